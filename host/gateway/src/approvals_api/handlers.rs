//! One short function per route of the approvals API, over the door's extractors.

use super::access::store_error;
use super::options::DECISION_AUDIT_DRAIN_TIMEOUT;
use super::router::ApprovalsApi;
use super::{ApprovalView, DecisionBody, LOG};
use crate::door::{Caller, Valid, check_id};
use crate::reject::Reject;
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use capgate_core::approval::{ApprovalFilter, ApprovalStatus};
use capgate_core::authz::Operation;
use capgate_core::runtime::{DecideRequest, Decider};
use std::collections::HashMap;
use std::sync::Arc;

type Api = State<Arc<ApprovalsApi>>;

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

pub(super) async fn list(
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

pub(super) async fn one(
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

pub(super) async fn decide(
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
}
