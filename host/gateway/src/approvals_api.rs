//! The human approvals API: what an approval console calls. Separate from the capability
//! gateway on purpose — no gateway operation and no model tool can decide an approval.
//!
//! | route | answer |
//! |---|---|
//! | `GET /approvals?status=pending&capability=orders.refund&limit=50&offset=0` | [`ApprovalView`]`[]`, newest first |
//! | `GET /approvals/{id}` | [`ApprovalView`] (`404` when unknown) |
//! | `POST /approvals/{id}/decision` `{"decision": "approved"\|"rejected", "comment"?}` | the decided [`ApprovalView`] |
//!
//! Every request passes the same door as the capability routes ([`crate::door`]):
//! authenticated (`401`), within quota (`429`), holding the configured role (or, for one
//! approval, admitted by the requester door below) and authorized by the deployment's
//! authorizer for the operation (`listApprovals`, `reviewApproval`,
//! `decideApproval`, told no surface: this is no model door) (`403` otherwise). The decider
//! is the authenticated principal, never a body field.
//!
//! **Tenancy.** An approver sees and decides only approvals requested in their own
//! namespace; another namespace's id reads `404` exactly like a missing one. The decision
//! (and its audit event) records the approver's namespace.
//!
//! **Who may decide.** A self-decision is refused when it is made (`403`, SI-4), unless
//! every type of the approval is self-confirmable; an approval whose type is mapped to
//! roles (`[approvals.types.manager] roles = ["manager"]`) can only be approved by a holder
//! of one of them (`403` with the reason). Deciding executes nothing: the requester resumes
//! the call afterwards, with their own fresh credentials.
//!
//! **The requester door.** A caller without the role may still `GET /approvals/{id}` and
//! decide an approval they requested themselves (same namespace, same actor id and kind,
//! a `user`) when every type it carries is self-confirmable (`selfConfirmableTypes`, e.g.
//! `human-confirmation`): the human confirming their own call. The authorizer is asked
//! exactly as for an approver (`reviewApproval`, `decideApproval`), and the decision is
//! recorded as `via: requester` (core's [`Decider::Requester`]). Their own approval of any
//! other type is `403` (an approver must decide it); anyone else's approval, and a missing
//! one, is `404`, so the door tells a requester nothing about approvals that are not
//! theirs. Listing stays for approvers. No model door reaches any of this: the door is a
//! human's credential used outside `/agent`, `/workflow` and `/mcp`, none of which can
//! decide an approval.
//!
//! What an approver sees of the stored input: the input after the capability's redactors'
//! `redact_approval_input` (the core's [`Approvals`](capgate_core::runtime::Approvals)
//! applies them on every read); when a redactor fails, or the capability no longer exists,
//! the input is withheld (`null`). The requester appears as `{id, kind}` only (no
//! attributes).
//!

use crate::auth::Authenticated;
use crate::door::{Caller, Door, DoorState, Doorkeeper, Valid, WireBody, check_id};
use crate::reject::{Reject, json_refusals};
use axum::Json;
use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use capgate_core::actor::{ActorRef, Surface};
use capgate_core::approval::{
    ApprovalFilter, ApprovalRecord, ApprovalStatus, ApprovalStoreError, Decision, DecisionStatus,
};
use capgate_core::authz::Operation;
use capgate_core::meta::{Risk, SideEffect};
use capgate_core::runtime::{ApprovalsError, DecideRequest, Decider, RequesterAccess, Runtime};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const LOG: &str = "capgate::approvals_api";

/// Largest decision body accepted.
pub const MAX_DECISION_BODY_BYTES: usize = 16 * 1024;
/// How long a decision waits for the audit drain before answering.
pub const DECISION_AUDIT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// One approval as an approver sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalView {
    /// `apr_…`
    pub id: String,
    /// The capability.
    pub capability_id: String,
    /// The surface of the original call.
    pub surface: Surface,
    /// Who asked (id and kind only).
    pub requester: ActorRef,
    /// The stored input after approval-input redaction (`null` when withheld).
    pub input: serde_json::Value,
    /// SHA-256 of the canonical input the approval binds.
    pub input_hash: String,
    /// Why approval is needed.
    pub reasons: Vec<String>,
    /// Approval types.
    pub types: Vec<String>,
    /// Risk of the capability.
    pub risk: Risk,
    /// Side effect of the capability.
    pub side_effect: SideEffect,
    /// Status, with lazy expiry applied.
    pub status: ApprovalStatus,
    /// When requested.
    pub requested_at: DateTime<Utc>,
    /// When it expires.
    pub expires_at: DateTime<Utc>,
    /// The execution that asked.
    pub execution_id: String,
    /// Correlation id of the original call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// The decision, once made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// The execution that consumed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumed_by_execution_id: Option<String>,
    /// Whether the viewer is the requester (a self-decision is refused unless the
    /// approval's types are self-confirmable).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub own_request: bool,
}

impl From<ApprovalRecord> for ApprovalView {
    fn from(r: ApprovalRecord) -> Self {
        let q = r.request;
        ApprovalView {
            id: q.id,
            capability_id: q.capability_id,
            surface: q.surface,
            requester: q.actor.reference(),
            input: q.input,
            input_hash: q.input_hash,
            reasons: q.reasons,
            types: q.types,
            risk: q.risk,
            side_effect: q.side_effect,
            status: r.status,
            requested_at: q.requested_at,
            expires_at: q.expires_at,
            execution_id: q.execution_id,
            correlation_id: q.correlation_id,
            decision: r.decision,
            consumed_by_execution_id: r.consumed_by_execution_id,
            own_request: false,
        }
    }
}

/// The body of `POST /approvals/{id}/decision`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecisionBody {
    /// `approved` or `rejected`.
    pub decision: DecisionStatus,
    /// Optional comment (at most 4096 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

impl WireBody for DecisionBody {
    const OPERATION: &'static str = "decision";
}

struct ApprovalsApi {
    runtime: Runtime,
    doorkeeper: Doorkeeper,
    role: Arc<str>,
}

impl DoorState for ApprovalsApi {
    fn keeper(&self) -> &Doorkeeper {
        &self.doorkeeper
    }
    fn door(&self) -> Door {
        Door::Approvals
    }
    fn body_limit(&self) -> usize {
        MAX_DECISION_BODY_BYTES
    }
}

type Api = State<Arc<ApprovalsApi>>;

/// The approvals API as an axum router (routes under `/approvals`), for principals holding
/// `role` (e.g. `"approver"`), through the same [`Doorkeeper`] as the capability routes.
pub fn approvals_router(
    runtime: Runtime,
    doorkeeper: Doorkeeper,
    role: impl Into<String>,
) -> Router {
    let api = Arc::new(ApprovalsApi {
        runtime,
        doorkeeper,
        role: Arc::from(role.into()),
    });
    Router::new()
        .route("/approvals", get(list))
        .route("/approvals/{id}", get(one))
        .route("/approvals/{id}/decision", post(decide))
        .layer(DefaultBodyLimit::disable())
        .layer(tower_http::limit::RequestBodyLimitLayer::new(
            MAX_DECISION_BODY_BYTES,
        ))
        .layer(axum::middleware::map_response(json_refusals))
        .with_state(api)
}

impl ApprovalsApi {
    /// The role check and the authorizer, for one operation of an admitted caller.
    async fn approver(
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
                None,
            )
            .await
    }

    /// Who the caller is to approval `id`, with the record, once the role or the requester
    /// door admits them and the authorizer allows `operation`.
    async fn standing(
        &self,
        who: &Authenticated,
        id: &str,
        operation: Operation,
    ) -> Result<(ApprovalRecord, Decider), Reject> {
        if who.has_role(&self.role) {
            let record = in_namespace(self, who, id).await?;
            self.approver(who, operation, Some(&record)).await?;
            let decider = Decider::Approver {
                namespace: who.principal.namespace.clone(),
                roles: who.roles.clone(),
            };
            return Ok((record, decider));
        }
        check_id("id", id)?;
        let access = self
            .runtime
            .approvals()
            .get_as_requester(
                id,
                &who.principal.namespace,
                &who.principal.actor.reference(),
            )
            .await
            .map_err(store_error)?;
        match access {
            None => Err(not_found()),
            Some(RequesterAccess::NeedsApprover) => {
                tracing::info!(target: LOG, actor = %who.principal.actor.id, approval = %id, "requester door refused: not self-confirmable");
                Err(Reject::forbidden_because(
                    "Only an approver can review or decide this approval; its requester may confirm only approvals of a self-confirmable type.",
                ))
            }
            Some(RequesterAccess::Confirmable(record)) => {
                self.doorkeeper
                    .authorize(
                        who,
                        Door::Approvals,
                        operation,
                        Some(record.request.capability_id.as_str()),
                        None,
                    )
                    .await?;
                let decider = Decider::Requester {
                    namespace: who.principal.namespace.clone(),
                };
                Ok((*record, decider))
            }
        }
    }

    fn view(&self, who: &Authenticated, record: ApprovalRecord) -> ApprovalView {
        let own = record.request.actor.id == who.principal.actor.id
            && record.request.actor.kind == who.principal.actor.kind;
        ApprovalView {
            own_request: own,
            ..ApprovalView::from(record)
        }
    }
}

fn store_error(e: ApprovalsError) -> Reject {
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

fn filter_from(query: &HashMap<String, String>) -> Result<ApprovalFilter, Reject> {
    let mut filter = ApprovalFilter::default();
    for (key, value) in query {
        match key.as_str() {
            "status" => {
                filter.status = Some(ApprovalStatus::parse(value).ok_or_else(|| {
                    Reject::bad_request(format!(
                        "Unknown status `{value}` (expected pending, approved, rejected, expired, cancelled or consumed)."
                    ))
                })?);
            }
            "capability" => {
                check_id("capability", value)?;
                filter.capability_id = Some(value.clone());
            }
            "limit" | "offset" => {
                let n = value.parse::<u32>().map_err(|_| {
                    Reject::bad_request(format!("`{key}` must be a non-negative integer."))
                })?;
                if key == "limit" {
                    filter.limit = Some(n);
                } else {
                    filter.offset = Some(n);
                }
            }
            other => {
                return Err(Reject::bad_request(format!(
                    "Unknown query parameter `{other}` (expected status, capability, limit or offset)."
                )));
            }
        }
    }
    Ok(filter)
}

async fn list(
    State(api): Api,
    Caller(who): Caller,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, Reject> {
    api.approver(&who, Operation::ListApprovals, None).await?;
    let Query(query) = query.map_err(|e| Reject::bad_request(format!("Invalid query: {e}.")))?;
    let mut filter = filter_from(&query)?;
    filter.namespace = Some(who.principal.namespace.clone());
    let records = api
        .runtime
        .approvals()
        .list(&filter)
        .await
        .map_err(store_error)?;
    let views: Vec<ApprovalView> = records.into_iter().map(|r| api.view(&who, r)).collect();
    Ok(Json(views).into_response())
}

/// The record of an approval in the caller's namespace, or 404 as if it did not exist.
async fn in_namespace(
    api: &ApprovalsApi,
    who: &Authenticated,
    id: &str,
) -> Result<ApprovalRecord, Reject> {
    check_id("id", id)?;
    api.runtime
        .approvals()
        .get_in(id, Some(&who.principal.namespace))
        .await
        .map_err(store_error)?
        .ok_or_else(not_found)
}

async fn one(
    State(api): Api,
    Caller(who): Caller,
    Path(id): Path<String>,
) -> Result<Response, Reject> {
    let (record, _) = api.standing(&who, &id, Operation::ReviewApproval).await?;
    Ok(Json(api.view(&who, record)).into_response())
}

async fn decide(
    State(api): Api,
    Caller(who): Caller,
    Path(id): Path<String>,
    Valid(body): Valid<DecisionBody>,
) -> Result<Response, Reject> {
    let (_, decider) = api.standing(&who, &id, Operation::DecideApproval).await?;
    let decided = api
        .runtime
        .approvals()
        .decide(
            &id,
            DecideRequest {
                status: body.decision,
                approver: who.principal.actor.reference(),
                comment: body.comment,
                decider,
            },
        )
        .await
        .map_err(store_error)?;
    match tokio::time::timeout(DECISION_AUDIT_DRAIN_TIMEOUT, api.runtime.drain_audit()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(target: LOG, error = %e, "audit drain failed"),
        Err(_) => tracing::error!(target: LOG, "audit drain timed out"),
    }
    Ok(Json(api.view(&who, decided)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_filters_parse_strictly() {
        let q: HashMap<String, String> = [("status", "pending"), ("capability", "orders.refund")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let f = filter_from(&q).ok();
        assert_eq!(
            f.as_ref().and_then(|f| f.status),
            Some(ApprovalStatus::Pending)
        );
        assert_eq!(
            f.and_then(|f| f.capability_id).as_deref(),
            Some("orders.refund")
        );
        let bad: HashMap<String, String> = [("status".to_string(), "maybe".to_string())].into();
        assert!(filter_from(&bad).is_err());
        let unknown: HashMap<String, String> = [("actor".to_string(), "x".to_string())].into();
        assert!(filter_from(&unknown).is_err());
    }

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
