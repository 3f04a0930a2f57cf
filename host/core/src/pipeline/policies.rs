//! Policy batches (stages 7 and 9, discovery): every applicable policy evaluated, runtime
//! policies first, under one shared deadline; panics, errors, invalid decisions and missed
//! deadlines are recorded as failures (SI-7). Shadow policies ([`crate::policy::Shadow`])
//! run in the same batch, but only their divergences are recorded: their stances never
//! reach the verdict.

use super::{EffectProgress, Exec};
use crate::actor::Actor;
use crate::audit::DenyReason;
use crate::audit::EventPayload;
use crate::error::{CapabilityError, ErrorCode};
use crate::policy::{
    Evaluated, Phase, Policy, PolicyError, PolicyRequest, SharedJson, Verdict, divergences, stances,
};
use crate::registry::Capability;
use crate::result::ExecutionResult;
use crate::runtime::Inner;
use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use tokio::time::Instant;
use tracing::Instrument;

/// Policies of `cap` that run in `phase`, in evaluation order.
fn applicable<'a>(
    rt: &'a Inner,
    cap: &'a Capability,
    phase: Phase,
) -> impl Iterator<Item = &'a Arc<dyn Policy>> {
    rt.policies
        .iter()
        .chain(cap.policies.iter())
        .filter(move |p| p.phases().contains(&phase))
}

/// Stage 7's batch for one call: every invocation-phase policy of `cap`, under one
/// deadline of the policy timeout from now. Invoke runs it once; resume runs it again
/// before consuming an approval (freshness), with the current actor and context.
pub(crate) async fn invocation_phase(
    exec: &Exec<'_>,
    cap: &Capability,
    actor: &Actor,
    context: &serde_json::Value,
    input: &serde_json::Value,
) -> Vec<Evaluated> {
    let rt = exec.rt;
    let deadline = Instant::now() + std::time::Duration::from_millis(rt.defaults.policy_timeout_ms);
    let shared = SharedJson::default();
    let request = PolicyRequest {
        phase: Phase::Invocation,
        capability: &cap.info,
        surface: exec.surface,
        namespace: &exec.namespace,
        actor,
        context,
        input: Some(input),
        execution_id: &exec.execution_id,
        approval: None,
        shared: &shared,
    };
    evaluate_batch(rt, cap, &request, deadline, Some(exec)).await
}

/// Evaluate the batch. `deadline` is shared by every policy in it. Returns the enforcing
/// policies' outcomes; where a shadow policy would have changed the verdict, the
/// divergence is counted and, for a call (`exec`), audited as
/// `capgate.policy.shadow_divergence` (policy, phase and stances only: SI-10).
pub(crate) async fn evaluate_batch(
    rt: &Inner,
    cap: &Capability,
    request: &PolicyRequest<'_>,
    deadline: Instant,
    exec: Option<&Exec<'_>>,
) -> Vec<Evaluated> {
    let policies: Vec<&Arc<dyn Policy>> = applicable(rt, cap, request.phase).collect();
    if policies.is_empty() {
        return Vec::new();
    }
    let budget_ms = rt.defaults.policy_timeout_ms;
    let futures = policies.into_iter().map(|p| {
        let name = p.name().to_string();
        let span = tracing::info_span!(
            "agent.policy_evaluation",
            capgate.policy = %name,
            capgate.phase = request.phase.as_str(),
            capgate.decision = tracing::field::Empty,
            capgate.fuel_used = tracing::field::Empty,
        );
        async move {
            let started = std::time::Instant::now();
            let guarded = AssertUnwindSafe(p.evaluate(request, deadline)).catch_unwind();
            let outcome = match tokio::time::timeout_at(deadline, guarded).await {
                Err(_) => Err(PolicyError::Timeout(budget_ms)),
                Ok(Err(_panic)) => Err(PolicyError::Panicked),
                Ok(Ok(Err(e))) => Err(e),
                Ok(Ok(Ok(d))) => d
                    .validate()
                    .map(|()| d)
                    .map_err(PolicyError::InvalidDecision),
            };
            crate::metrics::policy_evaluated(&name, request.phase, &outcome, started.elapsed());
            tracing::Span::current().record("capgate.decision", crate::metrics::stance(&outcome));
            (
                p.shadow(),
                Evaluated {
                    policy: name,
                    outcome,
                    provenance: p.provenance(),
                },
            )
        }
        .instrument(span)
    });
    let all = futures::future::join_all(futures).await;
    if all.iter().all(|(shadow, _)| !shadow) {
        return all.into_iter().map(|(_, e)| e).collect();
    }
    let (shadows, enforcing): (Vec<_>, Vec<_>) = all.into_iter().partition(|(s, _)| *s);
    let enforcing: Vec<Evaluated> = enforcing.into_iter().map(|(_, e)| e).collect();
    let shadows: Vec<Evaluated> = shadows.into_iter().map(|(_, e)| e).collect();
    for d in divergences(&enforcing, &shadows) {
        crate::metrics::shadow_divergence(&d.policy, &cap.id, request.phase, d.would_be);
        if let Some(exec) = exec {
            exec.emit(EventPayload::ShadowDivergence {
                policy: d.policy,
                phase: request.phase,
                stance: d.stance.to_string(),
                outcome: d.outcome.to_string(),
                would_be: d.would_be.to_string(),
            })
            .await;
        }
    }
    enforcing
}

/// Whether any policy of `cap` runs in `phase` (lets callers skip work).
pub(crate) fn any_applicable(rt: &Inner, cap: &Capability, phase: Phase) -> bool {
    applicable(rt, cap, phase).next().is_some()
}

/// The end of a call whose policy verdict refuses it, or `None` when the call goes on.
///
/// - Invocation phase (stage 7 on invoke, its re-check on resume): a failure, deny or hide
///   ends the call with `capability.denied`; allow and require-approval go on (stage 8
///   decides about approval).
/// - Execution phase (stage 9): `capability.denied` is kept for stages 3, 4 and 7,
///   so a failure, deny or hide here ends the call with `capability.failed` carrying the
///   `policyDecisions`. Without an approval, stage 9 opens the approval gate before asking
///   here (`execute.rs`), so a require-approval reaching here fails closed as
///   POLICY_DENIED.
/// - A require-approval on a call that carries an approval (`approval_types`: the types it
///   was granted for; a resume, or an inline decision) is satisfied only when those types
///   cover every type the verdict asks for, in either phase: an approval of another type
///   is refused as POLICY_DENIED, naming the missing type privately.
pub(crate) async fn refuse(
    exec: &Exec<'_>,
    phase: Phase,
    evaluated: &[Evaluated],
    verdict: &Verdict,
    approval_types: Option<&[String]>,
) -> Option<ExecutionResult> {
    let (reason, err) = match verdict.clone() {
        Verdict::Allowed => return None,
        Verdict::ApprovalRequired(required) => match approval_types {
            None if phase != Phase::Execution => return None,
            None => (
                DenyReason::PolicyDenied,
                CapabilityError::new(ErrorCode::PolicyDenied).with_private_details(
                    serde_json::json!({ "reason": "require-approval at the execution phase" }),
                ),
            ),
            Some(have) => match uncovered_type(&required.types, have) {
                None => return None,
                Some(missing) => (
                    DenyReason::PolicyDenied,
                    CapabilityError::new(ErrorCode::PolicyDenied).with_private_details(
                        serde_json::json!({
                            "reason": "the approval's types do not cover a fresh require-approval",
                            "missingType": missing,
                            "approvalTypes": have,
                        }),
                    ),
                ),
            },
        },
        Verdict::Failed { policy, reason } => (
            DenyReason::PolicyFailed,
            CapabilityError::new(ErrorCode::PolicyFailed)
                .with_private_details(serde_json::json!({ "policy": policy, "reason": reason })),
        ),
        Verdict::Denied {
            policy,
            code,
            message,
        } => {
            let mut err = CapabilityError::new(ErrorCode::PolicyDenied)
                .with_private_details(serde_json::json!({ "policy": policy, "code": code }));
            if let Some(m) = message {
                err = err.with_message(m);
            }
            (DenyReason::PolicyDenied, err)
        }
        Verdict::Hidden { policy } => (
            DenyReason::Hidden,
            CapabilityError::not_found()
                .with_private_details(serde_json::json!({ "policy": policy })),
        ),
    };
    let decisions = (!evaluated.is_empty()).then(|| stances(evaluated));
    Some(match phase {
        Phase::Execution => {
            exec.failed(err, EffectProgress::NotStarted, decisions)
                .await
        }
        Phase::Invocation | Phase::Discovery => exec.denied(reason, err, decisions).await,
    })
}

/// The first approval type `required` asks for that an approval granted for `granted`
/// does not cover, if any.
pub(crate) fn uncovered_type<'a>(required: &'a [String], granted: &[String]) -> Option<&'a str> {
    required
        .iter()
        .find(|t| !granted.contains(t))
        .map(String::as_str)
}
