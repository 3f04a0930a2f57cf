//! The adapter's admission step (`InvokeRequest::admission`): reached only by calls the
//! caller may learn about, never by a concealed or invalid one; a refusal there ends the
//! call before anything runs. And the resume edges of issue 33: type-matched approvals and
//! refusals recorded by `Runtime::refuse_resume`.

use crate::common;

use capgate_core::prelude::*;
use capgate_core::runtime::AdmissionHook;
use common::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Counts how often the pipeline asked; refuses when told to.
#[derive(Default)]
struct Gate {
    asked: AtomicUsize,
    refuse: bool,
}

#[async_trait::async_trait]
impl AdmissionHook for Gate {
    async fn admit(&self) -> Result<Option<String>, CapabilityError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        if self.refuse {
            return Err(CapabilityError::new(ErrorCode::AdapterError));
        }
        Ok(Some("idk_from_the_adapter".into()))
    }
}

fn refund_input() -> Value {
    json!({"orderId": "ord_1", "amount": 20, "reason": "damaged item"})
}

/// `orders.refund` plus `vault.read` (hidden by policy), `internal.export` (not exposed on
/// aiSdk) and `orders.cancel` (denied by policy).
fn runtime(counter: &Counter) -> Runtime {
    let vault = CapabilityDef::new(
        "vault.read",
        CapabilityMeta::new("Read the vault", SideEffect::Read, Risk::Critical)
            .exposed_on([Surface::AiSdk]),
    )
    .policy(policy_sync("hideVault", |_| Ok(PolicyDecision::hide())))
    .procedure(counter.procedure());
    let export = CapabilityDef::new(
        "internal.export",
        CapabilityMeta::new("Export", SideEffect::Read, Risk::High).exposed_on([Surface::Workflow]),
    )
    .procedure(counter.procedure());
    let cancel = CapabilityDef::new(
        "orders.cancel",
        CapabilityMeta::new("Cancel", SideEffect::Write, Risk::Medium).exposed_on([Surface::AiSdk]),
    )
    .policy(policy_sync("noCancel", |_| {
        Ok(PolicyDecision::deny("Not today."))
    }))
    .procedure(counter.procedure());
    runtime_with(
        vec![refund_def(counter), vault, export, cancel],
        Arc::new(MemorySink::new()),
    )
}

#[tokio::test]
async fn the_admission_step_is_never_reached_by_a_concealed_or_invalid_call() {
    let c = Counter::default();
    let rt = runtime(&c);
    for (id, input, expected) in [
        ("no.such", json!({}), ErrorCode::CapabilityNotFound),
        ("internal.export", json!({}), ErrorCode::CapabilityNotFound),
        ("vault.read", json!({}), ErrorCode::CapabilityNotFound),
        (
            "orders.refund",
            json!({"orderId": "x".repeat(100_000)}),
            ErrorCode::InputInvalid,
        ),
    ] {
        let gate = Arc::new(Gate::default());
        let r = rt.invoke(call(id, input).admission(gate.clone())).await;
        assert_eq!(code(&r), Some(expected), "{id}");
        assert_eq!(
            gate.asked.load(Ordering::SeqCst),
            0,
            "{id} reached admission"
        );
    }
    // A denial is something the caller learns: admitted (recorded), then refused.
    let gate = Arc::new(Gate::default());
    let r = rt
        .invoke(call("orders.cancel", json!({})).admission(gate.clone()))
        .await;
    assert_eq!(code(&r), Some(ErrorCode::PolicyDenied));
    assert_eq!(gate.asked.load(Ordering::SeqCst), 1);
    // An allowed call is admitted once, then runs.
    let gate = Arc::new(Gate::default());
    let r = rt
        .invoke(call("orders.refund", refund_input()).admission(gate.clone()))
        .await;
    assert_eq!(r.status(), "completed");
    assert_eq!(gate.asked.load(Ordering::SeqCst), 1);
    assert_eq!(c.get(), 1);
}

#[tokio::test]
async fn a_refusing_admission_step_ends_the_call_before_anything_runs() {
    let c = Counter::default();
    let sink = Arc::new(MemorySink::new());
    let rt = runtime_with(vec![refund_def(&c)], sink.clone());
    let gate = Arc::new(Gate {
        refuse: true,
        ..Gate::default()
    });
    let r = rt
        .invoke(call("orders.refund", refund_input()).admission(gate.clone()))
        .await;
    assert_eq!(code(&r), Some(ErrorCode::AdapterError));
    assert_eq!(c.get(), 0);
    assert_eq!(sink.types(), ["capability.requested", "capability.failed"]);
}

/// `messages.send` needs a human confirmation; a policy also asks for a `manager` approval
/// while `strict` is set.
fn send_def(counter: &Counter, strict: Arc<AtomicBool>) -> CapabilityDef {
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
    .policy(policy_sync("escalate", move |_| {
        Ok(if strict.load(Ordering::SeqCst) {
            PolicyDecision::RequireApproval {
                reason: "escalated".into(),
                approval_type: Some("manager".into()),
                expires_in_ms: None,
            }
        } else {
            PolicyDecision::allow()
        })
    }))
    .procedure(counter.procedure())
}

#[tokio::test]
async fn on_resume_a_fresh_require_approval_is_satisfied_only_by_an_approval_of_its_types() {
    let c = Counter::default();
    let strict = Arc::new(AtomicBool::new(false));
    let sink = Arc::new(MemorySink::new());
    let rt = runtime_with(vec![send_def(&c, strict.clone())], sink.clone());
    let r = rt.invoke(call("messages.send", json!({}))).await;
    let approval = r.approval().expect("approval-required").clone();
    assert_eq!(approval.types, ["human-confirmation"]);
    approve(&rt, &approval.id).await;
    strict.store(true, Ordering::SeqCst);
    let r = rt.resume(&approval.id, ResumeOptions::default()).await;
    assert_eq!(code(&r), Some(ErrorCode::PolicyDenied));
    assert_eq!(c.get(), 0);
    assert_eq!(
        data_of(&sink, "capability.denied")["reason"],
        "policy-denied"
    );
    let record = rt.approvals().get(&approval.id).await.unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Approved, "not consumed");
    // A fresh requirement of the type it carries is satisfied by it.
    strict.store(false, Ordering::SeqCst);
    let r = rt.resume(&approval.id, ResumeOptions::default()).await;
    assert_eq!(r.status(), "completed");
    assert_eq!(c.get(), 1);
}

#[tokio::test]
async fn a_resume_refused_by_its_door_is_recorded_like_the_runtimes_own_refusals() {
    let c = Counter::default();
    let sink = Arc::new(MemorySink::new());
    let rt = runtime_with(vec![refund_def(&c)], sink.clone());
    let r = rt
        .invoke(
            call(
                "orders.refund",
                json!({"orderId": "ord_42", "amount": 649, "reason": "damaged item"}),
            )
            .correlation_id("run-1"),
        )
        .await;
    let id = r.approval().expect("approval-required").id.clone();
    let before = sink.events().len();
    let refused = rt
        .refuse_resume(
            &id,
            ResumeOptions::default(),
            CapabilityError::new(ErrorCode::ApprovalPending),
        )
        .await;
    assert_eq!(code(&refused), Some(ErrorCode::ApprovalPending));
    let events = sink.events();
    assert_eq!(events.len(), before + 1);
    let event = &events[before];
    assert_eq!(event.type_name(), "capability.failed");
    assert_eq!(event.capability_id.as_deref(), Some("orders.refund"));
    assert_eq!(event.correlation_id.as_deref(), Some("run-1"));
    let data = serde_json::to_value(event).unwrap()["data"].clone();
    assert_eq!(data["approvalId"], id.as_str());
    assert_eq!(data["code"], "APPROVAL_PENDING");
    assert_eq!(c.get(), 0);
    let record = rt.approvals().get(&id).await.unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Pending);
}
