//! One short function per route, over the door's extractors: [`Caller`] (authenticated,
//! bound to this surface, within quota) and [`Valid`] (a body parsed and checked).

use super::Gateway;
use super::admission::Admission;
use super::execution::receipt;
use crate::auth::Authenticated;
use crate::door::{Caller, Valid};
use crate::reject::Reject;
use crate::wire::{
    DescribeBody, GetApprovalBody, GetInvocationBody, InvokeBody, ResumeApprovalBody,
};
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use capgate_contract::tools::{ToolFormat, export_tools};
use capgate_core::authz::Operation;
use capgate_core::journal::InvocationRecord;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::time::Instant;

type Gw = State<Arc<Gateway>>;

pub(super) async fn describe(
    State(gw): Gw,
    Caller(who): Caller,
    Valid(req): Valid<DescribeBody>,
) -> Result<Response, Reject> {
    let started = Instant::now();
    gw.authorize(&who, Operation::Describe, None, None).await?;
    let portable = gw.visible_contract(&who, req.scope).await;
    gw.drain(started).await;
    Ok(Json(portable?).into_response())
}

pub(super) async fn invoke(
    State(gw): Gw,
    Caller(who): Caller,
    Valid(req): Valid<InvokeBody>,
) -> Response {
    let started = Instant::now();
    answer_admitted(&gw, started, gw.admit_invoke(who, req)).await
}

pub(super) async fn resume_approval(
    State(gw): Gw,
    Caller(who): Caller,
    Valid(req): Valid<ResumeApprovalBody>,
) -> Response {
    let started = Instant::now();
    answer_admitted(&gw, started, gw.admit_resume(who, req)).await
}

/// The tail shared by `invoke` and `resumeApproval`: admission within the work budget, then
/// either the recorded answer or the governed run (and the audit drain after it).
async fn answer_admitted(
    gw: &Arc<Gateway>,
    started: Instant,
    admission: impl Future<Output = Result<Admission, Reject>>,
) -> Response {
    let outcome = match tokio::time::timeout(gw.work_budget(), admission).await {
        Err(_) => return Reject::timeout().into_response(),
        Ok(Err(reject)) => return reject.into_response(),
        Ok(Ok(Admission::Answer(outcome))) => {
            gw.drain(started).await;
            outcome
        }
        Ok(Ok(Admission::Run(run))) => {
            let outcome = gw.execute(run, started).await;
            gw.drain(started).await;
            match outcome {
                Ok(outcome) => outcome,
                Err(reject) => return reject.into_response(),
            }
        }
    };
    Json(outcome).into_response()
}

/// What a lookup asks the journal for, in the caller's scope.
enum Key<'a> {
    /// The record of an invocation id.
    Invocation(&'a str),
    /// The record that asked for an approval.
    Approval(&'a str),
}

/// The caller's journal record for `key`, read in the caller's own scope and authorized
/// as every lookup is (the authorizer sees the stored capability and input).
async fn lookup(
    gw: &Gateway,
    who: &Authenticated,
    key: Key<'_>,
) -> Result<Option<InvocationRecord>, Reject> {
    let scope = gw.scope(who)?;
    let (found, operation) = match key {
        Key::Invocation(id) => (gw.journal.get(&scope, id).await, Operation::GetInvocation),
        Key::Approval(id) => (
            gw.journal.find_approval(&scope, id).await,
            Operation::GetApproval,
        ),
    };
    let record = found.map_err(Reject::journal)?;
    gw.authorize_lookup(who, operation, record.as_ref()).await?;
    Ok(record)
}

pub(super) async fn get_invocation(
    State(gw): Gw,
    Caller(who): Caller,
    Valid(req): Valid<GetInvocationBody>,
) -> Result<Response, Reject> {
    let record = lookup(&gw, &who, Key::Invocation(&req.invocation_id)).await?;
    let Some(r) = record else {
        return Ok(Json(Value::Null).into_response());
    };
    Ok(Json(receipt(&r)).into_response())
}

pub(super) async fn get_approval(
    State(gw): Gw,
    Caller(who): Caller,
    Valid(req): Valid<GetApprovalBody>,
) -> Result<Response, Reject> {
    let record = lookup(&gw, &who, Key::Approval(&req.approval_id)).await?;
    if record.is_none() {
        return Ok(Json(Value::Null).into_response());
    }
    let me = &who.principal;
    let approval = gw
        .runtime
        .approvals()
        .get_for_requester(&req.approval_id, &me.namespace, &me.actor.reference())
        .await
        .map_err(|e| {
            tracing::error!(target: super::LOG, error = %e, "approval lookup failed");
            Reject::unavailable("approval store")
        })?;
    // The journal scope already binds the requester; the record must agree.
    let summary = approval
        .filter(|a| a.request.surface == gw.surface)
        .map(|a| a.summary(gw.runtime.now()));
    Ok(Json(summary).into_response())
}

pub(super) async fn get_contract(State(gw): Gw, Caller(who): Caller) -> Result<Response, Reject> {
    gw.authorize(&who, Operation::Describe, None, None).await?;
    Ok(Json(gw.visible_contract(&who, None).await?).into_response())
}

pub(super) async fn tools(
    State(gw): Gw,
    Caller(who): Caller,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, Reject> {
    let started = Instant::now();
    let Query(query) = query.map_err(|e| Reject::bad_request(format!("Invalid query: {e}.")))?;
    if let Some(unknown) = query.keys().find(|k| k.as_str() != "format") {
        return Err(Reject::bad_request(format!(
            "Unknown query parameter `{unknown}` (expected `format`)."
        )));
    }
    let format = match query.get("format") {
        None => ToolFormat::AiSdk,
        Some(f) => f
            .parse::<ToolFormat>()
            .map_err(|e| Reject::bad_request(format!("{e}.")))?,
    };
    gw.authorize(&who, Operation::Describe, None, None).await?;
    let descriptors = gw.describe_for(&who, None).await;
    gw.drain(started).await;
    Ok(Json(export_tools(&descriptors?, gw.runtime.registry(), format)).into_response())
}
