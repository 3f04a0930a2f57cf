//! Approvals belong to the namespace they were requested in; approval types are decided
//! only by their roles; an untyped approval is never self-confirmable; a resume re-checks
//! the current invocation-phase policies before it consumes anything; an execution-phase
//! require-approval is satisfied by the approval being resumed.

use crate::common;

use capgate_core::prelude::*;
use capgate_core::runtime::ApprovalsError;
use common::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

fn refund_input() -> Value {
    json!({"orderId": "ord_42", "amount": 649, "reason": "damaged item"})
}

async fn pending_in(rt: &Runtime, namespace: &str) -> String {
    let r = rt
        .invoke(call("orders.refund", refund_input()).namespace(namespace))
        .await;
    r.approval().expect("approval-required").id.clone()
}

fn priya_ref() -> ActorRef {
    priya()
}

#[tokio::test]
async fn an_approver_of_another_namespace_cannot_see_or_decide_and_it_reads_as_missing() {
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], Arc::new(MemorySink::new()));
    let id = pending_in(&rt, "org_2").await;
    let a = rt.approvals();
    assert!(a.get_in(&id, Some("org_1")).await.unwrap().is_none());
    assert!(a.get_in(&id, Some("org_2")).await.unwrap().is_some());
    let filter = ApprovalFilter {
        namespace: Some("org_1".into()),
        ..Default::default()
    };
    assert!(a.list(&filter).await.unwrap().is_empty());
    let refused = a
        .decide(&id, decide_as(priya_ref(), "org_1", &["manager"]))
        .await;
    let missing = a
        .decide("apr_missing", decide_as(priya_ref(), "org_1", &["manager"]))
        .await;
    assert_eq!(
        refused.err().map(|e| e.to_string()),
        missing
            .err()
            .map(|e| e.to_string().replace("apr_missing", &id))
    );
    let decided = a
        .decide(&id, decide_as(priya_ref(), "org_2", &["manager"]))
        .await
        .unwrap();
    let decision = decided.decision.unwrap();
    assert_eq!(decision.approver_namespace.as_deref(), Some("org_2"));
}

#[tokio::test]
async fn resume_from_another_namespace_is_a_mismatch_and_consumes_nothing() {
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], Arc::new(MemorySink::new()));
    let id = pending_in(&rt, "org_1").await;
    rt.approvals()
        .decide(&id, decide_as(priya_ref(), "org_1", &[]))
        .await
        .unwrap();
    let r = rt
        .resume(
            &id,
            ResumeOptions {
                expected_namespace: Some("org_2".into()),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(code(&r), Some(ErrorCode::ApprovalResumeMismatch));
    assert_eq!(c.get(), 0);
    let ok = rt
        .resume(
            &id,
            ResumeOptions {
                expected_namespace: Some("org_1".into()),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(ok.status(), "completed");
}

#[tokio::test]
async fn a_type_mapped_to_roles_is_approved_only_by_a_holder_of_one() {
    let c = Counter::default();
    let rt = Runtime::builder(
        Registry::builder()
            .capability(refund_def(&c))
            .build()
            .unwrap(),
    )
    .approval_type_roles("manager", ["manager"])
    .build()
    .expect("a valid runtime");
    let id = pending_in(&rt, "org_1").await;
    let a = rt.approvals();
    let refused = a
        .decide(&id, decide_as(priya_ref(), "org_1", &["approver"]))
        .await;
    match refused {
        Err(ApprovalsError::Forbidden(m)) => assert!(m.contains("manager"), "{m}"),
        other => panic!("expected a refusal naming the role, got {other:?}"),
    }
    a.decide(
        &id,
        decide_as(priya_ref(), "org_1", &["approver", "manager"]),
    )
    .await
    .unwrap();
}

fn confirm_def(counter: &Counter, policy_type: Option<&str>) -> CapabilityDef {
    let policy_type = policy_type.map(str::to_string);
    CapabilityDef::new(
        "messages.send",
        CapabilityMeta::new("Send a message", SideEffect::External, Risk::Medium)
            .exposed_on([Surface::AiSdk])
            .with_approval(ApprovalConfig {
                required: true,
                approval_type: Some("human-confirmation".into()),
                expires_in_ms: None,
            }),
    )
    .policy(policy_sync("alwaysAsk", move |_| {
        Ok(PolicyDecision::RequireApproval {
            reason: "a policy asks".into(),
            approval_type: policy_type.clone(),
            expires_in_ms: None,
        })
    }))
    .procedure(counter.procedure())
}

async fn self_confirm(policy_type: Option<&str>) -> Result<ApprovalRecord, ApprovalsError> {
    let c = Counter::default();
    let rt = Runtime::builder(
        Registry::builder()
            .capability(confirm_def(&c, policy_type))
            .build()
            .unwrap(),
    )
    .self_confirmable_types(["human-confirmation"])
    .build()
    .expect("a valid runtime");
    let r = rt.invoke(call("messages.send", json!({}))).await;
    let id = r.approval().expect("approval-required").id.clone();
    rt.approvals()
        .decide(&id, decide_as(dana().reference(), "", &[]))
        .await
}

#[tokio::test]
async fn an_untyped_policy_approval_merged_with_a_self_confirmable_type_is_not_self_confirmable() {
    assert!(matches!(
        self_confirm(None).await,
        Err(ApprovalsError::Forbidden(_))
    ));
    // The same with the policy naming the self-confirmable type: the requester confirms.
    assert!(self_confirm(Some("human-confirmation")).await.is_ok());
}

/// An org-isolation policy whose verdict the test flips between invoke and resume.
fn isolation(deny: Arc<AtomicBool>, phases: &[Phase]) -> impl Policy {
    let phases = phases.to_vec();
    policy_sync("orgIsolation", move |_| {
        Ok(if deny.load(Ordering::SeqCst) {
            PolicyDecision::deny("Not your organisation's order.")
        } else {
            PolicyDecision::allow()
        })
    })
    .with_phases(phases)
}

#[tokio::test]
async fn resume_rechecks_invocation_policies_and_a_new_deny_leaves_the_approval_unconsumed() {
    let c = Counter::default();
    let deny = Arc::new(AtomicBool::new(false));
    let sink = Arc::new(MemorySink::new());
    let rt = runtime_with(
        vec![refund_def(&c).policy(isolation(deny.clone(), &[Phase::Invocation]))],
        sink.clone(),
    );
    let id = pending_in(&rt, "").await;
    approve(&rt, &id).await;
    deny.store(true, Ordering::SeqCst);
    let r = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(code(&r), Some(ErrorCode::PolicyDenied));
    assert_eq!(c.get(), 0);
    let record = rt.approvals().get(&id).await.unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Approved, "not consumed");
    // The policy allows again: the same approval still runs, once.
    deny.store(false, Ordering::SeqCst);
    let r = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(r.status(), "completed");
    assert_eq!(c.get(), 1);
}

#[tokio::test]
async fn an_execution_phase_require_approval_is_satisfied_by_the_approval_being_resumed() {
    let c = Counter::default();
    let both = capgate_testkit::walkthrough::refund_limit("refundLimit", None)
        .with_phases([Phase::Invocation, Phase::Execution]);
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .policy(both)
        .procedure(c.procedure());
    let rt = runtime_with(vec![def], Arc::new(MemorySink::new()));
    let id = pending_in(&rt, "").await;
    approve(&rt, &id).await;
    let r = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(r.status(), "completed");
    assert_eq!(c.get(), 1);
}

#[tokio::test]
async fn without_an_approval_an_execution_phase_require_approval_asks_for_one() {
    let c = Counter::default();
    let execution_only = policy_sync("lateGate", |_| {
        Ok(PolicyDecision::require_approval("asks late"))
    })
    .with_phases([Phase::Execution]);
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .policy(execution_only)
        .procedure(c.procedure());
    let rt = runtime_with(vec![def], Arc::new(MemorySink::new()));
    let r = rt
        .invoke(call(
            "orders.refund",
            json!({"orderId": "ord_1", "amount": 5, "reason": "x"}),
        ))
        .await;
    assert_eq!(r.status(), "approval-required", "{r:?}");
    assert_eq!(c.get(), 0);
    // The approval it asked for satisfies it on resume.
    let id = r.approval().expect("an approval").id.clone();
    approve(&rt, &id).await;
    let resumed = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(resumed.status(), "completed", "{resumed:?}");
    assert_eq!(c.get(), 1);
}
