//! Resume: re-entry at stage 8 with the check order of docs/pipeline.md ("Resume"), then
//! stages 9–15 under a new execution id, as the original actor, with the approver visible
//! to the procedure.

use super::execute::{Admitted, execute};
use super::policies::{invocation_phase, refuse};
use super::{Exec, missing_actor, new_id};
use crate::approval::{ApprovalRef, ApprovalStatus, ApprovalStoreError};
use crate::canonical::input_hash;
use crate::error::{CapabilityError, ErrorCode, Stage};
use crate::policy::{Phase, combine, stances_in};
use crate::result::ExecutionResult;
use crate::runtime::{Inner, ResumeOptions};
use std::time::Instant;
use tracing::Instrument;

pub(crate) async fn resume(rt: &Inner, approval_id: &str, opts: ResumeOptions) -> ExecutionResult {
    let exec = open(rt, approval_id, &opts);
    let span = exec.span.clone();
    let started = exec.started;
    let mut labels = (crate::metrics::UNKNOWN_CAPABILITY.to_owned(), exec.surface);
    let result = checks(exec, approval_id, opts, &mut labels)
        .instrument(span)
        .await;
    crate::metrics::call_finished(&labels.0, labels.1, &result, started.elapsed());
    result
}

/// A resume an adapter refused before the runtime ran it (the approval still pending, an
/// unknown approval id, a contract that changed): opened and recorded exactly like the
/// runtime's own refusals (`capability.failed` with `error`, carrying the approval id),
/// with the capability, input hash and original correlation id of the approval when it is
/// the caller's own.
pub(crate) async fn refuse_resume(
    rt: &Inner,
    approval_id: &str,
    opts: ResumeOptions,
    error: CapabilityError,
) -> ExecutionResult {
    let mut exec = open(rt, approval_id, &opts);
    let span = exec.span.clone();
    let started = exec.started;
    if let Ok(Some(record)) = rt.coordinator.get(approval_id).await
        && guards_hold(&opts, &record)
    {
        exec.capability_id = record.request.capability_id.clone();
        exec.correlation_id = record.request.correlation_id.clone();
        exec.input_hash = Some(record.request.input_hash.clone());
        exec.surface = record.request.surface;
        exec.span
            .record("capgate.capability_id", exec.capability_id.as_str())
            .record("gen_ai.tool.name", exec.capability_id.as_str());
    }
    let label = if rt.registry.get(&exec.capability_id).is_some() {
        exec.capability_id.clone()
    } else {
        crate::metrics::UNKNOWN_CAPABILITY.to_owned()
    };
    let surface = exec.surface;
    let result = async { exec.failed_before_procedure(error).await }
        .instrument(span)
        .await;
    crate::metrics::call_finished(&label, surface, &result, started.elapsed());
    result
}

/// Whether the binding guards of `opts` hold for `record` (same requester, surface,
/// namespace).
fn guards_hold(opts: &ResumeOptions, record: &crate::approval::ApprovalRecord) -> bool {
    let same = |a: &crate::actor::ActorRef| {
        a.id == record.request.actor.id && a.kind == record.request.actor.kind
    };
    opts.expected_actor.as_ref().is_none_or(same)
        && opts
            .expected_surface
            .is_none_or(|s| s == record.request.surface)
        && opts
            .expected_namespace
            .as_ref()
            .is_none_or(|n| *n == record.request.namespace)
        && opts.actor.as_ref().is_none_or(|a| same(&a.reference()))
}

/// The execution a resume (or its refusal) opens: a new execution id and root span, as
/// the expected requester on the expected surface until the record is read.
fn open<'a>(rt: &'a Inner, approval_id: &str, opts: &ResumeOptions) -> Exec<'a> {
    let execution_id = new_id("exe");
    let span = tracing::info_span!(
        "agent.capability_call",
        capgate.execution_id = %execution_id,
        capgate.approval_id = %approval_id,
        capgate.capability_id = tracing::field::Empty,
        capgate.outcome = tracing::field::Empty,
        capgate.error_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        gen_ai.operation.name = super::GEN_AI_OPERATION,
        gen_ai.tool.name = tracing::field::Empty,
        error.r#type = tracing::field::Empty,
    );
    Exec {
        rt,
        execution_id,
        surface: opts
            .expected_surface
            .unwrap_or(crate::actor::Surface::Direct),
        namespace: opts.expected_namespace.clone().unwrap_or_default(),
        actor: opts.expected_actor.clone().unwrap_or_else(missing_actor),
        capability_id: String::new(),
        // The original call's correlation id (read with the record) stays the execution's;
        // the resume's own is recorded beside it.
        correlation_id: None,
        approval_id: Some(approval_id.to_string()),
        resume_correlation_id: opts.correlation_id.clone(),
        input_hash: None,
        started: Instant::now(),
        span,
    }
}

fn approval_error(code: ErrorCode) -> CapabilityError {
    CapabilityError::new(code)
}

fn internal(cause: impl Into<crate::error::BoxError>) -> CapabilityError {
    CapabilityError::new(ErrorCode::InternalError)
        .with_stage(Stage::Approval)
        .with_cause(cause)
}

/// `labels` receives the metrics labels (capability, surface) once the record is read.
async fn checks(
    mut exec: Exec<'_>,
    approval_id: &str,
    opts: ResumeOptions,
    labels: &mut (String, crate::actor::Surface),
) -> ExecutionResult {
    let rt = exec.rt;
    let now = rt.clock.now();

    // Load the record. An unknown id is INTERNAL_ERROR: it reveals nothing.
    let record = match rt.coordinator.get(approval_id).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return exec
                .failed_before_procedure(internal(format!("unknown approval `{approval_id}`")))
                .await;
        }
        Err(e) => {
            return exec.failed_before_procedure(internal(e)).await;
        }
    };
    exec.capability_id = record.request.capability_id.clone();
    exec.span
        .record("capgate.capability_id", exec.capability_id.as_str())
        .record("gen_ai.tool.name", exec.capability_id.as_str());
    exec.correlation_id = record.request.correlation_id.clone();

    // 1. Binding guards: not exposed, serialized exactly like an unknown id.
    if !guards_hold(&opts, &record) {
        return exec
            .failed_before_procedure(approval_error(ErrorCode::ApprovalResumeMismatch))
            .await;
    }
    // From here the execution runs as the original requester, on the original surface.
    exec.actor = record.request.actor.reference();
    exec.surface = record.request.surface;
    exec.namespace = record.request.namespace.clone();
    exec.input_hash = Some(record.request.input_hash.clone());
    if rt.registry.get(&exec.capability_id).is_some() {
        labels.0.clone_from(&exec.capability_id);
    }
    labels.1 = exec.surface;

    // 2. Status.
    let code = match record.effective_status(now) {
        ApprovalStatus::Approved => None,
        ApprovalStatus::Pending => Some(ErrorCode::ApprovalPending),
        ApprovalStatus::Rejected => Some(ErrorCode::ApprovalRejected),
        ApprovalStatus::Consumed => Some(ErrorCode::ApprovalConsumed),
        // Counted once per approval by the sweeper, not per refused resume.
        ApprovalStatus::Expired => Some(ErrorCode::ApprovalExpired),
        ApprovalStatus::Cancelled => {
            return exec
                .failed_before_procedure(internal("approval was cancelled"))
                .await;
        }
    };
    if let Some(code) = code {
        return exec.failed_before_procedure(approval_error(code)).await;
    }
    let Some(decision) = record.decision.clone() else {
        return exec
            .failed_before_procedure(internal("approved record carries no decision"))
            .await;
    };

    // 3. Self-approval (SI-4): ids compared.
    if rt.is_forbidden_self_approval(&decision.approver.id, &record.request) {
        return exec
            .failed_before_procedure(approval_error(ErrorCode::ApprovalSelfApproval))
            .await;
    }

    // 4. Integrity (SI-5): the stored input must still hash to the bound hash.
    match input_hash(&record.request.input) {
        Ok(h) if h == record.request.input_hash => {}
        _ => {
            return exec
                .failed_before_procedure(approval_error(ErrorCode::ApprovalInputMismatch))
                .await;
        }
    }

    // 5. Resolve against the current deployment: exposure and the current schema.
    let resolved = rt.registry.get(&record.request.capability_id).cloned();
    let (cap, input) = match exec
        .admit_input(resolved, record.request.input.clone())
        .await
    {
        Ok(admitted) => admitted,
        Err(result) => return result,
    };
    // A schema change that rewrote the value (new defaults) would execute something other
    // than what was approved.
    if input_hash(&input).ok().as_deref() != Some(record.request.input_hash.as_str()) {
        return exec
            .failed_before_procedure(approval_error(ErrorCode::ApprovalInputMismatch))
            .await;
    }
    if !record.request.actor.is_well_formed() {
        return exec
            .failed_before_procedure(CapabilityError::new(ErrorCode::Unauthenticated))
            .await;
    }

    // The call runs as the requester as authenticated now (current attributes), else as
    // stored with the approval.
    let actor = opts.actor.unwrap_or_else(|| record.request.actor.clone());

    // 5b. Freshness (docs/pipeline.md, "Resume" step 7): the current invocation-phase
    // policies are checked again, with the current actor and context, before anything is
    // consumed. A deny, hide or failure ends the call as it would on invoke and leaves the
    // approval unconsumed; a fresh require-approval is satisfied by this approval.
    let evaluated = invocation_phase(&exec, &cap, &actor, &opts.context, &input).await;
    let verdict = combine(&evaluated);
    // A fresh require-approval is satisfied only by an approval of the types it asks for
    // (`refuse`): an approval of another type (a self-confirmable `human-confirmation`,
    // say) does not stand in for a `manager` approval a policy now requires. Refused as a
    // denial; the approval stays unconsumed.
    let types = Some(record.request.types.as_slice());
    if let Some(result) = refuse(&exec, Phase::Invocation, &evaluated, &verdict, types).await {
        return result;
    }

    // 6. Consume atomically: at most one execution per approval.
    let consume = tracing::info_span!("agent.approval_consume", capgate.approval_id = %approval_id);
    match rt
        .coordinator
        .mark_consumed(approval_id, &exec.execution_id, now)
        .instrument(consume)
        .await
    {
        Ok(_) => crate::metrics::approval(crate::metrics::ApprovalEvent::Consumed),
        Err(ApprovalStoreError::WrongStatus { status, .. }) => {
            let code = match status {
                "expired" => ErrorCode::ApprovalExpired,
                _ => ErrorCode::ApprovalConsumed,
            };
            return exec.failed_before_procedure(approval_error(code)).await;
        }
        Err(e) => {
            return exec.failed_before_procedure(internal(e)).await;
        }
    }

    // 7. Continue at stage 9 as the original actor, approver in the agent info.
    execute(
        exec,
        Admitted {
            cap,
            input,
            actor,
            context: opts.context,
            approval: Some(ApprovalRef {
                id: approval_id.to_string(),
                approver: decision.approver,
            }),
            approval_types: record.request.types,
            cancel: opts.cancel,
            idempotency_key: opts.idempotency_key,
            progress: opts.progress,
            // A resumed call carries its approval, so stage 9 never opens a new gate.
            descriptor_digest: None,
            decisions: stances_in(&evaluated, Phase::Invocation),
        },
    )
    .await
}
