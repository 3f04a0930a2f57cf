//! Who may see and decide which approval: the approver role, the requester door, the
//! authorizer given what is decided, and what a viewer is offered.

use super::router::ApprovalsApi;
use super::{ApprovalView, LOG};
use crate::auth::Authenticated;
use crate::door::{Door, check_id};
use crate::reject::Reject;
use axum::http::StatusCode;
use capgate_core::approval::{ApprovalRecord, ApprovalStoreError, DecisionStatus};
use capgate_core::authz::Operation;
use capgate_core::runtime::{ApprovalsError, Decider};

/// What a credential that opens a model door is told at the requester door.
pub const REQUESTER_DOOR_CLOSED: &str = "This credential opens model doors (an agent's key) and cannot confirm calls: confirm with your own console credential (a key without model surfaces), or ask an approver.";

/// The most outcomes one listing looks up (the rest of a long page goes without).
const MAX_OUTCOMES_PER_LIST: usize = 100;

impl ApprovalsApi {
    /// The role check and the authorizer, for one operation of an admitted caller; for
    /// one approval, the authorizer is given its capability and its stored input.
    pub(super) async fn approver(
        &self,
        who: &Authenticated,
        operation: Operation,
        approval: Option<&ApprovalRecord>,
    ) -> Result<(), Reject> {
        if !who.has_role(&self.role) {
            tracing::info!(target: LOG, actor = %who.principal.actor.id, role = %self.role, "approvals API refused: role missing");
            return Err(Reject::forbidden());
        }
        self.doorkeeper
            .authorize(
                who,
                Door::Approvals,
                operation,
                approval.map(|a| a.request.capability_id.as_str()),
                approval.map(|a| &a.request.input),
            )
            .await
    }

    /// Who the caller is to approval `id`, with the record as they may see it, once the
    /// role or the requester door admits them and the authorizer — given the approval's
    /// capability and its stored, unredacted input — allows `operation`.
    pub(super) async fn standing(
        &self,
        who: &Authenticated,
        id: &str,
        operation: Operation,
    ) -> Result<(ApprovalRecord, Decider), Reject> {
        check_id("id", id)?;
        let approvals = self.runtime.approvals();
        if who.has_role(&self.role) {
            let stored = approvals
                .get_stored_in(id, &who.principal.namespace)
                .await
                .map_err(store_error)?
                .ok_or_else(not_found)?;
            self.approver(who, operation, Some(&stored)).await?;
            let decider = Decider::Approver {
                namespace: who.principal.namespace.clone(),
                roles: who.roles.clone(),
            };
            return Ok((approvals.for_reviewer(stored).await, decider));
        }
        if !who.requester_door {
            // A credential that opens a model door (an agent's key) is no human's: it
            // cannot confirm the agent's own calls. Refused before any lookup, so it
            // learns nothing about which approvals exist.
            tracing::info!(target: LOG, actor = %who.principal.actor.id, "requester door refused: the credential opens model doors");
            return Err(Reject::forbidden_because(REQUESTER_DOOR_CLOSED));
        }
        let stored = approvals
            .get_for_requester(
                id,
                &who.principal.namespace,
                &who.principal.actor.reference(),
            )
            .await
            .map_err(store_error)?
            .ok_or_else(not_found)?;
        if !approvals.requester_may_confirm(&stored.request) {
            tracing::info!(target: LOG, actor = %who.principal.actor.id, approval = %id, "requester door refused: not self-confirmable");
            return Err(Reject::forbidden_because(
                "Only an approver can review or decide this approval; its requester may confirm only approvals of a self-confirmable type.",
            ));
        }
        self.doorkeeper
            .authorize(
                who,
                Door::Approvals,
                operation,
                Some(stored.request.capability_id.as_str()),
                Some(&stored.request.input),
            )
            .await?;
        let decider = Decider::Requester {
            namespace: who.principal.namespace.clone(),
            roles: who.roles.clone(),
        };
        Ok((approvals.for_reviewer(stored).await, decider))
    }

    /// The record as `who`, standing as `decider`, sees it: with what they may decide.
    pub(super) fn view(
        &self,
        who: &Authenticated,
        decider: &Decider,
        record: ApprovalRecord,
    ) -> ApprovalView {
        let viewer = who.principal.actor.reference();
        let own = record.request.actor.id == viewer.id && record.request.actor.kind == viewer.kind;
        let approvals = self.runtime.approvals();
        let approve = approvals.may_decide(&record, &viewer, decider, DecisionStatus::Approved);
        // Self-decisions are not offered: a requester may decline their own request only
        // where they may also confirm it (a self-confirmable type).
        let reject = match &approve {
            Err(why) if own => Err(why.clone()),
            _ => approvals.may_decide(&record, &viewer, decider, DecisionStatus::Rejected),
        };
        let note = match (&approve, &reject) {
            (Err(why), Err(_)) => Some(why.clone()),
            (Err(why), Ok(())) => Some(format!("It can be rejected, not approved: {why}")),
            _ => None,
        };
        ApprovalView {
            own_request: own,
            may_approve: approve.is_ok(),
            may_reject: reject.is_ok(),
            decision_note: note,
            ..ApprovalView::from(record)
        }
    }

    /// Fill in `outcome` for consumed approvals (at most [`MAX_OUTCOMES_PER_LIST`]).
    pub(super) async fn with_outcomes(&self, views: &mut [ApprovalView]) {
        let Some(history) = &self.history else {
            return;
        };
        let consumed = views
            .iter_mut()
            .filter(|v| v.consumed_by_execution_id.is_some())
            .take(MAX_OUTCOMES_PER_LIST);
        for v in consumed {
            let Some(execution) = v.consumed_by_execution_id.as_deref() else {
                continue;
            };
            match history.outcome(execution).await {
                Ok(outcome) => v.outcome = outcome,
                Err(e) => {
                    tracing::warn!(target: LOG, execution = %execution, error = %e, "outcome lookup failed");
                }
            }
        }
    }
}

pub(super) fn store_error(e: ApprovalsError) -> Reject {
    match e {
        ApprovalsError::Invalid(m) => Reject::bad_request(m),
        ApprovalsError::Forbidden(m) => Reject::forbidden_because(m),
        ApprovalsError::Store(ApprovalStoreError::NotFound(_)) => not_found(),
        ApprovalsError::Store(ApprovalStoreError::WrongStatus { status, .. }) => Reject::new(
            StatusCode::CONFLICT,
            "CONFLICT",
            format!("The approval is {status}; only a pending, unexpired approval can be decided."),
        ),
        ApprovalsError::Store(other) => {
            tracing::error!(target: LOG, error = %other, "approval store failed");
            match other {
                ApprovalStoreError::Malformed { .. } => Reject::internal(),
                _ => Reject::unavailable("approval store"),
            }
        }
    }
}

fn not_found() -> Reject {
    Reject::new(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        "No approval with that id.",
    )
}
