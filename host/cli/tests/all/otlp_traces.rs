//! Traces (docs/guides/operating.md "Traces") through the real `capgate serve` and a test OTLP/HTTP
//! receiver that decodes the real protobuf (`ExportTraceServiceRequest`): one governed call is one
//! `agent.capability_call` root with its stage children, in the trace the caller's `traceparent`
//! started (HTTP and MCP doors, and on to an HTTP upstream); approvals show their create and
//! consume; no input value, model-written reason or approval comment is in any exported byte
//! (SI-10). A collector that is down or never answers changes no outcome.

use crate::common;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DANA: &str = "dana-dev-key";
const PRIYA: &str = "priya-dev-key";
/// In every input, reason and comment this test sends; it must be in no exported byte.
const CANARY: &str = "CANARY-7f3a9c2e-input-value";

/// Every export request the receiver got: its raw body and the decoded message.
type Received = Arc<Mutex<Vec<(Vec<u8>, ExportTraceServiceRequest)>>>;

/// A test OTLP/HTTP receiver: `POST /v1/traces` with a protobuf body.
async fn receiver() -> (String, Received) {
    let got: Received = Arc::default();
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let sink = sink.clone();
            async move {
                assert_eq!(
                    headers.get("content-type").and_then(|v| v.to_str().ok()),
                    Some("application/x-protobuf")
                );
                let request = ExportTraceServiceRequest::decode(body.as_ref())
                    .expect("an OTLP ExportTraceServiceRequest");
                sink.lock().expect("lock").push((body.to_vec(), request));
                (
                    StatusCode::OK,
                    [("content-type", "application/x-protobuf")],
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind receiver");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), got)
}

/// An HTTP upstream that answers a lookup and remembers each `traceparent` it was sent.
async fn upstream() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s = seen.clone();
    let app = axum::Router::new().route(
        "/lookup",
        axum::routing::post(move |headers: HeaderMap| {
            let s = s.clone();
            async move {
                if let Some(tp) = headers.get("traceparent").and_then(|v| v.to_str().ok()) {
                    s.lock().expect("lock").push(tp.to_string());
                }
                axum::Json(json!({"orderId": "ord_42", "status": "shipped"}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), seen)
}

/// The example deployment with an HTTP-upstream capability and `[telemetry.traces]`.
fn config(dir: &std::path::Path, upstream: &str, traces: &str) -> std::path::PathBuf {
    let extra = format!(
        r#"
[[capabilities]]
id = "orders.lookup"
description = "Look an order up in the order service."
expose = {{ aiSdk = true }}
sideEffect = "read"
risk = "low"
inputSchema = {{ type = "object", properties = {{ orderId = {{ type = "string" }}, note = {{ type = "string" }} }}, required = ["orderId"], additionalProperties = false }}
procedure = {{ http = {{ target = "orders", url = "{upstream}/lookup" }} }}

[telemetry.traces]
{traces}
"#
    );
    deployment(dir, |t| t, &extra)
}

fn start(dir: &std::path::Path, config: &std::path::Path) -> Server {
    let store = format!("sqlite://{}", dir.join("capgate.db").display());
    Server::start_with_env(config, &store, &[("OTEL_BSP_SCHEDULE_DELAY", "100")])
}

/// A fresh caller span: (trace id, span id, `traceparent` header), sampled.
fn caller_span(seed: u8) -> (String, String, String) {
    let trace = format!("{:032x}", u128::from(seed) << 64 | 0x5eed_0000_0000_0001);
    let span = format!("{:016x}", 0x00c0_ffee_0000_0000_u64 | u64::from(seed));
    let header = format!("00-{trace}-{span}-01");
    (trace, span, header)
}

async fn post(base: &str, path: &str, key: &str, traceparent: &str, body: &Value) -> Value {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .bearer_auth(key)
        .header("traceparent", traceparent)
        .header("tracestate", "caller=1")
        .json(body)
        .send()
        .await
        .expect("send");
    assert!(r.status().is_success(), "{path}: HTTP {}", r.status());
    r.json().await.expect("json answer")
}

/// Every span exported so far.
fn spans(got: &Received) -> Vec<Span> {
    got.lock()
        .expect("lock")
        .iter()
        .flat_map(|(_, r)| r.resource_spans.iter())
        .flat_map(|rs| rs.scope_spans.iter())
        .flat_map(|ss| ss.spans.iter().cloned())
        .collect()
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
        .map(|v| match v {
            Any::StringValue(s) => s.clone(),
            Any::IntValue(i) => i.to_string(),
            Any::BoolValue(b) => b.to_string(),
            Any::DoubleValue(d) => d.to_string(),
            other => format!("{other:?}"),
        })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Wait (bounded) until `found` finds what it wants among the exported spans.
async fn wait_for<T>(got: &Received, what: &str, found: impl Fn(&[Span]) -> Option<T>) -> T {
    for _ in 0..300 {
        if let Some(t) = found(&spans(got)) {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let names: Vec<String> = spans(got)
        .iter()
        .map(|s| format!("{} {}", s.name, hex(&s.trace_id)))
        .collect();
    panic!("never exported: {what}; got {names:#?}");
}

/// The one `agent.capability_call` of `trace` for `capability` (and its children, once the
/// root has ended: children end first).
fn call_in<'a>(spans: &'a [Span], trace: &str, capability: &str) -> Option<&'a Span> {
    let roots: Vec<&Span> = spans
        .iter()
        .filter(|s| {
            s.name == "agent.capability_call"
                && hex(&s.trace_id) == trace
                && attr(s, "capgate.capability_id").as_deref() == Some(capability)
        })
        .collect();
    assert!(roots.len() <= 1, "one root per governed call: {roots:#?}");
    roots.first().copied()
}

/// [`call_in`], once the request's server span (the root's parent) is exported too: it ends
/// after the response is written, so it may reach the collector in a later batch than the
/// root.
fn served<'a>(spans: &'a [Span], trace: &str, capability: &str) -> Option<&'a Span> {
    call_in(spans, trace, capability).filter(|root| by_id(spans, &root.parent_span_id).is_some())
}

fn children<'a>(spans: &'a [Span], parent: &Span) -> Vec<&'a Span> {
    spans
        .iter()
        .filter(|s| s.trace_id == parent.trace_id && s.parent_span_id == parent.span_id)
        .collect()
}

fn by_id<'a>(spans: &'a [Span], id: &[u8]) -> Option<&'a Span> {
    spans.iter().find(|s| s.span_id == id)
}

/// The root's parent is the request's server span, whose parent is the caller's span.
fn assert_continues(spans: &[Span], root: &Span, caller_span_id: &str, route: &str) {
    let server = by_id(spans, &root.parent_span_id)
        .unwrap_or_else(|| panic!("the root's parent is exported: {root:#?}"));
    assert_eq!(server.name, format!("POST {route}"), "{server:#?}");
    assert_eq!(server.kind, 2, "a server span: {server:#?}");
    assert_eq!(attr(server, "http.request.method").as_deref(), Some("POST"));
    assert_eq!(attr(server, "http.route").as_deref(), Some(route));
    assert_eq!(
        attr(server, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(
        hex(&server.parent_span_id),
        caller_span_id,
        "continues the caller's span"
    );
    assert_eq!(server.trace_id, root.trace_id);
}

/// No exported byte holds the canary: not the raw protobuf, not any decoded attribute,
/// event, link, status or resource value (walked generically through `Debug`).
fn assert_no_canary(got: &Received) {
    let got = got.lock().expect("lock");
    assert!(!got.is_empty(), "something was exported");
    for (raw, decoded) in got.iter() {
        let needle = CANARY.as_bytes();
        assert!(
            !raw.windows(needle.len()).any(|w| w == needle),
            "the canary is in an exported request body"
        );
        let all = format!("{decoded:?}");
        assert!(!all.contains(CANARY), "the canary is in an exported value");
        assert!(
            !all.contains("ord_canary"),
            "an input id is in an exported value"
        );
    }
}

fn refund(amount: u32, id: &str) -> Value {
    json!({
        "capabilityId": "orders.refund",
        "input": {"orderId": "ord_42", "amount": amount, "reason": format!("{CANARY} damaged item")},
        "invocationId": id,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_governed_call_is_one_root_with_its_stages_in_the_callers_trace_and_no_input_value() {
    let (collector, got) = receiver().await;
    let (backend, upstream_saw) = upstream().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(
        dir.path(),
        &backend,
        &format!(
            "endpoint = \"{collector}\"\nsamplingRatio = 1.0\nserviceName = \"capgate-test\"\nresourceAttributes = {{ \"deployment.environment.name\" = \"test\" }}\nexportTimeoutMs = 2000"
        ),
    );
    let server = start(dir.path(), &cfg);
    let base = &server.base;

    // 1. A $49 refund that completes: two policies, the procedure, output validation, a
    //    redactor, audit writes; the journal's store calls beside it.
    let (trace, caller, tp) = caller_span(1);
    let done = post(base, "/agent/invoke", DANA, &tp, &refund(49, "inv-trace-1")).await;
    assert_eq!(done["status"], "completed", "{done}");
    let (root, stages) = wait_for(&got, "the completed refund's root", |s| {
        let root = served(s, &trace, "orders.refund")?.clone();
        let stages: Vec<Span> = children(s, &root).into_iter().cloned().collect();
        Some((root, stages))
    })
    .await;
    let all = spans(&got);
    assert_continues(&all, &root, &caller, "/agent/invoke");
    assert_eq!(attr(&root, "capgate.outcome").as_deref(), Some("completed"));
    // OpenTelemetry's GenAI conventions beside capgate's own (issue 57).
    assert_eq!(
        attr(&root, "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(
        attr(&root, "gen_ai.tool.name").as_deref(),
        Some("orders.refund")
    );
    assert_eq!(attr(&root, "error.type"), None);
    assert_eq!(attr(&root, "capgate.surface").as_deref(), Some("aiSdk"));
    assert!(attr(&root, "capgate.execution_id").is_some_and(|e| e.starts_with("exe_")));
    assert_eq!(
        root.status.as_ref().map(|s| s.code),
        Some(1),
        "status ok: {root:#?}"
    );
    let named = |name: &str| -> Vec<&Span> { stages.iter().filter(|s| s.name == name).collect() };
    let policies = named("agent.policy_evaluation");
    let mut evaluated: Vec<(String, String, String)> = policies
        .iter()
        .map(|p| {
            (
                attr(p, "capgate.policy").unwrap_or_default(),
                attr(p, "capgate.phase").unwrap_or_default(),
                attr(p, "capgate.decision").unwrap_or_default(),
            )
        })
        .collect();
    evaluated.sort();
    assert_eq!(
        evaluated,
        [
            ("orgIsolation".into(), "invocation".into(), "allow".into()),
            ("refundLimit".into(), "invocation".into(), "allow".into())
        ],
        "{stages:#?}"
    );
    assert!(
        policies
            .iter()
            .all(|p| attr(p, "capgate.fuel_used")
                .is_some_and(|f| f.parse::<u64>().is_ok_and(|n| n > 0))),
        "Wasm policies report the fuel they used: {policies:#?}"
    );
    let attempts = named("agent.procedure_execution");
    assert_eq!(attempts.len(), 1, "{stages:#?}");
    assert_eq!(attr(attempts[0], "capgate.attempt").as_deref(), Some("1"));
    assert_eq!(named("agent.output_validation").len(), 1, "{stages:#?}");
    let redactions = named("agent.redaction");
    assert_eq!(redactions.len(), 1, "{stages:#?}");
    assert_eq!(
        attr(redactions[0], "capgate.redactor").as_deref(),
        Some("stripGatewayRef")
    );
    let mut events: Vec<String> = named("agent.audit_write")
        .iter()
        .filter_map(|s| attr(s, "capgate.event"))
        .collect();
    events.sort();
    assert_eq!(
        events,
        [
            "capability.completed",
            "capability.requested",
            "capability.started"
        ],
        "{stages:#?}"
    );
    // The journal's store calls are in the same trace, under the request.
    let claim = wait_for(&got, "the journal claim", |s| {
        s.iter()
            .find(|x| hex(&x.trace_id) == trace && x.name == "INSERT capgate_invocations")
            .cloned()
    })
    .await;
    assert_eq!(attr(&claim, "db.system.name").as_deref(), Some("sqlite"));
    assert_eq!(attr(&claim, "db.operation.name").as_deref(), Some("INSERT"));
    assert_eq!(
        attr(&claim, "capgate.store.operation").as_deref(),
        Some("invocation.claim")
    );
    assert_eq!(claim.kind, 3, "a client span");

    // 2. A $649 refund is held (approval create), approved, resumed (approval consume).
    let (trace2, caller2, tp2) = caller_span(2);
    let held = post(
        base,
        "/agent/invoke",
        DANA,
        &tp2,
        &refund(649, "inv-trace-2"),
    )
    .await;
    assert_eq!(held["status"], "approval-required", "{held}");
    let approval_id = held["approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_string();
    let (held_root, request) = wait_for(&got, "the approval request", |s| {
        let root = served(s, &trace2, "orders.refund")?.clone();
        let request = children(s, &root)
            .into_iter()
            .find(|x| x.name == "agent.approval_request")?
            .clone();
        Some((root, request))
    })
    .await;
    assert_continues(&spans(&got), &held_root, &caller2, "/agent/invoke");
    assert_eq!(
        attr(&held_root, "capgate.outcome").as_deref(),
        Some("approval-required")
    );
    assert_eq!(
        attr(&request, "capgate.approval_id").as_deref(),
        Some(approval_id.as_str())
    );
    let create = wait_for(&got, "the approval insert", |s| {
        children(s, &request)
            .into_iter()
            .find(|x| x.name == "INSERT capgate_approvals")
            .cloned()
    })
    .await;
    assert_eq!(
        attr(&create, "capgate.store.operation").as_deref(),
        Some("approval.create")
    );
    let (_, _, tp_decide) = caller_span(3);
    let decided = post(
        base,
        &format!("/approvals/{approval_id}/decision"),
        PRIYA,
        &tp_decide,
        &json!({"decision": "approved", "comment": format!("{CANARY} photo attached")}),
    )
    .await;
    assert_eq!(decided["status"], "approved", "{decided}");
    let (trace4, _, tp4) = caller_span(4);
    let resumed = post(
        base,
        "/agent/resumeApproval",
        DANA,
        &tp4,
        &json!({"approvalId": approval_id, "invocationId": "inv-trace-2"}),
    )
    .await;
    assert_eq!(resumed["status"], "completed", "{resumed}");
    let consume = wait_for(&got, "the approval consume", |s| {
        let root = call_in(s, &trace4, "orders.refund")?;
        let consume = children(s, root)
            .into_iter()
            .find(|x| x.name == "agent.approval_consume")?;
        children(s, consume)
            .into_iter()
            .find(|x| attr(x, "capgate.store.operation").as_deref() == Some("approval.consume"))
            .cloned()
    })
    .await;
    assert_eq!(consume.name, "UPDATE capgate_approvals");

    // 3. An HTTP upstream gets the trace: its `traceparent` names the client span of the
    //    attempt, in the caller's trace.
    let (trace5, caller5, tp5) = caller_span(5);
    let looked = post(
        base,
        "/agent/invoke",
        DANA,
        &tp5,
        &json!({"capabilityId": "orders.lookup", "input": {"orderId": "ord_canary", "note": CANARY}, "invocationId": "inv-trace-5"}),
    )
    .await;
    assert_eq!(looked["status"], "completed", "{looked}");
    let client = wait_for(&got, "the upstream client span", |s| {
        let root = served(s, &trace5, "orders.lookup")?;
        let attempt = children(s, root)
            .into_iter()
            .find(|x| x.name == "agent.procedure_execution")?;
        s.iter()
            .find(|x| x.trace_id == attempt.trace_id && x.name == "POST" && x.kind == 3)
            .cloned()
    })
    .await;
    assert_continues(
        &spans(&got),
        call_in(&spans(&got), &trace5, "orders.lookup").expect("root"),
        &caller5,
        "/agent/invoke",
    );
    assert_eq!(
        attr(&client, "server.address").as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(
        attr(&client, "http.response.status_code").as_deref(),
        Some("200")
    );
    let sent = upstream_saw.lock().expect("lock").clone();
    assert_eq!(
        sent,
        [format!("00-{trace5}-{}-01", hex(&client.span_id))],
        "the upstream continues the attempt's client span"
    );

    // 4. The MCP door continues a traceparent too (tools/call on a session).
    let (trace6, caller6, tp6) = caller_span(6);
    let answer = mcp_call(
        base,
        DANA,
        &tp6,
        "orders_refund",
        json!({"orderId": "ord_42", "amount": 12, "reason": format!("{CANARY} mcp")}),
    )
    .await;
    assert_eq!(
        answer["result"]["structuredContent"]["status"], "completed",
        "{answer}"
    );
    let mcp_root = wait_for(&got, "the MCP call's root", |s| {
        served(s, &trace6, "orders.refund").cloned()
    })
    .await;
    assert_eq!(attr(&mcp_root, "capgate.surface").as_deref(), Some("mcp"));
    // Between the request and the call, the MCP server span of OpenTelemetry's MCP
    // conventions: `tools/call TOOL`, the method, the tool, the JSON-RPC id, and the
    // session only as a digest (the session id is a bearer of the session).
    let all = spans(&got);
    let mcp_span = by_id(&all, &mcp_root.parent_span_id)
        .unwrap_or_else(|| panic!("the MCP span is exported: {mcp_root:#?}"));
    assert_eq!(mcp_span.name, "tools/call orders_refund", "{mcp_span:#?}");
    assert_eq!(mcp_span.kind, 2, "a server span: {mcp_span:#?}");
    for (key, want) in [
        ("mcp.method.name", "tools/call"),
        ("gen_ai.tool.name", "orders_refund"),
        ("gen_ai.operation.name", "execute_tool"),
        ("network.transport", "tcp"),
    ] {
        assert_eq!(
            attr(mcp_span, key).as_deref(),
            Some(want),
            "{key}: {mcp_span:#?}"
        );
    }
    assert!(
        attr(mcp_span, "jsonrpc.request.id").is_some(),
        "{mcp_span:#?}"
    );
    assert!(attr(mcp_span, "error.type").is_none(), "{mcp_span:#?}");
    let session = attr(mcp_span, "mcp.session.id").expect("the call ran on a session");
    assert!(
        session.starts_with("sha256:")
            && session.len() == 7 + 16
            && session[7..].bytes().all(|b| b.is_ascii_hexdigit()),
        "only a digest of the session: {session}"
    );
    assert_continues(&all, mcp_span, &caller6, "/mcp");
    assert!(
        children(&spans(&got), &mcp_root)
            .iter()
            .any(|s| s.name == "agent.procedure_execution"),
        "the MCP call has its stages"
    );

    // The resource says who exported, as configured.
    {
        let got = got.lock().expect("lock");
        let resource = got[0].1.resource_spans[0]
            .resource
            .clone()
            .expect("resource");
        let service = resource
            .attributes
            .iter()
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| kv.value.clone())
            .and_then(|v| v.value);
        assert_eq!(service, Some(Any::StringValue("capgate-test".into())));
        assert!(
            resource
                .attributes
                .iter()
                .any(|kv| kv.key == "deployment.environment.name"),
            "{resource:?}"
        );
    }
    assert_no_canary(&got);
    drop(server);
}

/// `initialize`, `notifications/initialized`, then one `tools/call` carrying `traceparent`.
async fn mcp_call(base: &str, key: &str, traceparent: &str, tool: &str, args: Value) -> Value {
    let http = reqwest::Client::new();
    let url = format!("{base}/mcp");
    let mut session: Option<String> = None;
    let mut send = async |body: Value, tp: Option<&str>| -> Option<Value> {
        let mut req = http
            .post(&url)
            .bearer_auth(key)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(s) = &session {
            req = req.header("mcp-session-id", s);
        }
        if let Some(tp) = tp {
            req = req.header("traceparent", tp);
        }
        let r = req.send().await.expect("send");
        assert!(r.status().is_success(), "MCP HTTP {}", r.status());
        if let Some(s) = r
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            session = Some(s.to_string());
        }
        let text = r.text().await.expect("body");
        let id = body.get("id").cloned()?;
        text.lines()
            .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v.get("id") == Some(&id))
    };
    let init = send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "otlp-traces", "version": "0"}}}),
        None,
    )
    .await;
    assert!(
        init.is_some_and(|i| i.get("result").is_some()),
        "initialize"
    );
    send(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        None,
    )
    .await;
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": tool, "arguments": args}}),
        Some(traceparent),
    )
    .await
    .expect("an answer to tools/call")
}

/// A listener that accepts connections and never reads or answers them.
async fn black_hole() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind black hole");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    format!("http://{addr}")
}

/// A port nothing listens on.
async fn closed_port() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_collector_that_is_down_or_never_answers_changes_no_outcome() {
    let (backend, _) = upstream().await;
    for (what, collector) in [
        ("down", closed_port().await),
        ("black hole", black_hole().await),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        // A small queue and a short export bound, so drops happen within the test.
        let cfg = config(
            dir.path(),
            &backend,
            &format!(
                "endpoint = \"{collector}\"\nsamplingRatio = 1.0\nexportTimeoutMs = 500\nmaxQueueSize = 16"
            ),
        );
        let server = start(dir.path(), &cfg);
        let base = &server.base;
        for i in 0..30u32 {
            let (_, _, tp) = caller_span(100 + i as u8);
            let done = post(
                base,
                "/agent/invoke",
                DANA,
                &tp,
                &refund(10 + i, &format!("inv-{what}-{i}")),
            )
            .await;
            assert_eq!(done["status"], "completed", "{what}, call {i}: {done}");
            let held = post(
                base,
                "/agent/invoke",
                DANA,
                &tp,
                &refund(600 + i, &format!("inv-{what}-held-{i}")),
            )
            .await;
            assert_eq!(
                held["status"], "approval-required",
                "{what}, call {i}: {held}"
            );
        }
        let answer = mcp_call(
            base,
            DANA,
            &caller_span(99).2,
            "orders_refund",
            json!({"orderId": "ord_42", "amount": 5}),
        )
        .await;
        assert_eq!(
            answer["result"]["structuredContent"]["status"], "completed",
            "{what}: {answer}"
        );
        let health = reqwest::get(format!("{base}/healthz"))
            .await
            .expect("healthz");
        assert!(health.status().is_success(), "{what}: still healthy");
        drop(server);
    }
}

/// Head sampling at the doors, on /agent and /mcp: a caller's `traceparent` decides for its
/// trace whatever the ratio (its sampled flag followed at ratio 0, its flag off followed at
/// ratio 1), the ratio decides for a call without one, and a call the decision leaves out
/// exports no span at all, not even its request's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_head_decision_follows_the_callers_flag_and_an_unsampled_call_exports_nothing() {
    let unsampled = |seed: u8| caller_span(seed).2.replace("-01", "-00");
    for ratio in ["0.0", "1.0"] {
        let (collector, got) = receiver().await;
        let (backend, _) = upstream().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = config(
            dir.path(),
            &backend,
            &format!("endpoint = \"{collector}\"\nsamplingRatio = {ratio}\nexportTimeoutMs = 2000"),
        );
        let server = start(dir.path(), &cfg);
        let base = &server.base;
        let mut sampled = std::collections::BTreeSet::new();

        // The caller's flag, followed on both doors: off at ratio 1, on at ratio 0.
        let flag = |seed: u8| {
            if ratio == "1.0" {
                (None, unsampled(seed))
            } else {
                let (trace, _, tp) = caller_span(seed);
                (Some(trace), tp)
            }
        };
        let (trace, tp) = flag(21);
        let done = post(base, "/agent/invoke", DANA, &tp, &refund(20, "head-1")).await;
        assert_eq!(done["status"], "completed", "{done}");
        sampled.extend(trace);
        let (trace, tp) = flag(22);
        let answer = mcp_call(
            base,
            DANA,
            &tp,
            "orders_refund",
            json!({"orderId": "ord_42", "amount": 22}),
        )
        .await;
        assert_eq!(
            answer["result"]["structuredContent"]["status"], "completed",
            "{answer}"
        );
        sampled.extend(trace);

        // No traceparent: the ratio decides (all at 1, none at 0).
        let r = reqwest::Client::new()
            .post(format!("{base}/agent/invoke"))
            .bearer_auth(DANA)
            .json(&refund(21, "head-3"))
            .send()
            .await
            .expect("send");
        assert!(r.status().is_success());

        // A last sampled call marks the end: spans end and are queued in order, so what
        // the calls above made is exported by the time its root is.
        let (last, _, tp) = caller_span(23);
        post(base, "/agent/invoke", DANA, &tp, &refund(23, "head-4")).await;
        sampled.insert(last.clone());
        wait_for(&got, "the last sampled call", |s| {
            call_in(s, &last, "orders.refund").map(|_| ())
        })
        .await;
        let all = spans(&got);
        let traces: std::collections::BTreeSet<String> =
            all.iter().map(|s| hex(&s.trace_id)).collect();
        let calls = all
            .iter()
            .filter(|s| s.name == "agent.capability_call")
            .count();
        if ratio == "1.0" {
            // The two flag-off calls are missing, the call without traceparent is there.
            // The two flag-off calls are missing (nothing in their traces, no root of
            // their own), the call without traceparent is there; MCP's initialize and
            // notification requests carry none either, so they are sampled.
            assert_eq!(calls, 2, "ratio 1: {traces:?}");
            for seed in [21, 22] {
                let (off, _, _) = caller_span(seed);
                assert!(!traces.contains(&off), "ratio 1: {off} was exported");
            }
            assert!(traces.contains(&last));
        } else {
            assert_eq!(traces, sampled, "ratio 0: only the callers' sampled traces");
            assert_eq!(calls, 3);
        }
        drop(server);
    }
}

/// A `traceparent` is believed only from an authenticated caller (issue 33): at ratio 0,
/// requests with a wrong key (on `/agent` and `/approvals`) that send a sampled flag export
/// nothing, while an authenticated caller's sampled flag is still followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unauthenticated_callers_sampled_flag_does_not_force_a_trace() {
    let (collector, got) = receiver().await;
    let (backend, _) = upstream().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(
        dir.path(),
        &backend,
        &format!("endpoint = \"{collector}\"\nsamplingRatio = 0.0\nexportTimeoutMs = 2000"),
    );
    let server = start(dir.path(), &cfg);
    let base = &server.base;
    let (forged, _, tp) = caller_span(31);
    for path in ["/agent/invoke", "/agent/describe"] {
        let r = reqwest::Client::new()
            .post(format!("{base}{path}"))
            .bearer_auth("not-a-key")
            .header("traceparent", &tp)
            .json(&refund(31, "forged-1"))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status().as_u16(), 401);
    }
    let r = reqwest::Client::new()
        .get(format!("{base}/approvals"))
        .header("traceparent", &tp)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 401);
    // An authenticated sampled call marks the end (spans are exported in order).
    let (last, _, tp) = caller_span(32);
    post(base, "/agent/invoke", DANA, &tp, &refund(32, "honest-1")).await;
    wait_for(&got, "the authenticated sampled call", |s| {
        call_in(s, &last, "orders.refund").map(|_| ())
    })
    .await;
    let traces: std::collections::BTreeSet<String> =
        spans(&got).iter().map(|s| hex(&s.trace_id)).collect();
    assert!(
        !traces.contains(&forged),
        "an unauthenticated caller's sampled flag forced a trace: {traces:?}"
    );
    assert!(traces.contains(&last));
    drop(server);
}

/// Issue 57: `capgate serve --log-format json` writes one JSON object per line, none with an
/// ANSI escape (stderr is a file here), and the access line of a call carries the trace id
/// of the caller's `traceparent`, the same trace the collector receives, so a log pipeline
/// joins a log line to its trace. What the caller wrote (the canary in the input) is in no
/// line, even at `debug`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn json_log_lines_parse_and_carry_the_trace_id_of_the_call() {
    use std::io::{BufRead, BufReader};
    let (collector, got) = receiver().await;
    let (backend, _) = upstream().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(
        dir.path(),
        &backend,
        &format!("endpoint = \"{collector}\"\nsamplingRatio = 1.0"),
    );
    let log_path = dir.path().join("capgate.log");
    let log = std::fs::File::create(&log_path).expect("the log file");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .args(["--store", &store, "--log-format", "json", "--config"])
        .arg(&cfg)
        .env("CAPGATE_LOG", "debug")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("start capgate serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let base = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(addr) = line.split("listening on ").nth(1) {
                    break addr.trim().to_string();
                }
            }
            _ => panic!("capgate serve exited before listening"),
        }
    };
    std::thread::spawn(move || for _ in lines {});

    let (trace, _, tp) = caller_span(7);
    let done = post(&base, "/agent/invoke", DANA, &tp, &refund(49, "inv-log-1")).await;
    assert_eq!(done["status"], "completed", "{done}");
    // The collector has the call's trace: the log's id is the trace's, not a local one.
    wait_for(&got, "the logged call's trace", |s| {
        served(s, &trace, "orders.refund").cloned()
    })
    .await;
    // A refused call's root says why in the conventions' `error.type`.
    let (denied_trace, _, tp) = caller_span(8);
    let refused = post(
        &base,
        "/agent/invoke",
        DANA,
        &tp,
        &json!({
            "capabilityId": "orders.refund",
            "input": {"orderId": 42},
            "invocationId": "inv-log-2",
        }),
    )
    .await;
    assert_eq!(refused["error"]["code"], "INPUT_INVALID", "{refused}");
    let root = wait_for(&got, "the refused call's root", |s| {
        call_in(s, &denied_trace, "orders.refund").cloned()
    })
    .await;
    assert_eq!(attr(&root, "error.type").as_deref(), Some("INPUT_INVALID"));
    assert_eq!(
        attr(&root, "gen_ai.tool.name").as_deref(),
        Some("orders.refund")
    );
    let _ = child.kill();
    let _ = child.wait();

    let text = std::fs::read_to_string(&log_path).expect("read the log");
    assert!(
        !text.contains('\u{1b}'),
        "an ANSI escape in a log file:\n{text}"
    );
    assert!(
        !text.contains(CANARY),
        "the caller's input reached the log:\n{text}"
    );
    let entries: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let access = entries
        .iter()
        .find(|e| e["target"] == "capgate::access" && e["fields"]["route"] == "/agent/invoke")
        .unwrap_or_else(|| panic!("no access line for /agent/invoke:\n{text}"));
    assert_eq!(access["traceId"], trace.as_str(), "{access}");
    assert_eq!(access["fields"]["status"], 200, "{access}");
    assert!(
        access["spanId"].as_str().is_some_and(|s| s.len() == 16),
        "{access}"
    );
}
