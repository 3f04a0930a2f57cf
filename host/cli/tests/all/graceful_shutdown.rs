//! Graceful shutdown (docs/operations/shutdown-and-crash-recovery.md), against the real `capgate
//! serve` on SQLite and on Postgres: SIGTERM under load turns `/readyz` unready first, keeps
//! serving through the unready delay, closes the listener, lets calls in flight finish, flushes the
//! audit and exits 0 — and every call that got an answer is settled in the store with its audit
//! events, executed once, while every call that got none left no trace. A call that outlives the
//! drain time is left pending, never reported.

use crate::common;
use crate::on_sqlite_and_postgres;

use common::lifecycle::*;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What one call got.
#[derive(Debug)]
enum Got {
    /// An HTTP answer, whole.
    Answer(u16, Value),
    /// No answer at all: the connection was refused or closed before any response (the
    /// error, for the failure message).
    Refused(#[allow(dead_code)] String),
    /// A status line and then a broken body (what must never happen).
    HalfAnswer(u16, String),
}

/// One call on a fresh connection (no pooling: a refused call is a refused connection).
async fn call(http: &reqwest::Client, url: &str, capability: &str, id: &str) -> Got {
    let sent = http
        .post(url)
        .bearer_auth(DANA)
        .json(&invoke(capability, id))
        .send()
        .await;
    match sent {
        Err(e) => Got::Refused(format!("{e:?}")),
        Ok(r) => {
            let status = r.status().as_u16();
            match r.text().await {
                Ok(text) => Got::Answer(status, serde_json::from_str(&text).unwrap_or(Value::Null)),
                Err(e) => Got::HalfAnswer(status, format!("{e:?}")),
            }
        }
    }
}

/// What `/readyz` answered, in order: a status, or `None` once the connection failed.
async fn poll_readyz(base: String, stop: Arc<AtomicBool>) -> Vec<(Option<u16>, Value)> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let mut seen = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match http.get(format!("{base}/readyz")).send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                let body = r.json::<Value>().await.unwrap_or(Value::Null);
                seen.push((Some(status), body));
            }
            Err(_) => {
                seen.push((None, Value::Null));
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen
}

async fn sigterm_under_load_loses_no_accepted_call(store: TestStore, dir: &std::path::Path) {
    const CALLERS: usize = 8;
    let upstream = Upstream::start().await;
    let config = upstream_deployment(
        dir,
        &upstream,
        "shutdownUnreadyDelayMs = 1000\nshutdownDrainMs = 20000",
    );
    let mut server = serve(&config, &store);
    let url = format!("{}/agent/invoke", server.base);
    let stop_polling = Arc::new(AtomicBool::new(false));
    let readyz = tokio::spawn(poll_readyz(server.base.clone(), stop_polling.clone()));
    let results: Arc<Mutex<Vec<(String, Got)>>> = Arc::default();
    let mut callers = Vec::new();
    for c in 0..CALLERS {
        let (url, results) = (url.clone(), results.clone());
        callers.push(tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .timeout(Duration::from_secs(60))
                .build()
                .expect("client");
            for i in 0.. {
                let id = format!("load-{c}-{i}");
                let got = call(&http, &url, "jobs.run", &id).await;
                let refused = matches!(got, Got::Refused(_));
                results.lock().expect("results").push((id, got));
                if refused {
                    break;
                }
            }
        }));
    }
    // Load for a while, then SIGTERM with calls in flight.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = results.lock().expect("results").len();
    server.terminate();
    for c in callers {
        c.await.expect("caller");
    }
    let status = server.wait_exit(Duration::from_secs(30));
    stop_polling.store(true, Ordering::SeqCst);
    assert!(status.success(), "exit status {status}");
    let readyz = readyz.await.expect("readyz poller");

    // /readyz went 503 (shutdown: draining) while the listener still answered, then the
    // connection was refused; never ready again in between.
    let first_unready = readyz
        .iter()
        .position(|(s, _)| *s == Some(503))
        .unwrap_or_else(|| panic!("/readyz never answered 503: {readyz:?}"));
    assert_eq!(readyz[first_unready].1["checks"]["shutdown"], "draining");
    assert!(
        readyz[..first_unready].iter().all(|(s, _)| *s == Some(200)),
        "{readyz:?}"
    );
    assert!(
        readyz[first_unready..].iter().all(|(s, _)| *s != Some(200)),
        "{readyz:?}"
    );
    assert_eq!(readyz.last().map(|r| r.0), Some(None), "{readyz:?}");

    let results = std::mem::take(&mut *results.lock().expect("results"));
    let answered: Vec<&String> = results
        .iter()
        .filter(|(_, g)| matches!(g, Got::Answer(..)))
        .map(|(id, _)| id)
        .collect();
    assert!(
        results.len() > before,
        "calls were answered after SIGTERM, during the unready delay and the drain"
    );
    for (id, got) in &results {
        match got {
            Got::Answer(status, body) => {
                assert_eq!(*status, 200, "{id}: {body}");
                assert_eq!(body["status"], "completed", "{id}: {body}");
            }
            Got::HalfAnswer(status, e) => panic!("{id}: a half answer ({status}): {e}"),
            Got::Refused(_) => {}
        }
    }
    assert_eq!(
        results
            .iter()
            .filter(|(_, g)| matches!(g, Got::Refused(_)))
            .count(),
        CALLERS,
        "each caller stopped at its first refused connection"
    );

    // From the store: every answered call settled, executed once, fully audited; every
    // refused call left nothing and never reached the upstream.
    let ids: Vec<String> = results.iter().map(|(id, _)| id.clone()).collect();
    let receipts = receipts(store.url(), &ids).await;
    let events = audit_events(store.url()).await;
    for (id, got) in &results {
        match got {
            Got::Answer(..) => {
                assert_eq!(
                    receipts.get(id).map(|(s, o)| (s.as_str(), o.as_str())),
                    Some(("settled", Some("completed"))),
                    "{id}"
                );
                assert_eq!(upstream.hits(id), 1, "{id} executed once");
                for ty in [
                    "capability.requested",
                    "capability.started",
                    "capability.completed",
                ] {
                    assert_eq!(count(&events, id, ty), 1, "{id}: {ty}");
                }
            }
            _ => {
                assert!(!receipts.contains_key(id), "{id}: {:?}", receipts.get(id));
                assert_eq!(upstream.hits(id), 0, "{id}");
                assert_eq!(count(&events, id, "capability.requested"), 0, "{id}");
            }
        }
    }
    let ours = events
        .iter()
        .filter(|e| {
            e["correlationId"]
                .as_str()
                .is_some_and(|c| c.starts_with("load-"))
        })
        .count();
    assert_eq!(
        ours,
        3 * answered.len(),
        "the audit queue was flushed: requested + started + completed per answered call"
    );
}

async fn a_call_outliving_the_drain_time_is_left_pending_and_the_exit_is_still_clean(
    store: TestStore,
    dir: &std::path::Path,
) {
    let upstream = Upstream::start().await;
    let config = upstream_deployment(
        dir,
        &upstream,
        "shutdownUnreadyDelayMs = 0\nshutdownDrainMs = 300",
    );
    let mut server = serve(&config, &store);
    let id = "outlives-the-drain";
    let url = format!("{}/agent/invoke", server.base);
    let pending = tokio::spawn(async move {
        let http = reqwest::Client::new();
        // `/hang`: the upstream takes the request and never answers.
        call(&http, &url, "orders.refund", id).await
    });
    upstream.wait_for(id).await;
    server.terminate();
    let status = server.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "exit status {status}");
    let got = pending.await.expect("caller");
    assert!(
        matches!(got, Got::Refused(_)),
        "no answer rather than an invented one: {got:?}"
    );
    let shown = show(store.url(), id);
    assert_eq!(shown["state"], "pending", "{shown}");
    assert!(shown["outcome"].is_null(), "{shown}");
    let events = audit_events(store.url()).await;
    assert_eq!(count(&events, id, "capability.started"), 1, "{events:#?}");
    for ended in [
        "capability.completed",
        "capability.failed",
        "capability.cancelled",
    ] {
        assert_eq!(count(&events, id, ended), 0, "{ended}: {events:#?}");
    }
    assert_eq!(upstream.hits(id), 1);
}

on_sqlite_and_postgres!(
    sigterm_under_load_loses_no_accepted_call
        => sigterm_under_load_on_sqlite_drains_exits_0_and_loses_no_accepted_call,
        sigterm_under_load_on_postgres_drains_exits_0_and_loses_no_accepted_call
);

on_sqlite_and_postgres!(
    a_call_outliving_the_drain_time_is_left_pending_and_the_exit_is_still_clean
        => a_call_outliving_the_drain_time_on_sqlite_is_left_pending_and_serve_exits_0,
        a_call_outliving_the_drain_time_on_postgres_is_left_pending_and_serve_exits_0
);
