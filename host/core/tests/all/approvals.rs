//! Stage 8 and resume: approval binds the exact operation (SI-4, SI-5), executes at most once.

use crate::common;

use capgate_core::approval::{ApprovalCoordinator, ApprovalHandler, InlineDecision};
use capgate_core::clock::ManualClock;
use capgate_core::prelude::*;
use capgate_core::runtime::{ApprovalsError, RuntimeBuilder};
use common::*;
use serde_json::json;
use std::sync::Arc;

async fn pending(rt: &Runtime) -> String {
    let r = rt
        .invoke(call(
            "orders.refund",
            json!({"orderId": "ord_42", "amount": 649, "reason": "damaged item"}),
        ))
        .await;
    r.approval().expect("approval-required").id.clone()
}

#[tokio::test]
async fn approval_required_then_decide_then_resume_completes_with_the_approver_visible() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], sink.clone());
    let r = rt
        .invoke(call(
            "orders.refund",
            json!({"orderId": "ord_42", "amount": 649}),
        ))
        .await;
    assert_eq!(r.status(), "approval-required");
    let apr = r.approval().unwrap().clone();
    assert!(apr.id.starts_with("apr_"));
    assert_eq!(apr.reasons, vec!["Refund of $649 exceeds $500"]);
    assert_eq!(c.get(), 0, "nothing executes before approval");

    approve(&rt, &apr.id).await;
    assert_eq!(c.get(), 0, "deciding executes nothing");

    let resumed = rt.resume(&apr.id, ResumeOptions::default()).await;
    assert_eq!(resumed.status(), "completed", "{resumed:?}");
    assert_ne!(
        resumed.execution_id(),
        r.execution_id(),
        "resume opens a new execution"
    );
    let out = resumed.output().unwrap();
    assert_eq!(out["approver"], "u_priya");
    assert_eq!(out["actor"], "u_dana", "runs as the original requester");
    assert_eq!(c.get(), 1);
    let started = data_of(&sink, "capability.started");
    assert_eq!(started["approvalId"], json!(apr.id));
}

#[tokio::test]
async fn resume_of_a_pending_approval_is_approval_pending() {
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], Arc::new(MemorySink::new()));
    let id = pending(&rt).await;
    let r = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(code(&r), Some(ErrorCode::ApprovalPending));
    assert!(r.error().unwrap().retryable());
}

#[tokio::test]
async fn resume_of_a_rejected_approval_is_approval_rejected() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], sink.clone());
    let id = pending(&rt).await;
    rt.approvals()
        .decide(
            &id,
            priya_decides(DecisionStatus::Rejected, Some("not eligible")),
        )
        .await
        .unwrap();
    assert!(sink.types().contains(&"capability.rejected"));
    let r = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(code(&r), Some(ErrorCode::ApprovalRejected));
    assert_eq!(c.get(), 0);
}

#[tokio::test]
async fn resume_after_expiry_is_approval_expired() {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let c = Counter::default();
    let rt = refund_runtime(&c, |b| b.clock(clock.clone()));
    let id = pending(&rt).await;
    approve(&rt, &id).await;
    clock.advance(chrono::Duration::milliseconds(900_001));
    let r = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(code(&r), Some(ErrorCode::ApprovalExpired));
    // Deciding after expiry is refused too.
    let id2 = pending(&rt).await;
    clock.advance(chrono::Duration::milliseconds(900_001));
    let late = rt
        .approvals()
        .decide(&id2, priya_decides(DecisionStatus::Approved, None))
        .await;
    assert!(late.is_err());
    assert_eq!(c.get(), 0);
}

#[tokio::test]
async fn a_second_resume_is_approval_consumed() {
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], Arc::new(MemorySink::new()));
    let id = pending(&rt).await;
    approve(&rt, &id).await;
    assert_eq!(
        rt.resume(&id, ResumeOptions::default()).await.status(),
        "completed"
    );
    let again = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(code(&again), Some(ErrorCode::ApprovalConsumed));
    assert_eq!(c.get(), 1);
}

#[tokio::test]
async fn si5_a_tampered_stored_input_is_approval_input_mismatch() {
    let coord = Arc::new(InMemoryApprovalCoordinator::new());
    let c = Counter::default();
    let rt = refund_runtime_over(coord.clone(), &c);
    let id = pending(&rt).await;
    approve(&rt, &id).await;
    assert!(coord.tamper(&id, |r| r.request.input["amount"] = json!(6490)));
    let r = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(code(&r), Some(ErrorCode::ApprovalInputMismatch));
    assert_eq!(
        serde_json::to_value(r.error().unwrap()).unwrap()["code"],
        "INTERNAL_ERROR",
        "not exposed to models"
    );
    assert_eq!(c.get(), 0);
}

#[tokio::test]
async fn si4_self_approval_is_refused_when_decided_and_the_approval_stays_pending() {
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], Arc::new(MemorySink::new()));
    let id = pending(&rt).await;
    let refused = rt
        .approvals()
        .decide(&id, decide_as(dana().reference(), "", &[]))
        .await;
    assert!(matches!(refused, Err(ApprovalsError::Forbidden(_))));
    let record = rt.approvals().get(&id).await.unwrap().unwrap();
    assert_eq!(record.status, ApprovalStatus::Pending);
    assert_eq!(c.get(), 0);
}

#[tokio::test]
async fn si4_self_approval_is_still_refused_at_resume_when_a_store_was_written_directly() {
    let coord = Arc::new(InMemoryApprovalCoordinator::new());
    let c = Counter::default();
    let rt = refund_runtime_over(coord.clone(), &c);
    let id = pending(&rt).await;
    let decision = capgate_core::approval::Decision {
        status: DecisionStatus::Approved,
        approver: dana().reference(),
        comment: None,
        decided_at: chrono::Utc::now(),
        approver_namespace: None,
        via: capgate_core::approval::DecidedVia::Operator,
    };
    coord
        .decide(&id, decision, chrono::Utc::now())
        .await
        .unwrap();
    let r = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(code(&r), Some(ErrorCode::ApprovalSelfApproval));
    assert_eq!(c.get(), 0);
}

#[tokio::test]
async fn resume_guards_mismatch_is_indistinguishable_from_an_unknown_id() {
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], Arc::new(MemorySink::new()));
    let id = pending(&rt).await;
    approve(&rt, &id).await;
    let mallory = ActorRef {
        id: "u_mallory".into(),
        kind: ActorKind::User,
    };
    let wrong_actor = rt
        .resume(
            &id,
            ResumeOptions {
                expected_actor: Some(mallory),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(code(&wrong_actor), Some(ErrorCode::ApprovalResumeMismatch));
    let wrong_surface = rt
        .resume(
            &id,
            ResumeOptions {
                expected_surface: Some(Surface::Mcp),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(
        code(&wrong_surface),
        Some(ErrorCode::ApprovalResumeMismatch)
    );
    let unknown = rt.resume("apr_nope", ResumeOptions::default()).await;
    assert_eq!(code(&unknown), Some(ErrorCode::InternalError));
    assert_eq!(
        serde_json::to_value(wrong_actor.error().unwrap()).unwrap(),
        serde_json::to_value(unknown.error().unwrap()).unwrap()
    );
    // The guards did not consume it: the rightful requester still can.
    let ok = rt
        .resume(
            &id,
            ResumeOptions {
                expected_actor: Some(dana().reference()),
                expected_surface: Some(Surface::AiSdk),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(ok.status(), "completed");
}

#[tokio::test]
async fn a_schema_tightened_between_approval_and_resume_is_input_invalid() {
    let coord = Arc::new(InMemoryApprovalCoordinator::new());
    let c = Counter::default();
    let before = refund_runtime_over(coord.clone(), &c);
    let id = pending(&before).await;
    approve(&before, &id).await;

    let mut tighter = refund_schema();
    tighter["properties"]["amount"]["maximum"] = json!(500);
    let after = Runtime::builder(
        Registry::builder()
            .capability(
                CapabilityDef::new("orders.refund", refund_meta())
                    .input_schema(tighter)
                    .procedure(c.procedure()),
            )
            .build()
            .unwrap(),
    )
    .approvals(coord)
    .build()
    .expect("a valid runtime");
    let r = after.resume(&id, ResumeOptions::default()).await;
    assert_eq!(code(&r), Some(ErrorCode::InputInvalid));
    assert_eq!(c.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn si5_one_hundred_concurrent_resumes_execute_exactly_once() {
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], Arc::new(MemorySink::new()));
    let id = pending(&rt).await;
    approve(&rt, &id).await;
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let rt = rt.clone();
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            rt.resume(&id, ResumeOptions::default()).await
        }));
    }
    let mut completed = 0;
    let mut consumed = 0;
    for t in tasks {
        let r = t.await.unwrap();
        match r.status() {
            "completed" => completed += 1,
            _ if code(&r) == Some(ErrorCode::ApprovalConsumed) => consumed += 1,
            other => panic!("unexpected {other}: {r:?}"),
        }
    }
    assert_eq!((completed, consumed), (1, 99));
    assert_eq!(c.get(), 1);
}

#[tokio::test]
async fn static_approval_required_adds_the_standard_reason_and_type() {
    let c = Counter::default();
    let def = CapabilityDef::new(
        "messages.send",
        CapabilityMeta::new("Send a message", SideEffect::External, Risk::Medium)
            .exposed_on([Surface::AiSdk])
            .with_approval(ApprovalConfig {
                required: true,
                approval_type: Some("human-confirmation".into()),
                expires_in_ms: Some(60_000),
            }),
    )
    .procedure(c.procedure());
    let rt = runtime_with(vec![def], Arc::new(MemorySink::new()));
    let r = rt
        .invoke(call("messages.send", json!({"body": "hi"})))
        .await;
    let a = r.approval().unwrap();
    assert_eq!(a.reasons, vec!["Approval is required for messages.send."]);
    assert_eq!(a.types, vec!["human-confirmation"]);
    assert_eq!((a.expires_at - a.requested_at).num_milliseconds(), 60_000);
}

struct Inline(Option<InlineDecision>);
#[async_trait::async_trait]
impl ApprovalHandler for Inline {
    async fn decide(
        &self,
        _r: &capgate_core::approval::ApprovalRequest,
    ) -> Result<Option<InlineDecision>, Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.0.clone())
    }
}

#[tokio::test]
async fn an_inline_handler_approves_in_the_same_call_and_refuses_self_approval() {
    let c = Counter::default();
    let make =
        |d: Option<InlineDecision>| refund_runtime(&c, |b| b.approval_handler(Arc::new(Inline(d))));
    let approved = make(Some(InlineDecision {
        status: DecisionStatus::Approved,
        approver: priya(),
        comment: None,
    }));
    let r = approved
        .invoke(call(
            "orders.refund",
            json!({"orderId": "o", "amount": 900}),
        ))
        .await;
    assert_eq!(r.status(), "completed");
    assert_eq!(r.output().unwrap()["approver"], "u_priya");

    let selfish = make(Some(InlineDecision {
        status: DecisionStatus::Approved,
        approver: dana().reference(),
        comment: None,
    }));
    let r = selfish
        .invoke(call(
            "orders.refund",
            json!({"orderId": "o", "amount": 900}),
        ))
        .await;
    assert_eq!(code(&r), Some(ErrorCode::ApprovalSelfApproval));

    let deferred = make(None);
    let r = deferred
        .invoke(call(
            "orders.refund",
            json!({"orderId": "o", "amount": 900}),
        ))
        .await;
    assert_eq!(r.status(), "approval-required");
    assert_eq!(c.get(), 1);
}

#[tokio::test]
async fn approval_listings_show_redacted_input_and_filter_by_status() {
    let c = Counter::default();
    let def = refund_def(&c).redactor(redactor_fn("noop", Ok).with_approval_input(|mut v| {
        v["orderId"] = json!("ord_***");
        Ok(v)
    }));
    let rt = runtime_with(vec![def], Arc::new(MemorySink::new()));
    let id = pending(&rt).await;
    let _other = pending(&rt).await;
    approve(&rt, &id).await;
    let pending_only = rt
        .approvals()
        .list(&ApprovalFilter {
            status: Some(ApprovalStatus::Pending),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(pending_only.len(), 1);
    assert_eq!(pending_only[0].request.input["orderId"], "ord_***");
    assert_eq!(pending_only[0].request.input["amount"], 649);
    let got = rt.approvals().get(&id).await.unwrap().unwrap();
    assert_eq!(got.status, ApprovalStatus::Approved);
    assert_eq!(got.request.input["orderId"], "ord_***");
}

#[tokio::test]
async fn deciding_twice_is_refused() {
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], Arc::new(MemorySink::new()));
    let id = pending(&rt).await;
    approve(&rt, &id).await;
    let again = rt
        .approvals()
        .decide(&id, priya_decides(DecisionStatus::Rejected, None))
        .await;
    assert!(again.is_err());
}

#[tokio::test]
async fn an_in_memory_coordinator_for_gated_capabilities_warns_at_startup() {
    let c = Counter::default();
    let def = CapabilityDef::new(
        "messages.send",
        CapabilityMeta::new("Send", SideEffect::External, Risk::Medium)
            .exposed_on([Surface::AiSdk])
            .with_approval(ApprovalConfig {
                required: true,
                ..Default::default()
            }),
    )
    .procedure(c.procedure());
    let rt = Runtime::builder(Registry::builder().capability(def).build().unwrap())
        .build()
        .expect("a valid runtime");
    assert!(
        rt.warnings()
            .iter()
            .any(|w| w.contains("in-memory approval coordinator"))
    );
    assert!(rt.warnings().iter().any(|w| w.contains("no audit sink")));
    let coord: Arc<dyn ApprovalCoordinator> = Arc::new(InMemoryApprovalCoordinator::new());
    assert!(!coord.is_durable());
}

/// The refund deployment over the approval coordinator a test tampers with.
fn refund_runtime_over(coord: Arc<InMemoryApprovalCoordinator>, c: &Counter) -> Runtime {
    refund_runtime(c, |b| b.approvals(coord))
}

/// The refund deployment (`orders.refund` under refundLimit, counted by `c`), its runtime
/// built as `configure` says.
fn refund_runtime(
    c: &Counter,
    configure: impl FnOnce(RuntimeBuilder) -> RuntimeBuilder,
) -> Runtime {
    let registry = Registry::builder()
        .capability(refund_def(c))
        .build()
        .unwrap();
    configure(Runtime::builder(registry))
        .build()
        .expect("a valid runtime")
}

/// Issue 55: an approval's own events (expired, escalated) name the approval and carry no
/// execution id: the call's execution ended when it asked for the approval, and an event
/// of that execution after its end would break "one terminal event per execution".
#[tokio::test]
async fn expiry_and_escalation_events_name_the_approval_not_an_ended_execution() {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let c = Counter::default();
    let sink = Arc::new(MemorySink::new());
    let coord = Arc::new(InMemoryApprovalCoordinator::new());
    let rt = refund_runtime(&c, |b| {
        b.clock(clock.clone())
            .approvals(coord)
            .audit_sink(sink.clone())
    });
    let id = pending(&rt).await;
    clock.advance(chrono::Duration::minutes(5));
    let escalated = rt
        .approvals()
        .escalate_due(std::time::Duration::from_secs(60), Some("director"), 10)
        .await
        .expect("escalate");
    assert_eq!(escalated.len(), 1);
    clock.advance(chrono::Duration::milliseconds(900_001));
    let expired = rt.approvals().expire_due(10).await.expect("expire");
    assert_eq!(expired.len(), 1);
    for ty in ["capgate.approval.escalated", "capgate.approval.expired"] {
        let event = sink
            .events()
            .into_iter()
            .find(|e| e.type_name() == ty)
            .unwrap_or_else(|| panic!("no {ty}"));
        assert_eq!(event.execution_id, None, "{ty}");
        assert_eq!(data_of(&sink, ty)["approvalId"], id.as_str(), "{ty}");
    }
}

/// Issue 55: an approval that was approved and never run lapses at its expiry and is
/// announced once, as such (`lapsed: true`), like one nobody decided.
#[tokio::test]
async fn an_approved_approval_that_lapses_unused_is_announced_once() {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let c = Counter::default();
    let sink = Arc::new(MemorySink::new());
    let coord = Arc::new(InMemoryApprovalCoordinator::new());
    let rt = refund_runtime(&c, |b| {
        b.clock(clock.clone())
            .approvals(coord)
            .audit_sink(sink.clone())
    });
    let id = pending(&rt).await;
    approve(&rt, &id).await;
    clock.advance(chrono::Duration::milliseconds(900_001));
    let expired = rt.approvals().expire_due(10).await.expect("expire");
    assert_eq!(expired.len(), 1);
    assert!(
        rt.approvals()
            .expire_due(10)
            .await
            .expect("again")
            .is_empty()
    );
    let data = data_of(&sink, "capgate.approval.expired");
    assert_eq!(data["approvalId"], id.as_str());
    assert_eq!(data["lapsed"], true, "{data}");
    let r = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(code(&r), Some(ErrorCode::ApprovalExpired));
    assert_eq!(c.get(), 0);
}
