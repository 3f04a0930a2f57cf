//! Stage 9 (execution-phase policies) and the edges of resume that the spec pins: the
//! events later stages emit, an approval satisfying a fresh require-approval, strict audit,
//! the approval id and correlation id on resumed executions, and unknown names.

use crate::common;

use capgate_core::audit::AuditConfig;
use capgate_core::meta::Discovery;
use capgate_core::prelude::*;
use capgate_core::runtime::RuntimeBuildError;
use common::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A policy that runs only at stage 9 and always decides `decision`.
fn at_execution(name: &str, decision: PolicyDecision) -> impl Policy {
    policy_sync(name.to_string(), move |_| Ok(decision.clone())).with_phases([Phase::Execution])
}

fn small_refund() -> Value {
    json!({"orderId": "ord_1", "amount": 20})
}

fn big_refund() -> Value {
    json!({"orderId": "ord_42", "amount": 649})
}

/// The `data` of every event of one execution, with its type.
fn events_of(sink: &MemorySink, execution_id: &str) -> Vec<(&'static str, Value)> {
    sink.for_execution(execution_id)
        .into_iter()
        .map(|e| {
            let v = serde_json::to_value(&e).expect("event serializes");
            (e.type_name(), v)
        })
        .collect()
}

fn types_of(events: &[(&'static str, Value)]) -> Vec<&'static str> {
    events.iter().map(|(t, _)| *t).collect()
}

async fn refused_at_stage_9(
    decision: PolicyDecision,
) -> (ExecutionResult, Arc<MemorySink>, Counter) {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with(
        vec![refund_def(&c).policy(at_execution("freshness", decision))],
        sink.clone(),
    );
    let r = rt.invoke(call("orders.refund", small_refund())).await;
    (r, sink, c)
}

#[tokio::test]
async fn an_execution_phase_deny_is_policy_denied_with_capability_failed_not_denied() {
    let (r, sink, c) = refused_at_stage_9(PolicyDecision::deny("the order was closed")).await;
    assert_eq!(code(&r), Some(ErrorCode::PolicyDenied));
    assert_eq!(c.get(), 0, "nothing runs after a stage-9 deny");
    let events = events_of(&sink, r.execution_id());
    assert_eq!(
        types_of(&events),
        ["capability.requested", "capability.failed"],
        "the spec keeps capability.denied for stages 3, 4 and 7"
    );
    let failed = &events[1].1["data"];
    assert_eq!(failed["code"], "POLICY_DENIED");
    assert_eq!(failed["stage"], "policy");
    let decisions = failed["policyDecisions"]
        .as_array()
        .expect("policyDecisions");
    assert!(
        decisions.iter().any(|d| d["policy"] == "freshness"),
        "{decisions:?}"
    );
}

#[tokio::test]
async fn an_execution_phase_hide_is_not_found_with_capability_failed() {
    let (r, sink, c) = refused_at_stage_9(PolicyDecision::hide()).await;
    assert_eq!(code(&r), Some(ErrorCode::CapabilityNotFound));
    assert_eq!(c.get(), 0);
    let events = events_of(&sink, r.execution_id());
    assert_eq!(
        types_of(&events),
        ["capability.requested", "capability.failed"]
    );
    assert!(events[1].1["data"]["policyDecisions"].is_array());
}

#[tokio::test]
async fn an_execution_phase_policy_failure_is_policy_failed_with_capability_failed() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let broken = policy_sync("broken", |_| {
        Err(PolicyError::Failed("backend down".into()))
    })
    .with_phases([Phase::Execution]);
    let rt = runtime_with(vec![refund_def(&c).policy(broken)], sink.clone());
    let r = rt.invoke(call("orders.refund", small_refund())).await;
    assert_eq!(code(&r), Some(ErrorCode::PolicyFailed));
    assert_eq!(c.get(), 0, "a failing policy fails closed (SI-7)");
    let events = events_of(&sink, r.execution_id());
    assert_eq!(
        types_of(&events),
        ["capability.requested", "capability.failed"]
    );
    assert_eq!(events[1].1["data"]["code"], "POLICY_FAILED");
}

#[tokio::test]
async fn an_execution_phase_allow_lets_the_call_run_without_approval() {
    let (r, sink, c) = refused_at_stage_9(PolicyDecision::allow()).await;
    assert_eq!(r.status(), "completed", "{r:?}");
    assert_eq!(c.get(), 1);
    assert_eq!(
        types_of(&events_of(&sink, r.execution_id())),
        [
            "capability.requested",
            "capability.started",
            "capability.completed"
        ]
    );
}

#[tokio::test]
async fn an_execution_phase_require_approval_without_an_approval_opens_the_approval_gate() {
    let (r, sink, c) =
        refused_at_stage_9(PolicyDecision::require_approval("re-check with a human")).await;
    assert_eq!(r.status(), "approval-required", "{r:?}");
    assert_eq!(
        r.approval().expect("an approval").reasons,
        ["re-check with a human"]
    );
    assert_eq!(c.get(), 0, "nothing runs before the approval");
    assert_eq!(
        types_of(&events_of(&sink, r.execution_id())),
        ["capability.requested", "capability.approval_requested"]
    );
}

#[tokio::test]
async fn a_policy_in_both_phases_requiring_approval_lets_the_approved_resume_run() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let seen_approval = Arc::new(AtomicUsize::new(0));
    let seen = seen_approval.clone();
    let both = policy_sync("refundLimitBothPhases", move |req| {
        let amount = req.input.and_then(|i| i["amount"].as_f64()).unwrap_or(0.0);
        if req.phase == Phase::Execution && req.approval.is_some() {
            seen.fetch_add(1, Ordering::SeqCst);
        }
        Ok(if amount > 500.0 {
            PolicyDecision::require_approval("over the limit")
        } else {
            PolicyDecision::allow()
        })
    })
    .with_phases([Phase::Invocation, Phase::Execution]);
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .policy(both)
        .procedure(c.procedure());
    let rt = runtime_with(vec![def], sink.clone());

    let r = rt.invoke(call("orders.refund", big_refund())).await;
    let apr = r.approval().expect("approval-required").id.clone();
    approve(&rt, &apr).await;
    let resumed = rt.resume(&apr, ResumeOptions::default()).await;
    assert_eq!(resumed.status(), "completed", "{resumed:?}");
    assert_eq!(c.get(), 1, "the approval being resumed satisfies stage 9");
    assert_eq!(
        seen_approval.load(Ordering::SeqCst),
        1,
        "stage 9 ran once, and saw the approval"
    );
}

#[tokio::test]
async fn a_stage_9_deny_on_resume_consumes_the_approval_and_carries_its_id() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with(
        vec![refund_def(&c).policy(at_execution("closedOrder", PolicyDecision::deny("closed")))],
        sink.clone(),
    );
    let r = rt.invoke(call("orders.refund", big_refund())).await;
    let apr = r.approval().expect("approval-required").id.clone();
    approve(&rt, &apr).await;
    let resumed = rt.resume(&apr, ResumeOptions::default()).await;
    assert_eq!(code(&resumed), Some(ErrorCode::PolicyDenied));
    assert_eq!(c.get(), 0);
    let events = events_of(&sink, resumed.execution_id());
    assert_eq!(types_of(&events), ["capability.failed"]);
    assert_eq!(events[0].1["data"]["approvalId"], json!(apr));
}

#[tokio::test]
async fn strict_audit_without_a_sink_refuses_to_build() {
    let c = Counter::default();
    let registry = Registry::builder()
        .capability(refund_def(&c))
        .build()
        .expect("registry");
    let refused = Runtime::builder(registry).strict_audit(true).build();
    assert_eq!(
        refused.err(),
        Some(RuntimeBuildError::StrictAuditWithoutSink),
        "strict means no record, no execution"
    );

    let registry = Registry::builder()
        .capability(refund_def(&c))
        .build()
        .expect("registry");
    let with_sink = Runtime::builder(registry)
        .audit(AuditConfig {
            sinks: vec![Arc::new(MemorySink::new())],
            strict: true,
            verbose: false,
            on_sink_error: None,
        })
        .build();
    assert!(with_sink.is_ok(), "strict with a sink builds");
}

#[tokio::test]
async fn resume_refusals_before_consumption_carry_the_approval_id() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], sink.clone());
    let r = rt.invoke(call("orders.refund", big_refund())).await;
    let apr = r.approval().expect("approval-required").id.clone();

    // Pending.
    let early = rt.resume(&apr, ResumeOptions::default()).await;
    assert_eq!(code(&early), Some(ErrorCode::ApprovalPending));
    // Someone else resuming.
    let mismatch = rt
        .resume(
            &apr,
            ResumeOptions {
                expected_actor: Some(priya()),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(code(&mismatch), Some(ErrorCode::ApprovalResumeMismatch));
    // Unknown id.
    let unknown = rt.resume("apr_nope", ResumeOptions::default()).await;
    assert_eq!(code(&unknown), Some(ErrorCode::InternalError));

    for (result, id) in [
        (&early, apr.as_str()),
        (&mismatch, &apr),
        (&unknown, "apr_nope"),
    ] {
        let events = events_of(&sink, result.execution_id());
        assert_eq!(types_of(&events), ["capability.failed"], "{events:?}");
        assert_eq!(events[0].1["data"]["approvalId"], json!(id), "{events:?}");
    }
    assert_eq!(c.get(), 0);
}

#[tokio::test]
async fn a_resume_keeps_the_stored_correlation_id_and_records_its_own_beside_it() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], sink.clone());
    let mut ids = Vec::new();
    for order in ["ord_42", "ord_43"] {
        let r = rt
            .invoke(
                call("orders.refund", json!({"orderId": order, "amount": 649}))
                    .correlation_id("run-original"),
            )
            .await;
        let apr = r.approval().expect("approval-required").id.clone();
        approve(&rt, &apr).await;
        ids.push(apr);
    }
    let own = rt
        .resume(
            &ids[0],
            ResumeOptions {
                correlation_id: Some("run-resume".into()),
                ..Default::default()
            },
        )
        .await;
    let kept = rt.resume(&ids[1], ResumeOptions::default()).await;
    assert_eq!(own.status(), "completed");
    assert_eq!(kept.status(), "completed");
    // The original call's correlation id is kept either way (issue 33: correlation is
    // preserved across a resume); a resume's own is recorded beside it.
    for (result, own_id) in [(&own, Some("run-resume")), (&kept, None)] {
        let events = events_of(&sink, result.execution_id());
        assert!(!events.is_empty());
        for (ty, e) in &events {
            assert_eq!(e["correlationId"], "run-original", "{ty}");
            let beside = e["data"]["resumeCorrelationId"].as_str();
            if *ty == "capability.started" {
                assert_eq!(beside, own_id, "{ty}");
            } else if own_id.is_none() {
                assert_eq!(beside, None, "{ty}");
            }
        }
    }
}

#[tokio::test]
async fn refuse_unknown_audits_the_request_and_answers_like_an_unknown_id() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], sink.clone());
    let via_invoke = rt.invoke(call("orders.nope", json!({}))).await;
    let refused = rt
        .refuse_unknown(call("some_tool_nobody_registered", json!({"x": 1})))
        .await;
    assert_eq!(
        serde_json::to_value(refused.error().map(|e| e.to_public())).unwrap(),
        serde_json::to_value(via_invoke.error().map(|e| e.to_public())).unwrap(),
        "SI-8: one public answer"
    );
    assert!(refused.execution_id().starts_with("exe_"));
    let events = events_of(&sink, refused.execution_id());
    assert_eq!(
        types_of(&events),
        ["capability.requested", "capability.denied"]
    );
    assert_eq!(events[1].1["data"]["reason"], "unknown");
    assert_eq!(events[1].1["capabilityId"], "some_tool_nobody_registered");
}

#[tokio::test]
async fn a_contextual_capability_is_described_as_such_and_stays_callable() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let def = CapabilityDef::new(
        "orders.refund",
        refund_meta().with_discovery(Discovery::Contextual),
    )
    .input_schema(refund_schema())
    .procedure(c.procedure());
    let rt = runtime_with(vec![def], sink);
    let described = rt
        .describe(
            Surface::AiSdk,
            DescribeOptions {
                namespace: String::new(),
                actor: dana(),
                context: Value::Null,
                scope: None,
            },
        )
        .await
        .expect("describe");
    assert_eq!(described.len(), 1);
    assert_eq!(described[0].discovery, Discovery::Contextual);
    assert_eq!(
        serde_json::to_value(&described[0]).unwrap()["discovery"],
        "contextual"
    );
    let r = rt.invoke(call("orders.refund", small_refund())).await;
    assert_eq!(r.status(), "completed");
}
