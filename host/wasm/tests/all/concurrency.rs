//! 8 tasks × 10 000 concurrent calls across plugins: no error, no cross-talk.

use crate::common;

use capgate_core::prelude::*;
use capgate_wasm::{Binding, Isolation};
use common::*;
use serde_json::json;
use std::sync::Arc;

const TASKS: u64 = 8;
const CALLS: u64 = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_tasks_of_ten_thousand_calls_complete_without_error_or_cross_talk() {
    // Policies fresh (the default), the redactor pooled: both paths under load.
    let policy = Arc::new(
        load("refund_limit")
            .policy(Binding::new("refundLimit").config(json!({"maxAmount": 500})))
            .expect("bind"),
    );
    let redactor = Arc::new(
        load("pii_redactor")
            .redactor(
                Binding::new("pii")
                    .config(json!({"paths": ["/secret"]}))
                    .isolation(Isolation::pooled()),
            )
            .expect("bind"),
    );
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let policy = policy.clone();
        let redactor = redactor.clone();
        tasks.push(tokio::spawn(async move {
            let ask = RefundAsk::by_dana();
            for i in 0..CALLS {
                if i % 2 == 0 {
                    let amount = 501 + t * CALLS + i;
                    let input = json!({"orderId": "o", "amount": amount});
                    let shared = SharedJson::default();
                    let req = ask.request(Some(&input), "exe_x", &shared);
                    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
                    match policy.evaluate(&req, deadline).await {
                        Ok(PolicyDecision::RequireApproval { reason, .. }) => {
                            assert_eq!(reason, format!("Refund of ${amount} exceeds $500"))
                        }
                        other => panic!("task {t} call {i}: {other:?}"),
                    }
                } else {
                    let out = json!({"task": t, "call": i, "secret": "s", "mail": format!("t{t}c{i}@example.com")});
                    let red = redactor.redact_output(&ask.info, "", out).await.expect("redact");
                    assert_eq!(red, json!({"task": t, "call": i, "mail": "[email]"}), "task {t} call {i}");
                }
                if i % 256 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    eprintln!("{} calls in {:?}", TASKS * CALLS, started.elapsed());
}
