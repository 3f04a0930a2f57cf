//! The gate's own edges, on a one-route app called in process: declarations that would
//! not govern what they say are refused before serving, a body streamed past the limit is
//! cut off, a second wrapped service fails closed, and a caller that goes away cancels.

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use bytes::Bytes;
use capgate_core::audit::MemorySink;
use capgate_core::prelude::*;
use capgate_tower::{Gate, GateError, Layer, Principal};
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Notify;
use tower::ServiceExt;

fn echo_capability(id: &str, surfaces: &[Surface]) -> CapabilityDef {
    CapabilityDef::new(
        id,
        CapabilityMeta::new("Echo", SideEffect::Write, Risk::Low).exposed_on(surfaces.to_vec()),
    )
}

/// An app whose `POST /echo` counts its calls and answers its body.
fn echo_app(calls: Arc<AtomicUsize>) -> Router {
    Router::new().route(
        "/echo",
        post(move |body: String| async move {
            calls.fetch_add(1, Ordering::SeqCst);
            body
        }),
    )
}

/// A governed `POST /echo` request as Dana.
fn echo_request(body: Body) -> Request<Body> {
    let mut request = Request::post("/echo")
        .header("content-type", "application/json")
        .body(body)
        .expect("a request");
    request
        .extensions_mut()
        .insert(Principal::new(capgate_testkit::actors::dana()));
    request
}

fn runtime_of(defs: Vec<CapabilityDef>, audit: Arc<MemorySink>) -> Runtime {
    let mut builder = Registry::builder();
    for def in defs {
        builder.push(def);
    }
    Runtime::builder(builder.build().expect("a valid registry"))
        .audit_sink(audit)
        .build()
        .expect("a valid runtime")
}

#[tokio::test]
async fn declarations_that_would_not_govern_what_they_say_are_refused_before_serving() {
    let audit = Arc::new(MemorySink::new());
    let refused = |gate: Gate, defs: Vec<CapabilityDef>| {
        gate.into_layer(runtime_of(defs, audit.clone()))
            .err()
            .expect("the gate is refused")
    };

    // The route's capability never made it into the registry.
    let mut gate = Gate::new(Surface::AiSdk);
    let _forgotten = gate.route(
        Method::POST,
        "/echo",
        echo_capability("echo", &[Surface::AiSdk]),
    );
    let other = echo_capability("other", &[Surface::AiSdk])
        .procedure(handler(|_| async { Ok(Value::Null) }));
    assert!(
        matches!(refused(gate, vec![other]), GateError::NotRegistered { capability, .. } if capability == "echo")
    );

    // Not exposed on the gate's surface: every call would be not found.
    let mut gate = Gate::new(Surface::AiSdk);
    let def = gate.route(
        Method::POST,
        "/echo",
        echo_capability("echo", &[Surface::Mcp]),
    );
    assert!(matches!(
        refused(gate, vec![def]),
        GateError::NotExposed { .. }
    ));

    // The procedure was replaced after `route`.
    let mut gate = Gate::new(Surface::AiSdk);
    let def = gate
        .route(
            Method::POST,
            "/echo",
            echo_capability("echo", &[Surface::AiSdk]),
        )
        .procedure(handler(|_| async { Ok(Value::Null) }));
    assert!(matches!(
        refused(gate, vec![def]),
        GateError::ProcedureReplaced { .. }
    ));

    // Not an absolute path, or one with a query.
    for path in ["echo", "/echo?x=1", ""] {
        let mut gate = Gate::new(Surface::AiSdk);
        let def = gate.route(
            Method::POST,
            path,
            echo_capability("echo", &[Surface::AiSdk]),
        );
        assert!(
            matches!(refused(gate, vec![def]), GateError::Path { .. }),
            "{path:?}"
        );
    }

    // The same route twice.
    let mut gate = Gate::new(Surface::AiSdk);
    let one = gate.route(
        Method::POST,
        "/echo",
        echo_capability("echo", &[Surface::AiSdk]),
    );
    let two = gate.route(
        Method::POST,
        "/echo",
        echo_capability("echo2", &[Surface::AiSdk]),
    );
    assert!(matches!(
        refused(gate, vec![one, two]),
        GateError::Duplicate { .. }
    ));
}

#[tokio::test]
async fn a_body_streamed_past_the_limit_is_413_and_runs_nothing() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut gate = Gate::new(Surface::AiSdk).max_body_bytes(1024);
    let def = gate.route(
        Method::POST,
        "/echo",
        echo_capability("echo", &[Surface::AiSdk]),
    );
    let runtime = runtime_of(vec![def], Arc::new(MemorySink::new()));
    let app = gate
        .into_layer(runtime)
        .expect("a gate")
        .layer(echo_app(calls.clone()));

    // Three 512-byte chunks and no Content-Length: refused while it is read.
    let chunks = (0..3).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b' '; 512])));
    let streamed = Body::from_stream(futures::stream::iter(chunks));
    let answer = app
        .clone()
        .oneshot(echo_request(streamed))
        .await
        .expect("an answer");
    assert_eq!(answer.status(), StatusCode::PAYLOAD_TOO_LARGE);

    // Within the limit it runs (the echo's answer is the input, as JSON).
    let fits = app
        .oneshot(echo_request(Body::from(r#"{"n": 1}"#)))
        .await
        .expect("an answer");
    assert_eq!(fits.status(), StatusCode::OK);
    let output = fits.into_body().collect().await.expect("a body").to_bytes();
    assert_eq!(
        serde_json::from_slice::<Value>(&output).expect("JSON"),
        json!({"n": 1})
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "only the call within the limit ran"
    );
}

#[tokio::test]
async fn a_second_service_wrapped_by_the_same_layer_fails_closed() {
    let (first, second) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut gate = Gate::new(Surface::AiSdk);
    let def = gate.route(
        Method::POST,
        "/echo",
        echo_capability("echo", &[Surface::AiSdk]),
    );
    let layer = gate
        .into_layer(runtime_of(vec![def], Arc::new(MemorySink::new())))
        .expect("a gate");
    let bound = layer.layer(echo_app(first.clone()));
    let unbound = layer.layer(echo_app(second.clone()));

    let refused = unbound
        .oneshot(echo_request(Body::from("{}")))
        .await
        .expect("an answer");
    assert_eq!(refused.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let ran = bound
        .oneshot(echo_request(Body::from("{}")))
        .await
        .expect("an answer");
    assert_eq!(ran.status(), StatusCode::OK);
    assert_eq!(
        (first.load(Ordering::SeqCst), second.load(Ordering::SeqCst)),
        (1, 0),
        "only the service the procedures call ever runs"
    );
}

#[tokio::test]
async fn a_caller_that_goes_away_cancels_the_governed_call() {
    let entered = Arc::new(Notify::new());
    let app = {
        let entered = entered.clone();
        Router::new().route(
            "/echo",
            post(move || async move {
                entered.notify_one();
                std::future::pending::<String>().await
            }),
        )
    };
    let audit = Arc::new(MemorySink::new());
    let mut gate = Gate::new(Surface::AiSdk);
    let def = gate.route(
        Method::POST,
        "/echo",
        echo_capability("echo", &[Surface::AiSdk]),
    );
    let runtime = runtime_of(vec![def], audit.clone());
    let governed = gate.into_layer(runtime.clone()).expect("a gate").layer(app);

    let call = governed.oneshot(echo_request(Body::from("{}")));
    tokio::select! {
        _ = call => panic!("the handler never returns"),
        _ = entered.notified() => {}
    }
    // The answer's future was dropped with the select: the call is cancelled, and its
    // task still ends the audit trail.
    let mut waited = 0;
    while !audit.types().contains(&"capability.cancelled") {
        assert!(
            waited < 1000,
            "no capability.cancelled: {:?}",
            audit.types()
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        waited += 1;
    }
    let cancelled = audit
        .events()
        .into_iter()
        .find(|e| e.type_name() == "capability.cancelled")
        .expect("the cancelled event");
    let event = serde_json::to_value(&cancelled).expect("an event serializes");
    assert_eq!(event["data"]["code"], "CANCELLED", "{event}");
}

/// Issue 55: the gate governs every spelling of a governed route the application might
/// route to the same handler, not only the exact one: a `HEAD` of a governed `GET`, a
/// trailing slash, a doubled slash, a dot segment or a percent-encoded letter is refused and
/// never reaches the handler; an ungoverned path is the application's, untouched.
#[tokio::test]
async fn another_spelling_of_a_governed_route_never_reaches_its_handler() {
    let calls = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let mut gate = Gate::new(Surface::AiSdk);
    let echo = gate.route(
        Method::POST,
        "/orders/refund",
        echo_capability("echo", &[Surface::AiSdk]),
    );
    let read = gate.route(
        Method::GET,
        "/orders/list",
        echo_capability("read", &[Surface::AiSdk]),
    );
    let runtime = runtime_of(vec![echo, read], Arc::new(MemorySink::new()));
    let counted = |n: Arc<AtomicUsize>| {
        move || async move {
            n.fetch_add(1, Ordering::SeqCst);
            "{}"
        }
    };
    // A lenient application: its router would take any of these spellings.
    let lenient = Router::new()
        .route("/orders/refund", post(counted(calls.clone())))
        .route("/orders/list", axum::routing::get(counted(reads.clone())))
        .fallback(counted(calls.clone()));
    let app = gate.into_layer(runtime).expect("a gate").layer(lenient);
    let send = |method: Method, path: &str| {
        let mut r = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(Body::from("{}"))
            .expect("a request");
        r.extensions_mut()
            .insert(Principal::new(capgate_testkit::actors::dana()));
        app.clone().oneshot(r)
    };
    for path in [
        "/orders/refund/",
        "//orders/refund",
        "/orders//refund",
        "/orders/./refund",
        "/orders/x/../refund",
        "/orders/%72efund",
        "/%6Frders/refund",
    ] {
        let answer = send(Method::POST, path).await.expect("an answer");
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{path}");
    }
    let head = send(Method::HEAD, "/orders/list").await.expect("an answer");
    assert_eq!(head.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the governed handler never ran"
    );
    assert_eq!(
        reads.load(Ordering::SeqCst),
        0,
        "the governed read never ran"
    );
    // An ungoverned path is the application's (here its fallback).
    let other = send(Method::POST, "/orders/other")
        .await
        .expect("an answer");
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// Issue 55 (SI-8): a governed route capgate conceals (a policy hides it) answers exactly
/// as the application answers a path it does not have, not with a capgate 404 of its own;
/// the application's 4xx for an unknown path keeps its body.
#[tokio::test]
async fn a_hidden_route_answers_as_the_applications_unknown_paths() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mut gate = Gate::new(Surface::AiSdk);
    let hidden = gate.route(
        Method::POST,
        "/echo",
        echo_capability("echo", &[Surface::AiSdk])
            .policy(policy_sync("hidesIt", |_| Ok(PolicyDecision::Hide))),
    );
    let runtime = runtime_of(vec![hidden], Arc::new(MemorySink::new()));
    let app =
        echo_app(calls.clone()).fallback(|| async { (StatusCode::NOT_FOUND, "no such page here") });
    let app = gate.into_layer(runtime).expect("a gate").layer(app);
    let body = |r: http::Response<axum::body::Body>| async move {
        let status = r.status();
        let bytes = r.into_body().collect().await.expect("a body").to_bytes();
        (status, bytes)
    };
    let concealed = body(
        app.clone()
            .oneshot(echo_request(Body::from("{}")))
            .await
            .expect("an answer"),
    )
    .await;
    let mut unknown = Request::post("/nothing-here")
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .expect("a request");
    unknown
        .extensions_mut()
        .insert(Principal::new(capgate_testkit::actors::dana()));
    let unknown = body(app.oneshot(unknown).await.expect("an answer")).await;
    assert_eq!(concealed, unknown);
    assert_eq!(concealed.0, StatusCode::NOT_FOUND);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// Issue 55: the application's own 4xx refusal of a governed request (a 409 it declares)
/// reaches the caller as that status with a defined, exposed error naming only the status,
/// not as a hidden 500; its body never does (SI-9), and a 5xx stays hidden.
#[tokio::test]
async fn the_applications_own_4xx_is_answered_as_such_without_its_body() {
    for (status, want, exposed) in [
        (StatusCode::CONFLICT, StatusCode::CONFLICT, true),
        (StatusCode::NOT_FOUND, StatusCode::NOT_FOUND, true),
        (
            StatusCode::BAD_GATEWAY,
            StatusCode::INTERNAL_SERVER_ERROR,
            false,
        ),
    ] {
        let mut gate = Gate::new(Surface::AiSdk);
        let def = gate.route(
            Method::POST,
            "/echo",
            echo_capability("echo", &[Surface::AiSdk]),
        );
        let runtime = runtime_of(vec![def], Arc::new(MemorySink::new()));
        let app = Router::new().route(
            "/echo",
            post(move || async move { (status, "secret body of the application") }),
        );
        let app = gate.into_layer(runtime).expect("a gate").layer(app);
        let answer = app
            .oneshot(echo_request(Body::from("{}")))
            .await
            .expect("an answer");
        assert_eq!(answer.status(), want, "{status}");
        let bytes = answer
            .into_body()
            .collect()
            .await
            .expect("a body")
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("secret body"), "{text}");
        let body: Value = serde_json::from_slice(&bytes).expect("JSON");
        if exposed {
            assert_eq!(body["error"]["code"], "EXECUTION_FAILED", "{body}");
            assert!(
                body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(status.as_str())),
                "{body}"
            );
        } else {
            assert_eq!(body["error"]["code"], "INTERNAL_ERROR", "{body}");
        }
    }
}
