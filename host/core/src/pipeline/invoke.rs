//! Invocation, stages 2–8. Stages 9–15 live in `execute.rs` because resume shares them.

use super::execute::{Admitted, execute};
use super::policies::{invocation_phase, refuse};
use super::{Exec, GEN_AI_OPERATION, missing_actor, new_id, panic_message};
use crate::approval::{ApprovalRef, ApprovalRequest, DecisionStatus};
use crate::audit::{DenyReason, EventPayload};
use crate::canonical::input_hash;
use crate::error::{CapabilityError, ErrorCode};
use crate::policy::{ApprovalRequirement, Phase, PolicyStance, Verdict, stances_in};
use crate::registry::Capability;
use crate::result::ExecutionResult;
use crate::runtime::{Inner, InvokeRequest};
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;
use tracing::Instrument;

/// Stages 2–15 of one governed call.
pub(crate) async fn invoke(rt: &Inner, req: InvokeRequest) -> ExecutionResult {
    let exec = begin(rt, &req);
    let span = exec.span.clone();
    let (started, surface) = (exec.started, req.surface);
    let capability = capability_label(rt, &req.capability_id);
    let result = stages(exec, req).instrument(span).await;
    crate::metrics::call_finished(&capability, surface, &result, started.elapsed());
    result
}

/// The metrics label of a requested id: the registry's id, or a constant for an id it does
/// not have (request data never becomes a label).
fn capability_label(rt: &Inner, id: &str) -> String {
    rt.registry
        .get(id)
        .map_or(crate::metrics::UNKNOWN_CAPABILITY, |c| c.id.as_str())
        .to_owned()
}

/// Stages 2–3 of a call the adapter must conceal: `capability.requested`, then the
/// not-found denial an unknown id gets (recording the true `reason`), with nothing
/// evaluated or run.
pub(crate) async fn conceal(rt: &Inner, req: InvokeRequest, reason: DenyReason) -> ExecutionResult {
    let exec = begin(rt, &req);
    let span = exec.span.clone();
    let (started, surface) = (exec.started, req.surface);
    // A known id is recorded with its side effect and risk, as any other call of it is
    // (the trail is the operator's; the caller is answered as for an unknown id).
    let known = rt.registry.get(&req.capability_id).cloned();
    let result = async {
        exec.emit(EventPayload::Requested {
            side_effect: known.as_ref().map(|c| c.meta.side_effect),
            risk: known.as_ref().map(|c| c.meta.risk),
        })
        .await;
        exec.denied(reason, CapabilityError::not_found(), None)
            .await
    }
    .instrument(span)
    .await;
    let capability = capability_label(rt, &req.capability_id);
    crate::metrics::call_finished(&capability, surface, &result, started.elapsed());
    result
}

/// Stage 2: the execution identity and its root span.
fn begin<'a>(rt: &'a Inner, req: &InvokeRequest) -> Exec<'a> {
    let execution_id = new_id("exe");
    let span = tracing::info_span!(
        "agent.capability_call",
        capgate.execution_id = %execution_id,
        capgate.capability_id = %req.capability_id,
        capgate.surface = req.surface.as_str(),
        capgate.outcome = tracing::field::Empty,
        capgate.error_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        // OpenTelemetry's GenAI conventions, which tracing backends key tool dashboards on.
        gen_ai.operation.name = GEN_AI_OPERATION,
        gen_ai.tool.name = %req.capability_id,
        error.r#type = tracing::field::Empty,
    );
    Exec {
        rt,
        execution_id,
        surface: req.surface,
        namespace: req.namespace.clone(),
        actor: req
            .actor
            .as_ref()
            .map_or_else(missing_actor, |a| a.reference()),
        capability_id: req.capability_id.clone(),
        correlation_id: req.correlation_id.clone(),
        approval_id: None,
        resume_correlation_id: None,
        input_hash: None,
        started: Instant::now(),
        span,
    }
}

async fn stages(mut exec: Exec<'_>, req: InvokeRequest) -> ExecutionResult {
    let rt = exec.rt;
    let resolved = rt.registry.get(&req.capability_id).cloned();
    exec.emit(EventPayload::Requested {
        side_effect: resolved.as_ref().map(|c| c.meta.side_effect),
        risk: resolved.as_ref().map(|c| c.meta.risk),
    })
    .await;

    // ── Stages 3–5: resolve, exposure, input validation ──
    let (cap, input) = match exec.admit_input(resolved, req.input).await {
        Ok(admitted) => admitted,
        Err(result) => return result,
    };
    // The canonical hash labels every later event; without sinks it is computed only if
    // stage 8 needs it.
    let mut hash = None;
    if rt.audit.is_active() {
        let h = input_hash(&input);
        exec.input_hash = h.as_ref().ok().cloned();
        hash = Some(h);
    }

    // ── Stage 6: actor check ──
    let actor = match req.actor {
        Some(a) if a.is_well_formed() => a,
        _ => {
            return exec
                .failed_before_procedure(CapabilityError::new(ErrorCode::Unauthenticated))
                .await;
        }
    };

    // ── Stage 7: invocation-phase policies (all evaluated, then combined) ──
    let evaluated = invocation_phase(&exec, &cap, &actor, &req.context, &input).await;
    let verdict = crate::policy::combine(&evaluated);
    // ── Admission: everything the caller may learn about from here on is admitted by the
    // adapter (its journal claim) before it is refused or run; a hidden call never is. ──
    let mut idempotency_key = req.idempotency_key;
    if let Some(hook) = &req.admission
        && !matches!(verdict, Verdict::Hidden { .. })
    {
        match AssertUnwindSafe(hook.admit()).catch_unwind().await {
            Ok(Ok(Some(key))) => idempotency_key = Some(key),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => return exec.failed_before_procedure(e).await,
            Err(p) => {
                let err = CapabilityError::new(ErrorCode::AdapterError)
                    .with_cause(format!("admission hook panicked: {}", panic_message(&*p)));
                return exec.failed_before_procedure(err).await;
            }
        }
    }
    if let Some(refused) = refuse(&exec, Phase::Invocation, &evaluated, &verdict, None).await {
        return refused;
    }
    let decisions = stances_in(&evaluated, Phase::Invocation);
    let mut requirement = match verdict {
        Verdict::ApprovalRequired(r) => Some(r),
        _ => None,
    };

    // ── Stage 8: approval gate ──
    if let Some(static_approval) = cap.meta.approval.as_ref().filter(|a| a.required) {
        let r = requirement.get_or_insert_with(ApprovalRequirement::default);
        r.merge(
            None,
            &format!("Approval is required for {}.", cap.id),
            static_approval.approval_type.as_deref(),
            static_approval.expires_in_ms,
        );
    }
    let mut approval = None;
    let mut approval_types = Vec::new();
    if let Some(requirement) = requirement {
        let hash = match hash.unwrap_or_else(|| input_hash(&input)) {
            Ok(h) => h,
            Err(e) => {
                let err =
                    CapabilityError::new(ErrorCode::ApprovalUnserializableInput).with_cause(e);
                return exec.failed_before_procedure(err).await;
            }
        };
        let digest = req.descriptor_digest.clone();
        let asked = Asked {
            requirement,
            descriptor_digest: digest,
            decisions: decisions.clone(),
        };
        let gate = approval_gate(&exec, &cap, &actor, &input, hash, asked);
        match gate.await {
            Gate::Suspended(result) => return result,
            Gate::Approved(a, types) => {
                approval = Some(a);
                approval_types = types;
            }
        }
    }

    // ── Stages 9–15 ──
    execute(
        exec,
        Admitted {
            cap,
            input,
            actor,
            context: req.context,
            approval,
            approval_types,
            cancel: req.cancel,
            idempotency_key,
            progress: req.progress,
            descriptor_digest: req.descriptor_digest,
            decisions,
        },
    )
    .await
}

/// What a call held for approval is told when its namespace is at its storage budget.
pub const STORAGE_BUDGET_MESSAGE: &str =
    "This namespace is at its storage budget: nothing was stored or run.";

/// What the approval gate made of a call: suspended (or ended) here, or approved inline.
pub(crate) enum Gate {
    /// The call ends with this envelope: `approval-required`, or a failure of the gate.
    Suspended(ExecutionResult),
    /// The inline handler approved: the call goes on carrying this approval, granted for
    /// these approval types.
    Approved(ApprovalRef, Vec<String>),
}

/// What the approval gate is asked to hold a call for.
pub(crate) struct Asked {
    /// The merged requirement of the policies (and the capability's own).
    pub(crate) requirement: ApprovalRequirement,
    /// The capability's descriptor digest, recorded on the request.
    pub(crate) descriptor_digest: Option<String>,
    /// The stances of the phase that asked, for `capability.approval_requested`.
    pub(crate) decisions: Vec<PolicyStance>,
}

/// Stage 8: store the request (or ask the inline handler), then suspend. Stage 9 opens it
/// too, for an execution-phase require-approval on a call that carries no approval.
pub(crate) async fn approval_gate(
    exec: &Exec<'_>,
    cap: &Arc<Capability>,
    actor: &crate::actor::Actor,
    input: &serde_json::Value,
    hash: String,
    asked: Asked,
) -> Gate {
    let Asked {
        requirement,
        descriptor_digest,
        decisions,
    } = asked;
    let rt = exec.rt;
    let span = tracing::info_span!(
        "agent.approval_request",
        capgate.approval_id = tracing::field::Empty
    );
    let now = rt.clock.now();
    let expires_in = requirement
        .expires_in_ms
        .unwrap_or(rt.defaults.approval_expires_in_ms);
    let expires_at = now
        + chrono::Duration::milliseconds(
            i64::try_from(expires_in)
                .unwrap_or(i64::MAX / 4)
                .min(i64::MAX / 4),
        );
    let reason_codes = requirement.reason_codes();
    let request = ApprovalRequest {
        id: new_id("apr"),
        capability_id: cap.id.clone(),
        surface: exec.surface,
        actor: actor.clone(),
        input: input.clone(),
        input_hash: hash,
        reasons: requirement.reasons,
        types: requirement.types,
        policies: requirement.policies,
        risk: cap.meta.risk,
        side_effect: cap.meta.side_effect,
        requested_at: now,
        expires_at,
        execution_id: exec.execution_id.clone(),
        correlation_id: exec.correlation_id.clone(),
        namespace: exec.namespace.clone(),
        untyped: requirement.untyped,
        descriptor_digest,
    };
    span.record("capgate.approval_id", request.id.as_str());
    let requested = EventPayload::ApprovalRequested {
        approval_id: request.id.clone(),
        reasons: reason_codes,
        types: request.types.clone(),
        expires_at,
        policy_decisions: (!decisions.is_empty()).then_some(decisions),
        namespace: (!exec.namespace.is_empty()).then(|| exec.namespace.clone()),
    };
    async {
        let mut announced = false;
        if let Some(handler) = &rt.handler {
            // Inline handler: the request is announced, then decided in this call.
            exec.emit(requested.clone()).await;
            announced = true;
            let decided = AssertUnwindSafe(handler.decide(&request))
                .catch_unwind()
                .await;
            match decided {
                Ok(Ok(None)) => {} // deferred to the coordinator
                Ok(Ok(Some(d))) => {
                    let payload_common =
                        (request.id.clone(), d.approver.clone(), d.comment.clone());
                    match d.status {
                        DecisionStatus::Rejected => {
                            exec.emit(EventPayload::Rejected {
                                approval_id: payload_common.0,
                                approver: payload_common.1,
                                comment: payload_common.2,
                                namespace: None,
                                via: None,
                                requester_namespace: (!exec.namespace.is_empty())
                                    .then(|| exec.namespace.clone()),
                            })
                            .await;
                            return Gate::Suspended(
                                exec.failed_before_procedure(CapabilityError::new(
                                    ErrorCode::ApprovalRejected,
                                ))
                                .await,
                            );
                        }
                        DecisionStatus::Approved => {
                            if rt.is_forbidden_self_approval(&d.approver.id, &request) {
                                return Gate::Suspended(
                                    exec.failed_before_procedure(CapabilityError::new(
                                        ErrorCode::ApprovalSelfApproval,
                                    ))
                                    .await,
                                );
                            }
                            exec.emit(EventPayload::Approved {
                                approval_id: payload_common.0.clone(),
                                approver: payload_common.1.clone(),
                                comment: payload_common.2,
                                namespace: None,
                                via: None,
                                requester_namespace: (!exec.namespace.is_empty())
                                    .then(|| exec.namespace.clone()),
                            })
                            .await;
                            return Gate::Approved(
                                ApprovalRef {
                                    id: payload_common.0,
                                    approver: payload_common.1,
                                },
                                request.types.clone(),
                            );
                        }
                    }
                }
                Ok(Err(e)) => {
                    let err = CapabilityError::new(ErrorCode::InternalError)
                        .with_stage(crate::error::Stage::Approval)
                        .with_cause(e);
                    return Gate::Suspended(exec.failed_before_procedure(err).await);
                }
                Err(p) => {
                    let err = CapabilityError::new(ErrorCode::InternalError)
                        .with_stage(crate::error::Stage::Approval)
                        .with_cause(format!("approval handler panicked: {}", panic_message(&*p)));
                    return Gate::Suspended(exec.failed_before_procedure(err).await);
                }
            }
        }

        match rt.coordinator.create(request).await {
            Ok(record) => {
                crate::metrics::approval(crate::metrics::ApprovalEvent::Created);
                if !announced {
                    exec.emit(requested).await;
                }
                exec.span.record("capgate.outcome", "approval-required");
                exec.span.record("otel.status_code", "OK");
                Gate::Suspended(ExecutionResult::ApprovalRequired {
                    execution_id: exec.execution_id.clone(),
                    approval: record.summary(now),
                })
            }
            // The namespace is at its storage budget: refused with nothing stored, told
            // plainly (the caller can do nothing else about it), at every door.
            Err(e @ crate::approval::ApprovalStoreError::QuotaExceeded { .. }) => {
                let err = CapabilityError::new(ErrorCode::AdapterError)
                    .with_stage(crate::error::Stage::Approval)
                    .with_exposed(true)
                    .with_message(STORAGE_BUDGET_MESSAGE)
                    .with_cause(e);
                Gate::Suspended(exec.failed_before_procedure(err).await)
            }
            Err(e) => {
                let err = CapabilityError::new(ErrorCode::InternalError)
                    .with_stage(crate::error::Stage::Approval)
                    .with_cause(e);
                Gate::Suspended(exec.failed_before_procedure(err).await)
            }
        }
    }
    .instrument(span.clone())
    .await
}
