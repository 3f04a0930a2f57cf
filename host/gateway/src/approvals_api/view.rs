//! What the approvals API answers and accepts: an approval as a viewer sees it, how its
//! resumed call ended, and the decision body.

use crate::door::WireBody;
use capgate_core::actor::{ActorRef, Surface};
use capgate_core::approval::{ApprovalRecord, ApprovalSummary, Decision, DecisionStatus};
use capgate_core::meta::{Risk, SideEffect};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One approval as an approver sees it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalView {
    /// What the requester may see too (id, capability, status with lazy expiry applied,
    /// reasons, types, times); its fields stand at the top level of the JSON.
    #[serde(flatten)]
    pub summary: ApprovalSummary,
    /// The surface of the original call.
    pub surface: Surface,
    /// Who asked (id and kind only).
    pub requester: ActorRef,
    /// The stored input after approval-input redaction (`null` when withheld).
    pub input: serde_json::Value,
    /// SHA-256 of the canonical input the approval binds.
    pub input_hash: String,
    /// Risk of the capability.
    pub risk: Risk,
    /// Side effect of the capability.
    pub side_effect: SideEffect,
    /// The execution that asked.
    pub execution_id: String,
    /// Correlation id of the original call.
    pub correlation_id: Option<String>,
    /// The decision, once made.
    pub decision: Option<Decision>,
    /// The execution that consumed it.
    pub consumed_by_execution_id: Option<String>,
    /// Whether the viewer is the requester (a self-decision is refused unless the
    /// approval's types are self-confirmable).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub own_request: bool,
    /// The policies that asked for approval (none when only the capability's own
    /// `approval.required` did).
    #[serde(default)]
    pub policies: Vec<String>,
    /// The input is withheld (`input` is `null`): a redactor failed on it, or the
    /// capability is gone from this deployment.
    #[serde(default)]
    pub input_withheld: bool,
    /// Whether this viewer may approve it now (what a console offers).
    #[serde(default)]
    pub may_approve: bool,
    /// Whether this viewer may reject it now. A requester is offered neither decision on
    /// their own approval unless it is self-confirmable.
    #[serde(default)]
    pub may_reject: bool,
    /// Why a decision is not offered, for the viewer.
    pub decision_note: Option<String>,
    /// For a consumed approval, how the resumed call ended (from the audit trail), when
    /// the API was given an [`ExecutionHistory`](super::ExecutionHistory).
    pub outcome: Option<ExecutionOutcome>,
}

/// How the execution that consumed an approval ended, as its audit trail tells it.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionOutcome {
    /// The resumed execution.
    pub execution_id: String,
    /// How it ended (or that it has not yet).
    pub status: OutcomeStatus,
    /// The error code of a failure or cancellation.
    pub code: Option<String>,
    /// When its last event was recorded.
    pub at: DateTime<Utc>,
}

/// The terminal state of an execution in its audit trail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutcomeStatus {
    /// It completed (`capability.completed`).
    Completed,
    /// It failed (`capability.failed`).
    Failed,
    /// It timed out or was cancelled (`capability.cancelled`).
    Cancelled,
    /// Started, no terminal event (yet): running, or its outcome is unknown.
    Running,
}

impl ExecutionOutcome {
    /// How an execution ended, from its audit trail in order: its last terminal event
    /// (`capability.completed`, `.failed`, `.cancelled`), or running after a start; `None`
    /// when the trail has no start yet. What an [`ExecutionHistory`](super::ExecutionHistory) over an audit log
    /// answers.
    pub fn from_trail(
        execution_id: &str,
        events: impl IntoIterator<Item = capgate_core::audit::AuditEvent>,
    ) -> Option<ExecutionOutcome> {
        use capgate_core::audit::EventPayload;
        let mut outcome = None;
        for event in events {
            let (status, code) = match &event.payload {
                EventPayload::Started { .. } => (OutcomeStatus::Running, None),
                EventPayload::Completed { .. } => (OutcomeStatus::Completed, None),
                EventPayload::Failed { code, .. } => {
                    (OutcomeStatus::Failed, Some(code.as_str().to_owned()))
                }
                EventPayload::Cancelled { code, .. } => {
                    (OutcomeStatus::Cancelled, Some(code.as_str().to_owned()))
                }
                _ => continue,
            };
            outcome = Some(ExecutionOutcome {
                execution_id: execution_id.to_owned(),
                status,
                code,
                at: event.timestamp,
            });
        }
        outcome
    }
}

impl From<ApprovalRecord> for ApprovalView {
    fn from(r: ApprovalRecord) -> Self {
        let q = r.request;
        let input_withheld = q.input.is_null();
        ApprovalView {
            summary: ApprovalSummary {
                id: q.id,
                capability_id: q.capability_id,
                status: r.status,
                reasons: q.reasons,
                types: q.types,
                requested_at: q.requested_at,
                expires_at: q.expires_at,
            },
            surface: q.surface,
            requester: q.actor.reference(),
            input: q.input,
            input_hash: q.input_hash,
            risk: q.risk,
            side_effect: q.side_effect,
            execution_id: q.execution_id,
            correlation_id: q.correlation_id,
            decision: r.decision,
            consumed_by_execution_id: r.consumed_by_execution_id,
            own_request: false,
            input_withheld,
            policies: q.policies,
            may_approve: false,
            may_reject: false,
            decision_note: None,
            outcome: None,
        }
    }
}

/// The body of `POST /approvals/{id}/decision`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecisionBody {
    /// `approved` or `rejected`.
    pub decision: DecisionStatus,
    /// Optional comment (at most 4096 bytes).
    pub comment: Option<String>,
}

impl WireBody for DecisionBody {
    const OPERATION: &'static str = "decision";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_reject_unknown_fields() {
        use crate::door::parse;
        assert!(parse::<DecisionBody>(br#"{"decision":"approved"}"#, "decision").is_ok());
        assert!(
            parse::<DecisionBody>(br#"{"decision":"approved","approver":"u_x"}"#, "decision")
                .is_err()
        );
        assert!(parse::<DecisionBody>(br#"{"decision":"maybe"}"#, "decision").is_err());
    }
}
