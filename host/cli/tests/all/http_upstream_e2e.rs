//! HTTP-upstream procedures through the real `capgate serve`: a deployment whose
//! capabilities are the application's own backend (a small axum server this test starts).
//! A call completes; a backend that dies mid-call yields a governed answer, not a hang; a
//! backend that stops sending progress is cut by the stall watchdog; a redirect is never
//! followed; an `https://` backend signed by a private CA is reached through `caFile`.

use crate::common;

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use axum::routing::post;
use common::*;
use futures::StreamExt;
use futures::stream;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
"#;

const GATEWAY: &str = r#"
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
        format!("{CONFIG}{GATEWAY}")
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

/// `capgate serve` over these capabilities (a config file written in `dir`), and the
/// `/agent/invoke` URL Dana calls.
fn serve(dir: &std::path::Path, capabilities: &str) -> (Server, String) {
    let config = dir.join("capgate.toml");
    let key_hash = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(b"dana-dev-key"))
    };
    std::fs::write(
        &config,
        format!("revision = \"http-upstream-test\"\n{capabilities}{GATEWAY}")
            .replace("@KEYHASH@", &key_hash),
    )
    .expect("write config");
    let store_url = format!("sqlite://{}", dir.join("capgate.db").display());
    let server = Server::start(&config, &store_url);
    let url = format!("{}/agent/invoke", server.base);
    (server, url)
}

/// Serve `app` on 127.0.0.1 over plain HTTP; its base URL.
async fn serve_http(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redirecting_upstream_is_not_followed_and_its_target_sees_no_request() {
    // Where the backend's redirect points: it counts whatever reaches it.
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    let elsewhere = serve_http(Router::new().fallback(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        async { axum::Json(json!({ "refundId": "ref_elsewhere", "status": "issued" })) }
    }))
    .await;
    let location = format!("{elsewhere}/refund");
    let moved = serve_http(Router::new().fallback(move || async move {
        (
            axum::http::StatusCode::TEMPORARY_REDIRECT,
            [(axum::http::header::LOCATION, location)],
        )
    }))
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let (_server, url) = serve(
        dir.path(),
        &format!(
            r#"
[[capabilities]]
id = "orders.refund"
description = "Refund an order"
expose = {{ aiSdk = true }}
sideEffect = "write"
risk = "low"
procedure = {{ http = {{ target = "orders", url = "{moved}/refund", headers = {{ x-api-key = "svc-secret" }} }} }}
"#
        ),
    );

    let (status, answer) = Caller::new("dana-dev-key")
        .post(
            &url,
            &invoke("orders.refund", json!({ "orderId": "ord_1" }), "r1"),
        )
        .await;
    // A hidden failure of a write the procedure was entered for: the gateway cannot know the
    // effect, so the receipt stays pending (the answer names nothing of the upstream).
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "outcome-unknown", "{answer}");
    assert!(!answer.to_string().contains("ref_elsewhere"), "{answer}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "neither the input nor the x-api-key reached the redirect's target"
    );
}

/// A test CA (its certificate in PEM) and a server certificate and key it issued for
/// 127.0.0.1.
fn test_pki() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().expect("CA key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "capgate e2e test CA");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).expect("CA certificate");
    let server_key = rcgen::KeyPair::generate().expect("server key");
    let server = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("server params")
        .signed_by(&server_key, &ca)
        .expect("server certificate");
    (ca.pem(), server.pem(), server_key.serialize_pem())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_https_upstream_signed_by_the_ca_file_works_through_capgate_serve() {
    let (ca_pem, cert_pem, key_pem) = test_pki();
    let refunds = Arc::new(AtomicUsize::new(0));
    let counted = refunds.clone();
    let app = Router::new().route(
        "/refund",
        post(move |axum::Json(call): axum::Json<Value>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                axum::Json(json!({ "refundId": "ref_tls", "amount": call["input"]["amount"] }))
            }
        }),
    );
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem(
        cert_pem.into_bytes(),
        key_pem.into_bytes(),
    )
    .await
    .expect("TLS config");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let backend = format!("https://{}", listener.local_addr().expect("addr"));
    let server = axum_server::from_tcp_rustls(listener, tls).expect("TLS server");
    tokio::spawn(async move {
        let _ = server.serve(app.into_make_service()).await;
    });

    // The CA sits beside the config file and is named relative to it.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("certs")).expect("mkdir");
    std::fs::write(dir.path().join("certs/ca.pem"), ca_pem).expect("write CA");
    let capability = |id: &str, ca_file: &str| {
        format!(
            r#"
[[capabilities]]
id = "{id}"
description = "Refund an order"
expose = {{ aiSdk = true }}
sideEffect = "write"
risk = "low"
procedure = {{ http = {{ target = "{id}", url = "{backend}/refund"{ca_file} }} }}
"#
        )
    };
    let (_server, url) = serve(
        dir.path(),
        &[
            capability("orders.refund", r#", caFile = "certs/ca.pem""#),
            capability("orders.untrusted", ""),
        ]
        .concat(),
    );
    let dana = Caller::new("dana-dev-key");

    let (status, done) = dana
        .post(
            &url,
            &invoke("orders.refund", json!({ "amount": 30 }), "t1"),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["output"],
        json!({ "refundId": "ref_tls", "amount": 30 })
    );
    assert_eq!(refunds.load(Ordering::SeqCst), 1);

    // The same backend without the caFile: an unknown issuer, a closed failure. The TLS
    // handshake failed before anything was sent, so the call failed (issue 55: its receipt
    // is settled, not left pending).
    let (status, refused) = dana
        .post(
            &url,
            &invoke("orders.untrusted", json!({ "amount": 30 }), "t2"),
        )
        .await;
    assert_eq!(status, 200, "{refused}");
    assert_eq!(refused["status"], "failed", "{refused}");
    assert_eq!(refused["error"]["code"], "INTERNAL_ERROR", "{refused}");
    assert!(refused.get("output").is_none(), "{refused}");
    assert_eq!(refunds.load(Ordering::SeqCst), 1, "no request got through");
}
