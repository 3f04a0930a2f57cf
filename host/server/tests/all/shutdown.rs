//! [`capgate_server::serve::Served::stop`] runs `serve`'s shutdown sequence
//! (docs/operations/shutdown-and-crash-recovery.md; `serve/shutdown.rs`): `/readyz` turns unready
//! at once, the listener keeps serving through `shutdownUnreadyDelayMs`, then closes; a call in
//! flight gets `shutdownDrainMs` to finish and is answered and settled; then the trail is flushed
//! and the store closed. A call that outlives the drain keeps a pending receipt, never an outcome
//! it did not have.

use crate::support::{self, DANA, Holding, PATIENCE, post, refund};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The example with `reports.build` over `backend` and this shutdown sequence.
fn deployment(
    dir: &std::path::Path,
    backend: &str,
    unready_ms: u64,
    drain_ms: u64,
) -> std::path::PathBuf {
    support::example_in(dir, |text| {
        format!(
            "{}\n{}",
            text.replace(
                "[gateway]\n",
                &format!(
                    "[gateway]\nshutdownUnreadyDelayMs = {unready_ms}\nshutdownDrainMs = {drain_ms}\n"
                ),
            ),
            support::report_capability(backend)
        )
    })
}

/// Whether a fresh connection to `addr` is refused.
async fn refused(addr: std::net::SocketAddr) -> bool {
    tokio::net::TcpStream::connect(addr).await.is_err()
}

/// A call of `reports.build` as its own client (its own connection).
fn call_report(base: &str, id: &str) -> tokio::task::JoinHandle<(u16, Value)> {
    let url = format!("{base}/agent/invoke");
    let body = json!({"capabilityId": "reports.build", "input": {}, "invocationId": id, "correlationId": id});
    tokio::spawn(async move {
        let http = reqwest::Client::new();
        post(&http, &url, DANA, &body).await
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_turns_unready_serves_through_the_delay_closes_and_lets_a_call_in_flight_finish() {
    const UNREADY: Duration = Duration::from_millis(1500);
    let mut backend = Holding::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(dir.path(), &backend.base, 1500, 20_000);
    let s = support::serve(&config, dir.path()).await;
    let addr = s.served.addr();
    // No pooling: each probe is a new connection, as a load balancer's would be.
    let fresh = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let (status, ready) = support::get(&fresh, &format!("{}/readyz", s.base), DANA).await;
    assert_eq!(
        (status, &ready["checks"]["shutdown"]),
        (200, &json!("ok")),
        "{ready}"
    );

    let in_flight = call_report(&s.base, "drain_in_flight");
    assert_eq!(backend.arrived().await, "/report");

    let stopping = Instant::now();
    let stop = tokio::spawn(s.served.stop());
    // 1. Unready at once, while the listener still serves.
    let draining = support::until("/readyz to answer 503", PATIENCE, async || {
        let r = fresh.get(format!("{}/readyz", s.base)).send().await.ok()?;
        let status = r.status().as_u16();
        let body: Value = r.json().await.ok()?;
        (status == 503).then_some(body)
    })
    .await;
    assert_eq!(draining["checks"]["shutdown"], "draining", "{draining}");
    // 2. A new call during the unready delay is served as before.
    let (status, served) = post(
        &fresh,
        &format!("{}/agent/invoke", s.base),
        DANA,
        &refund(20, "drain_during_delay"),
    )
    .await;
    assert_eq!(status, 200, "{served}");
    assert_eq!(served["status"], "completed", "{served}");
    // 3. Then the listener closes, not before the delay.
    support::until("the listener to close", PATIENCE, async || {
        refused(addr).await.then_some(())
    })
    .await;
    assert!(
        stopping.elapsed() >= UNREADY,
        "closed after {:?}, before the unready delay",
        stopping.elapsed()
    );
    // 4. The call in flight is still being waited for, and stop with it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!in_flight.is_finished(), "the call in flight was cut");
    assert!(
        !stop.is_finished(),
        "stop did not wait for the call in flight"
    );
    backend.release.notify_one();
    let (status, done) = tokio::time::timeout(PATIENCE, in_flight)
        .await
        .expect("the call in flight was answered")
        .expect("the call task");
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"]["report"], "done", "{done}");
    tokio::time::timeout(PATIENCE, stop)
        .await
        .expect("stop returned once the call was answered")
        .expect("the stop task")
        .expect("a clean stop");
    assert!(refused(addr).await, "the listener stays closed");

    // 5. Both calls settled, their trail flushed before the store closed.
    for id in ["drain_in_flight", "drain_during_delay"] {
        assert_eq!(
            support::receipt(&s.store, id).await,
            Some(("settled".into(), json!("completed"))),
            "{id}"
        );
    }
    let events = support::audit_events(&s.store).await;
    assert_eq!(
        support::types_of(&events, "drain_in_flight"),
        [
            "capability.requested",
            "capability.started",
            "capability.completed"
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_outliving_the_drain_keeps_a_pending_receipt_and_stop_returns_cleanly() {
    const DRAIN: Duration = Duration::from_millis(300);
    let mut backend = Holding::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(dir.path(), &backend.base, 0, 300);
    let s = support::serve(&config, dir.path()).await;
    let addr = s.served.addr();
    let in_flight = call_report(&s.base, "outlives_the_drain");
    backend.arrived().await;

    let stopping = Instant::now();
    tokio::time::timeout(PATIENCE, s.served.stop())
        .await
        .expect("stop is bounded by the drain time, not by the call")
        .expect("a drain that runs out is no failure");
    assert!(stopping.elapsed() >= DRAIN, "{:?}", stopping.elapsed());
    assert!(refused(addr).await, "the listener is closed");
    assert!(!in_flight.is_finished(), "no answer was invented");

    // The procedure had started: pending, no outcome, started and never ended.
    assert_eq!(
        support::receipt(&s.store, "outlives_the_drain").await,
        Some(("pending".into(), Value::Null))
    );
    let events = support::audit_events(&s.store).await;
    assert_eq!(
        support::types_of(&events, "outlives_the_drain"),
        ["capability.requested", "capability.started"],
    );
    in_flight.abort();
}
