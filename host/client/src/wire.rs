//! The gateway's wire shapes, camelCase as in the reference design so clients written
//! against it work unchanged. Unknown request fields are rejected. The contract is
//! described in docs/gateway.md.
//!
//! | operation | HTTP | body | answer |
//! |---|---|---|---|
//! | describe | `POST {mount}/describe` | [`DescribeBody`] | `PortableCapabilityDescriptor[]` |
//! | invoke | `POST {mount}/invoke` | [`InvokeBody`] | [`CapabilityOutcome`] |
//! | getInvocation | `POST {mount}/getInvocation` | [`GetInvocationBody`] | [`InvocationReceipt`] or `null` |
//! | getApproval | `POST {mount}/getApproval` | [`GetApprovalBody`] | [`PortableApproval`] or `null` |
//! | resumeApproval | `POST {mount}/resumeApproval` | [`ResumeApprovalBody`] | [`CapabilityOutcome`] |
//! | contract | `GET {mount}/contract` | – | `PortableCapabilityDescriptor[]` |
//! | tools | `GET {mount}/tools?format=ai-sdk\|openai` | – | the caller's tool list (`capgate_contract::tools`) |
//!
//! Failures of the gateway itself (bad body, authentication) answer with an HTTP status and
//! [`GatewayErrorBody`]. Governed results, including the gateway's own preflight failures
//! (`INVOCATION_CONFLICT`, `CONTRACT_MISMATCH`), are `200` with a [`CapabilityOutcome`].

use capgate_core::approval::ApprovalSummary;
use capgate_core::error::{ErrorCode, PublicDetails, PublicError};
use capgate_core::id::BoundedId;
use capgate_core::runtime::Scope;
use serde::{Deserialize, Serialize};

/// The contract's descriptors (`describe` and `contract` answer with them), defined with
/// the rest of the contract in [`capgate_contract`] and re-exported here so the gateway and
/// its clients name one type.
pub use capgate_contract::{PortableCapabilityDescriptor, ToolNames};

/// Most scope entries (tags + ids).
pub const MAX_SCOPE_ENTRIES: usize = 1000;

/// `describe` request.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DescribeBody {
    /// Optional narrowing.
    pub scope: Option<Scope>,
}

/// `invoke` request.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InvokeBody {
    /// The capability.
    pub capability_id: BoundedId,
    /// The input (validated by the runtime).
    #[serde(default)]
    pub input: serde_json::Value,
    /// Stable identity of this call, chosen by the caller before dispatch.
    pub invocation_id: BoundedId,
    /// Correlation id carried into audit.
    pub correlation_id: Option<BoundedId>,
    /// The contract digest the caller was built against; a stale one is CONTRACT_MISMATCH.
    pub contract_digest: Option<BoundedId>,
}

/// `getInvocation` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetInvocationBody {
    /// The invocation.
    pub invocation_id: BoundedId,
}

/// `getApproval` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GetApprovalBody {
    /// The approval.
    pub approval_id: BoundedId,
}

/// `resumeApproval` request.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResumeApprovalBody {
    /// The approval.
    pub approval_id: BoundedId,
    /// The ORIGINAL invocation id of the call that asked for approval.
    pub invocation_id: BoundedId,
    /// Correlation id of this resume (as `invoke` takes one), carried into the
    /// resumed execution and its events; without it the original call's one is kept.
    pub correlation_id: Option<BoundedId>,
    /// The contract digest the caller is built against, checked as on invoke: a stale one
    /// is CONTRACT_MISMATCH and nothing runs.
    pub contract_digest: Option<BoundedId>,
}

/// What a human must decide, without stored input or actor records.
pub type PortableApproval = ApprovalSummary;

/// The result of a gateway call. Always carries the invocation id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum CapabilityOutcome {
    /// Completed: validated, redacted output.
    #[serde(rename_all = "camelCase")]
    Completed {
        /// The invocation.
        invocation_id: String,
        /// The execution.
        execution_id: String,
        /// The output.
        output: serde_json::Value,
    },
    /// Suspended for approval (a settled intermediate result).
    #[serde(rename_all = "camelCase")]
    ApprovalRequired {
        /// The invocation.
        invocation_id: String,
        /// The execution.
        execution_id: String,
        /// The approval.
        approval: PortableApproval,
    },
    /// A governed failure. Preflight failures carry an empty execution id.
    #[serde(rename_all = "camelCase")]
    Failed {
        /// The invocation.
        invocation_id: String,
        /// The execution ("" for preflight failures).
        execution_id: String,
        /// The public error (a core code, or a gateway code for preflight failures).
        error: OutcomeError,
    },
    /// TIMEOUT or CANCELLED.
    #[serde(rename_all = "camelCase")]
    Cancelled {
        /// The invocation.
        invocation_id: String,
        /// The execution.
        execution_id: String,
        /// The public error.
        error: OutcomeError,
    },
    /// No authoritative result is known (the effect may or may not have happened);
    /// reconcile with `getInvocation`.
    #[serde(rename_all = "camelCase")]
    OutcomeUnknown {
        /// The invocation.
        invocation_id: String,
    },
}

impl CapabilityOutcome {
    /// The invocation id.
    pub fn invocation_id(&self) -> &str {
        match self {
            CapabilityOutcome::Completed { invocation_id, .. }
            | CapabilityOutcome::ApprovalRequired { invocation_id, .. }
            | CapabilityOutcome::Failed { invocation_id, .. }
            | CapabilityOutcome::Cancelled { invocation_id, .. }
            | CapabilityOutcome::OutcomeUnknown { invocation_id } => invocation_id,
        }
    }

    /// The wire status.
    pub fn status(&self) -> &'static str {
        match self {
            CapabilityOutcome::Completed { .. } => "completed",
            CapabilityOutcome::ApprovalRequired { .. } => "approval-required",
            CapabilityOutcome::Failed { .. } => "failed",
            CapabilityOutcome::Cancelled { .. } => "cancelled",
            CapabilityOutcome::OutcomeUnknown { .. } => "outcome-unknown",
        }
    }

    /// A preflight failure (no execution admitted).
    pub fn preflight(invocation_id: &str, error: impl Into<OutcomeError>) -> Self {
        CapabilityOutcome::Failed {
            invocation_id: invocation_id.to_string(),
            execution_id: String::new(),
            error: error.into(),
        }
    }

    /// This outcome, naming `execution_id` when it is a failure that names none yet (a
    /// door's refusal answered after the runtime opened and audited an execution for it),
    /// so the caller can find the execution the trail recorded.
    pub fn in_execution(self, execution_id: &str) -> Self {
        match self {
            CapabilityOutcome::Failed {
                invocation_id,
                execution_id: none,
                error,
            } if none.is_empty() => CapabilityOutcome::Failed {
                invocation_id,
                execution_id: execution_id.to_string(),
                error,
            },
            other => other,
        }
    }

    /// The error of a failed or cancelled outcome.
    pub fn error(&self) -> Option<&OutcomeError> {
        match self {
            CapabilityOutcome::Failed { error, .. }
            | CapabilityOutcome::Cancelled { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The execution id (`None` for outcome-unknown; `""` for preflight failures).
    pub fn execution_id(&self) -> Option<&str> {
        match self {
            CapabilityOutcome::Completed { execution_id, .. }
            | CapabilityOutcome::ApprovalRequired { execution_id, .. }
            | CapabilityOutcome::Failed { execution_id, .. }
            | CapabilityOutcome::Cancelled { execution_id, .. } => Some(execution_id),
            CapabilityOutcome::OutcomeUnknown { .. } => None,
        }
    }
}

/// The error of a failed or cancelled [`CapabilityOutcome`]: the model-safe
/// [`PublicError`] shape, with a code that is either a core [`ErrorCode`] or one of the
/// [`gateway_codes`] (which the core's closed list does not hold).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomeError {
    /// `INPUT_INVALID`, `POLICY_DENIED`, …, or `INVOCATION_CONFLICT` / `CONTRACT_MISMATCH`.
    pub code: String,
    /// The public message.
    pub message: String,
    /// Whether retrying may succeed.
    pub retryable: bool,
    /// INPUT_INVALID issue paths and messages, never values.
    pub details: Option<PublicDetails>,
}

impl OutcomeError {
    /// A gateway-level error (`INVOCATION_CONFLICT`, `CONTRACT_MISMATCH`).
    pub fn gateway(code: &str, message: impl Into<String>) -> Self {
        OutcomeError {
            code: code.to_string(),
            message: message.into(),
            retryable: false,
            details: None,
        }
    }

    /// Whether the code is this core code.
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code == code.as_str()
    }
}

impl From<PublicError> for OutcomeError {
    fn from(e: PublicError) -> Self {
        OutcomeError {
            code: e.code.as_str().to_string(),
            message: e.message,
            retryable: e.retryable,
            details: e.details,
        }
    }
}

/// Gateway-level error codes that do not modify the core's closed list.
pub mod gateway_codes {
    /// Same invocation id, different capability or input.
    pub const INVOCATION_CONFLICT: &str = "INVOCATION_CONFLICT";
    /// The caller's contract digest is stale.
    pub const CONTRACT_MISMATCH: &str = "CONTRACT_MISMATCH";
}

/// A public error with a gateway code (INVOCATION_CONFLICT, CONTRACT_MISMATCH) or a core one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayErrorBody {
    /// The error.
    pub error: GatewayError,
}

/// The error object of [`GatewayErrorBody`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayError {
    /// `BAD_REQUEST` (400), `UNAUTHENTICATED` (401), `FORBIDDEN` (403), `NOT_FOUND` (404),
    /// `CONFLICT` (409, approvals API), `PAYLOAD_TOO_LARGE` (413), `INTERNAL_ERROR` (500, or
    /// 503 and retryable when a store is unavailable), `TIMEOUT` (504).
    pub code: String,
    /// What went wrong, for a developer (never internals).
    pub message: String,
    /// Whether retrying may help.
    pub retryable: bool,
}

/// A receipt of an invocation: core's one receipt type, with the gateway's typed outcome.
pub type InvocationReceipt = capgate_core::journal::InvocationReceipt<CapabilityOutcome>;

/// A public error from a code (for preflight failures).
pub fn public(code: ErrorCode) -> PublicError {
    capgate_core::error::CapabilityError::new(code).to_public()
}
