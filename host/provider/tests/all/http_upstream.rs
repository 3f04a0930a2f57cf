//! The HTTP upstream adapter end to end: a capability driven through
//! `capgate_core::runtime::Runtime` against a small real axum backend on 127.0.0.1:0
//! (over HTTPS too, with a CA and server certificate made at test time).
//! Real sockets and real time; assertions are about outcomes, never durations.

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use capgate_core::prelude::*;
use capgate_provider::health::{LivenessClassification, ProbeTarget, ProviderHealth, probe_health};
use capgate_provider::http::{HttpUpstreamError, NDJSON_CONTENT_TYPE};
use capgate_provider::prelude::*;
use futures::StreamExt;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// A backend running on its own runtime and thread, so that killing it (dropping that
/// runtime) closes every socket it holds, mid-response included.
struct Backend {
    addr: SocketAddr,
    scheme: &'static str,
    kill: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Backend {
    fn start(router: Router) -> Backend {
        Backend::spawn(router, None)
    }

    /// The backend over HTTPS, presenting this server certificate (PEM) and key.
    #[cfg(feature = "tls")]
    fn start_tls(router: Router, cert_pem: &str, key_pem: &str) -> Backend {
        Backend::spawn(router, Some((cert_pem.into(), key_pem.into())))
    }

    fn spawn(router: Router, tls: Option<(Vec<u8>, Vec<u8>)>) -> Backend {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (kill_tx, kill_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("backend runtime");
            rt.spawn(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                addr_tx
                    .send(listener.local_addr().expect("addr"))
                    .expect("send addr");
                match tls {
                    None => axum::serve(listener, router).await.expect("serve"),
                    Some((cert, key)) => {
                        let config = axum_server::tls_rustls::RustlsConfig::from_pem(cert, key)
                            .await
                            .expect("TLS config");
                        axum_server::from_tcp_rustls(
                            listener.into_std().expect("std listener"),
                            config,
                        )
                        .expect("TLS server")
                        .serve(router.into_make_service())
                        .await
                        .expect("serve");
                    }
                }
            });
            let _ = kill_rx.recv();
            rt.shutdown_background();
        });
        let addr = addr_rx.recv().expect("backend address");
        Backend {
            addr,
            scheme,
            kill: Some(kill_tx),
            thread: Some(thread),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// Kill the backend: every task and socket of it goes away at once.
    fn kill(&mut self) {
        if let Some(k) = self.kill.take() {
            let _ = k.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Clone, Default)]
struct Seen {
    bodies: Arc<Mutex<Vec<Value>>>,
    idempotency: Arc<Mutex<Vec<String>>>,
}

fn ndjson<S>(stream: S) -> Response
where
    S: futures::Stream<Item = Result<String, Infallible>> + Send + 'static,
{
    (
        [(header::CONTENT_TYPE, NDJSON_CONTENT_TYPE)],
        Body::from_stream(stream),
    )
        .into_response()
}

fn line(v: Value) -> Result<String, Infallible> {
    Ok(format!("{v}\n"))
}

fn backend_router(seen: Seen, mid_call: Arc<Notify>) -> Router {
    let refund = {
        let seen = seen.clone();
        move |headers: HeaderMap, Json(body): Json<Value>| {
            let seen = seen.clone();
            async move {
                seen.idempotency.lock().unwrap().push(
                    headers
                        .get("idempotency-key")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string(),
                );
                let amount = body["input"]["amount"].clone();
                seen.bodies.lock().unwrap().push(body);
                Json(json!({ "refundId": "ref_77", "amount": amount, "status": "issued" }))
            }
        }
    };
    let stream = |_: Json<Value>| async {
        let lines = (0..3)
            .map(|i| line(json!({ "progress": { "step": i } })))
            .chain([
                line(json!({ "usage": { "inputTokens": 5, "outputTokens": 2, "totalTokens": 7 } })),
                line(json!({ "result": { "refundId": "ref_streamed", "amount": 20 } })),
            ]);
        ndjson(futures::stream::iter(lines.collect::<Vec<_>>()))
    };
    let long_stream = |_: Json<Value>| async {
        let s = futures::stream::unfold(0u32, |i| async move {
            if i > 15 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let v = if i == 15 {
                json!({ "result": { "refundId": "ref_long", "amount": 20 } })
            } else {
                json!({ "progress": { "step": i } })
            };
            Some((line(v), i + 1))
        });
        ndjson(s)
    };
    let stall = |_: Json<Value>| async {
        ndjson(
            futures::stream::iter([line(json!({ "progress": { "step": "validating" } }))])
                .chain(futures::stream::pending()),
        )
    };
    let dies = {
        let mid_call = mid_call.clone();
        move |_: Json<Value>| {
            let mid_call = mid_call.clone();
            async move {
                let tell = futures::stream::once(async move {
                    mid_call.notify_one();
                    std::future::pending::<Result<String, Infallible>>().await
                });
                ndjson(futures::stream::iter([line(json!({ "progress": "charging" }))]).chain(tell))
            }
        }
    };
    let hangs = {
        let mid_call = mid_call.clone();
        move |_: Json<Value>| {
            let mid_call = mid_call.clone();
            async move {
                mid_call.notify_one();
                std::future::pending::<()>().await;
                StatusCode::OK
            }
        }
    };
    let defined = |_: Json<Value>| async {
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(
                json!({ "error": { "code": "ORDER_NOT_REFUNDABLE", "message": "Order ord_1 was already refunded.", "data": { "orderId": "ord_1" } } }),
            ),
        )
    };
    let stream_error = |_: Json<Value>| async {
        ndjson(futures::stream::iter([
            line(json!({ "progress": 1 })),
            line(
                json!({ "error": { "code": "LIMIT", "message": "Refund limit reached.", "retryable": false } }),
            ),
        ]))
    };
    let unauth = |_: Json<Value>| async {
        (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "error": { "code": "AUTH", "message": "token expired" } })),
        )
    };
    let forbidden = |_: Json<Value>| async { (StatusCode::FORBIDDEN, "nope") };
    let boom = |_: Json<Value>| async {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "stack trace with secrets",
        )
    };
    let plain_404 = |_: Json<Value>| async { (StatusCode::NOT_FOUND, "no such route") };
    let garbage =
        |_: Json<Value>| async { ([(header::CONTENT_TYPE, "application/json")], "not json {") };
    let no_result =
        |_: Json<Value>| async { ndjson(futures::stream::iter([line(json!({ "progress": 1 }))])) };
    let bad_line = |_: Json<Value>| async {
        ndjson(futures::stream::iter([Ok(
            "{\"surprise\": 1}\n".to_string()
        )]))
    };

    Router::new()
        .route("/refund", post(refund))
        .route("/stream", post(stream))
        .route("/long-stream", post(long_stream))
        .route("/stall", post(stall))
        .route("/dies", post(dies))
        .route("/hangs", post(hangs))
        .route("/defined", post(defined))
        .route("/stream-error", post(stream_error))
        .route("/unauth", post(unauth))
        .route("/forbidden", post(forbidden))
        .route("/boom", post(boom))
        .route("/plain-404", post(plain_404))
        .route("/garbage", post(garbage))
        .route("/no-result", post(no_result))
        .route("/bad-line", post(bad_line))
        .route(
            "/health",
            get(|| async { Json(json!({ "status": "available", "target": "orders-backend" })) }),
        )
        .route(
            "/health-unhealthy",
            get(|| async { Json(json!({ "status": "unavailable" })) }),
        )
        .route(
            "/health-503",
            get(|| async {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    Json(json!({ "status": "unavailable" })),
                )
            }),
        )
        .route(
            "/health-other",
            get(|| async { Json(json!({ "status": "unavailable", "target": "billing" })) }),
        )
        .route("/health-garbage", get(|| async { "<html>" }))
        .route(
            "/health-weird",
            get(|| async { Json(json!({ "status": "degraded" })) }),
        )
}

struct Fixture {
    backend: Backend,
    seen: Seen,
    mid_call: Arc<Notify>,
}

fn fixture() -> Fixture {
    let seen = Seen::default();
    let mid_call = Arc::new(Notify::new());
    let backend = Backend::start(backend_router(seen.clone(), mid_call.clone()));
    Fixture {
        backend,
        seen,
        mid_call,
    }
}

fn upstream(url: String, health: Option<String>) -> HttpUpstream {
    HttpUpstream::new(HttpUpstreamConfig {
        target: "orders-backend".into(),
        url,
        health_url: health,
        ..Default::default()
    })
    .expect("valid upstream")
}

fn refund_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "orderId": {"type": "string"}, "amount": {"type": "number"} },
        "required": ["orderId", "amount"],
        "additionalProperties": false
    })
}

/// The customer-support refund capability, its procedure an HTTP upstream.
fn refund_runtime(up: HttpUpstream, stall_ms: i64, sink: Arc<MemorySink>) -> Runtime {
    let id = up.identity().clone();
    let mut providers = ProviderRegistry::new();
    providers
        .register(Arc::new(up), conf(stall_ms))
        .expect("register");
    let providers = ProviderRuntime::new(providers);
    let registry = Registry::builder()
        .capability(
            CapabilityDef::new(
                "orders.refund",
                CapabilityMeta::new("Refund an order", SideEffect::Write, Risk::High)
                    .exposed_on([Surface::AiSdk, Surface::Mcp, Surface::Direct])
                    .with_timeout_ms(20_000),
            )
            .input_schema(refund_schema())
            .policy(capgate_testkit::walkthrough::refund_limit(
                "refundLimit",
                None,
            ))
            .procedure(ProviderProcedure::new(providers, id)),
        )
        .build()
        .expect("registry");
    Runtime::builder(registry)
        .audit_sink(sink)
        .build()
        .expect("a valid runtime")
}

fn conf(ms: i64) -> ProviderConf {
    ProviderConf {
        response_stall_timeout_ms: ms,
        ..Default::default()
    }
}

fn dana() -> Actor {
    Actor::user("u_dana", json!({ "orgId": "org_1" }))
}

fn refund(amount: i64) -> InvokeRequest {
    InvokeRequest::new(
        Surface::AiSdk,
        "orders.refund",
        json!({ "orderId": "ord_1", "amount": amount }),
        dana(),
    )
}

fn data_of(sink: &MemorySink, ty: &str) -> Value {
    let ev = sink
        .events()
        .into_iter()
        .find(|e| e.type_name() == ty)
        .unwrap_or_else(|| panic!("no {ty} event in {:?}", sink.types()));
    serde_json::to_value(&ev).unwrap()["data"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_upstream_capability_works_end_to_end_and_receives_the_agent_info() {
    let fx = fixture();
    let sink = Arc::new(MemorySink::new());
    let rt = refund_runtime(upstream(fx.backend.url("/refund"), None), 0, sink.clone());

    let r = rt.invoke(refund(20).idempotency_key("idk_client_1")).await;
    assert_eq!(r.status(), "completed", "{r:?}");
    let ExecutionResult::Completed {
        output,
        execution_id,
    } = &r
    else {
        unreachable!()
    };
    assert_eq!(
        output,
        &json!({ "refundId": "ref_77", "amount": 20, "status": "issued" })
    );

    let body = fx.seen.bodies.lock().unwrap()[0].clone();
    assert_eq!(
        body["input"],
        json!({ "orderId": "ord_1", "amount": 20 }),
        "the validated input"
    );
    assert_eq!(body["agent"]["executionId"], json!(execution_id));
    assert_eq!(body["runId"], json!(execution_id));
    assert_eq!(body["agent"]["idempotencyKey"], json!("idk_client_1"));
    assert_eq!(body["agent"]["actor"]["id"], json!("u_dana"));
    assert_eq!(body["agent"]["capabilityId"], json!("orders.refund"));
    assert_eq!(body["attempt"], json!(1));
    assert!(body["agent"].get("approval").is_none());
    assert_eq!(fx.seen.idempotency.lock().unwrap()[0], "idk_client_1");
    assert_eq!(sink.types().last().copied(), Some("capability.completed"));

    // After approval, the approval and its approver reach the backend too.
    let pending = rt.invoke(refund(649)).await;
    assert_eq!(pending.status(), "approval-required");
    let approval_id = pending.approval().expect("approval").id.clone();
    rt.approvals()
        .decide(
            &approval_id,
            DecideRequest {
                status: DecisionStatus::Approved,
                approver: ActorRef {
                    id: "u_priya".into(),
                    kind: ActorKind::User,
                },
                comment: None,
                decider: capgate_core::runtime::Decider::Approver {
                    namespace: String::new(),
                    roles: Vec::new(),
                },
            },
        )
        .await
        .expect("decide");
    let resumed = rt.resume(&approval_id, ResumeOptions::default()).await;
    assert_eq!(resumed.status(), "completed", "{resumed:?}");
    let body = fx.seen.bodies.lock().unwrap()[1].clone();
    assert_eq!(body["agent"]["approval"]["id"], json!(approval_id));
    assert_eq!(
        body["agent"]["approval"]["approver"]["id"],
        json!("u_priya")
    );
    assert_eq!(
        body["agent"]["actor"]["id"],
        json!("u_dana"),
        "runs as the original actor"
    );
    assert!(
        body["agent"]["idempotencyKey"]
            .as_str()
            .unwrap()
            .starts_with("idk_")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_progress_reaches_the_callers_progress_fn_and_the_result_completes() {
    let fx = fixture();
    let sink = Arc::new(MemorySink::new());
    let rt = refund_runtime(upstream(fx.backend.url("/stream"), None), 0, sink);
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let r = rt
        .invoke(refund(20).progress(Arc::new(move |v| g.lock().unwrap().push(v))))
        .await;
    assert_eq!(r.status(), "completed", "{r:?}");
    let ExecutionResult::Completed { output, .. } = &r else {
        unreachable!()
    };
    assert_eq!(output, &json!({ "refundId": "ref_streamed", "amount": 20 }));
    assert_eq!(
        *got.lock().unwrap(),
        vec![json!({"step": 0}), json!({"step": 1}), json!({"step": 2})],
        "progress forwarded in order; usage is observation data, not progress output"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_keeps_progressing_runs_past_the_stall_timeout() {
    let fx = fixture();
    let sink = Arc::new(MemorySink::new());
    // 16 lines 100 ms apart (≈1.6 s in all) against a 1 s stall timeout.
    let rt = refund_runtime(upstream(fx.backend.url("/long-stream"), None), 1_000, sink);
    let r = rt.invoke(refund(20)).await;
    assert_eq!(r.status(), "completed", "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_stops_sending_progress_is_cut_by_the_stall_watchdog() {
    let fx = fixture();
    let sink = Arc::new(MemorySink::new());
    let up = upstream(fx.backend.url("/stall"), Some(fx.backend.url("/health")));
    let rt = refund_runtime(up, 300, sink.clone());
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let r = rt
        .invoke(refund(20).progress(Arc::new(move |v| g.lock().unwrap().push(v))))
        .await;

    // A TIMEOUT cancelled envelope...
    assert_eq!(r.status(), "cancelled", "{r:?}");
    let err = r.error().expect("error");
    assert_eq!(err.code(), ErrorCode::Timeout);
    assert!(
        err.retryable(),
        "the dropped request confirmed the close fence"
    );
    // ...whose public face carries no stall metadata...
    let public = serde_json::to_value(&r).unwrap();
    assert_eq!(
        public["error"],
        json!({ "code": "TIMEOUT", "message": "The operation timed out.", "retryable": true })
    );
    let text = public.to_string();
    for secret in [
        "response_stalled",
        "adapterMetadata",
        "provider_health",
        "orders-backend",
        "idle_ms",
    ] {
        assert!(!text.contains(secret), "{secret} leaked into the envelope");
    }
    // ...while the audit event carries exactly the allowlisted metadata.
    let data = data_of(&sink, "capability.cancelled");
    assert_eq!(data["code"], json!("TIMEOUT"));
    let meta = &data["metadata"];
    assert_eq!(meta["code"], json!("response_stalled"));
    assert_eq!(meta["provider_health"], json!("request_stalled"));
    assert_eq!(meta["liveness_classification"], json!("available"));
    assert_eq!(meta["adapter"], json!("http"));
    assert_eq!(meta["target"], json!("orders-backend"));
    assert_eq!(meta["close_fence"], json!("confirmed"));
    assert_eq!(meta["run_id"], json!(r.execution_id()));
    assert_eq!(
        meta["attempt_id"],
        json!(format!("{}/attempt-1", r.execution_id()))
    );
    assert!(meta["idle_ms"].as_u64().unwrap() >= 300);
    assert!(
        meta.get("health_observation_seq").is_none(),
        "no connection bound here"
    );
    let keys: Vec<&String> = meta.as_object().unwrap().keys().collect();
    assert!(
        keys.iter()
            .all(|k| capgate_provider::stall::STALL_METADATA_KEYS.contains(&k.as_str()))
    );
    // The one progress line before the stall was forwarded.
    assert_eq!(*got.lock().unwrap(), vec![json!({ "step": "validating" })]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_backend_mid_call_yields_a_governed_failure_not_a_hang() {
    let mut fx = fixture();
    let sink = Arc::new(MemorySink::new());
    let rt = refund_runtime(upstream(fx.backend.url("/dies"), None), 0, sink.clone());
    let call = tokio::spawn(async move { rt.invoke(refund(20)).await });
    fx.mid_call.notified().await;
    fx.backend.kill();
    let r = call.await.expect("invoke returns");
    assert_eq!(r.status(), "failed", "{r:?}");
    assert_eq!(r.error().unwrap().code(), ErrorCode::ExecutionFailed);
    let public = serde_json::to_value(&r).unwrap();
    assert_eq!(
        public["error"],
        json!({ "code": "INTERNAL_ERROR", "message": "The operation failed.", "retryable": false })
    );
    assert_eq!(
        data_of(&sink, "capability.failed")["code"],
        json!("EXECUTION_FAILED")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_a_governed_hidden_failure() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let sink = Arc::new(MemorySink::new());
    let rt = refund_runtime(
        upstream(format!("http://127.0.0.1:{port}/refund"), None),
        0,
        sink,
    );
    let r = rt.invoke(refund(20)).await;
    assert_eq!(r.status(), "failed");
    assert_eq!(r.error().unwrap().code(), ErrorCode::ExecutionFailed);
    assert!(!r.error().unwrap().expose_to_model());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caller_cancellation_reaches_the_upstream_call() {
    let fx = fixture();
    let sink = Arc::new(MemorySink::new());
    let rt = refund_runtime(upstream(fx.backend.url("/hangs"), None), 0, sink);
    let token = CancellationToken::new();
    let t = token.clone();
    let call = tokio::spawn(async move { rt.invoke(refund(20).cancel(t)).await });
    fx.mid_call.notified().await;
    token.cancel();
    let r = call.await.unwrap();
    assert_eq!(r.status(), "cancelled");
    assert_eq!(r.error().unwrap().code(), ErrorCode::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_and_json_errors_map_to_the_cores_procedure_errors() {
    let fx = fixture();
    // (path, status, core code, exposed, public message)
    let table = [
        (
            "/defined",
            "failed",
            ErrorCode::ExecutionFailed,
            true,
            "Order ord_1 was already refunded.",
        ),
        (
            "/stream-error",
            "failed",
            ErrorCode::ExecutionFailed,
            true,
            "Refund limit reached.",
        ),
        (
            "/unauth",
            "failed",
            ErrorCode::Unauthenticated,
            true,
            "Authentication is required.",
        ),
        (
            "/forbidden",
            "failed",
            ErrorCode::Forbidden,
            true,
            "The operation is forbidden.",
        ),
        (
            "/boom",
            "failed",
            ErrorCode::ExecutionFailed,
            false,
            "The operation failed.",
        ),
        (
            "/plain-404",
            "failed",
            ErrorCode::ExecutionFailed,
            false,
            "The operation failed.",
        ),
        (
            "/garbage",
            "failed",
            ErrorCode::ExecutionFailed,
            false,
            "The operation failed.",
        ),
        (
            "/no-result",
            "failed",
            ErrorCode::ExecutionFailed,
            false,
            "The operation failed.",
        ),
        (
            "/bad-line",
            "failed",
            ErrorCode::ExecutionFailed,
            false,
            "The operation failed.",
        ),
    ];
    for (path, status, code, exposed, message) in table {
        let sink = Arc::new(MemorySink::new());
        let rt = refund_runtime(upstream(fx.backend.url(path), None), 0, sink);
        let r = rt.invoke(refund(20)).await;
        assert_eq!(r.status(), status, "{path}: {r:?}");
        let err = r.error().unwrap();
        assert_eq!(err.code(), code, "{path}");
        assert_eq!(err.expose_to_model(), exposed, "{path}");
        assert_eq!(err.to_public().message, message, "{path}");
        let text = serde_json::to_string(&r).unwrap();
        assert!(
            !text.contains("secrets") && !text.contains("token expired"),
            "{path}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_endpoint_is_probed_for_the_exact_target_and_fails_closed() {
    let fx = fixture();
    let exact = ProbeTarget {
        adapter: "http".into(),
        target: "orders-backend".into(),
        instance_key: None,
    };
    let table = [
        (
            "/health",
            LivenessClassification::Available,
            ProviderHealth::RequestStalled,
        ),
        (
            "/health-unhealthy",
            LivenessClassification::Unavailable,
            ProviderHealth::ProviderUnhealthy,
        ),
        (
            "/health-503",
            LivenessClassification::Error,
            ProviderHealth::HealthUnknown,
        ),
        (
            "/health-other",
            LivenessClassification::IdentityMismatch,
            ProviderHealth::HealthUnknown,
        ),
        (
            "/health-garbage",
            LivenessClassification::Error,
            ProviderHealth::HealthUnknown,
        ),
        (
            "/health-weird",
            LivenessClassification::Unknown,
            ProviderHealth::HealthUnknown,
        ),
        (
            "/no-such-route",
            LivenessClassification::Error,
            ProviderHealth::HealthUnknown,
        ),
    ];
    for (path, class, health) in table {
        let up = upstream(fx.backend.url("/refund"), Some(fx.backend.url(path)));
        let report = probe_health(up.prober(), &exact).await;
        assert_eq!(
            (report.classification, report.health),
            (class, health),
            "{path}"
        );
    }
    // A prober asked about another target cannot vouch for it.
    let up = upstream(fx.backend.url("/refund"), Some(fx.backend.url("/health")));
    let other = ProbeTarget {
        target: "billing".into(),
        ..exact.clone()
    };
    assert_eq!(
        probe_health(up.prober(), &other).await.health,
        ProviderHealth::HealthUnknown
    );
    // No health endpoint: no prober, fail closed.
    let up = upstream(fx.backend.url("/refund"), None);
    assert!(up.prober().is_none());
    assert_eq!(
        probe_health(up.prober(), &exact).await.classification,
        LivenessClassification::Unsupported
    );
}

#[test]
fn upstream_configuration_is_validated_up_front() {
    let base = HttpUpstreamConfig {
        target: "orders-backend".into(),
        url: "http://127.0.0.1:1/refund".into(),
        ..Default::default()
    };
    assert!(HttpUpstream::new(base.clone()).is_ok());
    type Check = fn(&HttpUpstreamError) -> bool;
    let cases: Vec<(HttpUpstreamConfig, Check)> = vec![
        (
            HttpUpstreamConfig {
                target: String::new(),
                ..base.clone()
            },
            |e| matches!(e, HttpUpstreamError::EmptyTarget),
        ),
        (
            HttpUpstreamConfig {
                url: "not a url".into(),
                ..base.clone()
            },
            |e| matches!(e, HttpUpstreamError::InvalidUrl { field: "url", .. }),
        ),
        (
            HttpUpstreamConfig {
                url: "ftp://host/x".into(),
                ..base.clone()
            },
            |e| matches!(e, HttpUpstreamError::UnsupportedScheme { .. }),
        ),
        (
            HttpUpstreamConfig {
                health_url: Some("::".into()),
                ..base.clone()
            },
            |e| {
                matches!(
                    e,
                    HttpUpstreamError::InvalidUrl {
                        field: "healthUrl",
                        ..
                    }
                )
            },
        ),
        (
            HttpUpstreamConfig {
                headers: [("bad header".to_string(), "v".to_string())].into(),
                ..base.clone()
            },
            |e| matches!(e, HttpUpstreamError::InvalidHeader(_)),
        ),
        (
            HttpUpstreamConfig {
                headers: [("x-key".to_string(), "line\nbreak".to_string())].into(),
                ..base.clone()
            },
            |e| matches!(e, HttpUpstreamError::InvalidHeader(_)),
        ),
    ];
    for (cfg, want) in cases {
        match HttpUpstream::new(cfg.clone()) {
            Err(e) => assert!(want(&e), "{cfg:?}: {e}"),
            Ok(_) => panic!("{cfg:?} accepted"),
        }
    }
    #[cfg(feature = "tls")]
    assert!(
        HttpUpstream::new(HttpUpstreamConfig {
            url: "https://example.invalid/".into(),
            ..base.clone()
        })
        .is_ok()
    );
    #[cfg(not(feature = "tls"))]
    assert!(matches!(
        HttpUpstream::new(HttpUpstreamConfig {
            url: "https://example.invalid/".into(),
            ..base.clone()
        }),
        Err(HttpUpstreamError::TlsUnavailable { field: "url" })
    ));
    // The configuration is plain serde for the CLI's TOML/JSON.
    let cfg: HttpUpstreamConfig = serde_json::from_value(json!({
        "target": "orders-backend", "url": "http://127.0.0.1:8080/refund",
        "healthUrl": "http://127.0.0.1:8080/health", "headers": { "x-api-key": "k" }, "connectTimeoutMs": 500,
        "caFile": "certs/ca.pem"
    }))
    .unwrap();
    assert_eq!(cfg.connect_timeout_ms, Some(500));
    assert_eq!(cfg.ca_file, Some("certs/ca.pem".into()));
}

/// A backend that counts every request it receives, whatever its method and path, and
/// would answer it as a healthy, successful upstream: the target of the redirects below.
fn counting_backend(hits: Arc<AtomicUsize>) -> Backend {
    Backend::start(Router::new().fallback(move || {
        hits.fetch_add(1, Ordering::SeqCst);
        async {
            Json(json!({ "refundId": "ref_elsewhere", "status": "available", "target": "orders-backend" }))
        }
    }))
}

/// A backend whose every answer redirects to `location` with `status`.
fn redirecting_backend(status: StatusCode, location: String) -> Backend {
    Backend::start(
        Router::new()
            .fallback(move || async move { (status, [(header::LOCATION, location)], "moved") }),
    )
}

const REDIRECTS: [StatusCode; 5] = [
    StatusCode::MOVED_PERMANENTLY,
    StatusCode::FOUND,
    StatusCode::SEE_OTHER,
    StatusCode::TEMPORARY_REDIRECT,
    StatusCode::PERMANENT_REDIRECT,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirecting_upstream_fails_closed_and_its_target_receives_no_request() {
    let hits = Arc::new(AtomicUsize::new(0));
    let target = counting_backend(hits.clone());
    for status in REDIRECTS {
        let moved = redirecting_backend(status, target.url("/refund"));
        let up = HttpUpstream::new(HttpUpstreamConfig {
            target: "orders-backend".into(),
            url: moved.url("/refund"),
            headers: [("x-api-key".to_string(), "svc-secret".to_string())].into(),
            ..Default::default()
        })
        .expect("valid upstream");
        let sink = Arc::new(MemorySink::new());
        let r = refund_runtime(up, 0, sink.clone()).invoke(refund(20)).await;
        assert_eq!(r.status(), "failed", "{status}: {r:?}");
        let err = r.error().expect("error");
        assert_eq!(err.code(), ErrorCode::ExecutionFailed, "{status}");
        assert!(!err.expose_to_model(), "{status}: hidden from the model");
        assert_eq!(err.to_public().message, "The operation failed.", "{status}");
        let cause = err.cause().map(ToString::to_string).unwrap_or_default();
        assert!(
            cause.contains("redirects are not followed"),
            "{status}: {cause}"
        );
        assert_eq!(
            data_of(&sink, "capability.failed")["code"],
            json!("EXECUTION_FAILED")
        );
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "neither the input nor the credential header reached the Location"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirecting_health_endpoint_is_a_probe_error_and_is_not_followed() {
    let hits = Arc::new(AtomicUsize::new(0));
    let target = counting_backend(hits.clone());
    let exact = ProbeTarget {
        adapter: "http".into(),
        target: "orders-backend".into(),
        instance_key: None,
    };
    for status in REDIRECTS {
        let moved = redirecting_backend(status, target.url("/health"));
        let up = upstream(moved.url("/refund"), Some(moved.url("/health")));
        let report = probe_health(up.prober(), &exact).await;
        assert_eq!(
            (report.classification, report.health),
            (LivenessClassification::Error, ProviderHealth::HealthUnknown),
            "{status}"
        );
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

/// HTTPS upstreams: a CA and server certificate made at test time, the CA trusted through
/// `caFile`.
#[cfg(feature = "tls")]
mod https {
    use super::*;

    /// A test CA (named `ca_name`) and a server certificate it signed for 127.0.0.1, made
    /// fresh per test.
    struct TestPki {
        ca_pem: String,
        cert_pem: String,
        key_pem: String,
    }

    fn test_pki(ca_name: &str) -> TestPki {
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, ca_name);
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
        TestPki {
            ca_pem: ca.pem(),
            cert_pem: server.pem(),
            key_pem: server_key.serialize_pem(),
        }
    }

    /// An HTTPS backend answering refunds and health, counting the refunds it received.
    fn tls_backend(pki: &TestPki, refunds: Arc<AtomicUsize>) -> Backend {
        let router = Router::new()
            .route(
                "/refund",
                post(move |Json(body): Json<Value>| {
                    refunds.fetch_add(1, Ordering::SeqCst);
                    async move {
                        Json(json!({ "refundId": "ref_tls", "amount": body["input"]["amount"] }))
                    }
                }),
            )
            .route(
                "/health",
                get(|| async {
                    Json(json!({ "status": "available", "target": "orders-backend" }))
                }),
            );
        Backend::start_tls(router, &pki.cert_pem, &pki.key_pem)
    }

    fn https_upstream(backend: &Backend, ca_file: Option<std::path::PathBuf>) -> HttpUpstream {
        HttpUpstream::new(HttpUpstreamConfig {
            target: "orders-backend".into(),
            url: backend.url("/refund"),
            health_url: Some(backend.url("/health")),
            ca_file,
            ..Default::default()
        })
        .expect("valid upstream")
    }

    fn exact_target() -> ProbeTarget {
        ProbeTarget {
            adapter: "http".into(),
            target: "orders-backend".into(),
            instance_key: None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_https_upstream_whose_certificate_the_ca_file_vouches_for_completes_a_call() {
        let pki = test_pki("capgate test CA");
        let refunds = Arc::new(AtomicUsize::new(0));
        let backend = tls_backend(&pki, refunds.clone());
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, &pki.ca_pem).expect("write CA");

        let up = https_upstream(&backend, Some(ca_file));
        let report = probe_health(up.prober(), &exact_target()).await;
        assert_eq!(report.classification, LivenessClassification::Available);
        let sink = Arc::new(MemorySink::new());
        let r = refund_runtime(up, 0, sink).invoke(refund(20)).await;
        assert_eq!(r.status(), "completed", "{r:?}");
        let ExecutionResult::Completed { output, .. } = &r else {
            unreachable!()
        };
        assert_eq!(output, &json!({ "refundId": "ref_tls", "amount": 20 }));
        assert_eq!(refunds.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_https_upstream_from_an_unknown_issuer_fails_closed_without_its_ca() {
        let pki = test_pki("capgate test CA");
        let refunds = Arc::new(AtomicUsize::new(0));
        let backend = tls_backend(&pki, refunds.clone());
        // No caFile (the system's roots only), and a caFile of another CA.
        let dir = tempfile::tempdir().expect("tempdir");
        let other_ca = dir.path().join("other-ca.pem");
        std::fs::write(&other_ca, test_pki("another test CA").ca_pem).expect("write CA");
        for ca_file in [None, Some(other_ca)] {
            let up = https_upstream(&backend, ca_file.clone());
            let report = probe_health(up.prober(), &exact_target()).await;
            assert_eq!(
                (report.classification, report.health),
                (LivenessClassification::Error, ProviderHealth::HealthUnknown),
                "{ca_file:?}"
            );
            let sink = Arc::new(MemorySink::new());
            let r = refund_runtime(up, 0, sink).invoke(refund(20)).await;
            assert_eq!(r.status(), "failed", "{ca_file:?}: {r:?}");
            let err = r.error().expect("error");
            assert_eq!(err.code(), ErrorCode::ExecutionFailed);
            assert!(!err.expose_to_model());
            assert_eq!(err.to_public().message, "The operation failed.");
            let cause = err.cause().map(ToString::to_string).unwrap_or_default();
            assert!(cause.contains("UnknownIssuer"), "{ca_file:?}: {cause}");
        }
        assert_eq!(refunds.load(Ordering::SeqCst), 0, "no request got through");
    }

    #[test]
    fn a_ca_file_that_cannot_be_read_or_holds_no_certificate_is_refused_up_front() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = dir.path().join("ca.pem");
        std::fs::write(&good, test_pki("capgate test CA").ca_pem).expect("write CA");
        assert_eq!(capgate_provider::http::check_ca_file(&good), Ok(1));
        let key_only = dir.path().join("key-only.pem");
        std::fs::write(
            &key_only,
            rcgen::KeyPair::generate().expect("key").serialize_pem(),
        )
        .expect("write key");
        let not_pem = dir.path().join("notes.txt");
        std::fs::write(&not_pem, "trust me\n").expect("write text");
        let bad_der = dir.path().join("bad.pem");
        std::fs::write(
            &bad_der,
            "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n",
        )
        .expect("write bad certificate");
        let missing = dir.path().join("missing.pem");

        let with_ca = |url: &str, path: &std::path::Path| {
            HttpUpstream::new(HttpUpstreamConfig {
                target: "orders-backend".into(),
                url: url.into(),
                ca_file: Some(path.to_path_buf()),
                ..Default::default()
            })
        };
        let https = "https://127.0.0.1:1/refund";
        assert!(with_ca(https, &good).is_ok());
        match with_ca(https, &missing) {
            Err(e @ HttpUpstreamError::CaFileUnreadable { .. }) => {
                assert!(e.to_string().contains("missing.pem"), "{e}");
            }
            other => panic!("missing file accepted or misreported: {:?}", other.err()),
        }
        for path in [&key_only, &not_pem, &bad_der] {
            match with_ca(https, path) {
                Err(e @ HttpUpstreamError::CaFileInvalid { .. }) => {
                    assert_eq!(capgate_provider::http::check_ca_file(path), Err(e.clone()));
                    assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
                }
                other => panic!("{}: {:?}", path.display(), other.err()),
            }
        }
        // A plain-http upstream's caFile is checked all the same.
        assert!(matches!(
            with_ca("http://127.0.0.1:1/refund", &not_pem),
            Err(HttpUpstreamError::CaFileInvalid { .. })
        ));
    }
}

/// What a service with its own API received: method, path (as sent, still encoded), query,
/// the headers that matter here, body.
#[derive(Clone, Default)]
struct Recorded(Arc<Mutex<Vec<Value>>>);

/// A service with its own API (no capgate envelope): records every request; `/pets/missing`
/// answers 404 with a body the model must never see, `/pets/broken` 500, the rest 200 with
/// a JSON body (204 for DELETE).
fn service(recorded: Recorded) -> Backend {
    Backend::start(Router::new().fallback(
        move |method: axum::http::Method,
              uri: axum::http::Uri,
              headers: HeaderMap,
              body: String| {
            let recorded = recorded.clone();
            async move {
                let header = |n: &str| {
                    headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .map_or(Value::Null, |v| json!(v))
                };
                recorded.0.lock().expect("lock").push(json!({
                    "method": method.as_str(),
                    "path": uri.path(),
                    "query": uri.query(),
                    "tenant": header("x-tenant"),
                    "apiKey": header("x-api-key"),
                    "contentType": header("content-type"),
                    "idempotencyKey": header("idempotency-key"),
                    "body": body,
                }));
                match uri.path() {
                    "/v1/pets/missing" => (
                        StatusCode::NOT_FOUND,
                        Json(json!({ "message": "no pet missing in db shard 7 (secret)" })),
                    )
                        .into_response(),
                    "/v1/pets/broken" => {
                        (StatusCode::INTERNAL_SERVER_ERROR, "stack trace (secret)").into_response()
                    }
                    _ if method == axum::http::Method::DELETE => {
                        StatusCode::NO_CONTENT.into_response()
                    }
                    _ => Json(json!({ "id": "p1", "name": "Rex" })).into_response(),
                }
            }
        },
    ))
}

/// One capability (no input schema: the mapping itself must refuse what it cannot send)
/// whose procedure is `up`.
fn pet_runtime(up: HttpUpstream) -> Runtime {
    let id = up.identity().clone();
    let mut providers = ProviderRegistry::new();
    providers.register(Arc::new(up), conf(0)).expect("register");
    let providers = ProviderRuntime::new(providers);
    let registry = Registry::builder()
        .capability(
            CapabilityDef::new(
                "petstore.call",
                CapabilityMeta::new("A pet store operation", SideEffect::Write, Risk::Low)
                    .exposed_on([Surface::AiSdk]),
            )
            .procedure(ProviderProcedure::new(providers, id)),
        )
        .build()
        .expect("registry");
    Runtime::builder(registry).build().expect("a valid runtime")
}

fn mapped(base: String, request: Value) -> HttpUpstream {
    let cfg: HttpUpstreamConfig = serde_json::from_value(json!({
        "target": "petstore", "url": base,
        "headers": { "x-api-key": "svc-secret" },
        "request": request,
        "errors": { "404": "PET_NOT_FOUND" },
    }))
    .expect("a mapping config");
    HttpUpstream::new(cfg).expect("valid upstream")
}

fn call(input: Value) -> InvokeRequest {
    InvokeRequest::new(Surface::AiSdk, "petstore.call", input, dana())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_mapping_calls_the_service_as_its_own_clients_do() {
    let recorded = Recorded::default();
    let svc = service(recorded.clone());
    let last = || recorded.0.lock().expect("lock").last().cloned();

    // GET with a path value that must stay one segment, a query and a mapped header.
    let get = pet_runtime(mapped(
        svc.url("/v1/"),
        json!({ "method": "GET", "path": "/pets/{petId}", "query": ["verbose", "tag"],
                "headers": { "X-Tenant": "tenant" } }),
    ));
    let r = get
        .invoke(call(
            json!({ "petId": "a/b?c#d", "verbose": true, "tag": ["x", "y z"], "tenant": "t1" }),
        ))
        .await;
    assert_eq!(r.status(), "completed", "{r:?}");
    assert_eq!(r.output(), Some(&json!({ "id": "p1", "name": "Rex" })));
    let seen = last().expect("a request");
    assert_eq!(seen["method"], "GET");
    assert_eq!(seen["path"], "/v1/pets/a%2Fb%3Fc%23d");
    assert_eq!(seen["query"], "verbose=true&tag=x&tag=y+z");
    assert_eq!(seen["tenant"], "t1");
    assert_eq!(seen["apiKey"], "svc-secret");
    assert_eq!(seen["body"], "");
    assert!(seen["idempotencyKey"].is_string(), "{seen}");

    // POST with the named field as the JSON body.
    let post = pet_runtime(mapped(
        svc.url("/v1"),
        json!({ "method": "POST", "path": "/pets", "body": "body" }),
    ));
    let r = post
        .invoke(call(json!({ "body": { "name": "Rex", "tag": "dog" } })))
        .await;
    assert_eq!(r.status(), "completed", "{r:?}");
    let seen = last().expect("a request");
    assert_eq!(seen["method"], "POST");
    assert_eq!(seen["path"], "/v1/pets");
    assert_eq!(seen["query"], Value::Null);
    assert_eq!(seen["contentType"], "application/json");
    assert_eq!(
        serde_json::from_str::<Value>(seen["body"].as_str().expect("body")).expect("JSON"),
        json!({ "name": "Rex", "tag": "dog" })
    );

    // DELETE: an empty 2xx body is a null output; a declared 404 is the declared code,
    // shown without the service's body; an undeclared 500 stays hidden.
    let delete = pet_runtime(mapped(
        svc.url("/v1"),
        json!({ "method": "DELETE", "path": "/pets/{petId}" }),
    ));
    let r = delete.invoke(call(json!({ "petId": "p1" }))).await;
    assert_eq!(r.status(), "completed", "{r:?}");
    assert_eq!(r.output(), Some(&Value::Null));
    assert_eq!(last().expect("a request")["method"], "DELETE");
    let r = delete.invoke(call(json!({ "petId": "missing" }))).await;
    assert_eq!(r.status(), "failed", "{r:?}");
    let public = serde_json::to_value(r.error().expect("error").to_public()).expect("json");
    assert_eq!(public["code"], "EXECUTION_FAILED", "{public}");
    assert!(
        public["message"]
            .as_str()
            .is_some_and(|m| m.contains("PET_NOT_FOUND")),
        "{public}"
    );
    assert!(!public.to_string().contains("secret"), "{public}");
    let r = delete.invoke(call(json!({ "petId": "broken" }))).await;
    let err = r.error().expect("error");
    assert!(!err.expose_to_model());
    assert_eq!(err.to_public().message, "The operation failed.");

    // A missing path value fails closed before any request is sent.
    let before = recorded.0.lock().expect("lock").len();
    let r = delete.invoke(call(json!({}))).await;
    assert_eq!(r.status(), "failed", "{r:?}");
    let err = r.error().expect("error");
    assert!(!err.expose_to_model());
    assert!(
        err.cause()
            .map(ToString::to_string)
            .unwrap_or_default()
            .contains("petId"),
        "{err:?}"
    );
    let r = delete.invoke(call(json!({ "petId": ".." }))).await;
    assert_eq!(r.status(), "failed", "{r:?}");
    assert_eq!(recorded.0.lock().expect("lock").len(), before);
}

#[test]
fn a_request_mapping_is_validated_at_construction_and_located() {
    let with = |extra: Value| {
        let mut cfg = json!({ "target": "petstore", "url": "http://127.0.0.1:1/" });
        for (k, v) in extra.as_object().expect("object") {
            cfg[k] = v.clone();
        }
        HttpUpstream::new(serde_json::from_value(cfg).expect("config")).err()
    };
    let at = |e: Option<HttpUpstreamError>| {
        e.and_then(|e| e.setting().map(|s| s.join("/")))
            .unwrap_or_default()
    };
    assert!(with(json!({ "request": { "method": "GET", "path": "/a/{b}" } })).is_none());
    assert_eq!(
        at(with(json!({ "request": { "method": "FETCH" } }))),
        "request/method"
    );
    assert_eq!(
        at(with(
            json!({ "request": { "method": "GET", "path": "/a/{b" } })
        )),
        "request/path"
    );
    assert_eq!(at(with(json!({ "errors": { "200": "OK" } }))), "errors/200");
    assert_eq!(
        at(with(json!({ "errors": { "404": "not found" } }))),
        "errors/404"
    );
    assert_eq!(
        at(with(
            json!({ "headers": { "X-Key": "k" }, "request": { "method": "GET", "headers": { "x-key": "k" } } })
        )),
        "request/headers/x-key"
    );
    // Unknown keys of the mapping are refused by the format itself.
    assert!(
        serde_json::from_value::<HttpUpstreamConfig>(json!({
            "target": "t", "url": "http://h/", "request": { "method": "GET", "verb": "GET" }
        }))
        .is_err()
    );
}
