//! MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663) for held calls: the
//! seam where they are kept ([`McpTaskStore`]), an in-process implementation, and how the
//! MCP server uses them ([`McpTasks`]).
//!
//! A `tools/call` the pipeline holds for approval is answered, to a client that declared
//! the extension, with a task handle instead of the approval-required result. The client
//! polls `tasks/get`; the first poll after a human decided (in the console or the approvals
//! API, never over MCP) claims the task and runs the call through the runtime's resume,
//! with every check of a resume (the re-check of current policies, the approval's types,
//! the input digest, one consumption across replicas). The task then ends `completed` with
//! the tool's redacted result, or `failed` with the public error; `tasks/cancel` withdraws
//! an approval nobody has run. A task is bound to the principal that created it: another
//! principal's `tasks/get` is answered as for an unknown task.
//!
//! `capgate serve` keeps tasks in its store (any replica answers, a restart loses nothing);
//! [`InMemoryMcpTaskStore`] keeps them in this process.

use async_trait::async_trait;
use capgate_core::authz::Principal;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where a task stands. It leaves [`TaskState::Working`] once and never returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Waiting for the human, or running the approved call.
    Working,
    /// The call ran and answered: the tool's (redacted) result.
    Completed,
    /// The call did not run or did not succeed: the public error.
    Failed,
    /// The requester cancelled it.
    Cancelled,
}

impl TaskState {
    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Working => "working",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
        }
    }

    /// The state a stored name names; `None` for anything else (a damaged row).
    pub fn parse(s: &str) -> Option<TaskState> {
        Some(match s {
            "working" => TaskState::Working,
            "completed" => TaskState::Completed,
            "failed" => TaskState::Failed,
            "cancelled" => TaskState::Cancelled,
            _ => return None,
        })
    }
}

/// One task as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredTask {
    /// The task's id (`tsk_…`, 128 random bits).
    pub id: String,
    /// SHA-256 hex of the key of the principal that created it ([`principal_digest`]).
    pub principal_sha256: String,
    /// That principal's namespace (whose storage budget the task counts against).
    pub namespace: String,
    /// The approval it waits for.
    pub approval_id: Option<String>,
    /// The capability of the held call.
    pub capability_id: String,
    /// Where it stands.
    pub state: TaskState,
    /// What its status says to the client and its user (never the input).
    pub status_message: String,
    /// What `tasks/get` answers once it ended: the `CallToolResult` when completed, the
    /// JSON-RPC error object when failed (JSON text).
    pub outcome: Option<String>,
    /// The client answered the URL elicitation pointing its user to the console (it is
    /// not asked again).
    pub input_answered: bool,
    /// The token of the run that claimed it.
    pub claim: Option<String>,
    /// Until when that run may take; past it, the replica running it is assumed to have
    /// stopped and the task fails as outcome-unknown.
    pub run_deadline: Option<DateTime<Utc>>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When the store may forget it.
    pub purge_after: DateTime<Utc>,
}

/// Why the task store did not do what was asked.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TaskStoreError {
    /// The store did not answer.
    #[error("MCP task store unavailable: {0}")]
    Unavailable(String),
    /// A stored task does not decode, or a field is too long.
    #[error("malformed MCP task: {0}")]
    Malformed(String),
    /// The principal holds as many working tasks as it may.
    #[error("the principal already holds {limit} working MCP tasks")]
    TooMany {
        /// The bound.
        limit: u32,
    },
    /// The namespace is at its storage budget.
    #[error("namespace `{namespace}` is at its storage budget ({limit})")]
    QuotaExceeded {
        /// The namespace.
        namespace: String,
        /// Which bound: `rows` or `bytes`.
        limit: &'static str,
    },
}

/// Where tasks are kept. Every change is a compare-and-set, so replicas sharing one store
/// agree: a task leaves `working` once, and one claim runs its call.
#[async_trait]
pub trait McpTaskStore: Send + Sync + 'static {
    /// Keep a new working task (claimed already when it was created running), unless its
    /// principal holds `per_principal` working tasks
    /// already ([`TaskStoreError::TooMany`]) or its namespace is at its storage budget.
    async fn create(&self, task: &StoredTask, per_principal: u32) -> Result<(), TaskStoreError>;
    /// The task `id` of the principal `principal_sha256`; anyone else's reads as `None`.
    async fn get(
        &self,
        id: &str,
        principal_sha256: &str,
    ) -> Result<Option<StoredTask>, TaskStoreError>;
    /// Claim a working, unclaimed task to run its call by `deadline`: true for exactly one
    /// caller.
    async fn claim(
        &self,
        id: &str,
        token: &str,
        now: DateTime<Utc>,
        deadline: DateTime<Utc>,
    ) -> Result<bool, TaskStoreError>;
    /// Say how the run holding `claim` is progressing (the task's status message): true
    /// while the task is working and theirs.
    async fn report(
        &self,
        id: &str,
        claim: &str,
        status_message: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, TaskStoreError>;
    /// End a working task held by `claim` (or unclaimed, for `None`): true when this call
    /// ended it.
    async fn finish(
        &self,
        id: &str,
        state: TaskState,
        status_message: &str,
        outcome: &str,
        claim: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<bool, TaskStoreError>;
    /// Record that the client answered the principal's working task's URL elicitation:
    /// true when it was theirs and working.
    async fn answer_input(
        &self,
        id: &str,
        principal_sha256: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, TaskStoreError>;
    /// Cancel the principal's working task: the task as cancelled, or `None` when it is
    /// not theirs, unknown, or had ended.
    async fn cancel(
        &self,
        id: &str,
        principal_sha256: &str,
        status_message: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<StoredTask>, TaskStoreError>;
}

/// The key digest a task is bound to: namespace, actor kind and actor id, as every door
/// names a principal.
pub fn principal_digest(principal: &Principal) -> String {
    capgate_core::digest::sha256_hex(format!(
        "{}\u{0}{}\u{0}{}",
        principal.namespace,
        principal.actor.kind.as_str(),
        principal.actor.id
    ))
}

/// Tasks in this process only (a restart forgets them; replicas do not share them).
#[derive(Debug, Default)]
pub struct InMemoryMcpTaskStore {
    tasks: Mutex<HashMap<String, StoredTask>>,
}

impl InMemoryMcpTaskStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, StoredTask>> {
        // Every update is a single assignment under the lock: a poisoned lock still holds
        // consistent data.
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl McpTaskStore for InMemoryMcpTaskStore {
    async fn create(&self, task: &StoredTask, per_principal: u32) -> Result<(), TaskStoreError> {
        let mut tasks = self.lock();
        let now = task.created_at;
        tasks.retain(|_, t| t.purge_after > now);
        let working = tasks
            .values()
            .filter(|t| t.principal_sha256 == task.principal_sha256)
            .filter(|t| t.state == TaskState::Working)
            .count();
        if working >= per_principal as usize {
            return Err(TaskStoreError::TooMany {
                limit: per_principal,
            });
        }
        tasks.entry(task.id.clone()).or_insert_with(|| task.clone());
        Ok(())
    }

    async fn get(
        &self,
        id: &str,
        principal_sha256: &str,
    ) -> Result<Option<StoredTask>, TaskStoreError> {
        Ok(self
            .lock()
            .get(id)
            .filter(|t| t.principal_sha256 == principal_sha256)
            .cloned())
    }

    async fn claim(
        &self,
        id: &str,
        token: &str,
        now: DateTime<Utc>,
        deadline: DateTime<Utc>,
    ) -> Result<bool, TaskStoreError> {
        let mut tasks = self.lock();
        match tasks.get_mut(id) {
            Some(t) if t.state == TaskState::Working && t.claim.is_none() => {
                t.claim = Some(token.to_owned());
                t.run_deadline = Some(deadline);
                t.updated_at = now;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn report(
        &self,
        id: &str,
        claim: &str,
        status_message: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, TaskStoreError> {
        let mut tasks = self.lock();
        match tasks.get_mut(id) {
            Some(t) if t.state == TaskState::Working && t.claim.as_deref() == Some(claim) => {
                status_message.clone_into(&mut t.status_message);
                t.updated_at = now;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn finish(
        &self,
        id: &str,
        state: TaskState,
        status_message: &str,
        outcome: &str,
        claim: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<bool, TaskStoreError> {
        let mut tasks = self.lock();
        match tasks.get_mut(id) {
            Some(t)
                if t.state == TaskState::Working
                    && (t.claim.is_none() || t.claim.as_deref() == claim) =>
            {
                t.state = state;
                status_message.clone_into(&mut t.status_message);
                t.outcome = Some(outcome.to_owned());
                t.updated_at = now;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn answer_input(
        &self,
        id: &str,
        principal_sha256: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, TaskStoreError> {
        let mut tasks = self.lock();
        match tasks.get_mut(id) {
            Some(t) if t.principal_sha256 == principal_sha256 && t.state == TaskState::Working => {
                t.input_answered = true;
                t.updated_at = now;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn cancel(
        &self,
        id: &str,
        principal_sha256: &str,
        status_message: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<StoredTask>, TaskStoreError> {
        let mut tasks = self.lock();
        match tasks.get_mut(id) {
            Some(t) if t.principal_sha256 == principal_sha256 && t.state == TaskState::Working => {
                t.state = TaskState::Cancelled;
                status_message.clone_into(&mut t.status_message);
                t.updated_at = now;
                Ok(Some(t.clone()))
            }
            _ => Ok(None),
        }
    }
}

/// How the MCP server answers held calls with tasks ([`super::McpOptions::tasks`]).
#[derive(Clone)]
pub struct McpTasks {
    /// Where tasks are kept.
    pub store: Arc<dyn McpTaskStore>,
    /// The `pollIntervalMs` a task suggests (default 1 s).
    pub poll_interval: Duration,
    /// The most working tasks one principal holds (default
    /// [`DEFAULT_MAX_TASKS_PER_PRINCIPAL`]); a held call past it is answered without a
    /// task, as to a client without the extension.
    pub max_per_principal: u32,
    /// How long an ended task stays readable after its approval's expiry (default 24 h).
    pub retention: Duration,
}

/// The default [`McpTasks::max_per_principal`].
pub const DEFAULT_MAX_TASKS_PER_PRINCIPAL: u32 = 100;

impl McpTasks {
    /// Tasks kept in `store`, with the default poll interval, bound and retention.
    pub fn new(store: Arc<dyn McpTaskStore>) -> Self {
        McpTasks {
            store,
            poll_interval: Duration::from_secs(1),
            max_per_principal: DEFAULT_MAX_TASKS_PER_PRINCIPAL,
            retention: Duration::from_secs(24 * 3600),
        }
    }
}

impl Default for McpTasks {
    fn default() -> Self {
        McpTasks::new(Arc::new(InMemoryMcpTaskStore::new()))
    }
}

impl std::fmt::Debug for McpTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTasks")
            .field("poll_interval", &self.poll_interval)
            .field("max_per_principal", &self.max_per_principal)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}
