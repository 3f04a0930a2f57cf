//! HTTP-upstream procedures through the real `capgate serve`: a deployment whose
//! capabilities are the application's own backend (a small axum server this test starts).
//! A call completes; a backend that dies mid-call yields a governed answer, not a hang; a
//! backend that stops sending progress is cut by the stall watchdog.

mod common;

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use axum::routing::post;
use common::*;
use futures::StreamExt;
use futures::stream;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The application's backend: a plain refund, a stream that goes silent, a stream that
/// breaks (the connection dies mid-response).
async fn backend() -> String {
    let ndjson = |body: Body| {
        Response::builder()
            .header("content-type", "application/x-ndjson")
            .body(body)
            .expect("response")
    };
    let app = Router::new()
        .route(
            "/refund",
            post(|axum::Json(call): axum::Json<Value>| async move {
                axum::Json(json!({
                    "refundId": "ref_http_1",
                    "amount": call["input"]["amount"],
                    "status": "issued",
                    "gatewayRef": "gw_secret",
                }))
            }),
        )
        .route(
            "/silent",
            post(move || async move {
                let lines =
                    stream::iter([Ok::<_, std::io::Error>("{\"progress\":{\"pct\":10}}\n")])
                        .chain(stream::pending());
                ndjson(Body::from_stream(lines))
            }),
        )
        .route(
            "/crash",
            post(move || async move {
                let lines = stream::iter([
                    Ok("{\"progress\":{\"pct\":10}}\n"),
                    Err(std::io::Error::other("backend died")),
                ]);
                ndjson(Body::from_stream(lines))
            }),
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

const CONFIG: &str = r#"
revision = "http-upstream-test"

[[capabilities]]
id = "orders.refund"
description = "Refund an order"
expose = { aiSdk = true }
sideEffect = "write"
risk = "high"
inputSchema = { type = "object", properties = { orderId = { type = "string" }, amount = { type = "number" } }, required = ["orderId", "amount"] }
procedure = { http = { target = "orders", url = "@BACKEND@/refund" } }

[[capabilities]]
id = "reports.build"
description = "Build a report"
expose = { aiSdk = true }
sideEffect = "read"
risk = "low"
procedure = { http = { target = "reports", url = "@BACKEND@/silent" }, responseStallTimeoutMs = 500 }

[[capabilities]]
id = "orders.crash"
description = "A backend that dies mid-call"
expose = { aiSdk = true }
sideEffect = "write"
risk = "low"
procedure = { http = { target = "crash", url = "@BACKEND@/crash" } }

[gateway]
authorize = "authenticated"
routes = [{ path = "/agent", surface = "aiSdk" }]

[[gateway.apiKeys]]
sha256 = "@KEYHASH@"
namespace = "org_1"
surfaces = ["aiSdk"]
actor = { id = "u_dana", kind = "user", attributes = { orgId = "org_1" } }
"#;

fn invoke(capability: &str, input: Value, id: &str) -> Value {
    json!({"capabilityId": capability, "input": input, "invocationId": id, "correlationId": id})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http_upstream_procedures_complete_fail_governed_and_are_cut_when_silent() {
    let backend = backend().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("capgate.toml");
    let key_hash = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(b"dana-dev-key"))
    };
    std::fs::write(
        &config,
        CONFIG
            .replace("@BACKEND@", &backend)
            .replace("@KEYHASH@", &key_hash),
    )
    .expect("write config");
    let store_url = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&config, &store_url);
    let url = format!("{}/agent/invoke", server.base);
    let dana = Caller::new("dana-dev-key");

    let (status, done) = dana
        .post(
            &url,
            &invoke(
                "orders.refund",
                json!({"orderId": "ord_42", "amount": 120}),
                "h1",
            ),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"]["refundId"], "ref_http_1");
    assert_eq!(done["output"]["amount"], 120);

    // The backend dies mid-response: a governed answer at once. The procedure was entered,
    // so the effect is unknown: the receipt stays pending and the answer says so.
    let started = Instant::now();
    let (status, crashed) = dana
        .post(&url, &invoke("orders.crash", json!({}), "h2"))
        .await;
    assert_eq!(status, 200, "{crashed}");
    assert_eq!(crashed["status"], "outcome-unknown", "{crashed}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    // The backend goes silent after one progress line: the stall watchdog (500 ms) cuts it.
    let started = Instant::now();
    let (status, silent) = dana
        .post(&url, &invoke("reports.build", json!({}), "h3"))
        .await;
    assert_eq!(status, 200, "{silent}");
    assert_eq!(silent["status"], "outcome-unknown", "{silent}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cut by the watchdog, not the 25 s request ceiling ({:?})",
        started.elapsed()
    );

    // The audit trail names what happened; the model-facing answers never did.
    let store = capgate_store::Store::open(&store_url)
        .await
        .expect("open store");
    let events: Vec<Value> = store
        .audit_log()
        .tail(1000)
        .await
        .expect("tail")
        .into_iter()
        .filter_map(|r| r.event.ok())
        .map(|e| serde_json::to_value(&e).expect("json"))
        .collect();
    let of = |id: &str, ty: &str| {
        events
            .iter()
            .find(|e| {
                (e["correlationId"] == id || e["data"]["correlationId"] == id) && e["type"] == ty
            })
            .cloned()
            .unwrap_or_else(|| panic!("no {ty} for {id}: {events:#?}"))
    };
    of("h1", "capability.completed");
    of("h2", "capability.failed");
    let stalled = of("h3", "capability.cancelled");
    assert_eq!(
        stalled["data"]["metadata"]["code"], "response_stalled",
        "{stalled}"
    );
    assert!(!silent.to_string().contains("response_stalled"));

    // The operator reconciles the crashed call after checking the backend: show the
    // pending receipt's claim, settle it as failed; the caller's lookup then has it.
    let scope = [&DANA_AGENT_SCOPE[..], &["--store", &store_url][..]].concat();
    let shown: Value = serde_json::from_str(&capgate(
        &[&["invocations", "show", "h2"][..], &scope[..]].concat(),
    ))
    .expect("show prints JSON");
    assert_eq!(shown["state"], "pending", "{shown}");
    let claim = shown["claimToken"]
        .as_str()
        .expect("claim token")
        .to_string();
    let outcome = json!({
        "status": "failed", "invocationId": "h2", "executionId": "",
        "error": {"code": "EXECUTION_FAILED", "message": "The operation failed.", "retryable": false}
    })
    .to_string();
    let done = capgate(
        &[
            &[
                "invocations",
                "reconcile",
                "h2",
                "--claim",
                &claim,
                "--outcome",
                &outcome,
            ][..],
            &scope[..],
        ]
        .concat(),
    );
    assert!(done.contains("reconciled h2"), "{done}");
    let (_, receipt) = dana
        .post(
            &format!("{}/agent/getInvocation", server.base),
            &json!({"invocationId": "h2"}),
        )
        .await;
    assert_eq!(receipt["state"], "settled", "{receipt}");
    assert_eq!(
        receipt["outcome"]["error"]["code"], "EXECUTION_FAILED",
        "{receipt}"
    );
}
