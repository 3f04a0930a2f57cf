//! Stage-by-stage behaviour of `Runtime::invoke`, named after what each test pins.

use crate::common;

use capgate_core::prelude::*;
use common::*;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// SI-1 (deny by default: an unexposed capability is unreachable) and SI-8.
#[tokio::test]
async fn si8_unexposed_is_indistinguishable_from_unknown() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let internal = CapabilityDef::new(
        "orders.internalAdjust",
        CapabilityMeta::new("Internal", SideEffect::Write, Risk::High)
            .exposed_on([Surface::Direct]),
    )
    .input_schema(refund_schema())
    .procedure(c.procedure());
    let rt = runtime_with(vec![internal], sink.clone());

    // Invalid input on an unexposed capability: concealment beats validation (stage 4 < 5).
    let unexposed = rt
        .invoke(call(
            "orders.internalAdjust",
            json!({"amount": "not a number"}),
        ))
        .await;
    let unknown = rt.invoke(call("orders.nope", json!({}))).await;

    let a = serde_json::to_value(unexposed.error().unwrap()).unwrap();
    let b = serde_json::to_value(unknown.error().unwrap()).unwrap();
    assert_eq!(a, b, "unexposed and unknown must serialize identically");
    assert_eq!(
        a,
        json!({"code": "CAPABILITY_NOT_FOUND", "message": "Capability not found.", "retryable": false})
    );

    let denied: Vec<_> = sink
        .events()
        .into_iter()
        .filter(|e| e.type_name() == "capability.denied")
        .map(|e| serde_json::to_value(&e).unwrap()["data"]["reason"].clone())
        .collect();
    assert_eq!(denied, vec![json!("not-exposed"), json!("unknown")]);
    assert_eq!(c.get(), 0);
}

#[tokio::test]
async fn si8_hidden_is_indistinguishable_from_unknown() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .policy(policy_sync("hideFromContractors", |_| {
            Ok(PolicyDecision::hide())
        }))
        .procedure(c.procedure());
    let rt = runtime_with(vec![def], sink.clone());
    let hidden = rt
        .invoke(call("orders.refund", json!({"orderId": "o", "amount": 5})))
        .await;
    let unknown = rt.invoke(call("orders.nope", json!({}))).await;
    assert_eq!(
        serde_json::to_value(&hidden).unwrap()["error"],
        serde_json::to_value(&unknown).unwrap()["error"]
    );
    assert_eq!(data_of(&sink, "capability.denied")["reason"], "hidden");
    assert_eq!(c.get(), 0);
}

#[tokio::test]
async fn input_validation_runs_before_the_actor_check() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], sink.clone());
    let mut req = call("orders.refund", json!({"orderId": "o", "amount": -1}));
    req.actor = None;
    let r = rt.invoke(req).await;
    assert_eq!(code(&r), Some(ErrorCode::InputInvalid));
    let wire = serde_json::to_value(r.error().unwrap()).unwrap();
    assert_eq!(wire["details"]["issues"][0]["path"], "/amount");

    let mut req = call("orders.refund", json!({"orderId": "o", "amount": 1}));
    req.actor = None;
    let r = rt.invoke(req).await;
    assert_eq!(code(&r), Some(ErrorCode::Unauthenticated));
    assert_eq!(c.get(), 0);
}

/// SI-9 (validation details never echo the input).
#[tokio::test]
async fn input_invalid_details_never_echo_values() {
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], Arc::new(MemorySink::new()));
    let r = rt
        .invoke(call(
            "orders.refund",
            json!({"orderId": "o", "amount": "4111111111111111"}),
        ))
        .await;
    let wire = serde_json::to_string(r.error().unwrap()).unwrap();
    assert!(!wire.contains("4111111111111111"), "{wire}");
}

#[tokio::test]
async fn si6_policies_receive_the_validated_value_with_defaults_applied() {
    let seen = Arc::new(Mutex::new(None));
    let s2 = seen.clone();
    let c = Counter::default();
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .policy(policy_sync("spy", move |req| {
            *s2.lock().unwrap() = req.input.cloned();
            Ok(PolicyDecision::allow())
        }))
        .procedure(c.procedure());
    let rt = runtime_with(vec![def], Arc::new(MemorySink::new()));
    let r = rt
        .invoke(call("orders.refund", json!({"orderId": "o", "amount": 5})))
        .await;
    assert_eq!(r.status(), "completed");
    assert_eq!(
        seen.lock().unwrap().clone().unwrap(),
        json!({"orderId": "o", "amount": 5, "currency": "USD"})
    );
}

fn counting(name: &'static str, d: PolicyDecision, n: Arc<AtomicUsize>) -> impl Policy {
    policy_sync(name, move |_| {
        n.fetch_add(1, Ordering::SeqCst);
        Ok(d.clone())
    })
}

#[tokio::test]
async fn every_policy_is_evaluated_after_a_deny() {
    let sink = Arc::new(MemorySink::new());
    let n = Arc::new(AtomicUsize::new(0));
    let c = Counter::default();
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .policy(counting(
            "first",
            PolicyDecision::deny("Refunds are frozen."),
            n.clone(),
        ))
        .policy(counting("second", PolicyDecision::allow(), n.clone()))
        .policy(counting("third", PolicyDecision::hide(), n.clone()))
        .procedure(c.procedure());
    let rt = Runtime::builder(Registry::builder().capability(def).build().unwrap())
        .policy(counting("runtimeLevel", PolicyDecision::allow(), n.clone()))
        .audit_sink(sink.clone())
        .build()
        .expect("a valid runtime");
    let r = rt
        .invoke(call("orders.refund", json!({"orderId": "o", "amount": 5})))
        .await;
    assert_eq!(n.load(Ordering::SeqCst), 4);
    assert_eq!(code(&r), Some(ErrorCode::PolicyDenied));
    assert_eq!(r.error().unwrap().public_message(), "Refunds are frozen.");
    let data = data_of(&sink, "capability.denied");
    assert_eq!(data["reason"], "policy-denied");
    assert_eq!(
        data["policyDecisions"],
        json!([
            {"policy": "runtimeLevel", "type": "allow"},
            {"policy": "first", "type": "deny"},
            {"policy": "second", "type": "allow"},
            {"policy": "third", "type": "hide"}
        ])
    );
}

async fn verdict_of(decisions: Vec<PolicyDecision>) -> ExecutionResult {
    let c = Counter::default();
    let mut def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .procedure(c.procedure());
    for (i, d) in decisions.into_iter().enumerate() {
        def = def.policy(policy_sync(format!("p{i}"), move |_| Ok(d.clone())));
    }
    let rt = runtime_with(vec![def], Arc::new(MemorySink::new()));
    rt.invoke(call("orders.refund", json!({"orderId": "o", "amount": 5})))
        .await
}

#[tokio::test]
async fn precedence_is_deny_then_hide_then_approval_then_allow() {
    use PolicyDecision as D;
    let ra = || D::require_approval("needs a look");
    let r = verdict_of(vec![ra(), D::hide(), D::deny("no"), D::allow()]).await;
    assert_eq!(code(&r), Some(ErrorCode::PolicyDenied));
    let r = verdict_of(vec![ra(), D::hide(), D::allow()]).await;
    assert_eq!(code(&r), Some(ErrorCode::CapabilityNotFound));
    let r = verdict_of(vec![D::allow(), ra()]).await;
    assert_eq!(r.status(), "approval-required");
    let r = verdict_of(vec![D::allow(), D::allow()]).await;
    assert_eq!(r.status(), "completed");
}

#[tokio::test]
async fn approval_requirements_merge_reasons_distinct_types_and_minimum_expiry() {
    let rq = |reason: &str, ty: &str, exp: Option<u64>| PolicyDecision::RequireApproval {
        reason: reason.into(),
        approval_type: Some(ty.into()),
        expires_in_ms: exp,
    };
    let r = verdict_of(vec![
        rq("amount", "manager", Some(60_000)),
        rq("new customer", "manager", Some(30_000)),
        rq("region", "compliance", None),
    ])
    .await;
    let a = r.approval().expect("approval-required");
    assert_eq!(a.reasons, vec!["amount", "new customer", "region"]);
    assert_eq!(a.types, vec!["manager", "compliance"]);
    assert_eq!((a.expires_at - a.requested_at).num_milliseconds(), 30_000);
}

async fn policy_failure(p: impl Policy) -> (ExecutionResult, Arc<MemorySink>, Counter) {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .policy(policy_sync("fine", |_| Ok(PolicyDecision::allow())))
        .policy(p)
        .procedure(c.procedure());
    let rt = Runtime::builder(Registry::builder().capability(def).build().unwrap())
        .audit_sink(sink.clone())
        .defaults(capgate_core::runtime::Defaults {
            policy_timeout_ms: 50,
            ..Default::default()
        })
        .build()
        .expect("a valid runtime");
    let r = rt
        .invoke(call("orders.refund", json!({"orderId": "o", "amount": 5})))
        .await;
    (r, sink, c)
}

fn assert_failed_closed(r: &ExecutionResult, sink: &MemorySink, c: &Counter) {
    assert_eq!(code(r), Some(ErrorCode::PolicyFailed));
    assert_eq!(
        serde_json::to_value(r.error().unwrap()).unwrap(),
        json!({"code": "INTERNAL_ERROR", "message": "The operation failed.", "retryable": false}),
        "POLICY_FAILED is not exposed to models"
    );
    let data = data_of(sink, "capability.denied");
    assert_eq!(data["reason"], "policy-failed");
    assert_eq!(
        data["policyDecisions"][0],
        json!({"policy": "fine", "type": "allow"})
    );
    assert_eq!(data["policyDecisions"][1]["type"], "error");
    assert_eq!(c.get(), 0);
}

#[tokio::test]
async fn si7_a_panicking_policy_fails_closed() {
    let (r, sink, c) = policy_failure(policy_sync("boom", |_| panic!("policy bug"))).await;
    assert_failed_closed(&r, &sink, &c);
}

#[tokio::test]
async fn si7_a_policy_hanging_past_the_deadline_fails_closed() {
    let p = policy_fn("hangs", |_| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(PolicyDecision::allow())
        })
    });
    let started = std::time::Instant::now();
    let (r, sink, c) = policy_failure(p).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_failed_closed(&r, &sink, &c);
}

#[tokio::test]
async fn si7_a_policy_returning_garbage_fails_closed() {
    let p = policy_sync("garbage", |_| Ok(PolicyDecision::require_approval("   ")));
    let (r, sink, c) = policy_failure(p).await;
    assert_failed_closed(&r, &sink, &c);
}

#[tokio::test]
async fn si7_a_policy_error_fails_closed() {
    let p = policy_sync("errs", |_| Err(PolicyError::Failed("db down".into())));
    let (r, sink, c) = policy_failure(p).await;
    assert_failed_closed(&r, &sink, &c);
    assert!(!serde_json::to_string(&r).unwrap().contains("db down"));
}

/// SI-12 (bounded execution: the composed timeout ends the run with one envelope).
#[tokio::test]
async fn timeout_returns_the_cancelled_envelope() {
    let sink = Arc::new(MemorySink::new());
    let def = CapabilityDef::new(
        "orders.slow",
        CapabilityMeta::new("slow", SideEffect::Read, Risk::Low)
            .exposed_on([Surface::AiSdk])
            .with_timeout_ms(30),
    )
    .procedure(handler(|call| async move {
        call.cancel.cancelled().await; // a cooperative handler sees the abort
        Ok(json!({"late": true}))
    }));
    let rt = runtime_with(vec![def], sink.clone());
    let r = rt.invoke(call("orders.slow", json!({}))).await;
    assert_eq!(r.status(), "cancelled");
    assert_eq!(code(&r), Some(ErrorCode::Timeout));
    assert!(r.error().unwrap().retryable());
    assert!(r.effect_unknown());
    assert_eq!(data_of(&sink, "capability.cancelled")["code"], "TIMEOUT");
}

/// SI-12 (bounded execution: the caller's cancellation ends the run with one envelope).
#[tokio::test]
async fn caller_cancellation_returns_cancelled() {
    let sink = Arc::new(MemorySink::new());
    let def = CapabilityDef::new(
        "orders.slow",
        CapabilityMeta::new("slow", SideEffect::Read, Risk::Low).exposed_on([Surface::AiSdk]),
    )
    .procedure(handler(|_call| async move {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(json!({}))
    }));
    let rt = runtime_with(vec![def], sink.clone());
    let token = CancellationToken::new();
    let t2 = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        t2.cancel();
    });
    let r = rt
        .invoke(call("orders.slow", json!({})).cancel(token))
        .await;
    assert_eq!(r.status(), "cancelled");
    assert_eq!(code(&r), Some(ErrorCode::Cancelled));
    assert_eq!(data_of(&sink, "capability.cancelled")["code"], "CANCELLED");
}

fn flaky(fails: usize, n: Arc<AtomicUsize>) -> impl Procedure {
    handler(move |_call| {
        let n = n.clone();
        async move {
            let k = n.fetch_add(1, Ordering::SeqCst);
            if k < fails {
                Err(ProcedureError::Defined {
                    code: "UPSTREAM_BUSY".into(),
                    message: "Try again.".into(),
                    data: None,
                    retryable: true,
                })
            } else {
                Ok(json!({"ok": true}))
            }
        }
    })
}

#[tokio::test]
async fn si11_a_read_is_retried_with_capability_retried() {
    let sink = Arc::new(MemorySink::new());
    let n = Arc::new(AtomicUsize::new(0));
    let def = CapabilityDef::new(
        "customers.search",
        CapabilityMeta::new("search", SideEffect::Read, Risk::Low)
            .exposed_on([Surface::AiSdk])
            .with_retry(RetryConfig {
                max_attempts: 3,
                backoff_ms: Some(1),
                retry_on: None,
            }),
    )
    .procedure(flaky(2, n.clone()));
    let rt = runtime_with(vec![def], sink.clone());
    let r = rt.invoke(call("customers.search", json!({}))).await;
    assert_eq!(r.status(), "completed");
    assert_eq!(n.load(Ordering::SeqCst), 3);
    let exe = r.execution_id().to_string();
    let types: Vec<_> = sink
        .for_execution(&exe)
        .iter()
        .map(|e| e.type_name())
        .collect();
    assert_eq!(
        types,
        [
            "capability.requested",
            "capability.started",
            "capability.retried",
            "capability.retried",
            "capability.completed"
        ]
    );
    assert_eq!(
        data_of(&sink, "capability.retried"),
        json!({"attempt": 2, "previousErrorCode": "EXECUTION_FAILED"})
    );
    assert_eq!(data_of(&sink, "capability.completed")["attempts"], 3);
}

#[tokio::test]
async fn si11_a_write_is_never_auto_retried() {
    // A retry config on a non-idempotent write is refused at registry build ...
    let refused = Registry::builder()
        .capability(
            CapabilityDef::new(
                "orders.refund",
                refund_meta().with_retry(RetryConfig {
                    max_attempts: 3,
                    backoff_ms: None,
                    retry_on: None,
                }),
            )
            .procedure(Counter::default().procedure()),
        )
        .build();
    assert!(refused.is_err());
    // ... and a write that fails retryably runs exactly once.
    let sink = Arc::new(MemorySink::new());
    let n = Arc::new(AtomicUsize::new(0));
    let def = CapabilityDef::new("orders.refund", refund_meta()).procedure(flaky(5, n.clone()));
    let rt = runtime_with(vec![def], sink.clone());
    let r = rt.invoke(call("orders.refund", json!({}))).await;
    assert_eq!(code(&r), Some(ErrorCode::ExecutionFailed));
    assert!(r.error().unwrap().retryable());
    assert_eq!(n.load(Ordering::SeqCst), 1);
    assert!(!sink.types().contains(&"capability.retried"));
}

#[tokio::test]
async fn output_invalid_withholds_the_output() {
    let sink = Arc::new(MemorySink::new());
    let def = CapabilityDef::new(
        "orders.get",
        CapabilityMeta::new("get", SideEffect::Read, Risk::Low).exposed_on([Surface::AiSdk]),
    )
    .output_schema(json!({"type": "object", "required": ["status"]}))
    .procedure(handler(|_| async {
        Ok(json!({"secret": "internal-row-42"}))
    }));
    let rt = runtime_with(vec![def], sink.clone());
    let r = rt.invoke(call("orders.get", json!({}))).await;
    assert_eq!(code(&r), Some(ErrorCode::OutputInvalid));
    let wire = serde_json::to_string(&r).unwrap();
    assert!(!wire.contains("internal-row-42"));
    assert_eq!(
        data_of(&sink, "capability.failed")["executedBeforeFailure"],
        true
    );
}

#[tokio::test]
async fn si10_redaction_applies_before_the_envelope_and_payloads_never_reach_events() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .redactor(redactor_fn("stripGatewayRef", |mut v| {
            if let Some(o) = v.as_object_mut() {
                o.remove("gatewayRef");
            }
            Ok(v)
        }))
        .procedure(c.procedure());
    let rt = runtime_with(vec![def], sink.clone());
    let r = rt
        .invoke(call(
            "orders.refund",
            json!({"orderId": "ord_secret_input", "amount": 5}),
        ))
        .await;
    let out = r.output().expect("completed");
    assert!(out.get("gatewayRef").is_none());
    let events = serde_json::to_string(&sink.events()).unwrap();
    assert!(!events.contains("gw_secret_123"));
    assert!(!events.contains("ord_secret_input"));
    assert!(events.contains("inputHash"));
}

#[tokio::test]
async fn a_failing_redactor_withholds_the_output() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .redactor(redactor_fn("broken", |_| {
            Err(RedactError::refused("bad path"))
        }))
        .procedure(c.procedure());
    let rt = runtime_with(vec![def], sink.clone());
    let r = rt
        .invoke(call("orders.refund", json!({"orderId": "o", "amount": 5})))
        .await;
    assert_eq!(r.status(), "failed");
    assert!(!serde_json::to_string(&r).unwrap().contains("gw_secret_123"));
    assert_eq!(
        data_of(&sink, "capability.failed")["executedBeforeFailure"],
        true
    );
}

struct FailingSink;
#[async_trait::async_trait]
impl AuditSink for FailingSink {
    fn name(&self) -> &str {
        "failing"
    }
    async fn emit(&self, _e: &AuditEvent) -> Result<(), capgate_core::audit::AuditSinkError> {
        Err(capgate_core::audit::AuditSinkError {
            sink: "failing".into(),
            message: "disk full".into(),
        })
    }
}

#[tokio::test]
async fn strict_audit_sink_failure_is_audit_unavailable_and_the_procedure_never_runs() {
    let c = Counter::default();
    let def = CapabilityDef::new("orders.refund", refund_meta()).procedure(c.procedure());
    let rt = Runtime::builder(Registry::builder().capability(def).build().unwrap())
        .audit_sink(Arc::new(FailingSink))
        .strict_audit(true)
        .build()
        .expect("a valid runtime");
    let r = rt
        .invoke(call("orders.refund", json!({"orderId": "o", "amount": 5})))
        .await;
    assert_eq!(code(&r), Some(ErrorCode::AuditUnavailable));
    assert_eq!(c.get(), 0);
}

#[tokio::test]
async fn best_effort_audit_keeps_serving_and_counts_lost_events() {
    let c = Counter::default();
    let def = CapabilityDef::new("orders.refund", refund_meta()).procedure(c.procedure());
    let errors = Arc::new(AtomicUsize::new(0));
    let e2 = errors.clone();
    let rt = Runtime::builder(Registry::builder().capability(def).build().unwrap())
        .audit(capgate_core::audit::AuditConfig {
            sinks: vec![Arc::new(FailingSink)],
            strict: false,
            verbose: false,
            on_sink_error: Some(Arc::new(move |_, _| {
                e2.fetch_add(1, Ordering::SeqCst);
            })),
        })
        .build()
        .expect("a valid runtime");
    let r = rt
        .invoke(call("orders.refund", json!({"orderId": "o", "amount": 5})))
        .await;
    assert_eq!(r.status(), "completed");
    assert_eq!(c.get(), 1);
    assert_eq!(rt.lost_audit_events(), 3); // requested, started, completed
    assert_eq!(errors.load(Ordering::SeqCst), 3);
}

/// SI-9 (internal details never reach models).
#[tokio::test]
async fn procedure_error_mapping_keeps_internals_from_models() {
    let cases: Vec<(ProcedureError, serde_json::Value)> = vec![
        (
            ProcedureError::defined("NOT_REFUNDABLE", "Order ord_42 was already refunded."),
            json!({"code": "EXECUTION_FAILED", "message": "Order ord_42 was already refunded.", "retryable": false}),
        ),
        (
            ProcedureError::Unauthorized("session expired at 12:00".into()),
            json!({"code": "UNAUTHENTICATED", "message": "Authentication is required.", "retryable": false}),
        ),
        (
            ProcedureError::Forbidden("missing orders:refund".into()),
            json!({"code": "FORBIDDEN", "message": "The operation is forbidden.", "retryable": false}),
        ),
        (
            ProcedureError::internal("SQLSTATE 23505 at refunds_pkey"),
            json!({"code": "INTERNAL_ERROR", "message": "The operation failed.", "retryable": false}),
        ),
    ];
    for (err, wire) in cases {
        let e2 = err.clone();
        let def =
            CapabilityDef::new("orders.refund", refund_meta()).procedure(handler(move |_| {
                let e = e2.clone();
                async move { Err(e) }
            }));
        let rt = runtime_with(vec![def], Arc::new(MemorySink::new()));
        let r = rt.invoke(call("orders.refund", json!({}))).await;
        assert_eq!(
            serde_json::to_value(r.error().unwrap()).unwrap(),
            wire,
            "{err:?}"
        );
    }
}

/// SI-9 (a panic is a hidden execution failure).
#[tokio::test]
async fn a_panicking_procedure_is_a_hidden_execution_failure() {
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .procedure(handler(|_| async { panic!("handler bug with secret 42") }));
    let rt = runtime_with(vec![def], Arc::new(MemorySink::new()));
    let r = rt.invoke(call("orders.refund", json!({}))).await;
    assert_eq!(code(&r), Some(ErrorCode::ExecutionFailed));
    assert!(!serde_json::to_string(&r).unwrap().contains("secret"));
}

#[tokio::test]
async fn middleware_runs_in_order_extends_context_and_can_reject() {
    let order = Arc::new(Mutex::new(Vec::new()));
    let (o1, o2) = (order.clone(), order.clone());
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .middleware(middleware(move |mut call, next| {
            let o1 = o1.clone();
            Box::pin(async move {
                o1.lock().unwrap().push("auth");
                call.context["orgId"] = json!("org_1");
                next.run(call).await
            })
        }))
        .middleware(middleware(move |call, next| {
            let o2 = o2.clone();
            Box::pin(async move {
                o2.lock().unwrap().push("permission");
                let perms = &call.agent.actor.attributes["permissions"];
                if !perms
                    .as_array()
                    .is_some_and(|p| p.iter().any(|x| x == "orders:refund"))
                {
                    return Err(ProcedureError::Forbidden("missing orders:refund".into()));
                }
                next.run(call).await
            })
        }))
        .procedure(handler(|call| async move {
            Ok(json!({"org": call.context["orgId"]}))
        }));
    let rt = runtime_with(vec![def], Arc::new(MemorySink::new()));
    let r = rt
        .invoke(call("orders.refund", json!({})).context(json!({})))
        .await;
    assert_eq!(r.output(), Some(&json!({"org": "org_1"})));
    assert_eq!(*order.lock().unwrap(), vec!["auth", "permission"]);

    let mut req = call("orders.refund", json!({})).context(json!({}));
    req.actor = Some(Actor::user("u_eve", json!({"permissions": []})));
    let r = rt.invoke(req).await;
    assert_eq!(code(&r), Some(ErrorCode::Forbidden));
}

/// SI-12 (exactly one envelope and one terminal event per run).
#[tokio::test]
async fn every_run_yields_exactly_one_terminal_event() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], sink.clone());
    let inputs = [
        json!({"orderId": "o", "amount": 5}),
        json!({"orderId": "o", "amount": 900}),
        json!({"orderId": "o"}),
    ];
    for input in inputs {
        let r = rt.invoke(call("orders.refund", input)).await;
        let terminal: Vec<_> = sink
            .for_execution(r.execution_id())
            .into_iter()
            .filter(|e| {
                matches!(
                    e.type_name(),
                    "capability.completed"
                        | "capability.failed"
                        | "capability.denied"
                        | "capability.cancelled"
                        | "capability.approval_requested"
                )
            })
            .collect();
        assert_eq!(terminal.len(), 1, "{:?}", sink.types());
    }
}

#[tokio::test]
async fn the_policies_of_one_batch_share_one_serialization_of_the_request() {
    // Sandboxed policies take input, context and attributes as JSON text; a batch serializes
    // each once, and every policy of it reads the same text.
    let seen: Arc<Mutex<Vec<(usize, String)>>> = Arc::default();
    let recorder = |name: &'static str, seen: Arc<Mutex<Vec<(usize, String)>>>| {
        policy_sync(name, move |req| {
            let input = req.input_json().expect("an invocation has input");
            let parsed: Value = serde_json::from_str(input).unwrap();
            assert_eq!(Some(&parsed), req.input, "the text is the validated input");
            seen.lock()
                .unwrap()
                .push((input.as_ptr() as usize, input.to_owned()));
            assert_eq!(req.context_json(), req.context.to_string());
            assert_eq!(req.attributes_json(), req.actor.attributes.to_string());
            Ok(PolicyDecision::Allow)
        })
    };
    let c = Counter::default();
    let def = refund_def(&c)
        .policy(recorder("first", seen.clone()))
        .policy(recorder("second", seen.clone()));
    let rt = runtime_with(vec![def], Arc::new(MemorySink::new()));
    let r = rt
        .invoke(call("orders.refund", json!({"orderId": "o", "amount": 5})))
        .await;
    assert_eq!(r.status(), "completed", "{r:?}");

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "both policies ran once");
    assert_eq!(
        seen[0].0, seen[1].0,
        "one serialization, shared by the batch"
    );
    assert_eq!(seen[0].1, seen[1].1);
}

/// Issue 55: a call an adapter conceals (`Runtime::conceal`: an authorizer's refusal of a
/// capability the caller cannot learn exists) is on record like any other call of that
/// capability, `capability.requested` with its side effect and risk, and answered as an
/// unknown id; an unknown id's record has neither.
#[tokio::test]
async fn a_concealed_call_of_a_known_capability_records_its_side_effect_and_risk() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with(vec![refund_def(&c)], sink.clone());
    let concealed = rt
        .conceal(call("orders.refund", json!({"orderId": "o", "amount": 5})))
        .await;
    assert_eq!(code(&concealed), Some(ErrorCode::CapabilityNotFound));
    let requested = data_of(&sink, "capability.requested");
    assert_eq!(requested["sideEffect"], "write", "{requested}");
    assert_eq!(requested["risk"], "high", "{requested}");
    let sink2 = Arc::new(MemorySink::new());
    let rt2 = runtime_with(vec![refund_def(&c)], sink2.clone());
    let _ = rt2.conceal(call("orders.nope", json!({}))).await;
    let unknown = data_of(&sink2, "capability.requested");
    assert!(unknown.get("sideEffect").is_none(), "{unknown}");
    assert_eq!(c.get(), 0);
}
