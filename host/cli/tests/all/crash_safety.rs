//! Crash safety (docs/operations/shutdown-and-crash-recovery.md), against the real `capgate serve`
//! on SQLite and on Postgres: `kill -9` the process while a call is inside its procedure, or
//! between an approval's consumption and the procedure; after a restart on the same store the
//! receipt is pending, `getInvocation` invents no outcome, a retry of the same invocation id
//! answers `outcome-unknown` without a second execution (the upstream counts every request), and
//! `capgate invocations reconcile` settles it.

use crate::common;
use crate::on_sqlite_and_postgres;

use common::lifecycle::*;
use common::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Send `body` to `url` as `key` on a task of its own, ignoring the outcome: the server is
/// killed before it answers.
fn fire(url: String, key: &str, body: Value) -> tokio::task::JoinHandle<()> {
    let key = key.to_string();
    tokio::spawn(async move {
        let _ = reqwest::Client::new()
            .post(url)
            .bearer_auth(key)
            .json(&body)
            .send()
            .await;
    })
}

/// What an operator writes after checking the backend: the call failed.
/// Dana's receipt of `id` after the crash: pending, and no outcome invented for it.
async fn assert_pending_without_outcome(dana: &Caller, base: &str, id: &str) {
    let (status, receipt) = dana
        .post(
            &format!("{base}/agent/getInvocation"),
            &json!({ "invocationId": id }),
        )
        .await;
    assert_eq!(status, 200, "{receipt}");
    assert_eq!(receipt["state"], "pending", "{receipt}");
    assert!(
        receipt["outcome"].is_null(),
        "no invented outcome: {receipt}"
    );
}

/// The operator settles `id` as failed (`capgate invocations reconcile`), and Dana's receipt
/// reads settled with that outcome.
async fn reconcile_as_failed(dana: &Caller, base: &str, store: &str, id: &str) {
    let done = reconcile(store, id, &failed(id));
    assert!(done.contains(&format!("reconciled {id}")), "{done}");
    let (_, receipt) = dana
        .post(
            &format!("{base}/agent/getInvocation"),
            &json!({ "invocationId": id }),
        )
        .await;
    assert_eq!(receipt["state"], "settled", "{receipt}");
    assert_eq!(
        receipt["outcome"]["error"]["code"], "EXECUTION_FAILED",
        "{receipt}"
    );
}

fn failed(id: &str) -> Value {
    json!({
        "status": "failed", "invocationId": id, "executionId": "",
        "error": {"code": "EXECUTION_FAILED", "message": "The operation failed.", "retryable": false}
    })
}

async fn a_crash_inside_the_procedure_leaves_a_pending_receipt_that_is_never_run_twice(
    store: TestStore,
    dir: &std::path::Path,
) {
    let upstream = Upstream::start().await;
    let config = upstream_deployment(dir, &upstream, "");
    let mut server = serve(&config, &store);
    let dana = Caller::new(DANA);
    let id = "crash-in-procedure";

    let call = fire(
        format!("{}/agent/invoke", server.base),
        DANA,
        invoke("orders.refund", id),
    );
    upstream.wait_for(id).await;
    server.kill_hard();
    let _ = call.await;

    // From the store: one receipt, pending, no outcome; the call started and never ended.
    let shown = show(store.url(), id);
    assert_eq!(shown["state"], "pending", "{shown}");
    assert!(shown["outcome"].is_null(), "{shown}");
    let events = audit_events(store.url()).await;
    assert_eq!(count(&events, id, "capability.requested"), 1, "{events:#?}");
    // The example's audit is strict: `capability.started` is written through before the
    // procedure is entered, so a kill inside the procedure cannot lose it.
    assert_eq!(count(&events, id, "capability.started"), 1, "{events:#?}");
    for ended in [
        "capability.completed",
        "capability.failed",
        "capability.cancelled",
    ] {
        assert_eq!(count(&events, id, ended), 0, "{ended}: {events:#?}");
    }

    // Restarted on the same store.
    let server = serve(&config, &store);
    assert_pending_without_outcome(&dana, &server.base, id).await;

    let (status, retried) = dana
        .post(
            &format!("{}/agent/invoke", server.base),
            &invoke("orders.refund", id),
        )
        .await;
    assert_eq!(status, 200, "{retried}");
    assert_eq!(retried["status"], "outcome-unknown", "{retried}");
    assert_eq!(upstream.hits(id), 1, "the retry did not execute again");

    // The operator checks the backend and settles it.
    reconcile_as_failed(&dana, &server.base, store.url(), id).await;
    // A retry now replays the reconciled outcome, still without executing.
    let (_, replayed) = dana
        .post(
            &format!("{}/agent/invoke", server.base),
            &invoke("orders.refund", id),
        )
        .await;
    assert_eq!(replayed["status"], "failed", "{replayed}");
    assert_eq!(upstream.hits(id), 1, "executed exactly once in all");
    let events = audit_events(store.url()).await;
    assert_eq!(count(&events, id, "capability.started"), 1, "{events:#?}");
    assert_eq!(count(&events, id, "capability.completed"), 0);
}

async fn a_crash_after_the_approval_is_consumed_runs_nothing_and_leaves_a_pending_receipt(
    store: TestStore,
    dir: &std::path::Path,
) {
    let upstream = Upstream::start().await;
    let config = upstream_deployment(dir, &upstream, "");
    let mut server = serve(&config, &store);
    let dana = Caller::new(DANA);
    let priya = Caller::new(PRIYA);
    let id = "crash-after-consume";

    let (status, held) = dana
        .post(
            &format!("{}/agent/invoke", server.base),
            &invoke("messages.send", id),
        )
        .await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["status"], "approval-required", "{held}");
    let approval = held["approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_string();
    priya.approve(&server.base, &approval).await;

    // The resume consumes the approval, then spends seconds in the execution-phase
    // re-check (stage 9) before the procedure: kill -9 inside that window.
    let resume = json!({ "approvalId": approval, "invocationId": id, "correlationId": id });
    let call = fire(
        format!("{}/agent/resumeApproval", server.base),
        DANA,
        resume.clone(),
    );
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, view) = priya
            .get(&format!("{}/approvals/{approval}", server.base))
            .await;
        if view["status"] == "consumed" {
            break;
        }
        assert!(Instant::now() < until, "never consumed: {view}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill_hard();
    let _ = call.await;
    assert_eq!(upstream.hits(id), 0, "the procedure had not started");

    let shown = show(store.url(), id);
    assert_eq!(shown["state"], "pending", "{shown}");
    assert!(shown["outcome"].is_null(), "{shown}");

    let server = serve(&config, &store);
    let (_, view) = priya
        .get(&format!("{}/approvals/{approval}", server.base))
        .await;
    assert_eq!(view["status"], "consumed", "{view}");
    assert_pending_without_outcome(&dana, &server.base, id).await;

    // The same resume again: unknown, not a second execution.
    let (status, retried) = dana
        .post(&format!("{}/agent/resumeApproval", server.base), &resume)
        .await;
    assert_eq!(status, 200, "{retried}");
    assert_eq!(retried["status"], "outcome-unknown", "{retried}");
    // The consumed approval cannot be resumed under another invocation id either.
    let other = format!("{id}-again");
    let (_, again) = dana
        .post(
            &format!("{}/agent/resumeApproval", server.base),
            &json!({ "approvalId": approval, "invocationId": other }),
        )
        .await;
    assert_ne!(again["status"], "completed", "{again}");
    assert_ne!(again["status"], "outcome-unknown", "{again}");
    assert_eq!(upstream.hits(id), 0, "nothing executed");

    reconcile_as_failed(&dana, &server.base, store.url(), id).await;
    assert_eq!(upstream.hits(id), 0);
    let events = audit_events(store.url()).await;
    assert_eq!(
        count(&events, id, "capability.started"),
        0,
        "stage 10 was never reached: {events:#?}"
    );
    assert_eq!(count(&events, id, "capability.completed"), 0);
}

on_sqlite_and_postgres!(
    a_crash_inside_the_procedure_leaves_a_pending_receipt_that_is_never_run_twice
        => kill_9_inside_a_slow_procedure_on_sqlite_leaves_it_pending_and_never_runs_it_twice,
        kill_9_inside_a_slow_procedure_on_postgres_leaves_it_pending_and_never_runs_it_twice
);

on_sqlite_and_postgres!(
    a_crash_after_the_approval_is_consumed_runs_nothing_and_leaves_a_pending_receipt
        => kill_9_between_approval_consumption_and_the_procedure_on_sqlite_runs_nothing,
        kill_9_between_approval_consumption_and_the_procedure_on_postgres_runs_nothing
);
