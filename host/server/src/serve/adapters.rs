//! The seams of the gateway implemented over the deployment's store (the gateway knows the
//! seams, the store the rows; they meet here): console and MCP sessions as rows, the
//! approvals API's execution history from the audit log, and `/readyz`'s store check.

use capgate_gateway::approvals_api::{ExecutionHistory, ExecutionOutcome};
use capgate_gateway::console::{SessionCredential, SessionStore, SessionStoreError, StoredSession};
use capgate_gateway::health::{ReadinessError, ReadinessProbe};
use capgate_gateway::mcp::{SharedMcpSession, SharedMcpSessions};
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
