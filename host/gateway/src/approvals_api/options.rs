//! How the approvals API is configured: the role an approver holds, where outcomes are
//! read from, and its bounds.

use super::ExecutionOutcome;
use std::sync::Arc;
use std::time::Duration;

/// The role an approver holds unless the deployment names another: the approvals API's
/// and the console's.
pub const APPROVER_ROLE: &str = "approver";

/// Largest decision body accepted.
pub const MAX_DECISION_BODY_BYTES: usize = 16 * 1024;
/// How long a decision waits for the audit drain before answering.
pub const DECISION_AUDIT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the approvals API reads how a resumed call ended: the deployment's audit log.
/// Optional; without it views carry no `outcome`.
#[async_trait::async_trait]
pub trait ExecutionHistory: Send + Sync + 'static {
    /// The outcome of one execution, or `None` when its trail has no start yet. `Err`
    /// (a store failure) leaves the view without an outcome; it is logged, never shown.
    async fn outcome(&self, execution_id: &str) -> Result<Option<ExecutionOutcome>, String>;
}

/// What the approvals API is given beyond its runtime and doorkeeper.
#[derive(Clone)]
pub struct ApprovalsOptions {
    /// The role an approver must hold (default [`APPROVER_ROLE`]).
    pub role: String,
    /// Where views of consumed approvals read how the resumed call ended (`None`: they
    /// carry no `outcome`).
    pub history: Option<Arc<dyn ExecutionHistory>>,
}

impl Default for ApprovalsOptions {
    fn default() -> Self {
        ApprovalsOptions {
            role: APPROVER_ROLE.into(),
            history: None,
        }
    }
}

impl std::fmt::Debug for ApprovalsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalsOptions")
            .field("role", &self.role)
            .field("history", &self.history.is_some())
            .finish()
    }
}
