//! Stages 9–15: execution-phase policies, controls, the procedure under its retry loop,
//! output validation, redaction, completion. Shared by invoke and resume.

use super::invoke::{Asked, Gate, approval_gate};
use super::policies::{any_applicable, evaluate_batch, refuse};
use super::{EffectProgress, Exec, new_id, panic_message};
use crate::actor::Actor;
use crate::approval::ApprovalRef;
use crate::audit::EventPayload;
use crate::canonical::input_hash;
use crate::error::{CapabilityError, ErrorCode};
use crate::policy::{
    ApprovalRequirement, Phase, PolicyRequest, PolicyStance, SharedJson, Verdict, combine,
    stances_in,
};
use crate::procedure::{AgentInvocationInfo, Next, ProcedureCall, ProcedureError, ProgressFn};
use crate::registry::Capability;
use crate::result::ExecutionResult;
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// A call that passed stages 3–8.
pub(crate) struct Admitted {
    pub(crate) cap: Arc<Capability>,
    pub(crate) input: serde_json::Value,
    pub(crate) actor: Actor,
    pub(crate) context: serde_json::Value,
    pub(crate) approval: Option<ApprovalRef>,
    /// The approval types `approval` was granted for: stage 9 accepts it for a fresh
    /// require-approval only when they cover every type that asks (type-matched, as the
    /// re-check on resume is).
    pub(crate) approval_types: Vec<String>,
    pub(crate) cancel: Option<CancellationToken>,
    pub(crate) idempotency_key: Option<String>,
    pub(crate) progress: Option<ProgressFn>,
    /// The capability's own descriptor digest, recorded on an approval stage 9 asks for.
    pub(crate) descriptor_digest: Option<String>,
    /// The stances (with provenance) that let the call this far, by phase: what
    /// `capability.started` records of why it was allowed.
    pub(crate) decisions: Vec<PolicyStance>,
}

pub(crate) async fn execute(exec: Exec<'_>, mut a: Admitted) -> ExecutionResult {
    let rt = exec.rt;
    let cap = &a.cap;

    // ── Stage 9: execution-phase policies (freshness after approval latency) ──
    if any_applicable(rt, cap, Phase::Execution) {
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(rt.defaults.policy_timeout_ms);
        let shared = SharedJson::default();
        let request = PolicyRequest {
            phase: Phase::Execution,
            capability: &cap.info,
            surface: exec.surface,
            namespace: &exec.namespace,
            actor: &a.actor,
            context: &a.context,
            input: Some(&a.input),
            execution_id: &exec.execution_id,
            approval: a.approval.as_ref(),
            shared: &shared,
        };
        let evaluated = evaluate_batch(rt, cap, &request, deadline, Some(&exec)).await;
        let verdict = combine(&evaluated);
        a.decisions.extend(stances_in(&evaluated, Phase::Execution));
        // A require-approval here on a call that carries no approval opens the approval
        // gate, as the reference runtime does: the call suspends with a new approval (or is
        // decided by the inline handler) before anything is started.
        if let (Verdict::ApprovalRequired(requirement), None) = (&verdict, &a.approval) {
            match stage_9_gate(&exec, &a, requirement.clone()).await {
                Gate::Suspended(result) => return result,
                Gate::Approved(approval, types) => {
                    a.approval = Some(approval);
                    a.approval_types = types;
                }
            }
        } else if let Some(result) = refuse(
            &exec,
            Phase::Execution,
            &evaluated,
            &verdict,
            a.approval.as_ref().map(|_| a.approval_types.as_slice()),
        )
        .await
        {
            return result;
        }
    }

    // ── Stage 10: controls (timeout + caller cancellation), capability.started ──
    let timeout = Duration::from_millis(cap.meta.timeout_ms.unwrap_or(rt.defaults.timeout_ms));
    let caller = a.cancel.unwrap_or_default();
    let started = || {
        exec.event(EventPayload::Started {
            attempt: 1,
            approval_id: a.approval.as_ref().map(|x| x.id.clone()),
            resume_correlation_id: exec.resume_correlation_id.clone(),
            policy_decisions: (!a.decisions.is_empty()).then(|| a.decisions.clone()),
        })
    };
    if rt.audit.is_active()
        && let Err(e) = rt.audit.emit(started()).await
        && rt.audit.config.strict
    {
        let err = CapabilityError::new(ErrorCode::AuditUnavailable).with_cause(e);
        return exec.failed_before_procedure(err).await;
    }

    // ── Stage 11: the procedure through its middleware chain; retries wrap this stage ──
    let agent = Arc::new(AgentInvocationInfo {
        execution_id: exec.execution_id.clone(),
        capability_id: cap.id.clone(),
        surface: exec.surface,
        namespace: exec.namespace.clone(),
        actor: a.actor,
        approval: a.approval,
        correlation_id: exec.correlation_id.clone(),
        idempotency_key: a.idempotency_key.unwrap_or_else(|| new_id("idk")),
    });
    // Progress leaves through the output redactors and a bounded buffer (crate::progress);
    // the guard ends the relay when this execution ends, whichever way it does.
    let (progress, _relay_guard) = match a.progress {
        Some(sink) => crate::progress::relay(cap.clone(), exec.namespace.clone(), sink),
        None => (None, None),
    };
    let retry = cap
        .meta
        .retry
        .as_ref()
        .filter(|_| cap.meta.retry_eligible());
    let max_attempts = 1 + retry.map_or(0, |r| r.max_attempts);
    let mut attempt = 1u32;
    // Whether an earlier attempt may have had an effect: a failure that does not show it
    // had none (ProcedureError::had_no_effect).
    let mut uncertain = false;
    // What the attempts so far leave of the effect.
    let progress_after = |attempts: u32, uncertain: bool| match (attempts, uncertain) {
        (0, _) => EffectProgress::NotStarted,
        (attempts, true) => EffectProgress::Attempted { attempts },
        (attempts, false) => EffectProgress::Refused { attempts },
    };
    let mut input = Some(a.input);
    let output = loop {
        let this_input = if attempt < max_attempts {
            input.clone().unwrap_or_default()
        } else {
            input.take().unwrap_or_default()
        };
        let call = ProcedureCall {
            input: this_input,
            context: a.context.clone(),
            agent: agent.clone(),
            cancel: caller.child_token(),
            progress: progress.clone(),
            attempt,
        };
        match run_attempt(cap, call, &caller, timeout, attempt).await {
            Ok(v) => break v,
            Err(Failure {
                error: err,
                entered: false,
                ..
            }) => {
                // Cancelled before this attempt entered the middleware chain: nothing of it
                // ran. Before the first attempt the call settles as cancelled with nothing
                // entered; before a retry the earlier attempts decide.
                return exec
                    .failed(err, progress_after(attempt - 1, uncertain), None)
                    .await;
            }
            Err(Failure {
                error: err,
                no_effect,
                ..
            }) => {
                uncertain |= !no_effect;
                let retry_allowed = retry.is_some_and(|r| {
                    r.retry_on
                        .as_ref()
                        .is_none_or(|codes| codes.contains(&err.code()))
                });
                let terminal = err.code() == ErrorCode::Cancelled
                    || !err.retryable()
                    || !retry_allowed
                    || attempt >= max_attempts;
                if terminal {
                    return exec
                        .failed(err, progress_after(attempt, uncertain), None)
                        .await;
                }
                let base = retry
                    .and_then(|r| r.backoff_ms)
                    .unwrap_or(rt.defaults.retry_backoff_ms);
                let backoff = base.saturating_mul(1u64 << (attempt - 1).min(20));
                tokio::select! {
                    biased;
                    _ = caller.cancelled() => {
                        let err = CapabilityError::new(ErrorCode::Cancelled);
                        return exec.failed(err, progress_after(attempt, uncertain), None).await;
                    }
                    _ = tokio::time::sleep(Duration::from_millis(backoff)) => {}
                }
                attempt += 1;
                exec.emit(EventPayload::Retried {
                    attempt,
                    previous_error_code: err.code(),
                })
                .await;
            }
        }
    };

    // ── Stage 12: output validation (the contract is checked on the true output) ──
    let checked = cap.output.as_ref().map(|schema| {
        let _validation = tracing::info_span!("agent.output_validation").entered();
        schema.check(&output)
    });
    if let Some(Err(issues)) = checked {
        let err = CapabilityError::new(ErrorCode::OutputInvalid)
            .with_private_details(serde_json::json!({ "issues": issues }));
        return exec
            .failed(err, EffectProgress::Executed { attempts: attempt }, None)
            .await;
    }

    // ── Stage 13: redaction, before any envelope, event or span attribute (SI-10) ──
    let mut output = output;
    for r in &cap.redactors {
        let span = tracing::info_span!(
            "agent.redaction",
            capgate.redactor = r.name(),
            capgate.fuel_used = tracing::field::Empty,
        );
        match AssertUnwindSafe(r.redact_output(&cap.info, &exec.namespace, output))
            .catch_unwind()
            .instrument(span)
            .await
        {
            Ok(Ok(v)) => output = v,
            Ok(Err(e)) => {
                let err = CapabilityError::new(ErrorCode::ExecutionFailed)
                    .with_cause(format!("redactor `{}`: {e}", r.name()));
                return exec
                    .failed(err, EffectProgress::Executed { attempts: attempt }, None)
                    .await;
            }
            Err(p) => {
                let err = CapabilityError::new(ErrorCode::ExecutionFailed).with_cause(format!(
                    "redactor `{}` panicked: {}",
                    r.name(),
                    panic_message(&*p)
                ));
                return exec
                    .failed(err, EffectProgress::Executed { attempts: attempt }, None)
                    .await;
            }
        }
    }

    // ── Stage 14: capability.completed, span ok ──
    exec.emit(EventPayload::Completed {
        duration_ms: exec.elapsed_ms(),
        attempts: attempt,
    })
    .await;
    exec.span.record("capgate.outcome", "completed");
    exec.span.record("otel.status_code", "OK");

    // ── Stage 15: the completed envelope ──
    ExecutionResult::Completed {
        execution_id: exec.execution_id,
        output,
    }
}

/// Stage 9's approval gate: the stage-8 gate over the validated input, its hash binding the
/// approval (an input that cannot be hashed is `APPROVAL_UNSERIALIZABLE_INPUT`).
async fn stage_9_gate(exec: &Exec<'_>, a: &Admitted, requirement: ApprovalRequirement) -> Gate {
    match input_hash(&a.input) {
        Ok(hash) => {
            approval_gate(
                exec,
                &a.cap,
                &a.actor,
                &a.input,
                hash,
                Asked {
                    requirement,
                    descriptor_digest: a.descriptor_digest.clone(),
                    decisions: a.decisions.clone(),
                },
            )
            .await
        }
        Err(e) => {
            let err = CapabilityError::new(ErrorCode::ApprovalUnserializableInput).with_cause(e);
            Gate::Suspended(exec.failed_before_procedure(err).await)
        }
    }
}

/// A failed attempt of stage 11, and whether it got as far as the middleware chain.
struct Failure {
    error: CapabilityError,
    /// The chain (middleware, then the procedure) was polled: whatever it does may have
    /// taken effect. False only when the caller had cancelled before it was first polled.
    entered: bool,
    /// The chain answered a failure that shows the attempt had no effect
    /// ([`ProcedureError::had_no_effect`]).
    no_effect: bool,
}

/// One attempt of stage 11 under the composite signal: the caller's cancellation and a
/// timer re-armed for this attempt. The procedure's own token fires on either.
async fn run_attempt(
    cap: &Capability,
    call: ProcedureCall,
    caller: &CancellationToken,
    timeout: Duration,
    attempt: u32,
) -> Result<serde_json::Value, Failure> {
    let child = call.cancel.clone();
    let span = tracing::info_span!(
        "agent.procedure_execution",
        capgate.attempt = attempt,
        capgate.fuel_used = tracing::field::Empty,
    );
    let entered = AtomicBool::new(false);
    let chain = Next::new(&cap.middleware, cap.procedure.as_ref()).run(call);
    let guarded = async {
        entered.store(true, Ordering::Relaxed);
        AssertUnwindSafe(chain).catch_unwind().await
    }
    .instrument(span);
    let failed = |error| Failure {
        error,
        entered: entered.load(Ordering::Relaxed),
        no_effect: false,
    };
    tokio::select! {
        biased;
        // Polled first: a cancellation that is already there ends the attempt before the
        // chain is ever polled (nothing entered).
        _ = caller.cancelled() => {
            child.cancel();
            Err(failed(CapabilityError::new(ErrorCode::Cancelled)))
        }
        // Polled before the timer so a procedure that is ready at once never arms it.
        r = guarded => match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                let no_effect = e.had_no_effect();
                Err(Failure { no_effect, ..failed(e.into_capability_error()) })
            }
            Err(p) => Err(failed(ProcedureError::Internal(format!("procedure panicked: {}", panic_message(&*p))).into_capability_error())),
        },
        _ = tokio::time::sleep(timeout) => {
            child.cancel();
            Err(failed(CapabilityError::new(ErrorCode::Timeout)))
        }
    }
}
