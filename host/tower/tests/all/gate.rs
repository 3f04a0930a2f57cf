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
