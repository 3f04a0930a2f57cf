//! The hostile cases hold in every language: a JavaScript `while (true) {}` and a Python
//! `while True: pass` policy are stopped by the deadline, fail closed with POLICY_FAILED and
//! leave the host healthy.

use crate::common;

use capgate_core::prelude::*;
use capgate_wasm::{Binding, Isolation, Limits};
use common::*;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn interpreter_loop_is_stopped_by_the_deadline(lang: &str) {
    let policy = load_polyglot(lang, "infinite-loop")
        .policy(
            Binding::new("spin").limits(
                Limits::default()
                    .with_fuel(None)
                    .with_timeout(Duration::from_millis(100)),
            ),
        )
        .expect("bind the infinite loop");
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let rt = runtime_with_policy(policy, &c, sink.clone());
    let started = Instant::now();
    let r = rt.invoke(refund(20)).await;
    assert_eq!(code(&r), Some(ErrorCode::PolicyFailed), "{r:?}");
    assert!(failure_reason(&r).contains("timed out"), "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{lang}: stopped only after {:?}",
        started.elapsed()
    );
    assert_eq!(
        data_of(&sink, "capability.denied")["reason"],
        "policy-failed"
    );
    assert_eq!(c.get(), 0, "the procedure must not run");

    // The host stays healthy: the same language's real policy still answers, in both modes.
    for isolation in [Isolation::Fresh, Isolation::pooled()] {
        let limit = load_polyglot(lang, "refund-limit")
            .policy(
                Binding::new("refundLimit")
                    .config(json!({"maxAmount": 500}))
                    .isolation(isolation),
            )
            .expect("bind refund-limit");
        let c = Counter::default();
        let rt = runtime_with_policy(limit, &c, Arc::new(MemorySink::new()));
        let ok = rt.invoke(refund(20)).await;
        assert_eq!(ok.status(), "completed", "{lang}: {ok:?}");
        let held = rt.invoke(refund(649)).await;
        assert_eq!(held.status(), "approval-required", "{lang}: {held:?}");
    }
    good_plugin_still_works().await;
}

#[tokio::test]
async fn javascript_while_true_is_stopped_by_the_deadline_and_fails_closed() {
    interpreter_loop_is_stopped_by_the_deadline("js").await;
}

#[tokio::test]
async fn python_while_true_is_stopped_by_the_deadline_and_fails_closed() {
    interpreter_loop_is_stopped_by_the_deadline("python").await;
}
