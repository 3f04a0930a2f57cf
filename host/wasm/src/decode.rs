//! Where a plugin's answer becomes host values: a policy's decision, a redactor's value, a
//! procedure's result or error. Pure functions over the WIT-side values, public so that the
//! fuzz target `plugin_outputs` (host/fuzz) holds the exact code the calls run to
//! "never panics; what is accepted is within bounds".

use crate::error::CallError;
use capgate_core::policy::PolicyDecision;
use capgate_core::procedure::ProcedureError;

/// A policy's `decision` as the guest returns it (`capgate:plugin/policy@0.1.0`).
pub use crate::wit::wit_policy::{ApprovalRequirement, Decision, Denial};
/// A procedure's `procedure-error` as the guest returns it (`capgate:plugin/procedure@0.1.0`).
pub use crate::wit::wit_procedure::{DefinedError, ProcedureError as GuestProcedureError};

/// Longest reason, code or approval type a decision may carry.
pub const MAX_DECISION_FIELD: usize = 4_096;

fn bounded(what: &str, s: &str) -> Result<(), CallError> {
    if s.len() > MAX_DECISION_FIELD {
        return Err(CallError::Malformed(format!(
            "{what} is {} bytes (at most {MAX_DECISION_FIELD})",
            s.len()
        )));
    }
    Ok(())
}

/// A WIT decision → core's: oversized fields refused here, the rest by
/// [`PolicyDecision::validate`]. An `Err` fails the policy closed.
pub fn policy_decision(d: Decision) -> Result<PolicyDecision, CallError> {
    let decision = match d {
        Decision::Allow => PolicyDecision::Allow,
        Decision::Hide => PolicyDecision::Hide,
        Decision::Deny(Denial { code, message }) => {
            if let Some(c) = &code {
                bounded("deny code", c)?;
            }
            if let Some(m) = &message {
                bounded("deny message", m)?;
            }
            PolicyDecision::Deny { code, message }
        }
        Decision::RequireApproval(r) => {
            bounded("approval reason", &r.reason)?;
            if let Some(t) = &r.approval_type {
                bounded("approval type", t)?;
            }
            PolicyDecision::RequireApproval {
                reason: r.reason,
                approval_type: r.approval_type,
                expires_in_ms: r.expires_in_ms,
            }
        }
    };
    decision.validate().map_err(CallError::Malformed)?;
    Ok(decision)
}

/// A JSON document a plugin returned (a redacted value, a procedure's output), within the
/// binding's output cap.
pub fn plugin_json(s: &str, max_output_bytes: usize) -> Result<serde_json::Value, CallError> {
    if s.len() > max_output_bytes {
        return Err(CallError::OutputTooLarge {
            size: s.len(),
            cap: max_output_bytes,
        });
    }
    serde_json::from_str(s).map_err(|e| CallError::Malformed(format!("output is not JSON: {e}")))
}

/// A procedure's `procedure-error` → core's, keeping the stage-11 mapping's cases apart
/// (docs/pipeline.md): `defined` is shown to the model (its `data`, private, is kept only
/// when it is JSON), the others map to UNAUTHENTICATED, FORBIDDEN and the hidden
/// EXECUTION_FAILED.
pub fn procedure_error(e: GuestProcedureError) -> ProcedureError {
    match e {
        GuestProcedureError::Defined(d) => ProcedureError::Defined {
            code: d.code,
            message: d.message,
            data: d.data.and_then(|s| serde_json::from_str(&s).ok()),
            retryable: d.retryable,
        },
        GuestProcedureError::Unauthorized(m) => ProcedureError::Unauthorized(m),
        GuestProcedureError::Forbidden(m) => ProcedureError::Forbidden(m),
        GuestProcedureError::Internal(m) => ProcedureError::Internal(m),
    }
}
