//! Shadow rollout: a policy wrapped in `Shadow` is evaluated like any other, but its stance
//! never changes a call's outcome; where it would have, the call records one
//! `capgate.policy.shadow_divergence` event (policy, phase, stances; never the input), and a
//! shadow policy that fails is counted, never fails the call.

use crate::common;

use capgate_core::prelude::*;
use capgate_core::runtime::DescribeOptions;
use common::*;
use serde_json::{Value, json};
use std::sync::Arc;

const DIVERGENCE: &str = "capgate.policy.shadow_divergence";

/// A policy that always decides `decision`.
fn always(name: &str, decision: PolicyDecision) -> capgate_core::policy::FnPolicy {
    policy_sync(name.to_string(), move |_| Ok(decision.clone()))
}

fn shadow(name: &str, decision: PolicyDecision) -> Shadow {
    Shadow::new(always(name, decision))
}

/// A refund well under refundLimit's 500, with a value no event may carry.
fn canary_refund() -> Value {
    json!({"orderId": "ord_CANARY_7f3a", "amount": 20})
}

/// Run one refund with `extra` policies added to the capability; returns the result, the
/// sink and how often the procedure ran.
async fn refund_with(
    extra: Vec<Arc<dyn Policy>>,
    input: Value,
) -> (ExecutionResult, Arc<MemorySink>, Counter) {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let mut def = refund_def(&c);
    for p in extra {
        def = def.policy_arc(p);
    }
    let rt = runtime_with(vec![def], sink.clone());
    let r = rt.invoke(call("orders.refund", input)).await;
    (r, sink, c)
}

fn types(sink: &MemorySink, execution_id: &str) -> Vec<&'static str> {
    sink.for_execution(execution_id)
        .into_iter()
        .map(|e| e.type_name())
        .collect()
}

#[tokio::test]
async fn a_shadow_deny_lets_the_call_complete_and_records_one_divergence_without_the_input() {
    let (r, sink, c) = refund_with(
        vec![Arc::new(shadow(
            "strictRefunds",
            PolicyDecision::deny("no refunds"),
        ))],
        canary_refund(),
    )
    .await;
    assert_eq!(r.status(), "completed", "{r:?}");
    assert_eq!(c.get(), 1, "the procedure ran");
    assert_eq!(
        types(&sink, r.execution_id()),
        [
            "capability.requested",
            DIVERGENCE,
            "capability.started",
            "capability.completed"
        ]
    );
    let data = data_of(&sink, DIVERGENCE);
    assert_eq!(
        data,
        json!({
            "policy": "strictRefunds",
            "phase": "invocation",
            "stance": "deny",
            "outcome": "allow",
            "wouldBe": "deny",
        })
    );
    for e in sink.events() {
        let text = serde_json::to_string(&e).unwrap();
        assert!(!text.contains("ord_CANARY_7f3a"), "input in {text}");
    }
}

#[tokio::test]
async fn a_shadow_policy_that_agrees_with_the_outcome_records_nothing() {
    let (r, sink, _) = refund_with(
        vec![Arc::new(shadow("lenient", PolicyDecision::allow()))],
        canary_refund(),
    )
    .await;
    assert_eq!(r.status(), "completed");
    assert!(!sink.types().contains(&DIVERGENCE), "{:?}", sink.types());
}

#[tokio::test]
async fn a_shadow_deny_under_an_enforcing_deny_changes_nothing_and_stays_out_of_policy_decisions() {
    let (r, sink, c) = refund_with(
        vec![
            Arc::new(always("closed", PolicyDecision::deny("closed"))),
            Arc::new(shadow("strictRefunds", PolicyDecision::deny("no"))),
        ],
        canary_refund(),
    )
    .await;
    assert_eq!(code(&r), Some(ErrorCode::PolicyDenied));
    assert_eq!(c.get(), 0);
    assert_eq!(
        types(&sink, r.execution_id()),
        ["capability.requested", "capability.denied"]
    );
    let decisions = data_of(&sink, "capability.denied")["policyDecisions"].clone();
    let names: Vec<&str> = decisions
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["policy"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["refundLimit", "closed"],
        "a shadow stance is not a decision"
    );
}

#[tokio::test]
async fn a_shadow_require_approval_does_not_hold_the_call() {
    let (r, sink, c) = refund_with(
        vec![Arc::new(shadow(
            "fourEyes",
            PolicyDecision::require_approval("every refund"),
        ))],
        canary_refund(),
    )
    .await;
    assert_eq!(r.status(), "completed");
    assert_eq!(c.get(), 1);
    let data = data_of(&sink, DIVERGENCE);
    assert_eq!(data["wouldBe"], "require-approval");
    assert_eq!(data["outcome"], "allow");
}

#[tokio::test]
async fn a_shadow_policy_that_fails_or_misses_the_deadline_never_fails_the_call() {
    let failing: Arc<dyn Policy> = Arc::new(Shadow::new(policy_sync("broken", |_| {
        Err(PolicyError::Failed("plugin trapped".into()))
    })));
    let panicking: Arc<dyn Policy> = Arc::new(Shadow::new(policy_sync("panicky", |_| {
        panic!("a shadow policy panicked")
    })));
    let slow: Arc<dyn Policy> = Arc::new(Shadow::new(policy_fn("slow", |_| {
        Box::pin(async {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            Ok(PolicyDecision::allow())
        })
    })));
    tokio::time::pause();
    let (r, sink, c) = refund_with(vec![failing, panicking, slow], canary_refund()).await;
    assert_eq!(r.status(), "completed", "{r:?}");
    assert_eq!(c.get(), 1);
    let divergences: Vec<Value> = sink
        .events()
        .into_iter()
        .filter(|e| e.type_name() == DIVERGENCE)
        .map(|e| serde_json::to_value(&e).unwrap()["data"].clone())
        .collect();
    let failed: Vec<(&str, &str)> = divergences
        .iter()
        .map(|d| (d["policy"].as_str().unwrap(), d["stance"].as_str().unwrap()))
        .collect();
    assert_eq!(
        failed,
        [("broken", "error"), ("panicky", "error"), ("slow", "error")]
    );
    assert!(divergences.iter().all(|d| d["wouldBe"] == "error"));
}

#[tokio::test]
async fn a_shadow_execution_phase_deny_is_recorded_at_stage_9() {
    let p = Shadow::new(
        always("freshness", PolicyDecision::deny("stale")).with_phases([Phase::Execution]),
    );
    let (r, sink, _) = refund_with(vec![Arc::new(p)], canary_refund()).await;
    assert_eq!(r.status(), "completed");
    assert_eq!(data_of(&sink, DIVERGENCE)["phase"], "execution");
}

#[tokio::test]
async fn a_shadow_hide_does_not_hide_the_capability_from_discovery() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let def = refund_def(&c).policy(Shadow::new(
        always("concealed", PolicyDecision::hide())
            .with_phases([Phase::Discovery, Phase::Invocation]),
    ));
    let rt = runtime_with(vec![def], sink.clone());
    let listed = rt
        .describe(
            Surface::Mcp,
            DescribeOptions {
                namespace: String::new(),
                actor: dana(),
                context: json!({}),
                scope: None,
            },
        )
        .await
        .unwrap();
    let ids: Vec<&str> = listed.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["orders.refund"]);
}
