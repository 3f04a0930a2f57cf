//! Every hostile plugin fails closed with the right code and audit reason, driven through
//! core's real `Runtime`; after each, a good plugin still answers.

use crate::common;

use capgate_core::prelude::*;
use capgate_wasm::{Binding, CallError, Isolation, Limits, ReserveOptions};
use common::*;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Invoke through core with a hostile policy; assert POLICY_FAILED + `policy-failed` and that
/// nothing executed. Returns core's private reason.
async fn fails_closed(policy: impl Policy) -> String {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with_policy(policy, &c, sink.clone());
    let r = rt.invoke(refund(20)).await;
    assert_eq!(code(&r), Some(ErrorCode::PolicyFailed), "{r:?}");
    assert_eq!(
        data_of(&sink, "capability.denied")["reason"],
        "policy-failed"
    );
    assert_eq!(c.get(), 0, "the procedure must not run");
    failure_reason(&r)
}

fn hostile(name: &str, limits: Limits) -> capgate_wasm::WasmPolicy {
    load(name)
        .policy(Binding::new(name).limits(limits))
        .unwrap_or_else(|e| panic!("bind {name}: {e}"))
}

#[tokio::test]
async fn infinite_loop_is_stopped_by_the_deadline() {
    let limits = Limits::default()
        .with_fuel(None)
        .with_timeout(Duration::from_millis(50));
    let started = Instant::now();
    let reason = fails_closed(hostile("hostile_infinite_loop", limits)).await;
    assert!(reason.contains("timed out"), "{reason}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    good_plugin_still_works().await;
}

#[tokio::test]
async fn infinite_loop_is_stopped_by_fuel() {
    let limits = Limits::default()
        .with_fuel(Some(2_000_000))
        .with_timeout(Duration::from_secs(30));
    let reason = fails_closed(hostile("hostile_infinite_loop", limits)).await;
    assert!(reason.contains("fuel exhausted"), "{reason}");
    good_plugin_still_works().await;
}

#[tokio::test]
async fn memory_bomb_is_stopped_by_the_memory_cap() {
    let limits = Limits::default().with_memory_bytes(16 << 20);
    let reason = fails_closed(hostile("hostile_memory_bomb", limits)).await;
    assert!(
        reason.contains("memory cap of 16777216 bytes exceeded"),
        "{reason}"
    );
    good_plugin_still_works().await;
}

#[tokio::test]
async fn stack_overflow_fails_closed() {
    let reason = fails_closed(hostile("hostile_stack_overflow", Limits::default())).await;
    assert!(
        reason.contains("stack overflow") || reason.contains("out of bounds"),
        "{reason}"
    );
    good_plugin_still_works().await;
}

#[tokio::test]
async fn panic_fails_closed_and_keeps_the_panic_message_private() {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with_policy(
        hostile("hostile_panic", Limits::default()),
        &c,
        sink.clone(),
    );
    let r = rt.invoke(refund(20)).await;
    assert_eq!(code(&r), Some(ErrorCode::PolicyFailed));
    let reason = failure_reason(&r);
    assert!(
        reason.contains("hostile plugin panicked on purpose"),
        "{reason}"
    );
    let public = serde_json::to_string(&r).expect("envelope");
    assert!(!public.contains("on purpose"), "the cause leaked: {public}");
    good_plugin_still_works().await;
}

#[tokio::test]
async fn invalid_decisions_fail_closed() {
    for mode in ["empty-reason", "zero-expiry", "long-deny"] {
        let policy = load("hostile_invalid_decision")
            .policy(Binding::new("liar").config(json!({ "mode": mode })))
            .expect("bind");
        let reason = fails_closed(policy).await;
        assert!(reason.contains("invalid decision"), "{mode}: {reason}");
    }
    good_plugin_still_works().await;
}

#[tokio::test]
async fn slow_but_in_budget_plugin_is_not_stopped() {
    let policy = load("hostile_slow")
        .policy(
            Binding::new("slow")
                .config(json!({"iterations": 3_000_000}))
                .limits(
                    Limits::default()
                        .with_fuel(None)
                        .with_timeout(Duration::from_secs(5)),
                ),
        )
        .expect("bind");
    let c = Counter::default();
    let rt = runtime_with_policy(policy, &c, Arc::new(MemorySink::new()));
    let r = rt.invoke(refund(20)).await;
    assert_eq!(r.status(), "completed", "{r:?}");
}

async fn redacted_with(config: serde_json::Value) -> (ExecutionResult, Arc<MemorySink>, Counter) {
    let redactor = load("hostile_huge_output")
        .redactor(Binding::new("huge").config(config))
        .expect("bind");
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .redactor(redactor)
        .procedure(c.procedure());
    let rt = Runtime::builder(
        Registry::builder()
            .capability(def)
            .build()
            .expect("registry"),
    )
    .audit_sink(sink.clone())
    .build()
    .expect("a valid runtime");
    (rt.invoke(refund(20)).await, sink, c)
}

#[tokio::test]
async fn oversized_redactor_output_is_withheld() {
    let (r, sink, c) = redacted_with(json!({"mode": "huge", "bytes": 4 << 20})).await;
    assert_eq!(r.status(), "failed", "{r:?}");
    assert!(r.output().is_none());
    assert_eq!(c.get(), 1);
    let failed = data_of(&sink, "capability.failed");
    assert_eq!(failed["executedBeforeFailure"], true, "{failed}");
    let public = serde_json::to_string(&r).expect("envelope");
    assert!(!public.contains("gw_secret_123"), "{public}");
}

#[tokio::test]
async fn redactor_output_that_is_not_json_is_withheld() {
    let (r, sink, _) = redacted_with(json!({"mode": "not-json"})).await;
    assert_eq!(r.status(), "failed", "{r:?}");
    assert_eq!(
        data_of(&sink, "capability.failed")["executedBeforeFailure"],
        true
    );
}

fn counter_request_calls(policy: &capgate_wasm::WasmPolicy, n: usize) -> Vec<String> {
    let ask = RefundAsk::by_dana();
    let input = json!({"amount": 1});
    let shared = SharedJson::default();
    let req = ask.request(Some(&input), "exe_1", &shared);
    (0..n)
        .map(
            |_| match futures::executor::block_on(policy.evaluate_raw(&req, None)) {
                Ok(PolicyDecision::Deny { code: Some(c), .. }) => c,
                other => panic!("unexpected {other:?}"),
            },
        )
        .collect()
}

#[test]
fn counter_sees_one_on_every_call_in_fresh_mode() {
    let policy = load("hostile_counter")
        .policy(Binding::new("counter"))
        .expect("bind");
    let seen = counter_request_calls(&policy, 25);
    assert!(seen.iter().all(|c| c == "calls=1"), "{seen:?}");
    assert_eq!(policy.idle_instances(), 0);
}

/// The reserve serves fresh calls with ready, never-called instances: each still sees a
/// first call, and with the reserve off every call instantiates inline (a miss).
#[test]
fn fresh_calls_take_never_used_instances_from_the_reserve() {
    let policy = load("hostile_counter")
        .policy(Binding::new("counter").reserve(ReserveOptions::of(3)))
        .expect("bind");
    let filled = Instant::now();
    while policy.reserve_stats().ready < 3 {
        assert!(
            filled.elapsed() < Duration::from_secs(30),
            "the reserve was never filled: {:?}",
            policy.reserve_stats()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let seen = counter_request_calls(&policy, 10);
    assert!(seen.iter().all(|c| c == "calls=1"), "{seen:?}");
    let stats = policy.reserve_stats();
    assert!(stats.hits >= 3, "{stats:?}");
    assert_eq!(stats.hits + stats.misses, 10, "{stats:?}");

    let inline = load("hostile_counter")
        .policy(Binding::new("counter").reserve(ReserveOptions::disabled()))
        .expect("bind");
    let seen = counter_request_calls(&inline, 4);
    assert!(seen.iter().all(|c| c == "calls=1"), "{seen:?}");
    let stats = inline.reserve_stats();
    assert_eq!(
        (stats.hits, stats.misses, stats.ready),
        (0, 4, 0),
        "{stats:?}"
    );
}

/// Pooled mode is documented as weaker: guest state survives between the calls one
/// instance serves, up to `max_uses`, and never crosses namespaces.
#[test]
fn counter_in_pooled_mode_reuses_state_up_to_max_uses_and_never_across_namespaces() {
    let pooled = Isolation::Pooled {
        max_uses: 3,
        max_idle: 1,
    };
    let plugin = load("hostile_counter");
    let tenant_a = plugin
        .policy(
            Binding::new("counter")
                .isolation(pooled)
                .namespace("tenant-a"),
        )
        .expect("bind");
    let seen = counter_request_calls(&tenant_a, 7);
    assert_eq!(
        seen,
        [
            "calls=1", "calls=2", "calls=3", "calls=1", "calls=2", "calls=3", "calls=1"
        ]
    );
    assert_eq!(tenant_a.idle_instances(), 1);

    let tenant_b = plugin
        .policy(
            Binding::new("counter")
                .isolation(pooled)
                .namespace("tenant-b"),
        )
        .expect("bind");
    assert_eq!(counter_request_calls(&tenant_b, 1), ["calls=1"]);
}

#[test]
fn pooled_instance_is_recycled_after_a_trap() {
    let policy = load("hostile_panic")
        .policy(Binding::new("panics").isolation(Isolation::pooled()))
        .expect("bind");
    let ask = RefundAsk::by_dana();
    let shared = SharedJson::default();
    let req = ask.request(None, "exe_1", &shared);
    for _ in 0..3 {
        let err = futures::executor::block_on(policy.evaluate_raw(&req, None)).expect_err("panics");
        assert!(matches!(err, CallError::Trap(_)), "{err:?}");
        assert_eq!(
            policy.idle_instances(),
            0,
            "a trapped instance must never be reused"
        );
    }
}

/// Two looping policies of one call, each allowed 2 s by its own binding, under a batch
/// budget (`policyTimeoutMs`) of 150 ms: the batch ends at its shared deadline, not at the
/// sum (4 s) or either (2 s) of the per-plugin limits, and fails closed.
#[tokio::test]
async fn a_batch_of_looping_policies_is_cut_at_the_shared_batch_deadline() {
    let limits = Limits::default()
        .with_fuel(None)
        .with_timeout(Duration::from_secs(2));
    let first = load("hostile_infinite_loop")
        .policy(Binding::new("spinFirst").limits(limits.clone()))
        .expect("bind spinFirst");
    let second = load("hostile_infinite_loop")
        .policy(Binding::new("spinSecond").limits(limits))
        .expect("bind spinSecond");
    let c = Counter::default();
    let sink = Arc::new(MemorySink::new());
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .policy(first)
        .policy(second)
        .procedure(c.procedure());
    let rt = Runtime::builder(
        Registry::builder()
            .capability(def)
            .build()
            .expect("registry"),
    )
    .audit_sink(sink.clone())
    .defaults(capgate_core::runtime::Defaults {
        policy_timeout_ms: 150,
        ..Default::default()
    })
    .build()
    .expect("a valid runtime");

    let started = Instant::now();
    let r = rt.invoke(refund(20)).await;
    let took = started.elapsed();
    assert_eq!(code(&r), Some(ErrorCode::PolicyFailed), "{r:?}");
    assert_eq!(c.get(), 0, "nothing runs after a failed batch");
    // Every stance of the batch is a failure, each bounded by what was left of 150 ms.
    let decisions = data_of(&sink, "capability.denied")["policyDecisions"].clone();
    let failed: Vec<&str> = decisions
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["type"] == "error")
        .filter_map(|d| d["policy"].as_str())
        .collect();
    assert_eq!(failed, ["spinFirst", "spinSecond"], "{decisions}");
    assert!(
        took < Duration::from_secs(2),
        "the batch waited for a per-plugin limit: {took:?}"
    );
    good_plugin_still_works().await;
}

/// A guest that loops never holds the caller's thread: on a single-threaded runtime, another
/// task wakes and runs while the looping call is still in flight (before, the loop held the
/// only thread until its deadline, and the other task saw the call already finished).
#[test]
fn a_looping_guest_does_not_hold_the_callers_thread() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let spin = hostile(
            "hostile_infinite_loop",
            Limits::default()
                .with_fuel(None)
                .with_timeout(Duration::from_secs(2)),
        );
        let c = Counter::default();
        let sink = Arc::new(MemorySink::new());
        let core = runtime_with_policy(spin, &c, sink.clone());
        let finished = std::sync::atomic::AtomicBool::new(false);
        let call = async {
            let r = core.invoke(refund(20)).await;
            finished.store(true, std::sync::atomic::Ordering::SeqCst);
            r
        };
        let other = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            finished.load(std::sync::atomic::Ordering::SeqCst)
        };
        let (r, call_was_finished) = tokio::join!(call, other);
        assert!(
            !call_was_finished,
            "the other task only ran after the looping call ended"
        );
        assert_eq!(code(&r), Some(ErrorCode::PolicyFailed), "{r:?}");
        assert_eq!(c.get(), 0);
    });
}
