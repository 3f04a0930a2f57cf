//! The human approvals API: what an approval console calls. Separate from the capability
//! gateway on purpose — no gateway operation and no model tool can decide an approval.
//!
//! | route | answer |
//! |---|---|
//! | `GET /approvals?status=pending&capability=orders.refund&requester=u_dana&limit=50&offset=0` | [`ApprovalView`]`[]`, newest first |
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
//! decide an approval. **The credential must be a human's**: one that opens a model door
//! (an agent's key, `surfaces = ["aiSdk", …]`) does not open the requester door
//! ([`crate::auth::Authenticated::requester_door`], `403` before any lookup) unless the
//! operator said so for that key (`requesterDoor = true`, which `capgate check` warns
//! about): whatever holds the agent's key cannot confirm the agent's own held calls. The
//! type's configured roles apply here too (a role-mapped type is confirmed only by a
//! requester holding one of its roles).
//!
//! **The authorizer sees what is decided.** For one approval (`reviewApproval`,
//! `decideApproval`) it is given the approval's capability and its stored, unredacted
//! input, on both doors, before anything is shown or decided.
//!
//! What an approver sees of the stored input: the input after the capability's redactors'
//! `redact_approval_input` (the core's [`Approvals`](capgate_core::runtime::Approvals)
//! applies them on every read); when a redactor fails, or the capability no longer exists,
//! the input is withheld (`null`). The requester appears as `{id, kind}` only (no
//! attributes).
//!
//! **What a console needs.** Each view says what *this viewer* may decide now
//! (`mayApprove`, `mayReject`, with `decisionNote` saying why not: the same checks a
//! decision runs, without running it; a requester is offered no decision on their own
//! approval unless it is self-confirmable), which policies asked (`policies`), whether the
//! input is withheld (`inputWithheld`), and, for a consumed approval, how the resumed call
//! ended (`outcome`, from the audit trail, when the router was given an
//! [`ExecutionHistory`]). The approval console ([`crate::console`]) is a page over exactly
//! this API.
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
    ApprovalFilter, ApprovalRecord, ApprovalStatus, ApprovalStoreError, ApprovalSummary, Decision,
    DecisionStatus,
};
use capgate_core::authz::Operation;
use capgate_core::meta::{Risk, SideEffect};
use capgate_core::runtime::{ApprovalsError, DecideRequest, Decider, Runtime};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const LOG: &str = "capgate::approvals_api";

/// What a credential that opens a model door is told at the requester door.
pub const REQUESTER_DOOR_CLOSED: &str = "This credential opens model doors (an agent's key) and cannot confirm calls: confirm with your own console credential (a key without model surfaces), or ask an approver.";

/// Largest decision body accepted.
pub const MAX_DECISION_BODY_BYTES: usize = 16 * 1024;
/// How long a decision waits for the audit drain before answering.
pub const DECISION_AUDIT_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// the API was given an [`ExecutionHistory`].
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

/// Where the approvals API reads how a resumed call ended: the deployment's audit log.
/// Optional; without it views carry no `outcome`.
#[async_trait::async_trait]
pub trait ExecutionHistory: Send + Sync + 'static {
    /// The outcome of one execution, or `None` when its trail has no start yet. `Err`
    /// (a store failure) leaves the view without an outcome; it is logged, never shown.
    async fn outcome(&self, execution_id: &str) -> Result<Option<ExecutionOutcome>, String>;
}

impl ExecutionOutcome {
    /// How an execution ended, from its audit trail in order: its last terminal event
    /// (`capability.completed`, `.failed`, `.cancelled`), or running after a start; `None`
    /// when the trail has no start yet. What an [`ExecutionHistory`] over an audit log
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

/// The most outcomes one listing looks up (the rest of a long page goes without).
const MAX_OUTCOMES_PER_LIST: usize = 100;

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

struct ApprovalsApi {
    runtime: Runtime,
    doorkeeper: Doorkeeper,
    role: Arc<str>,
    history: Option<Arc<dyn ExecutionHistory>>,
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
    ApprovalsRouter::new(runtime, doorkeeper).role(role).build()
}

/// The approvals API with its options: the role, and where outcomes are read from.
pub struct ApprovalsRouter {
    api: ApprovalsApi,
}

impl ApprovalsRouter {
    /// The API over `runtime`, through `doorkeeper`, for the role `approver`.
    pub fn new(runtime: Runtime, doorkeeper: Doorkeeper) -> Self {
        ApprovalsRouter {
            api: ApprovalsApi {
                runtime,
                doorkeeper,
                role: Arc::from("approver"),
                history: None,
            },
        }
    }

    /// The role an approver must hold.
    pub fn role(mut self, role: impl Into<String>) -> Self {
        self.api.role = Arc::from(role.into());
        self
    }

    /// Read how resumed calls ended, so views of consumed approvals carry an `outcome`.
    pub fn history(mut self, history: Arc<dyn ExecutionHistory>) -> Self {
        self.api.history = Some(history);
        self
    }

    /// The routes, under `/approvals`.
    pub fn build(self) -> Router {
        build_router(Arc::new(self.api))
    }
}

fn build_router(api: Arc<ApprovalsApi>) -> Router {
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
    /// The role check and the authorizer, for one operation of an admitted caller; for
    /// one approval, the authorizer is given its capability and its stored input.
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
                approval.map(|a| &a.request.input),
            )
            .await
    }

    /// Who the caller is to approval `id`, with the record as they may see it, once the
    /// role or the requester door admits them and the authorizer — given the approval's
    /// capability and its stored, unredacted input — allows `operation`.
    async fn standing(
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
    fn view(&self, who: &Authenticated, decider: &Decider, record: ApprovalRecord) -> ApprovalView {
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
    async fn with_outcomes(&self, views: &mut [ApprovalView]) {
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
            "requester" => {
                check_id("requester", value)?;
                filter.actor_id = Some(value.clone());
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
                    "Unknown query parameter `{other}` (expected status, capability, requester, limit or offset)."
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
    let decider = Decider::Approver {
        namespace: who.principal.namespace.clone(),
        roles: who.roles.clone(),
    };
    let mut views: Vec<ApprovalView> = records
        .into_iter()
        .map(|r| api.view(&who, &decider, r))
        .collect();
    api.with_outcomes(&mut views).await;
    Ok(Json(views).into_response())
}

async fn one(
    State(api): Api,
    Caller(who): Caller,
    Path(id): Path<String>,
) -> Result<Response, Reject> {
    let (record, decider) = api.standing(&who, &id, Operation::ReviewApproval).await?;
    let mut view = [api.view(&who, &decider, record)];
    api.with_outcomes(&mut view).await;
    let [view] = view;
    Ok(Json(view).into_response())
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
                decider: decider.clone(),
            },
        )
        .await
        .map_err(store_error)?;
    match tokio::time::timeout(DECISION_AUDIT_DRAIN_TIMEOUT, api.runtime.drain_audit()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(target: LOG, error = %e, "audit drain failed"),
        Err(_) => tracing::error!(target: LOG, "audit drain timed out"),
    }
    Ok(Json(api.view(&who, &decider, decided)).into_response())
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
