//! Spec areas pinned by no other module (issue 33, item 8): the approval gate opened at
//! stage 9, unhashable input, the inline handler's failure paths, cancellation before the
//! procedure starts and during a backoff, retried timeouts and `retryOn`, resume against a
//! changed deployment or an approval that was cancelled or expired under it, and the status
//! of the call's root span.

use crate::common;

use capgate_core::approval::{
    ApprovalCoordinator, ApprovalHandler, ApprovalRecord, ApprovalRequest, ApprovalStoreError,
    Decision, InlineDecision,
};
use capgate_core::prelude::*;
use chrono::{DateTime, Utc};
use common::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn small_refund() -> Value {
    json!({"orderId": "ord_1", "amount": 20})
}

fn big_refund() -> Value {
    json!({"orderId": "ord_42", "amount": 649})
}

/// The event types of one execution, in order.
fn types_for(sink: &MemorySink, execution_id: &str) -> Vec<&'static str> {
    sink.for_execution(execution_id)
        .iter()
        .map(|e| e.type_name())
        .collect()
}

/// The `data` of the first event of `ty` in one execution.
fn data_for(sink: &MemorySink, execution_id: &str, ty: &str) -> Value {
    let ev = sink
        .for_execution(execution_id)
        .into_iter()
        .find(|e| e.type_name() == ty)
        .unwrap_or_else(|| panic!("no {ty} in {:?}", types_for(sink, execution_id)));
    serde_json::to_value(&ev).expect("event serializes")["data"].clone()
}

/// A policy that runs only at stage 9 and always asks for approval.
fn approval_at_execution() -> impl Policy {
    policy_sync("recheckWithAHuman", |_| {
        Ok(PolicyDecision::RequireApproval {
            reason: "the order changed since it was looked at".into(),
            approval_type: Some("manager".into()),
            expires_in_ms: Some(60_000),
        })
    })
    .with_phases([Phase::Execution])
}

/// `orders.refund` (no invocation-phase policy) gated at stage 9 only.
fn gated_at_stage_9(c: &Counter) -> CapabilityDef {
    gated_at_stage_9_as("orders.refund", c)
}

/// [`gated_at_stage_9`] under another id.
fn gated_at_stage_9_as(id: &str, c: &Counter) -> CapabilityDef {
    CapabilityDef::new(id, refund_meta())
        .input_schema(refund_schema())
        .policy(approval_at_execution())
        .procedure(c.procedure())
}

fn runtime_of(
    defs: Vec<CapabilityDef>,
    configure: impl FnOnce(RuntimeBuilder) -> RuntimeBuilder,
) -> Runtime {
    let mut b = Registry::builder();
    for d in defs {
        b.push(d);
    }
    configure(Runtime::builder(b.build().expect("registry")))
        .build()
        .expect("a valid runtime")
}

use capgate_core::runtime::RuntimeBuilder;

// ── Stage 9 opens the approval gate ──────────────────────────────────────────────────────

#[tokio::test]
async fn an_execution_phase_require_approval_suspends_with_a_new_approval_and_its_resume_runs() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with(vec![gated_at_stage_9(&c)], sink.clone());

    let r = rt.invoke(call("orders.refund", small_refund())).await;
    assert_eq!(r.status(), "approval-required", "{r:?}");
    assert_eq!(c.get(), 0, "nothing runs before the approval");
    let approval = r.approval().expect("an approval").clone();
    assert_eq!(
        approval.reasons,
        ["the order changed since it was looked at"]
    );
    assert_eq!(approval.types, ["manager"]);
    assert_eq!(
        (approval.expires_at - approval.requested_at).num_milliseconds(),
        60_000,
        "the policy's expiry"
    );
    assert_eq!(
        types_for(&sink, r.execution_id()),
        ["capability.requested", "capability.approval_requested"],
        "suspended before capability.started, no failure recorded"
    );
    assert_eq!(
        data_for(&sink, r.execution_id(), "capability.approval_requested")["approvalId"],
        json!(approval.id)
    );
    let stored = rt
        .approvals()
        .get(&approval.id)
        .await
        .expect("store")
        .expect("the approval is stored");
    assert_eq!(stored.status, ApprovalStatus::Pending);
    assert_eq!(
        stored.request.input["currency"], "USD",
        "the validated input"
    );

    approve(&rt, &approval.id).await;
    let resumed = rt.resume(&approval.id, ResumeOptions::default()).await;
    assert_eq!(resumed.status(), "completed", "{resumed:?}");
    assert_eq!(c.get(), 1);
    assert_eq!(resumed.output().expect("output")["approver"], "u_priya");
    assert_eq!(
        data_for(&sink, resumed.execution_id(), "capability.started")["approvalId"],
        json!(approval.id)
    );
}

/// Decides every approval it is asked about as `status` by Priya, counting the requests.
struct DecidesAs(DecisionStatus, Arc<AtomicUsize>);

#[async_trait::async_trait]
impl ApprovalHandler for DecidesAs {
    async fn decide(
        &self,
        _r: &ApprovalRequest,
    ) -> Result<Option<InlineDecision>, Box<dyn std::error::Error + Send + Sync>> {
        self.1.fetch_add(1, Ordering::SeqCst);
        Ok(Some(InlineDecision {
            status: self.0,
            approver: priya(),
            comment: None,
        }))
    }
}

#[tokio::test]
async fn an_execution_phase_require_approval_is_put_to_the_inline_handler() {
    for (status, expected) in [
        (DecisionStatus::Approved, None),
        (DecisionStatus::Rejected, Some(ErrorCode::ApprovalRejected)),
    ] {
        let sink = Arc::new(MemorySink::new());
        let c = Counter::default();
        let asked = Arc::new(AtomicUsize::new(0));
        let rt = runtime_of(vec![gated_at_stage_9(&c)], |b| {
            b.audit_sink(sink.clone())
                .approval_handler(Arc::new(DecidesAs(status, asked.clone())))
        });
        let r = rt.invoke(call("orders.refund", small_refund())).await;
        assert_eq!(asked.load(Ordering::SeqCst), 1, "{status:?}");
        assert_eq!(code(&r), expected, "{status:?}: {r:?}");
        match expected {
            None => {
                assert_eq!(r.output().expect("output")["approver"], "u_priya");
                assert_eq!(c.get(), 1);
                let started = data_for(&sink, r.execution_id(), "capability.started");
                assert!(started["approvalId"].is_string(), "{started}");
            }
            Some(_) => {
                assert_eq!(c.get(), 0);
                assert_eq!(
                    types_for(&sink, r.execution_id()),
                    [
                        "capability.requested",
                        "capability.approval_requested",
                        "capability.rejected",
                        "capability.failed"
                    ]
                );
            }
        }
    }
}

// ── APPROVAL_UNSERIALIZABLE_INPUT ────────────────────────────────────────────────────────

/// A value nested deeper than canonical JSON accepts: valid input for a schema of `true`,
/// but no approval can bind it.
fn too_deep() -> Value {
    let mut v = json!(1);
    for _ in 0..(capgate_core::canonical::MAX_DEPTH + 8) {
        v = json!({ "a": v });
    }
    v
}

#[tokio::test]
async fn an_input_that_cannot_be_hashed_is_approval_unserializable_input_and_stores_nothing() {
    let statically = |c: &Counter| {
        CapabilityDef::new(
            "messages.send",
            CapabilityMeta::new("Send", SideEffect::External, Risk::Medium)
                .exposed_on([Surface::AiSdk])
                .with_approval(ApprovalConfig {
                    required: true,
                    ..Default::default()
                }),
        )
        .procedure(c.procedure())
    };
    let at_stage_9 = |c: &Counter| {
        CapabilityDef::new(
            "messages.send",
            CapabilityMeta::new("Send", SideEffect::External, Risk::Medium)
                .exposed_on([Surface::AiSdk]),
        )
        .policy(approval_at_execution())
        .procedure(c.procedure())
    };
    type Def = fn(&Counter) -> CapabilityDef;
    for (stage, def) in [
        ("stage 8", statically as Def),
        ("stage 9", at_stage_9 as Def),
    ] {
        let sink = Arc::new(MemorySink::new());
        let coord = Arc::new(InMemoryApprovalCoordinator::new());
        let c = Counter::default();
        let rt = runtime_of(vec![def(&c)], |b| {
            b.audit_sink(sink.clone()).approvals(coord.clone())
        });
        let r = rt.invoke(call("messages.send", too_deep())).await;
        assert_eq!(
            code(&r),
            Some(ErrorCode::ApprovalUnserializableInput),
            "{stage}: {r:?}"
        );
        assert_eq!(r.status(), "failed", "{stage}");
        assert!(!r.effect_unknown(), "{stage}: nothing was entered");
        assert_eq!(
            r.error().expect("error").to_public().code,
            ErrorCode::InternalError,
            "{stage}: not exposed to models"
        );
        assert_eq!(c.get(), 0, "{stage}");
        let stored = coord
            .list(&ApprovalFilter::default(), Utc::now())
            .await
            .expect("list");
        assert!(stored.is_empty(), "{stage}: no approval stored");
        let failed = data_for(&sink, r.execution_id(), "capability.failed");
        assert_eq!(failed["code"], "APPROVAL_UNSERIALIZABLE_INPUT", "{stage}");
        assert_eq!(failed["stage"], "approval", "{stage}");
    }
}

// ── The inline handler's failure paths ───────────────────────────────────────────────────

enum Misbehaves {
    Errs,
    Panics,
}

struct BrokenHandler(Misbehaves);

#[async_trait::async_trait]
impl ApprovalHandler for BrokenHandler {
    async fn decide(
        &self,
        _r: &ApprovalRequest,
    ) -> Result<Option<InlineDecision>, Box<dyn std::error::Error + Send + Sync>> {
        match self.0 {
            Misbehaves::Errs => Err("the approval desk is down".into()),
            Misbehaves::Panics => panic!("the approval desk fell over"),
        }
    }
}

#[tokio::test]
async fn an_inline_rejection_is_approval_rejected_with_capability_rejected() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let asked = Arc::new(AtomicUsize::new(0));
    let coord = Arc::new(InMemoryApprovalCoordinator::new());
    let rt = runtime_of(vec![refund_def(&c)], |b| {
        b.audit_sink(sink.clone())
            .approvals(coord.clone())
            .approval_handler(Arc::new(DecidesAs(DecisionStatus::Rejected, asked.clone())))
    });
    let r = rt.invoke(call("orders.refund", big_refund())).await;
    assert_eq!(code(&r), Some(ErrorCode::ApprovalRejected));
    assert_eq!(r.status(), "failed");
    assert_eq!(c.get(), 0);
    assert_eq!(
        types_for(&sink, r.execution_id()),
        [
            "capability.requested",
            "capability.approval_requested",
            "capability.rejected",
            "capability.failed"
        ]
    );
    let rejected = data_for(&sink, r.execution_id(), "capability.rejected");
    assert_eq!(rejected["approver"]["id"], "u_priya");
    let stored = coord
        .list(&ApprovalFilter::default(), Utc::now())
        .await
        .expect("list");
    assert!(stored.is_empty(), "an inline decision stores nothing");
}

#[tokio::test]
async fn a_failing_or_panicking_inline_handler_is_internal_error_at_stage_approval() {
    for (what, how) in [("error", Misbehaves::Errs), ("panic", Misbehaves::Panics)] {
        let sink = Arc::new(MemorySink::new());
        let c = Counter::default();
        let coord = Arc::new(InMemoryApprovalCoordinator::new());
        let rt = runtime_of(vec![refund_def(&c)], |b| {
            b.audit_sink(sink.clone())
                .approvals(coord.clone())
                .approval_handler(Arc::new(BrokenHandler(how)))
        });
        let r = rt.invoke(call("orders.refund", big_refund())).await;
        let err = r.error().unwrap_or_else(|| panic!("{what}: {r:?}"));
        assert_eq!(err.code(), ErrorCode::InternalError, "{what}");
        assert_eq!(err.stage(), Some(Stage::Approval), "{what}");
        assert_eq!(c.get(), 0, "{what}: fails closed");
        let public = serde_json::to_string(&err.to_public()).expect("public");
        assert!(
            !public.contains("desk"),
            "{what}: the cause stays private: {public}"
        );
        assert_eq!(
            types_for(&sink, r.execution_id()),
            [
                "capability.requested",
                "capability.approval_requested",
                "capability.failed"
            ],
            "{what}"
        );
        assert_eq!(
            data_for(&sink, r.execution_id(), "capability.failed")["stage"],
            "approval",
            "{what}"
        );
        let stored = coord
            .list(&ApprovalFilter::default(), Utc::now())
            .await
            .expect("list");
        assert!(
            stored.is_empty(),
            "{what}: nothing deferred to the coordinator"
        );
    }
}

// ── Cancellation before the procedure starts, and during a backoff ───────────────────────

fn lookup(c: &Counter) -> CapabilityDef {
    CapabilityDef::new(
        "orders.lookup",
        CapabilityMeta::new("Look an order up", SideEffect::Read, Risk::Low)
            .exposed_on([Surface::AiSdk]),
    )
    .procedure(c.procedure())
}

#[tokio::test]
async fn a_cancellation_before_the_procedure_starts_is_cancelled_with_nothing_entered() {
    // Already cancelled when the call arrives.
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with(vec![lookup(&c)], sink.clone());
    let token = CancellationToken::new();
    token.cancel();
    let r = rt
        .invoke(call("orders.lookup", json!({})).cancel(token))
        .await;
    assert_eq!(r.status(), "cancelled", "{r:?}");
    assert_eq!(code(&r), Some(ErrorCode::Cancelled));
    assert!(!r.effect_unknown(), "nothing was entered: {r:?}");
    assert!(
        serde_json::to_value(&r).expect("envelope")["effectStatus"].is_null(),
        "no effectStatus on the wire"
    );
    assert_eq!(c.get(), 0);
    assert_eq!(
        data_for(&sink, r.execution_id(), "capability.cancelled")["code"],
        "CANCELLED"
    );

    // Cancelled while the policies were being evaluated (the client went away).
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let token = CancellationToken::new();
    let during = token.clone();
    let goes_away = policy_sync("clientGoesAway", move |_| {
        during.cancel();
        Ok(PolicyDecision::allow())
    })
    .with_phases([Phase::Execution]);
    let rt = runtime_with(vec![lookup(&c).policy(goes_away)], sink.clone());
    let r = rt
        .invoke(call("orders.lookup", json!({})).cancel(token))
        .await;
    assert_eq!(code(&r), Some(ErrorCode::Cancelled), "{r:?}");
    assert!(!r.effect_unknown(), "nothing was entered: {r:?}");
    assert_eq!(c.get(), 0);
}

#[tokio::test]
async fn a_cancellation_after_the_procedure_was_entered_leaves_the_effect_unknown() {
    let sink = Arc::new(MemorySink::new());
    let token = CancellationToken::new();
    let inside = token.clone();
    let def = CapabilityDef::new(
        "orders.lookup",
        CapabilityMeta::new("Look an order up", SideEffect::Read, Risk::Low)
            .exposed_on([Surface::AiSdk]),
    )
    .procedure(handler(move |_call| {
        let inside = inside.clone();
        async move {
            // The caller goes away while the procedure runs; it never returns by itself.
            inside.cancel();
            std::future::pending::<()>().await;
            Ok(json!({}))
        }
    }));
    let rt = runtime_with(vec![def], sink.clone());
    let r = rt
        .invoke(call("orders.lookup", json!({})).cancel(token))
        .await;
    assert_eq!(code(&r), Some(ErrorCode::Cancelled), "{r:?}");
    assert!(r.effect_unknown(), "the procedure was entered: {r:?}");
    assert_eq!(
        serde_json::to_value(&r).expect("envelope")["effectStatus"],
        "unknown"
    );
}

/// Fails retryably on attempt 1 (telling `failed`), succeeds afterwards; counts attempts.
fn fails_once(n: Arc<AtomicUsize>, failed: Arc<tokio::sync::Notify>) -> impl Procedure {
    handler(move |call| {
        let (n, failed) = (n.clone(), failed.clone());
        async move {
            n.fetch_add(1, Ordering::SeqCst);
            if call.attempt == 1 {
                failed.notify_one();
                return Err(ProcedureError::Defined {
                    code: "UPSTREAM_BUSY".into(),
                    message: "Try again.".into(),
                    data: None,
                    retryable: true,
                });
            }
            Ok(json!({"ok": true}))
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_cancellation_during_the_backoff_ends_the_call_without_another_attempt() {
    let sink = Arc::new(MemorySink::new());
    let n = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(tokio::sync::Notify::new());
    let def = CapabilityDef::new(
        "customers.search",
        CapabilityMeta::new("search", SideEffect::Read, Risk::Low)
            .exposed_on([Surface::AiSdk])
            .with_retry(RetryConfig {
                max_attempts: 2,
                backoff_ms: Some(3_600_000),
                retry_on: None,
            }),
    )
    .procedure(fails_once(n.clone(), failed.clone()));
    let rt = runtime_with(vec![def], sink.clone());
    let token = CancellationToken::new();
    let canceller = token.clone();
    // Cancels once attempt 1 has failed, while the call waits out its backoff.
    tokio::spawn(async move {
        failed.notified().await;
        canceller.cancel();
    });
    let r = rt
        .invoke(call("customers.search", json!({})).cancel(token))
        .await;
    assert_eq!(r.status(), "cancelled", "{r:?}");
    assert_eq!(code(&r), Some(ErrorCode::Cancelled));
    assert_eq!(n.load(Ordering::SeqCst), 1, "no second attempt");
    // Attempt 1 was entered, and answered a defined error: the procedure's deliberate
    // failure, which shows it had no effect (issue 55), so the effect is known.
    assert!(!r.effect_unknown(), "attempt 1 answered a defined error");
    assert_eq!(
        types_for(&sink, r.execution_id()),
        [
            "capability.requested",
            "capability.started",
            "capability.cancelled"
        ],
        "no capability.retried: the backoff was cut short"
    );
}

// ── Retried timeouts and retryOn ─────────────────────────────────────────────────────────

/// Hangs on attempt 1 (until the per-attempt timer cuts it), answers on later attempts.
fn hangs_once(n: Arc<AtomicUsize>) -> impl Procedure {
    handler(move |call| {
        let n = n.clone();
        async move {
            n.fetch_add(1, Ordering::SeqCst);
            if call.attempt == 1 {
                std::future::pending::<()>().await;
            }
            Ok(json!({"attempt": call.attempt}))
        }
    })
}

#[tokio::test(start_paused = true)]
async fn a_timeout_on_the_first_attempt_is_retried_and_the_second_attempt_completes() {
    // A read, and a write declared idempotent (SI-11), both retry a TIMEOUT.
    for (what, meta) in [
        (
            "read",
            CapabilityMeta::new("search", SideEffect::Read, Risk::Low),
        ),
        (
            "idempotent write",
            CapabilityMeta::new("tag", SideEffect::Write, Risk::Low).idempotent(true),
        ),
    ] {
        let sink = Arc::new(MemorySink::new());
        let n = Arc::new(AtomicUsize::new(0));
        let def = CapabilityDef::new(
            "customers.op",
            meta.exposed_on([Surface::AiSdk])
                .with_timeout_ms(50)
                .with_retry(RetryConfig {
                    max_attempts: 1,
                    backoff_ms: Some(10),
                    retry_on: None,
                }),
        )
        .procedure(hangs_once(n.clone()));
        let rt = runtime_with(vec![def], sink.clone());
        let r = rt.invoke(call("customers.op", json!({}))).await;
        assert_eq!(r.status(), "completed", "{what}: {r:?}");
        assert_eq!(r.output().expect("output")["attempt"], 2, "{what}");
        assert_eq!(n.load(Ordering::SeqCst), 2, "{what}");
        let exe = r.execution_id();
        assert_eq!(
            data_for(&sink, exe, "capability.retried"),
            json!({"attempt": 2, "previousErrorCode": "TIMEOUT"}),
            "{what}"
        );
        assert_eq!(
            data_for(&sink, exe, "capability.completed")["attempts"],
            2,
            "{what}"
        );
        assert!(
            !types_for(&sink, exe).contains(&"capability.cancelled"),
            "{what}: the timeout of attempt 1 is not terminal"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_write_that_times_out_is_never_retried() {
    // SI-11: a non-idempotent write cannot even declare a retry; its TIMEOUT is terminal.
    let sink = Arc::new(MemorySink::new());
    let n = Arc::new(AtomicUsize::new(0));
    let def = CapabilityDef::new("orders.refund", refund_meta().with_timeout_ms(50))
        .procedure(hangs_once(n.clone()));
    let rt = runtime_with(vec![def], sink.clone());
    let r = rt.invoke(call("orders.refund", json!({}))).await;
    assert_eq!(r.status(), "cancelled", "{r:?}");
    assert_eq!(code(&r), Some(ErrorCode::Timeout));
    assert!(
        r.error().expect("error").retryable(),
        "TIMEOUT is retryable ..."
    );
    assert_eq!(n.load(Ordering::SeqCst), 1, "... but a write runs once");
    assert!(r.effect_unknown());
    assert!(!types_for(&sink, r.execution_id()).contains(&"capability.retried"));
}

/// `customers.search`, a read retried up to 3 times on the codes `retry_on` lists, run by
/// `procedure`; the call's result, how many attempts ran, and its events.
async fn search_retrying_on(
    retry_on: Vec<ErrorCode>,
    procedure: impl FnOnce(Arc<AtomicUsize>) -> Arc<dyn Procedure>,
) -> (ExecutionResult, usize, Arc<MemorySink>) {
    let sink = Arc::new(MemorySink::new());
    let n = Arc::new(AtomicUsize::new(0));
    let def = CapabilityDef::new(
        "customers.search",
        CapabilityMeta::new("search", SideEffect::Read, Risk::Low)
            .exposed_on([Surface::AiSdk])
            .with_timeout_ms(50)
            .with_retry(RetryConfig {
                max_attempts: 3,
                backoff_ms: Some(10),
                retry_on: Some(retry_on),
            }),
    )
    .procedure_arc(procedure(n.clone()));
    let rt = runtime_with(vec![def], sink.clone());
    let r = rt.invoke(call("customers.search", json!({}))).await;
    (r, n.load(Ordering::SeqCst), sink)
}

fn failing_once(n: Arc<AtomicUsize>) -> Arc<dyn Procedure> {
    Arc::new(fails_once(n, Arc::new(tokio::sync::Notify::new())))
}

fn hanging_once(n: Arc<AtomicUsize>) -> Arc<dyn Procedure> {
    Arc::new(hangs_once(n))
}

#[tokio::test(start_paused = true)]
async fn retry_on_retries_only_the_listed_codes() {
    // A retryable EXECUTION_FAILED under `retryOn = [TIMEOUT]`: not listed, not retried.
    let (r, attempts, sink) = search_retrying_on(vec![ErrorCode::Timeout], failing_once).await;
    assert_eq!(code(&r), Some(ErrorCode::ExecutionFailed), "{r:?}");
    assert!(r.error().expect("error").retryable());
    assert_eq!(attempts, 1, "EXECUTION_FAILED is not in retryOn");
    assert!(!types_for(&sink, r.execution_id()).contains(&"capability.retried"));

    // The same error under `retryOn = [EXECUTION_FAILED]`: retried, and the call completes.
    let (r, attempts, _) = search_retrying_on(vec![ErrorCode::ExecutionFailed], failing_once).await;
    assert_eq!(r.status(), "completed", "{r:?}");
    assert_eq!(attempts, 2);

    // A TIMEOUT under `retryOn = [EXECUTION_FAILED]`: not listed, terminal ...
    let (r, attempts, _) = search_retrying_on(vec![ErrorCode::ExecutionFailed], hanging_once).await;
    assert_eq!(code(&r), Some(ErrorCode::Timeout), "{r:?}");
    assert_eq!(attempts, 1, "TIMEOUT is not in retryOn");
    // ... and retried where it is listed.
    let (r, attempts, _) = search_retrying_on(vec![ErrorCode::Timeout], hanging_once).await;
    assert_eq!(r.status(), "completed", "{r:?}");
    assert_eq!(attempts, 2);
}

// ── Resume against a changed deployment, or a record changed under it ────────────────────

/// An approved refund of $649 in `coord`, requested through the full refund deployment.
async fn approved_refund(coord: &Arc<InMemoryApprovalCoordinator>) -> String {
    let c = Counter::default();
    let rt = runtime_of(vec![refund_def(&c)], |b| b.approvals(coord.clone()));
    let r = rt.invoke(call("orders.refund", big_refund())).await;
    let id = r.approval().expect("approval-required").id.clone();
    approve(&rt, &id).await;
    id
}

async fn status_of(coord: &InMemoryApprovalCoordinator, id: &str) -> ApprovalStatus {
    coord
        .get(id)
        .await
        .expect("store")
        .expect("the record")
        .status
}

#[tokio::test]
async fn resuming_a_cancelled_approval_is_internal_error_and_runs_nothing() {
    let coord = Arc::new(InMemoryApprovalCoordinator::new());
    let id = approved_refund(&coord).await;
    assert!(coord.tamper(&id, |r| r.status = ApprovalStatus::Cancelled));
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_of(vec![refund_def(&c)], |b| {
        b.approvals(coord.clone()).audit_sink(sink.clone())
    });
    let r = rt.resume(&id, ResumeOptions::default()).await;
    let err = r.error().expect("refused");
    assert_eq!(err.code(), ErrorCode::InternalError);
    assert_eq!(err.stage(), Some(Stage::Approval));
    assert_eq!(c.get(), 0);
    let unknown = rt.resume("apr_nope", ResumeOptions::default()).await;
    assert_eq!(
        serde_json::to_value(err.to_public()).expect("public"),
        serde_json::to_value(unknown.error().expect("refused").to_public()).expect("public"),
        "a model sees a cancelled approval like an unknown one"
    );
    assert_eq!(status_of(&coord, &id).await, ApprovalStatus::Cancelled);
    assert_eq!(types_for(&sink, r.execution_id()), ["capability.failed"]);
}

#[tokio::test]
async fn resuming_after_the_capability_was_removed_or_unexposed_is_concealed_and_consumes_nothing()
{
    let removed = |_c: &Counter| -> Vec<CapabilityDef> {
        vec![
            CapabilityDef::new(
                "orders.other",
                CapabilityMeta::new("other", SideEffect::Read, Risk::Low)
                    .exposed_on([Surface::AiSdk]),
            )
            .procedure(Counter::default().procedure()),
        ]
    };
    let unexposed = |c: &Counter| -> Vec<CapabilityDef> {
        vec![
            CapabilityDef::new(
                "orders.refund",
                CapabilityMeta::new("Refund an order", SideEffect::Write, Risk::High)
                    .exposed_on([Surface::Direct]),
            )
            .input_schema(refund_schema())
            .procedure(c.procedure()),
        ]
    };
    type Deployment = fn(&Counter) -> Vec<CapabilityDef>;
    for (what, deployment, reason) in [
        ("removed", removed as Deployment, "unknown"),
        ("unexposed", unexposed as Deployment, "not-exposed"),
    ] {
        let coord = Arc::new(InMemoryApprovalCoordinator::new());
        let id = approved_refund(&coord).await;
        // A new deployment over the same approval store.
        let sink = Arc::new(MemorySink::new());
        let c = Counter::default();
        let rt = runtime_of(deployment(&c), |b| {
            b.approvals(coord.clone()).audit_sink(sink.clone())
        });
        let r = rt.resume(&id, ResumeOptions::default()).await;
        assert_eq!(
            code(&r),
            Some(ErrorCode::CapabilityNotFound),
            "{what}: {r:?}"
        );
        let not_found = rt.invoke(call("orders.nothing", json!({}))).await;
        assert_eq!(
            serde_json::to_value(r.error().expect("refused").to_public()).expect("public"),
            serde_json::to_value(not_found.error().expect("refused").to_public()).expect("public"),
            "{what}: SI-8"
        );
        assert_eq!(c.get(), 0, "{what}");
        assert_eq!(
            types_for(&sink, r.execution_id()),
            ["capability.denied"],
            "{what}"
        );
        let denied = data_for(&sink, r.execution_id(), "capability.denied");
        assert_eq!(denied["reason"], reason, "{what}");
        assert_eq!(denied["approvalId"], json!(id), "{what}");
        assert_eq!(
            status_of(&coord, &id).await,
            ApprovalStatus::Approved,
            "{what}: the approval is not consumed"
        );
    }
}

#[tokio::test]
async fn a_schema_that_gains_a_default_after_the_approval_is_approval_input_mismatch() {
    let coord = Arc::new(InMemoryApprovalCoordinator::new());
    let id = approved_refund(&coord).await;
    // The next deployment adds a property with a default: the stored input still
    // validates, but the validated value (defaults applied) is no longer what was approved.
    let mut with_default = refund_schema();
    with_default["properties"]["priority"] = json!({"type": "string", "default": "normal"});
    let c = Counter::default();
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(with_default.clone())
        .procedure(c.procedure());
    let rt = runtime_of(vec![def], |b| b.approvals(coord.clone()));
    let r = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(code(&r), Some(ErrorCode::ApprovalInputMismatch), "{r:?}");
    assert_eq!(
        r.error().expect("refused").to_public().code,
        ErrorCode::InternalError,
        "not exposed to models"
    );
    assert_eq!(c.get(), 0);
    assert_eq!(status_of(&coord, &id).await, ApprovalStatus::Approved);

    // Control: the same deployment without the new default resumes fine.
    let c = Counter::default();
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .procedure(c.procedure());
    let rt = runtime_of(vec![def], |b| b.approvals(coord.clone()));
    let r = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(r.status(), "completed", "{r:?}");
    assert_eq!(c.get(), 1);
}

/// An approval store where the expiry sweep lands between the runtime's status check and
/// its compare-and-set: the record is approved when read and expired when consumed.
struct ExpiresUnderTheResume(Arc<InMemoryApprovalCoordinator>);

#[async_trait::async_trait]
impl ApprovalCoordinator for ExpiresUnderTheResume {
    async fn create(&self, request: ApprovalRequest) -> Result<ApprovalRecord, ApprovalStoreError> {
        self.0.create(request).await
    }
    async fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, ApprovalStoreError> {
        self.0.get(id).await
    }
    async fn decide(
        &self,
        id: &str,
        decision: Decision,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, ApprovalStoreError> {
        self.0.decide(id, decision, now).await
    }
    async fn mark_consumed(
        &self,
        id: &str,
        execution_id: &str,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, ApprovalStoreError> {
        self.0.tamper(id, |r| r.status = ApprovalStatus::Expired);
        self.0.mark_consumed(id, execution_id, now).await
    }
    async fn withdraw(
        &self,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, ApprovalStoreError> {
        self.0.withdraw(id, now).await
    }
    async fn list(
        &self,
        filter: &ApprovalFilter,
        now: DateTime<Utc>,
    ) -> Result<Vec<ApprovalRecord>, ApprovalStoreError> {
        self.0.list(filter, now).await
    }
}

#[tokio::test]
async fn losing_the_consume_race_to_expiry_is_approval_expired() {
    let inner = Arc::new(InMemoryApprovalCoordinator::new());
    let id = approved_refund(&inner).await;
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_of(vec![refund_def(&c)], |b| {
        b.approvals(Arc::new(ExpiresUnderTheResume(inner.clone())))
            .audit_sink(sink.clone())
    });
    let r = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(code(&r), Some(ErrorCode::ApprovalExpired), "{r:?}");
    assert_eq!(c.get(), 0, "an expired approval executes nothing");
    assert_eq!(types_for(&sink, r.execution_id()), ["capability.failed"]);
    assert_eq!(status_of(&inner, &id).await, ApprovalStatus::Expired);
}

// ── The status of the call's root span ───────────────────────────────────────────────────

/// Collects the fields of every closed `agent.capability_call` span.
#[derive(Clone, Default)]
struct CallSpans {
    open: Arc<Mutex<BTreeMap<u64, BTreeMap<String, String>>>>,
    closed: Arc<Mutex<Vec<BTreeMap<String, String>>>>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
}

impl<S> tracing_subscriber::Layer<S> for CallSpans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() != "agent.capability_call" {
            return;
        }
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        self.open
            .lock()
            .expect("spans")
            .insert(id.into_u64(), fields);
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if let Some(fields) = self.open.lock().expect("spans").get_mut(&id.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }

    fn on_close(&self, id: tracing::span::Id, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        if let Some(fields) = self.open.lock().expect("spans").remove(&id.into_u64()) {
            self.closed.lock().expect("spans").push(fields);
        }
    }
}

impl CallSpans {
    /// The closed root span of one execution.
    fn of(&self, execution_id: &str) -> BTreeMap<String, String> {
        self.closed
            .lock()
            .expect("spans")
            .iter()
            .find(|f| f.get("capgate.execution_id").map(String::as_str) == Some(execution_id))
            .cloned()
            .unwrap_or_else(|| panic!("no closed agent.capability_call span for {execution_id}"))
    }
}

#[tokio::test]
async fn the_call_span_is_ok_when_suspended_and_error_when_failed_or_cancelled() {
    use tracing_subscriber::layer::SubscriberExt;
    let spans = CallSpans::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));

    let c = Counter::default();
    let denies = policy_sync("closedOrder", |req| {
        Ok(match req.input.and_then(|i| i["orderId"].as_str()) {
            Some("ord_closed") => PolicyDecision::deny("closed"),
            _ => PolicyDecision::allow(),
        })
    });
    let rt = runtime_with(
        vec![
            refund_def(&c).policy(denies),
            gated_at_stage_9_as("orders.recheck", &c),
            lookup(&c),
        ],
        Arc::new(MemorySink::new()),
    );
    // tracing caches each callsite's interest process-wide, computed on the thread that
    // reaches it first: a sibling test without a subscriber that registers the root span's
    // callsite while this one installs its scoped subscriber pins it to "never". Reach the
    // callsites from this thread, then have every callsite re-asked against this subscriber.
    rt.invoke(call("orders.lookup", json!({}))).await;
    rt.resume("apr_warm", ResumeOptions::default()).await;
    tracing::callsite::rebuild_interest_cache();
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let cases = [
        (
            "approval-required at stage 8",
            call("orders.refund", big_refund()),
            "OK",
            "approval-required",
            None,
        ),
        (
            "approval-required at stage 9",
            call("orders.recheck", small_refund()),
            "OK",
            "approval-required",
            None,
        ),
        (
            "completed",
            call("orders.refund", small_refund()),
            "OK",
            "completed",
            None,
        ),
        (
            "denied",
            call(
                "orders.refund",
                json!({"orderId": "ord_closed", "amount": 20}),
            ),
            "ERROR",
            "denied",
            Some("POLICY_DENIED"),
        ),
        (
            "failed",
            call("orders.refund", json!({"amount": -1})),
            "ERROR",
            "failed",
            Some("INPUT_INVALID"),
        ),
        (
            "cancelled",
            call("orders.lookup", json!({})).cancel(cancelled),
            "ERROR",
            "cancelled",
            Some("CANCELLED"),
        ),
    ];
    for (what, request, status, outcome, error_code) in cases {
        let r = rt.invoke(request).await;
        let span = spans.of(r.execution_id());
        assert_eq!(
            span.get("otel.status_code").map(String::as_str),
            Some(status),
            "{what}: {span:?}"
        );
        assert_eq!(
            span.get("capgate.outcome").map(String::as_str),
            Some(outcome),
            "{what}: {span:?}"
        );
        assert_eq!(
            span.get("capgate.error_code").map(String::as_str),
            error_code,
            "{what}: {span:?}"
        );
    }

    // A refused resume ends its own root span with an error too.
    let r = rt.resume("apr_nope", ResumeOptions::default()).await;
    let span = spans.of(r.execution_id());
    assert_eq!(
        span.get("otel.status_code").map(String::as_str),
        Some("ERROR"),
        "{span:?}"
    );
    assert_eq!(
        span.get("capgate.error_code").map(String::as_str),
        Some("INTERNAL_ERROR")
    );
}

/// Issue 55: a call whose every attempt failed in a way that shows it had no effect (a
/// defined error the procedure answered, an adapter that sent nothing) ends with its effect
/// known, so a gateway settles its receipt as failed; an internal failure of an entered
/// procedure still leaves the effect unknown.
#[tokio::test]
async fn a_failure_that_shows_no_effect_leaves_the_effect_known() {
    for (error, unknown) in [
        (
            ProcedureError::defined("ORDER_NOT_FOUND", "No such order."),
            false,
        ),
        (ProcedureError::not_sent("connection refused"), false),
        (
            ProcedureError::internal("the upstream hung up mid-answer"),
            true,
        ),
    ] {
        let sink = Arc::new(MemorySink::new());
        let failing = error.to_string();
        let def = CapabilityDef::new(
            "orders.refund",
            CapabilityMeta::new("refund", SideEffect::Write, Risk::High)
                .exposed_on([Surface::AiSdk]),
        )
        .procedure(handler(move |_call| {
            let error = match &error {
                ProcedureError::Defined { code, message, .. } => {
                    ProcedureError::defined(code.clone(), message.clone())
                }
                ProcedureError::NotSent(m) => ProcedureError::not_sent(m.clone()),
                other => ProcedureError::internal(other.to_string()),
            };
            async move { Err::<serde_json::Value, _>(error) }
        }));
        let rt = runtime_with(vec![def], sink.clone());
        let r = rt.invoke(call("orders.refund", json!({}))).await;
        assert_eq!(r.status(), "failed", "{failing}: {r:?}");
        assert_eq!(r.effect_unknown(), unknown, "{failing}");
        assert_eq!(
            data_of(&sink, "capability.failed")["attempts"],
            1,
            "{failing}"
        );
    }
}
