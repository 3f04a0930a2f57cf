//! The envelope every invocation returns: governed failures are values, never panics or
//! `Err`s (SI-12: exactly one envelope per run).

use crate::approval::ApprovalSummary;
use crate::error::CapabilityError;
use serde::{Deserialize, Serialize};

/// Whether a failed or cancelled run may still have had its effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EffectStatus {
    /// The procedure was entered; a late or partial effect may have committed.
    Unknown,
}

/// The outcome of `invoke` or `resume`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum ExecutionResult {
    /// The procedure ran; `output` is validated and redacted.
    #[serde(rename_all = "camelCase")]
    Completed {
        /// The execution's id, to find its audit events.
        execution_id: String,
        /// The redacted output.
        output: serde_json::Value,
    },
    /// Suspended at stage 8; nothing executed.
    #[serde(rename_all = "camelCase")]
    ApprovalRequired {
        /// The execution that asked.
        execution_id: String,
        /// What a human must decide.
        approval: ApprovalSummary,
    },
    /// A governed failure.
    #[serde(rename_all = "camelCase")]
    Failed {
        /// The execution's id, to find its audit events.
        execution_id: String,
        /// The error (serializes to its model-safe shape only).
        error: CapabilityError,
        /// Set when the procedure was entered.
        effect_status: Option<EffectStatus>,
    },
    /// TIMEOUT or CANCELLED.
    #[serde(rename_all = "camelCase")]
    Cancelled {
        /// The execution's id, to find its audit events.
        execution_id: String,
        /// Why it stopped (`TIMEOUT` or `CANCELLED`); serializes to its model-safe shape
        /// only.
        error: CapabilityError,
        /// Set when the procedure was entered.
        effect_status: Option<EffectStatus>,
    },
}

impl ExecutionResult {
    /// The execution id.
    pub fn execution_id(&self) -> &str {
        match self {
            ExecutionResult::Completed { execution_id, .. }
            | ExecutionResult::ApprovalRequired { execution_id, .. }
            | ExecutionResult::Failed { execution_id, .. }
            | ExecutionResult::Cancelled { execution_id, .. } => execution_id,
        }
    }

    /// `completed`, `approval-required`, `failed` or `cancelled`.
    pub fn status(&self) -> &'static str {
        match self {
            ExecutionResult::Completed { .. } => "completed",
            ExecutionResult::ApprovalRequired { .. } => "approval-required",
            ExecutionResult::Failed { .. } => "failed",
            ExecutionResult::Cancelled { .. } => "cancelled",
        }
    }

    /// The error of a failed or cancelled run.
    pub fn error(&self) -> Option<&CapabilityError> {
        match self {
            ExecutionResult::Failed { error, .. } | ExecutionResult::Cancelled { error, .. } => {
                Some(error)
            }
            _ => None,
        }
    }

    /// The output of a completed run.
    pub fn output(&self) -> Option<&serde_json::Value> {
        match self {
            ExecutionResult::Completed { output, .. } => Some(output),
            _ => None,
        }
    }

    /// The approval of a suspended run.
    pub fn approval(&self) -> Option<&ApprovalSummary> {
        match self {
            ExecutionResult::ApprovalRequired { approval, .. } => Some(approval),
            _ => None,
        }
    }

    /// Whether the procedure was entered and the effect is uncertain.
    pub fn effect_unknown(&self) -> bool {
        matches!(
            self,
            ExecutionResult::Failed {
                effect_status: Some(EffectStatus::Unknown),
                ..
            } | ExecutionResult::Cancelled {
                effect_status: Some(EffectStatus::Unknown),
                ..
            }
        )
    }
}
