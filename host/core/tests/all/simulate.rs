//! `Runtime::simulate` (docs/pipeline.md, "Simulating a decision"): for every way a call
//! can be decided, the simulation names the outcome `invoke` reaches on the same runtime
//! shape, with the same stances, while it opens no execution, records no event, stores no
//! approval and never reaches the procedure.

use crate::common;

use capgate_core::meta::ApprovalConfig;
use capgate_core::prelude::*;
use capgate_core::runtime::{SimulateRequest, SimulatedOutcome};
use common::*;
use serde_json::{Value, json};
use std::sync::Arc;

/// One case: the capability's extra policy (if any), its own approval rule, the call.
struct Case {
    name: &'static str,
    extra: Option<(PolicyDecision, Phase)>,
    failing: bool,
    own_approval: bool,
    capability: &'static str,
    input: Value,
    surface: Surface,
    actor: bool,
    simulated: SimulatedOutcome,
    /// `None`: completed; else the invoke's error code, or "approval-required".
    invoked: &'static str,
}

fn def(c: &Case, counter: &Counter) -> CapabilityDef {
    let mut meta = refund_meta();
    if c.own_approval {
        meta.approval = Some(ApprovalConfig {
            required: true,
            approval_type: Some("human-confirmation".into()),
            ..ApprovalConfig::default()
        });
    }
    let mut d = CapabilityDef::new("orders.refund", meta)
        .input_schema(refund_schema())
        .policy(refund_limit("refundLimit", Some("manager")))
        .procedure(counter.procedure());
    if let Some((decision, phase)) = &c.extra {
        let decision = decision.clone();
        d = d.policy(policy_sync("extra", move |_| Ok(decision.clone())).with_phases([*phase]));
    }
    if c.failing {
        d = d.policy(policy_sync("broken", |_| {
            Err(PolicyError::Failed("no answer".into()))
        }));
    }
    d
}

fn cases() -> Vec<Case> {
    let small = json!({"orderId": "ord_1", "amount": 20});
    let big = json!({"orderId": "ord_42", "amount": 649});
    let case = |name, input: &Value, simulated, invoked| Case {
        name,
        extra: None,
        failing: false,
        own_approval: false,
        capability: "orders.refund",
        input: input.clone(),
        surface: Surface::AiSdk,
        actor: true,
        simulated,
        invoked,
    };
    vec![
        case("small refund", &small, SimulatedOutcome::Allow, "completed"),
        case(
            "big refund",
            &big,
            SimulatedOutcome::RequireApproval,
            "approval-required",
        ),
        Case {
            capability: "orders.unknown",
            ..case(
                "unknown",
                &small,
                SimulatedOutcome::NotFound,
                "CAPABILITY_NOT_FOUND",
            )
        },
        Case {
            surface: Surface::Workflow,
            ..case(
                "not exposed",
                &small,
                SimulatedOutcome::NotFound,
                "CAPABILITY_NOT_FOUND",
            )
        },
        case(
            "bad input",
            &json!({"orderId": 7}),
            SimulatedOutcome::InputInvalid,
            "INPUT_INVALID",
        ),
        Case {
            actor: false,
            ..case(
                "no actor",
                &small,
                SimulatedOutcome::Unauthenticated,
                "UNAUTHENTICATED",
            )
        },
        Case {
            extra: Some((PolicyDecision::deny("closed"), Phase::Invocation)),
            ..case("deny", &big, SimulatedOutcome::Deny, "POLICY_DENIED")
        },
        Case {
            extra: Some((PolicyDecision::Hide, Phase::Invocation)),
            ..case(
                "hide",
                &small,
                SimulatedOutcome::Hide,
                "CAPABILITY_NOT_FOUND",
            )
        },
        Case {
            failing: true,
            ..case("failing", &small, SimulatedOutcome::Error, "POLICY_FAILED")
        },
        Case {
            extra: Some((PolicyDecision::deny("stale"), Phase::Execution)),
            ..case(
                "stage-9 deny",
                &small,
                SimulatedOutcome::Deny,
                "POLICY_DENIED",
            )
        },
        Case {
            extra: Some((
                PolicyDecision::require_approval("fresh check"),
                Phase::Execution,
            )),
            ..case(
                "stage-9 hold",
                &small,
                SimulatedOutcome::RequireApproval,
                "approval-required",
            )
        },
        Case {
            own_approval: true,
            ..case(
                "own approval",
                &small,
                SimulatedOutcome::RequireApproval,
                "approval-required",
            )
        },
    ]
}

fn status(r: &ExecutionResult) -> String {
    match r.error() {
        Some(e) => e.code().as_str().to_string(),
        None => r.status().to_string(),
    }
}

#[tokio::test]
async fn a_simulation_decides_as_invoke_does_and_does_nothing_else() {
    for c in cases() {
        // The simulation, on a runtime of its own.
        let sink = Arc::new(MemorySink::new());
        let counter = Counter::default();
        let rt = runtime_with(vec![def(&c, &counter)], sink.clone());
        let sim = rt
            .simulate(SimulateRequest {
                surface: c.surface,
                capability_id: c.capability.into(),
                input: c.input.clone(),
                actor: c.actor.then(dana),
                namespace: "org_1".into(),
                context: json!({}),
            })
            .await;
        assert_eq!(sim.outcome, c.simulated, "{}: {sim:?}", c.name);
        assert_eq!(counter.get(), 0, "{}: a procedure ran", c.name);
        assert!(sink.events().is_empty(), "{}: {:?}", c.name, sink.types());
        let pending = rt
            .approvals()
            .list(&Default::default())
            .await
            .expect("list approvals");
        assert!(pending.is_empty(), "{}: an approval was stored", c.name);

        // The real call on a fresh runtime of the same shape.
        let sink = Arc::new(MemorySink::new());
        let counter = Counter::default();
        let rt = runtime_with(vec![def(&c, &counter)], sink.clone());
        let mut req = InvokeRequest::new(c.surface, c.capability, c.input.clone(), dana());
        req.namespace = "org_1".into();
        if !c.actor {
            req.actor = None;
        }
        let r = rt.invoke(req).await;
        assert_eq!(status(&r), c.invoked, "{}: {r:?}", c.name);

        // Every stance the call recorded is one the simulation names (a stage-9 refusal
        // records that batch's only; the simulation lists both phases).
        let recorded = sink.events().into_iter().find_map(|e| {
            let v = serde_json::to_value(&e).expect("event");
            v["data"]["policyDecisions"].as_array().cloned()
        });
        let simulated: Vec<Value> = sim
            .policy_decisions
            .iter()
            .map(|s| json!({"policy": s.policy, "type": s.kind}))
            .collect();
        if let Some(recorded) = recorded {
            let recorded: Vec<Value> = recorded
                .iter()
                .map(|s| json!({"policy": s["policy"], "type": s["type"]}))
                .collect();
            assert!(
                recorded.iter().all(|r| simulated.contains(r)),
                "{}: recorded {recorded:?}, simulated {simulated:?}",
                c.name
            );
        }
    }
}
