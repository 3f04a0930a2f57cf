//! Stage 11: the application's operation, reached through a middleware chain that stays
//! the authoritative gate (docs/invariants.md, "The gates"), and the error mapping that
//! keeps internals from models.

use crate::actor::{Actor, Surface};
use crate::approval::ApprovalRef;
use crate::error::{CapabilityError, ErrorCode, Stage};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What the procedure learns about the governed call (`context.agent` in the reference).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInvocationInfo {
    /// The id of this execution, to correlate the procedure's own logs with audit.
    pub execution_id: String,
    /// The capability being run.
    pub capability_id: String,
    /// The door the call came through.
    pub surface: Surface,
    /// The tenant partition of the call (empty when the embedder has none); pooled Wasm
    /// procedure instances are keyed by it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The actor the call runs as (the original requester after a resume).
    pub actor: Actor,
    /// The approval and its approver, after a resume or inline approval.
    pub approval: Option<ApprovalRef>,
    /// Caller-supplied correlation id.
    pub correlation_id: Option<String>,
    /// Stable across runtime retries (`idk_…`), or supplied by the adapter.
    pub idempotency_key: String,
}

/// A progress report from a running procedure (becomes MCP progress, feeds stall watchdogs).
pub type ProgressFn = Arc<dyn Fn(serde_json::Value) + Send + Sync>;

/// One attempt of stage 11.
#[derive(Clone)]
pub struct ProcedureCall {
    /// The validated input (SI-6).
    pub input: serde_json::Value,
    /// The application context; middleware may extend it.
    pub context: serde_json::Value,
    /// Governance facts about the call.
    pub agent: Arc<AgentInvocationInfo>,
    /// Fires on timeout or caller cancellation; cooperative handlers stop when it does.
    pub cancel: CancellationToken,
    /// Optional progress channel.
    pub progress: Option<ProgressFn>,
    /// The attempt number (1-based).
    pub attempt: u32,
}

impl ProcedureCall {
    /// Report progress, if anyone listens.
    pub fn report_progress(&self, value: serde_json::Value) {
        if let Some(p) = &self.progress {
            p(value);
        }
    }
}

/// How a procedure fails. The variants keep the stage-11 mapping's cases apart.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProcedureError {
    /// A contract-level, intentional failure the model may act on: EXECUTION_FAILED exposed
    /// with this message.
    #[error("{code}: {message}")]
    Defined {
        /// The application's error code (private; audit only).
        code: String,
        /// The public message.
        message: String,
        /// Extra data (private).
        data: Option<serde_json::Value>,
        /// Whether retrying may help.
        retryable: bool,
    },
    /// The caller is not authenticated for this operation → UNAUTHENTICATED.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// The caller may not do this → FORBIDDEN.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// Anything else → EXECUTION_FAILED hidden, "The operation failed." (SI-9).
    #[error("internal: {0}")]
    Internal(String),
    /// The adapter observed a timeout of its own (e.g. a stalled upstream) → TIMEOUT.
    #[error("timed out: {0}")]
    TimedOut(String),
    /// An already-governed error, passed through unchanged.
    #[error("{0}")]
    Governed(CapabilityError),
    /// The adapter provably sent nothing (the upstream could not be reached, a pinned
    /// tool no longer matched before the call was made, the input could not be encoded):
    /// EXECUTION_FAILED hidden like [`ProcedureError::Internal`], but the effect is known
    /// not to have happened, so the call's receipt settles as failed instead of waiting
    /// for an operator's reconcile.
    #[error("not sent: {0}")]
    NotSent(String),
}

impl ProcedureError {
    /// A defined error.
    pub fn defined(code: impl Into<String>, message: impl Into<String>) -> Self {
        ProcedureError::Defined {
            code: code.into(),
            message: message.into(),
            data: None,
            retryable: false,
        }
    }

    /// An internal error (hidden from the model).
    pub fn internal(message: impl Into<String>) -> Self {
        ProcedureError::Internal(message.into())
    }

    /// A [`ProcedureError::NotSent`].
    pub fn not_sent(message: impl Into<String>) -> Self {
        ProcedureError::NotSent(message.into())
    }

    /// Whether this failure shows that the attempt had no effect: the procedure answered a
    /// defined error (its contract's deliberate failure: an upstream's mapped error, an
    /// OpenAPI 404), or the adapter sent nothing. Any other failure of an entered procedure
    /// (a refusal included: it may come after part of the work) leaves the effect unknown.
    pub fn had_no_effect(&self) -> bool {
        matches!(
            self,
            ProcedureError::Defined { .. } | ProcedureError::NotSent(_)
        )
    }

    /// The stage-11 error mapping (docs/pipeline.md, "Stage-11 error mapping").
    pub fn into_capability_error(self) -> CapabilityError {
        match self {
            ProcedureError::Defined {
                code,
                message,
                data: _,
                retryable,
            } => CapabilityError::new(ErrorCode::ExecutionFailed)
                .with_exposed(true)
                .with_retryable(retryable)
                .with_message(message)
                .with_private_details(serde_json::json!({ "procedureCode": code })),
            ProcedureError::Unauthorized(m) => {
                CapabilityError::new(ErrorCode::Unauthenticated).with_cause(m)
            }
            ProcedureError::Forbidden(m) => {
                CapabilityError::new(ErrorCode::Forbidden).with_cause(m)
            }
            ProcedureError::Internal(m) | ProcedureError::NotSent(m) => {
                CapabilityError::new(ErrorCode::ExecutionFailed)
                    .with_stage(Stage::Execution)
                    .with_cause(m)
            }
            ProcedureError::TimedOut(m) => CapabilityError::new(ErrorCode::Timeout).with_cause(m),
            ProcedureError::Governed(e) => e,
        }
    }
}

/// The boxed future procedures and middleware return.
pub type ProcedureFuture<'a> =
    Pin<Box<dyn Future<Output = Result<serde_json::Value, ProcedureError>> + Send + 'a>>;

/// The operation a capability runs. Implemented by native handlers, HTTP upstreams and Wasm
/// procedure components.
#[async_trait]
pub trait Procedure: Send + Sync + 'static {
    /// Run one attempt.
    async fn call(&self, call: ProcedureCall) -> Result<serde_json::Value, ProcedureError>;
}

/// A link in the application's middleware chain: runs in order right before the handler,
/// may extend `call.context`, and may reject.
#[async_trait]
pub trait Middleware: Send + Sync + 'static {
    /// Handle the call; call `next.run(call)` to continue down the chain.
    async fn handle(
        &self,
        call: ProcedureCall,
        next: Next<'_>,
    ) -> Result<serde_json::Value, ProcedureError>;
}

/// The rest of the chain, ending in the procedure.
pub struct Next<'a> {
    chain: &'a [Arc<dyn Middleware>],
    procedure: &'a dyn Procedure,
}

impl<'a> Next<'a> {
    /// The chain to run.
    pub fn new(chain: &'a [Arc<dyn Middleware>], procedure: &'a dyn Procedure) -> Self {
        Next { chain, procedure }
    }

    /// Continue with the next middleware, or the procedure at the end.
    pub async fn run(self, call: ProcedureCall) -> Result<serde_json::Value, ProcedureError> {
        match self.chain.split_first() {
            Some((first, rest)) => {
                first
                    .handle(
                        call,
                        Next {
                            chain: rest,
                            procedure: self.procedure,
                        },
                    )
                    .await
            }
            None => self.procedure.call(call).await,
        }
    }
}

/// A procedure from an async closure.
pub struct FnProcedure<F>(F);

#[async_trait]
impl<F, Fut> Procedure for FnProcedure<F>
where
    F: Fn(ProcedureCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<serde_json::Value, ProcedureError>> + Send + 'static,
{
    async fn call(&self, call: ProcedureCall) -> Result<serde_json::Value, ProcedureError> {
        (self.0)(call).await
    }
}

/// A procedure from an async closure.
///
/// ```
/// use capgate_core::procedure::handler;
/// let p = handler(|call| async move { Ok(serde_json::json!({ "echo": call.input })) });
/// # let _ = p;
/// ```
pub fn handler<F, Fut>(f: F) -> FnProcedure<F>
where
    F: Fn(ProcedureCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<serde_json::Value, ProcedureError>> + Send + 'static,
{
    FnProcedure(f)
}

/// A middleware from a closure taking the call and the rest of the chain.
pub struct FnMiddleware<F>(F);

#[async_trait]
impl<F> Middleware for FnMiddleware<F>
where
    F: for<'a> Fn(ProcedureCall, Next<'a>) -> ProcedureFuture<'a> + Send + Sync + 'static,
{
    async fn handle(
        &self,
        call: ProcedureCall,
        next: Next<'_>,
    ) -> Result<serde_json::Value, ProcedureError> {
        (self.0)(call, next).await
    }
}

/// A middleware from a closure.
///
/// ```
/// use capgate_core::procedure::{middleware, ProcedureError};
/// let require_refund_permission = middleware(|call, next| Box::pin(async move {
///     let perms = &call.agent.actor.attributes["permissions"];
///     if !perms.as_array().is_some_and(|p| p.iter().any(|x| x == "orders:refund")) {
///         return Err(ProcedureError::Forbidden("missing orders:refund".into()));
///     }
///     next.run(call).await
/// }));
/// # let _ = require_refund_permission;
/// ```
pub fn middleware<F>(f: F) -> FnMiddleware<F>
where
    F: for<'a> Fn(ProcedureCall, Next<'a>) -> ProcedureFuture<'a> + Send + Sync + 'static,
{
    FnMiddleware(f)
}
