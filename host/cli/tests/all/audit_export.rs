//! Audit export (issue 39, item 3) end to end: a served deployment exports its trail to an
//! OTLP logs receiver (real HTTP, protobuf decoded) and to a `jsonl` sink; both receive
//! every event the store holds, in order, across a receiver outage, a clean restart and a
//! `kill -9` in the middle of a delivery, which repeats at most the batch that was never
//! acknowledged.

use crate::common::{Caller, Server, capgate, deployment};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use serde_json::{Value, json};
use sqlx::Connection;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

const DANA: &str = "dana-dev-key";
const BATCH: usize = 8;

/// How the receiver answers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Accept,
    /// `503`: the collector is down; nothing is kept.
    Refuse,
    /// Keep the batch, then hold the answer until released (the sender dies meanwhile).
    Hold,
}

/// An event as received: its chain, its place, its type.
type Received = (String, i64, String);

struct Receiver {
    mode: Mode,
    got: Vec<Received>,
    /// The batch kept while holding its answer.
    held: Vec<Received>,
    requests: usize,
}

#[derive(Clone)]
struct Otlp {
    state: Arc<Mutex<Receiver>>,
    release: Arc<Notify>,
}

impl Otlp {
    fn with<T>(&self, f: impl FnOnce(&mut Receiver) -> T) -> T {
        f(&mut self.state.lock().expect("receiver state"))
    }
}

async fn logs(State(r): State<Otlp>, body: Bytes) -> StatusCode {
    let Ok(req) = ExportLogsServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut batch = Vec::new();
    for rl in &req.resource_logs {
        for sl in &rl.scope_logs {
            assert_eq!(
                sl.scope.as_ref().map(|s| s.name.as_str()),
                Some("capgate.audit")
            );
            for rec in &sl.log_records {
                let attr = |k: &str| {
                    rec.attributes
                        .iter()
                        .find(|a| a.key == k)
                        .and_then(|a| a.value.clone())
                        .and_then(|v| v.value)
                };
                let (Some(Any::StringValue(chain)), Some(Any::IntValue(seq))) =
                    (attr("capgate.audit.chain"), attr("capgate.audit.seq"))
                else {
                    return StatusCode::BAD_REQUEST;
                };
                batch.push((chain, seq, rec.event_name.clone()));
            }
        }
    }
    let mode = r.with(|s| {
        s.requests += 1;
        if s.mode != Mode::Refuse {
            s.got.extend(batch.iter().cloned());
        }
        if s.mode == Mode::Hold && s.held.is_empty() {
            s.held = batch.clone();
        }
        s.mode
    });
    match mode {
        Mode::Accept => StatusCode::OK,
        Mode::Refuse => StatusCode::SERVICE_UNAVAILABLE,
        Mode::Hold => {
            r.release.notified().await;
            StatusCode::OK
        }
    }
}

async fn receiver() -> (Otlp, String) {
    let otlp = Otlp {
        state: Arc::new(Mutex::new(Receiver {
            mode: Mode::Accept,
            got: Vec::new(),
            held: Vec::new(),
            requests: 0,
        })),
        release: Arc::new(Notify::new()),
    };
    let app = axum::Router::new()
        .route("/v1/logs", axum::routing::post(logs))
        .with_state(otlp.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (otlp, base)
}

/// Every chained event in the store, in insertion order.
async fn stored(store: &str) -> Vec<Received> {
    let mut c = sqlx::SqliteConnection::connect(store)
        .await
        .expect("connect");
    let rows: Vec<(String, i64, String)> = sqlx::query_as(
        "SELECT chain, seq, type FROM capgate_audit_events WHERE chain IS NOT NULL ORDER BY id",
    )
    .fetch_all(&mut c)
    .await
    .expect("read the trail");
    c.close().await.expect("close");
    rows
}

/// The `jsonl` sink's lines, file by file in name (creation) order.
fn file_lines(dir: &std::path::Path) -> Vec<Received> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.expect("entry").path()).collect())
        .unwrap_or_default();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        for line in std::fs::read_to_string(&f).expect("read").lines() {
            let v: Value = serde_json::from_str(line).expect("a whole JSON line");
            out.push((
                v["chain"].as_str().expect("chain").to_string(),
                v["seq"].as_i64().expect("seq"),
                v["event"]["type"].as_str().expect("type").to_string(),
            ));
        }
    }
    out
}

/// The distinct events of `got` in the order they first arrived.
fn first_arrivals(got: &[Received]) -> Vec<Received> {
    let mut seen = BTreeSet::new();
    got.iter()
        .filter(|e| seen.insert((e.0.clone(), e.1)))
        .cloned()
        .collect()
}

async fn until(what: &str, timeout: Duration, mut done: impl AsyncFnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !done().await {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn calls(server: &Server, from: usize, n: usize) {
    let dana = Caller::new(DANA);
    for i in from..from + n {
        let (status, body) = dana
            .post(
                &format!("{}/agent/invoke", server.base),
                &json!({
                    "capabilityId": "orders.refund",
                    "input": {"orderId": "ord_42", "amount": 20 + i, "reason": "damaged item"},
                    "invocationId": format!("export_{i}"),
                }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_and_jsonl_sinks_get_every_event_in_order_across_an_outage_a_restart_and_a_kill() {
    let (otlp, collector) = receiver().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let files = dir.path().join("export");
    let config = deployment(
        dir.path(),
        |t| t,
        &format!(
            "[audit.export.siem]\nto = \"otlp\"\nendpoint = \"{collector}\"\nbatchEvents = {BATCH}\ntimeoutMs = 120000\n\n\
             [audit.export.archive]\nto = \"jsonl\"\ndirectory = \"{}\"\nrotateBytes = 8192\nbatchEvents = {BATCH}\n",
            files.display()
        ),
    );
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let all_arrived = |otlp: Otlp, store: String, files: std::path::PathBuf| {
        async move || {
            let want = stored(&store).await;
            first_arrivals(&otlp.with(|s| s.got.clone())) == want
                && first_arrivals(&file_lines(&files)) == want
        }
    };
    let wait = Duration::from_secs(60);

    // 1. Served and exported.
    let mut server = Server::start(&config, &store);
    calls(&server, 0, 3).await;
    until(
        "the first calls' events",
        wait,
        all_arrived(otlp.clone(), store.clone(), files.clone()),
    )
    .await;
    let (status, ready) = Caller::new(DANA)
        .get(&format!("{}/readyz", server.base))
        .await;
    assert_eq!(status, 200, "{ready}");
    assert_eq!(ready["checks"]["export:siem"], "ok", "{ready}");
    assert_eq!(ready["checks"]["export:archive"], "ok", "{ready}");

    // 2. The collector goes down: calls go on, the file sink keeps up, nothing is lost.
    otlp.with(|s| s.mode = Mode::Refuse);
    let refused_before = otlp.with(|s| s.requests);
    calls(&server, 3, 3).await;
    until("refused deliveries", wait, async || {
        otlp.with(|s| s.requests) >= refused_before + 2
    })
    .await;
    let want = stored(&store).await;
    until("the file sink", wait, async || {
        first_arrivals(&file_lines(&files)) == stored(&store).await
    })
    .await;
    assert!(
        otlp.with(|s| s.got.len()) < want.len(),
        "the outage kept events from the collector"
    );
    otlp.with(|s| s.mode = Mode::Accept);
    until(
        "the events held during the outage",
        wait,
        all_arrived(otlp.clone(), store.clone(), files.clone()),
    )
    .await;

    // 3. A clean restart: a new chain, resumed where each sink was.
    server.terminate();
    assert!(server.wait_exit(Duration::from_secs(30)).success());
    let mut server = Server::start(&config, &store);
    calls(&server, 6, 2).await;
    until(
        "the events after the restart",
        wait,
        all_arrived(otlp.clone(), store.clone(), files.clone()),
    )
    .await;
    assert_eq!(
        otlp.with(|s| s.got.clone()),
        stored(&store).await,
        "no event twice so far: every delivery was acknowledged"
    );

    // 4. `kill -9` while the collector holds a delivery's answer.
    otlp.with(|s| s.mode = Mode::Hold);
    calls(&server, 8, 2).await;
    until("a held delivery", wait, async || {
        !otlp.with(|s| s.held.is_empty())
    })
    .await;
    server.kill_hard();
    otlp.release.notify_waiters();
    otlp.with(|s| s.mode = Mode::Accept);
    let server = Server::start(&config, &store);
    calls(&server, 10, 1).await;
    until(
        "everything after the kill",
        wait,
        all_arrived(otlp.clone(), store.clone(), files.clone()),
    )
    .await;

    // Exactly the store's events, first arrivals in its order; repeats only of the batch
    // that was delivered and never acknowledged.
    let want = stored(&store).await;
    let (got, held) = otlp.with(|s| (s.got.clone(), s.held.clone()));
    assert_eq!(first_arrivals(&got), want);
    let mut counts: BTreeMap<(String, i64), usize> = BTreeMap::new();
    for e in &got {
        *counts.entry((e.0.clone(), e.1)).or_default() += 1;
    }
    let repeated: BTreeSet<_> = counts
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| k.clone())
        .collect();
    let held: BTreeSet<_> = held.iter().map(|e| (e.0.clone(), e.1)).collect();
    // The held batch reached the collector but its answer never reached capgate: after
    // the restart it went again, and it is the only thing that did.
    assert!(!held.is_empty() && held.len() <= BATCH, "{held:?}");
    assert_eq!(repeated, held);
    assert!(counts.values().all(|n| *n <= 2));
    let lines = file_lines(&files);
    assert_eq!(first_arrivals(&lines), want);
    assert!(
        lines.len() - want.len() <= BATCH,
        "the file repeats at most one batch"
    );
    assert!(
        std::fs::read_dir(&files).expect("dir").count() > 1,
        "files rotate at 8 KiB"
    );
    drop(server);

    // A backfill prints the same events, in the same order.
    let backfill = capgate(&["audit", "export", "--store", &store, "--batch", "5"]);
    let printed: Vec<Received> = backfill
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            (
                v["chain"].as_str().expect("chain").to_string(),
                v["seq"].as_i64().expect("seq"),
                v["event"]["type"].as_str().expect("type").to_string(),
            )
        })
        .collect();
    assert_eq!(printed, want);
    let before = otlp.with(|s| s.got.len());
    let sent = capgate(&[
        "audit",
        "export",
        "--store",
        &store,
        "--format",
        "otlp",
        "--endpoint",
        &collector,
    ]);
    assert!(sent.is_empty(), "progress goes to stderr: {sent}");
    assert_eq!(otlp.with(|s| s.got[before..].to_vec()), want);
}
