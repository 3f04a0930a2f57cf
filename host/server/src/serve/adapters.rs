//! The seams of the gateway implemented over the deployment's store (the gateway knows the
//! seams, the store the rows; they meet here): console and MCP sessions as rows, the
//! approvals API's execution history from the audit log, and `/readyz`'s store check.

use capgate_gateway::approvals_api::{ExecutionHistory, ExecutionOutcome};
use capgate_gateway::console::{SessionCredential, SessionStore, SessionStoreError, StoredSession};
use capgate_gateway::health::{ReadinessError, ReadinessProbe};
use capgate_gateway::mcp::{
    McpTaskStore, SharedMcpSession, SharedMcpSessions, StoredTask, TaskState, TaskStoreError,
};
use rmcp::transport::streamable_http_server::session::SessionStoreError as McpStoreError;

/// The console's sessions as rows of the deployment's store (the gateway knows the seam,
/// the store the rows; they meet here), so a restart or another replica keeps them. The
/// row's credential column holds the console's [`SessionCredential`] as JSON: an API
/// key's SHA-256 or a token's principal, never a raw credential.
pub(super) struct StoredSessions(pub(super) capgate_store::ConsoleSessionRows);

#[async_trait::async_trait]
impl SessionStore for StoredSessions {
    async fn open(
        &self,
        session: StoredSession,
        per_principal: u32,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), SessionStoreError> {
        let credential = serde_json::to_string(&session.credential)
            .map_err(|e| SessionStoreError::Malformed(e.to_string()))?;
        let row = capgate_store::ConsoleSessionRow {
            id_sha256: session.id_sha256,
            principal: session.principal,
            credential,
            namespace: session.namespace,
            created_at: session.created_at,
            expires_at: session.expires_at,
        };
        self.0
            .insert(&row, per_principal, now)
            .await
            .map(|_| ())
            .map_err(session_store_error)
    }

    async fn get(
        &self,
        id_sha256: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<StoredSession>, SessionStoreError> {
        let Some(row) = self
            .0
            .get(id_sha256, now)
            .await
            .map_err(session_store_error)?
        else {
            return Ok(None);
        };
        let credential: SessionCredential = serde_json::from_str(&row.credential)
            .map_err(|e| SessionStoreError::Malformed(format!("credential: {e}")))?;
        Ok(Some(StoredSession {
            id_sha256: row.id_sha256,
            principal: row.principal,
            credential,
            namespace: row.namespace,
            created_at: row.created_at,
            expires_at: row.expires_at,
        }))
    }

    async fn close(&self, id_sha256: &str) -> Result<(), SessionStoreError> {
        self.0.delete(id_sha256).await.map_err(session_store_error)
    }
}

fn session_store_error(e: capgate_store::SessionRowError) -> SessionStoreError {
    match e {
        capgate_store::SessionRowError::Malformed(m) => SessionStoreError::Malformed(m),
        capgate_store::SessionRowError::QuotaExceeded { namespace, limit } => {
            SessionStoreError::QuotaExceeded { namespace, limit }
        }
        other => SessionStoreError::Unavailable(other.to_string()),
    }
}

/// MCP sessions as rows of the deployment's store (the gateway knows the seam, the store
/// the rows; they meet here), so any replica serves a session another opened.
pub(super) struct StoredMcpSessions(pub(super) capgate_store::McpSessionRows);

#[async_trait::async_trait]
impl SharedMcpSessions for StoredMcpSessions {
    async fn put(
        &self,
        id_sha256: &str,
        principal_sha256: &str,
        state: &str,
    ) -> Result<(), McpStoreError> {
        let row = capgate_store::McpSessionRow {
            id_sha256: id_sha256.to_owned(),
            principal_sha256: principal_sha256.to_owned(),
            state: state.to_owned(),
            created_at: chrono::Utc::now(),
        };
        Ok(self.0.insert(&row).await?)
    }

    async fn get(&self, id_sha256: &str) -> Result<Option<SharedMcpSession>, McpStoreError> {
        Ok(self.0.get(id_sha256).await?.map(|row| SharedMcpSession {
            principal_sha256: row.principal_sha256,
            state: row.state,
        }))
    }

    async fn delete(&self, id_sha256: &str) -> Result<(), McpStoreError> {
        Ok(self.0.delete(id_sha256).await?)
    }
}

/// MCP tasks as rows of the deployment's store (the gateway knows the seam, the store the
/// rows; they meet here), so any replica answers a task another created, and a restart
/// loses none.
pub(super) struct StoredMcpTasks(pub(super) capgate_store::McpTaskRows);

fn task_store_error(e: capgate_store::McpTaskRowError) -> TaskStoreError {
    match e {
        capgate_store::McpTaskRowError::Malformed(m) => TaskStoreError::Malformed(m),
        capgate_store::McpTaskRowError::TooMany { limit } => TaskStoreError::TooMany { limit },
        capgate_store::McpTaskRowError::QuotaExceeded { namespace, limit } => {
            TaskStoreError::QuotaExceeded { namespace, limit }
        }
        other => TaskStoreError::Unavailable(other.to_string()),
    }
}

fn task_of(row: capgate_store::McpTaskRow) -> Result<StoredTask, TaskStoreError> {
    let state = TaskState::parse(&row.status)
        .ok_or_else(|| TaskStoreError::Malformed(format!("task status `{}`", row.status)))?;
    Ok(StoredTask {
        id: row.id,
        principal_sha256: row.principal_sha256,
        namespace: row.namespace,
        approval_id: row.approval_id,
        capability_id: row.capability_id,
        state,
        status_message: row.status_message,
        outcome: row.outcome,
        input_answered: row.input_answered,
        claim: row.claim,
        run_deadline: row.run_deadline,
        created_at: row.created_at,
        updated_at: row.updated_at,
        purge_after: row.purge_after,
    })
}

#[async_trait::async_trait]
impl McpTaskStore for StoredMcpTasks {
    async fn create(&self, task: &StoredTask, per_principal: u32) -> Result<(), TaskStoreError> {
        let row = capgate_store::McpTaskRow {
            id: task.id.clone(),
            principal_sha256: task.principal_sha256.clone(),
            namespace: task.namespace.clone(),
            approval_id: task.approval_id.clone(),
            capability_id: task.capability_id.clone(),
            status: task.state.as_str().to_owned(),
            status_message: task.status_message.clone(),
            outcome: None,
            input_answered: false,
            claim: task.claim.clone(),
            run_deadline: task.run_deadline,
            created_at: task.created_at,
            updated_at: task.updated_at,
            purge_after: task.purge_after,
        };
        self.0
            .insert(&row, per_principal)
            .await
            .map_err(task_store_error)
    }

    async fn get(
        &self,
        id: &str,
        principal_sha256: &str,
    ) -> Result<Option<StoredTask>, TaskStoreError> {
        self.0
            .get(id, principal_sha256)
            .await
            .map_err(task_store_error)?
            .map(task_of)
            .transpose()
    }

    async fn claim(
        &self,
        id: &str,
        token: &str,
        now: chrono::DateTime<chrono::Utc>,
        deadline: chrono::DateTime<chrono::Utc>,
    ) -> Result<bool, TaskStoreError> {
        self.0
            .claim(id, token, now, deadline)
            .await
            .map_err(task_store_error)
    }

    async fn report(
        &self,
        id: &str,
        claim: &str,
        status_message: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<bool, TaskStoreError> {
        self.0
            .report(id, claim, status_message, now)
            .await
            .map_err(task_store_error)
    }

    async fn finish(
        &self,
        id: &str,
        state: TaskState,
        status_message: &str,
        outcome: &str,
        claim: Option<&str>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<bool, TaskStoreError> {
        self.0
            .finish(id, state.as_str(), status_message, outcome, claim, now)
            .await
            .map_err(task_store_error)
    }

    async fn answer_input(
        &self,
        id: &str,
        principal_sha256: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<bool, TaskStoreError> {
        self.0
            .answer_input(id, principal_sha256, now)
            .await
            .map_err(task_store_error)
    }

    async fn cancel(
        &self,
        id: &str,
        principal_sha256: &str,
        status_message: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<StoredTask>, TaskStoreError> {
        self.0
            .cancel(id, principal_sha256, status_message, now)
            .await
            .map_err(task_store_error)?
            .map(task_of)
            .transpose()
    }
}

/// How long a stored MCP session can be restored by a replica that does not hold it. Past
/// it, such a replica answers `404` and the client starts a new session, as MCP prescribes.
pub(super) const MCP_SESSION_HORIZON: chrono::TimeDelta = chrono::TimeDelta::hours(24);

/// The approvals API's view of how a resumed call ended, read from the deployment's audit
/// log (the gateway knows the seam, the store the rows; they meet here).
pub(super) struct AuditTrail(pub(super) capgate_store::AuditLog);

#[async_trait::async_trait]
impl ExecutionHistory for AuditTrail {
    async fn outcome(&self, execution_id: &str) -> Result<Option<ExecutionOutcome>, String> {
        let rows = self
            .0
            .for_execution(execution_id)
            .await
            .map_err(|e| e.to_string())?;
        let events = rows.into_iter().filter_map(|r| r.event.ok());
        Ok(ExecutionOutcome::from_trail(execution_id, events))
    }
}

/// `/readyz`'s store check: the journal answers a read, and a store that refused a write
/// for lack of storage (SQLite on a full disk) takes one again.
pub(super) struct StoreProbe {
    pub(super) journal: capgate_gateway::health::JournalProbe,
    pub(super) store: capgate_store::Store,
}

#[async_trait::async_trait]
impl ReadinessProbe for StoreProbe {
    async fn ready(&self) -> Result<(), ReadinessError> {
        self.journal.ready().await?;
        self.store
            .check_writable()
            .await
            .map_err(|e| ReadinessError::Store(Box::new(e)))
    }
}
