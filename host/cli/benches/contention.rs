//! Contention: does a hostile Wasm policy slow anyone else down? The real `capgate serve`
//! (release build, SQLite store, journal and audit on, its default Tokio runtime) serves the
//! customer-support example plus two capabilities:
//! - `ops.native`: no Wasm on its path (no policy, no redactor; an HTTP upstream this bench
//!   serves), the "native" call measured one in flight, back to back;
//! - `ops.spin`: guarded by the `hostile_infinite_loop` policy plugin (no fuel limit,
//!   `timeoutMs = 1000`), which loops until its deadline.
//!
//! Two phases of `--seconds` each: `alone` (only the native calls) and `2 loopers` (two
//! `ops.spin` calls always in flight, each re-sent as soon as it ends). Throughout both, a
//! prober sends `GET /healthz` every 5 ms. It prints the native calls' and the probes'
//! p50/p99/p99.9/max for each phase, the p99 ratio, and how every looping call ended (it
//! must be POLICY_FAILED, at its 1 s deadline: the model is answered INTERNAL_ERROR, as
//! POLICY_FAILED is not exposed to models (docs/error-codes.md), and the audit trail records
//! `policy-failed`).
//!
//! ```sh
//! cargo xtask build-plugins && cargo xtask example-config
//! cargo bench -p capgate --bench contention                          # both cores
//! cargo bench -p capgate --bench contention -- --seconds 20
//! ```
//!
//! Figures compare only within one run on one machine.

#[path = "../tests/all/common/mod.rs"]
mod common;

use axum::Router;
use axum::routing::post;
use common::*;
use serde_json::{Value, json};
use sha2::Digest;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Nearest-rank percentile of sorted samples, in ms.
fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
}

struct Summary {
    n: usize,
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

fn summarize(mut s: Vec<Duration>) -> Summary {
    s.sort_unstable();
    Summary {
        n: s.len(),
        p50: pct(&s, 50.0),
        p99: pct(&s, 99.0),
        p999: pct(&s, 99.9),
        max: s.last().map_or(f64::NAN, |d| d.as_secs_f64() * 1e3),
    }
}

fn row(phase: &str, what: &str, s: &Summary) {
    println!(
        "{phase:<10} {what:<8} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
        s.n, s.p50, s.p99, s.p999, s.max
    );
}

/// The application's backend for `ops.*`: answers at once.
async fn backend() -> String {
    let app = Router::new().route(
        "/ok",
        post(|| async { axum::Json(json!({"ok": true, "gatewayRef": "gw_1"})) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind backend");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

fn extra(backend: &str) -> String {
    let spin = root().join("plugins/target/wasm32-wasip2/release/hostile_infinite_loop.wasm");
    let bytes = std::fs::read(&spin).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run `cargo xtask build-plugins` first",
            spin.display()
        )
    });
    let digest = hex::encode(sha2::Sha256::digest(&bytes));
    format!(
        r#"
[plugins.spin]
path = "hostile_infinite_loop.wasm"
sha256 = "{digest}"
fuel = 0
timeoutMs = 1000

[policies.spin]
plugin = "spin"

[[capabilities]]
id = "ops.native"
description = "No Wasm on the path"
expose = {{ aiSdk = true }}
sideEffect = "read"
risk = "low"
procedure = {{ http = {{ target = "ops", url = "{backend}/ok" }} }}

[[capabilities]]
id = "ops.spin"
description = "Guarded by a policy that loops"
expose = {{ aiSdk = true }}
sideEffect = "read"
risk = "low"
policies = ["spin"]
procedure = {{ http = {{ target = "spin", url = "{backend}/ok" }} }}
"#
    )
}

fn invoke(capability: &str, id: u64) -> Value {
    json!({"capabilityId": capability, "input": {}, "invocationId": format!("{capability}-{id}")})
}

/// One phase: native calls back to back, /healthz every 5 ms, and `loopers` spinning calls
/// always in flight. Returns (native, healthz, looping calls as (code, duration)).
async fn phase(
    base: &str,
    seconds: u64,
    loopers: usize,
    ids: &Arc<AtomicU64>,
) -> (Vec<Duration>, Vec<Duration>, Vec<(String, Duration)>) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut spinning = Vec::new();
    for _ in 0..loopers {
        let (stop, ids, url) = (stop.clone(), ids.clone(), format!("{base}/agent/invoke"));
        spinning.push(tokio::spawn(async move {
            let caller = Caller::new("dana-dev-key");
            let mut ended = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let (_, answer) = caller
                    .post(
                        &url,
                        &invoke("ops.spin", ids.fetch_add(1, Ordering::Relaxed)),
                    )
                    .await;
                let code = answer["error"]["code"]
                    .as_str()
                    .or(answer["status"].as_str())
                    .unwrap_or("?")
                    .to_string();
                if std::env::var_os("CONTENTION_DEBUG").is_some() {
                    eprintln!("{answer}");
                }
                ended.push((code, started.elapsed()));
            }
            ended
        }));
    }
    if loopers > 0 {
        // Let the loopers enter their guests before measuring.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let probe = {
        let (stop, url) = (stop.clone(), format!("{base}/healthz"));
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let ok = http
                    .get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                assert!(ok, "/healthz failed");
                samples.push(started.elapsed());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            samples
        })
    };
    let caller = Caller::new("dana-dev-key");
    let url = format!("{base}/agent/invoke");
    let mut native = Vec::new();
    let end = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < end {
        let started = Instant::now();
        let (status, answer) = caller
            .post(
                &url,
                &invoke("ops.native", ids.fetch_add(1, Ordering::Relaxed)),
            )
            .await;
        native.push(started.elapsed());
        assert!(
            status == 200 && answer["status"] == "completed",
            "{status} {answer}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let health = probe.await.expect("prober");
    let mut ended = Vec::new();
    for s in spinning {
        ended.extend(s.await.expect("looper"));
    }
    (native, health, ended)
}

fn main() {
    let mut seconds = 10u64;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => {
                seconds = match args.next().and_then(|v| v.parse().ok()) {
                    Some(s) if s > 0 => s,
                    _ => {
                        eprintln!("contention: --seconds needs a positive number");
                        std::process::exit(2);
                    }
                }
            }
            "--bench" => {}
            other => {
                eprintln!("contention: unknown argument `{other}` (expected --seconds N)");
                std::process::exit(2);
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let backend = backend().await;
        let dir = tempfile::tempdir().expect("tempdir");
        if std::env::var_os("CONTENTION_DEBUG").is_some() {
            eprintln!("store in {}", dir.path().display());
        }
        let config = deployment(dir.path(), |t| t, &extra(&backend));
        let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
        let server = Server::start(&config, &store);
        let ids = Arc::new(AtomicU64::new(0));
        // Warm up: plugins compiled, connections open, SQLite pages cached.
        let _ = phase(&server.base, 1, 0, &ids).await;

        println!(
            "contention, ms (capgate serve on SQLite; native = `ops.native`, one in flight; \
             /healthz every 5 ms; {seconds} s per phase)"
        );
        println!(
            "{:<10} {:<8} {:>8} {:>9} {:>9} {:>9} {:>9}",
            "phase", "calls", "n", "p50", "p99", "p99.9", "max"
        );
        let (native_alone, health_alone, _) = phase(&server.base, seconds, 0, &ids).await;
        let (native_busy, health_busy, ended) = phase(&server.base, seconds, 2, &ids).await;
        let (a, b) = (summarize(native_alone), summarize(native_busy));
        let (ha, hb) = (summarize(health_alone), summarize(health_busy));
        row("alone", "native", &a);
        row("alone", "healthz", &ha);
        row("2 loopers", "native", &b);
        row("2 loopers", "healthz", &hb);
        println!(
            "native p99 with 2 loopers / alone: {:.2}×; p50: {:.2}×",
            b.p99 / a.p99,
            b.p50 / a.p50
        );
        let mut codes = std::collections::BTreeMap::<String, usize>::new();
        for (code, _) in &ended {
            *codes.entry(code.clone()).or_default() += 1;
        }
        let durations = summarize(ended.iter().map(|(_, d)| *d).collect());
        println!(
            "looping calls: {} ended {codes:?}; duration p50 {:.0} ms, max {:.0} ms",
            ended.len(),
            durations.p50,
            durations.max
        );
        drop(server);
        // The model sees INTERNAL_ERROR (POLICY_FAILED is not exposed to models); the audit
        // trail says why.
        let audit = sqlx::SqlitePool::connect(&store).await.expect("open the store");
        let (failed,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM capgate_audit_events WHERE type = 'capability.denied' \
             AND capability_id = 'ops.spin' AND json_extract(data, '$.reason') = 'policy-failed'",
        )
        .fetch_one(&audit)
        .await
        .expect("count the audit records");
        println!(
            "audit: {failed} of the {} looping calls denied with reason policy-failed (POLICY_FAILED)",
            ended.len()
        );
        if std::env::var_os("CONTENTION_DEBUG").is_some() {
            let _ = dir.keep();
        }
    });
}
