//! The decision of a call without the call (`capgate replay`, docs/pipeline.md
//! "Simulating a decision"): stages 3–9 as [`super::invoke`] runs them up to the point
//! where a call would be refused, held or started, and nothing after it. No execution is
//! opened, no event is recorded, no approval is stored, no admission hook runs and no
//! procedure is reached: this module has no path to stage 10.

use super::new_id;
use super::policies::{any_applicable, evaluate_batch};
use crate::actor::Actor;
use crate::policy::{Phase, PolicyRequest, PolicyStance, SharedJson, Verdict, combine, stances_in};
use crate::runtime::Inner;
use crate::runtime::request::SimulateRequest;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What the pipeline would have done with a call, at the first stage that decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SimulatedOutcome {
    /// Stages 3–4: unknown, or not exposed on the surface (concealed as not found).
    NotFound,
    /// Stage 5: the input does not pass the capability's schema.
    InputInvalid,
    /// Stage 6: no well-formed actor.
    Unauthenticated,
    /// Stage 7 or 9: a policy failed (SI-7).
    Error,
    /// Stage 7 or 9: a policy denied.
    Deny,
    /// Stage 7 or 9: a policy hid the capability.
    Hide,
    /// Stage 8 (or 9): the call would be held for approval.
    RequireApproval,
    /// Stage 10 would start the procedure.
    Allow,
}

impl SimulatedOutcome {
    /// The outcome as its wire word (`allow`, `require-approval`, `deny`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            SimulatedOutcome::NotFound => "not-found",
            SimulatedOutcome::InputInvalid => "input-invalid",
            SimulatedOutcome::Unauthenticated => "unauthenticated",
            SimulatedOutcome::Error => "error",
            SimulatedOutcome::Deny => "deny",
            SimulatedOutcome::Hide => "hide",
            SimulatedOutcome::RequireApproval => "require-approval",
            SimulatedOutcome::Allow => "allow",
        }
    }

    fn of(verdict: &Verdict) -> SimulatedOutcome {
        match verdict {
            Verdict::Failed { .. } => SimulatedOutcome::Error,
            Verdict::Denied { .. } => SimulatedOutcome::Deny,
            Verdict::Hidden { .. } => SimulatedOutcome::Hide,
            Verdict::ApprovalRequired(_) => SimulatedOutcome::RequireApproval,
            Verdict::Allowed => SimulatedOutcome::Allow,
        }
    }
}

/// The simulated decision of one call: the outcome, every enforcing policy's stance (each
/// with its phase and provenance, as `capability.started` records them) and, when held,
/// the approval types asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Simulation {
    /// The outcome.
    pub outcome: SimulatedOutcome,
    /// Every stance that led to it, in evaluation order.
    pub policy_decisions: Vec<PolicyStance>,
    /// The approval types a hold would ask for (policies' and the capability's own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approval_types: Vec<String>,
}

impl Simulation {
    fn ended(outcome: SimulatedOutcome) -> Simulation {
        Simulation {
            outcome,
            policy_decisions: Vec::new(),
            approval_types: Vec::new(),
        }
    }
}

pub(crate) async fn simulate(rt: &Inner, req: SimulateRequest) -> Simulation {
    // ── Stages 3–5: resolve, exposure, input validation ──
    let Some(cap) = rt.registry.get(&req.capability_id).cloned() else {
        return Simulation::ended(SimulatedOutcome::NotFound);
    };
    if !cap.meta.expose.allows(req.surface) {
        return Simulation::ended(SimulatedOutcome::NotFound);
    }
    let Ok(input) = cap.input.validate(req.input) else {
        return Simulation::ended(SimulatedOutcome::InputInvalid);
    };
    // ── Stage 6: actor check ──
    let actor: Actor = match req.actor {
        Some(a) if a.is_well_formed() => a,
        _ => return Simulation::ended(SimulatedOutcome::Unauthenticated),
    };
    let execution_id = new_id("sim");
    let batch = |phase: Phase| {
        let (cap, actor, input, context) = (&cap, &actor, &input, &req.context);
        let (namespace, execution_id) = (&req.namespace, &execution_id);
        async move {
            let deadline =
                tokio::time::Instant::now() + Duration::from_millis(rt.defaults.policy_timeout_ms);
            let shared = SharedJson::default();
            let request = PolicyRequest {
                phase,
                capability: &cap.info,
                surface: req.surface,
                namespace,
                actor,
                context,
                input: Some(input),
                execution_id,
                approval: None,
                shared: &shared,
            };
            // No execution: shadow divergences are counted, never recorded.
            evaluate_batch(rt, cap, &request, deadline, None).await
        }
    };
    // ── Stage 7: invocation-phase policies ──
    let evaluated = batch(Phase::Invocation).await;
    let mut decisions = stances_in(&evaluated, Phase::Invocation);
    let mut verdict = combine(&evaluated);
    // ── Stage 8: the capability's own approval joins the policies' ──
    if matches!(verdict, Verdict::Allowed | Verdict::ApprovalRequired(_))
        && let Some(own) = cap.meta.approval.as_ref().filter(|a| a.required)
    {
        let mut r = match verdict {
            Verdict::ApprovalRequired(r) => r,
            _ => Default::default(),
        };
        r.merge(
            None,
            &format!("Approval is required for {}.", cap.id),
            own.approval_type.as_deref(),
            own.expires_in_ms,
        );
        verdict = Verdict::ApprovalRequired(r);
    }
    // ── Stage 9: execution-phase policies, for a call that would go straight on (a held
    // call meets them after its approval, with the approval in the request) ──
    if matches!(verdict, Verdict::Allowed) && any_applicable(rt, &cap, Phase::Execution) {
        let evaluated = batch(Phase::Execution).await;
        decisions.extend(stances_in(&evaluated, Phase::Execution));
        verdict = combine(&evaluated);
    }
    Simulation {
        outcome: SimulatedOutcome::of(&verdict),
        approval_types: match &verdict {
            Verdict::ApprovalRequired(r) => r.types.clone(),
            _ => Vec::new(),
        },
        policy_decisions: decisions,
    }
}
