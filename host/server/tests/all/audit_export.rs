//! `[audit.export.NAME]` started by [`capgate_server::serve::start`] (docs/guides/operating.md
//! "Exporting the trail"): a `jsonl` sink receives the events of calls served over HTTP, exactly
//! the store's chained events in its order, while a sink whose collector refuses every delivery (a
//! real receiver answering 503) is retried, named failing on `/readyz` once past its lag bound, and
//! holds nothing back from the other.

use crate::support::{self, Chained, DANA, PATIENCE, post, refund, text};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// An OTLP collector that refuses every delivery (`503`), counting them.
async fn refusing_collector() -> (String, Arc<AtomicUsize>) {
    let refused = Arc::new(AtomicUsize::new(0));
    let count = refused.clone();
    let app = axum::Router::new().route(
        "/v1/logs",
        axum::routing::post(move || {
            count.fetch_add(1, Ordering::SeqCst);
            async { axum::http::StatusCode::SERVICE_UNAVAILABLE }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the collector");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, refused)
}

/// The `jsonl` sink's event lines, file by file in name (creation) order.
fn exported(dir: &Path) -> Vec<Chained> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let lines = std::fs::read_to_string(&f).expect("read an export file");
        for line in lines.lines() {
            let v: Value = serde_json::from_str(line).expect("a whole JSON line");
            if v.get("checkpoint").is_some() {
                continue;
            }
            out.push((
                v["chain"].as_str().expect("chain").to_owned(),
                v["seq"].as_i64().expect("seq"),
                text(&v["event"]["type"]),
                text(&v["event"]["correlationId"]),
            ));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_calls_events_reach_a_jsonl_sink_while_a_broken_sink_is_named_unready() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = dir.path().join("export");
    let (collector, refused) = refusing_collector().await;
    let config = support::example_in(dir.path(), |text| {
        text.replace(
            "[telemetry.metrics]\n",
            &format!(
                "[audit.export.archive]\nto = \"jsonl\"\ndirectory = \"{}\"\nbatchEvents = 4\n\n\
                 [audit.export.siem]\nto = \"otlp\"\nendpoint = \"{collector}\"\nmaxLagSeconds = 1\n\n\
                 [telemetry.metrics]\n",
                files.display(),
            ),
        )
    });
    let s = support::serve(&config, dir.path()).await;
    let http = reqwest::Client::new();
    let invoke = format!("{}/agent/invoke", s.base);
    for (i, amount) in [20, 30, 649].into_iter().enumerate() {
        let (status, answer) = post(
            &http,
            &invoke,
            DANA,
            &refund(amount, &format!("export_{i}")),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
    }

    // The file receives the calls' events as they are committed, without a stop: two
    // completed refunds and one held for approval.
    let of = |got: &[Chained], id: &str| -> Vec<String> {
        got.iter()
            .filter(|e| e.3 == id)
            .map(|e| e.2.clone())
            .collect()
    };
    support::until("the calls' events in the file", PATIENCE, async || {
        let got = exported(&files);
        let done = |id: &str| of(&got, id).contains(&"capability.completed".to_owned());
        let held = of(&got, "export_2").contains(&"capability.approval_requested".to_owned());
        (done("export_0") && done("export_1") && held).then_some(())
    })
    .await;

    // The refused sink is retried and, past its bound, named failing; the file's is not.
    let readyz = support::until("/readyz to name the refused sink", PATIENCE, async || {
        let (status, body) = support::get(&http, &format!("{}/readyz", s.base), DANA).await;
        (status == 503 && body["checks"]["export:siem"] != "ok").then_some(body)
    })
    .await;
    assert!(refused.load(Ordering::SeqCst) >= 2, "retried");
    assert_eq!(readyz["checks"]["export:siem"], "failing", "{readyz}");
    assert_eq!(readyz["checks"]["export:archive"], "ok", "{readyz}");
    assert_eq!(readyz["checks"]["shutdown"], "ok", "{readyz}");

    s.served.stop().await.expect("a clean stop");
    // What the file holds is the store's chained trail, in its order, each event once (the
    // events recorded at the stop itself may be left for the next start), and every event
    // of the three calls is in it.
    let stored = support::audit_chained(&s.store).await;
    let exported = exported(&files);
    assert!(
        stored.starts_with(&exported),
        "the export is not the store's trail in order:\nexported {exported:#?}\nstored {stored:#?}"
    );
    for id in ["export_0", "export_1", "export_2"] {
        assert_eq!(of(&exported, id), of(&stored, id), "{id}");
        assert!(of(&stored, id).len() >= 2, "{id}: {stored:#?}");
    }
}
