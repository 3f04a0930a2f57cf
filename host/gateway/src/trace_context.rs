//! W3C trace context on the HTTP doors (capability routes, `/mcp`, the approvals API).
//!
//! [`continue_trace`] is an axum middleware: it opens one server span per request
//! (`{method} {route}`, OpenTelemetry's HTTP attributes `http.request.method`, `http.route`,
//! `http.response.status_code`), makes it a child of the caller's `traceparent` /
//! `tracestate` (read with the process's global propagator, which `capgate serve` sets to the
//! W3C one when traces are on), and runs the request inside it. The execution the request
//! starts — its `agent.capability_call` span and the stages under it — is a child of this
//! span, so a caller's trace continues through capgate.
//!
//! The request span is also put in the request's extensions as [`RequestSpan`], for handlers
//! that run their work elsewhere (the MCP server handles tool calls on a task of its own).
//!
//! Nothing from the request but its method and matched route is recorded: no URL, query,
//! headers or body (SI-10). With traces off the span is disabled at its call site and the
//! global propagator is the no-op one, so the layer costs next to nothing.

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::propagation::Extractor;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The field of the request span that says whether the caller's `traceparent` was
/// sampled (absent when the caller sent none). The process's trace switch makes its head
/// sampling decision from it: a caller's decision is followed, as OpenTelemetry's
/// parent-based sampler does.
pub const PARENT_SAMPLED: &str = "capgate.trace.parent_sampled";

/// The span of the HTTP request a handler serves (see the module docs).
#[derive(Clone, Debug)]
pub struct RequestSpan(pub tracing::Span);

/// The span of the request these extensions belong to, or the current span.
pub fn request_span(extensions: &axum::http::Extensions) -> tracing::Span {
    extensions
        .get::<RequestSpan>()
        .map_or_else(tracing::Span::current, |s| s.0.clone())
}

/// The caller's trace context in `headers` (`traceparent`, `tracestate`), as the global
/// propagator reads it; an empty context when there is none or traces are off.
pub fn extract(headers: &HeaderMap) -> opentelemetry::Context {
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(headers)))
}

/// The axum middleware (use with `axum::middleware::from_fn`); see the module docs.
pub async fn continue_trace(mut request: Request, next: Next) -> Response {
    // OpenTelemetry's HTTP conventions: a method outside the known set is `_OTHER`, so a
    // caller cannot put arbitrary text into span names and attributes.
    let method = match crate::metrics::method_label(request.method()) {
        "other" => "_OTHER",
        known => known,
    };
    let route = route_of(&request);
    let parent = extract(request.headers());
    let parent_sampled = {
        use opentelemetry::trace::TraceContextExt;
        let caller = parent.span();
        let sc = caller.span_context();
        sc.is_valid().then(|| sc.is_sampled())
    };
    let span = tracing::info_span!(
        "http.server.request",
        otel.name = %format_args!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
        capgate.trace.parent_sampled = parent_sampled,
    );
    if !span.is_disabled() {
        // Fails only when no OpenTelemetry layer is installed (or the trace is not
        // sampled): then there is nothing to link.
        let _ = span.set_parent(parent);
        request.extensions_mut().insert(RequestSpan(span.clone()));
    }
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    response
}

/// The route template the request matched (`/agent/invoke`, `/approvals/{id}`, `/mcp`),
/// never the raw path (ids in it are the caller's).
fn route_of(request: &Request) -> String {
    match request.extensions().get::<MatchedPath>() {
        Some(m) => {
            let p = m.as_str();
            // A nested service (`/mcp`) matches `/mcp/{*…}`: report its mount point.
            match p.find("/{*") {
                Some(i) if i > 0 => p[..i].to_string(),
                Some(_) => "/".to_string(),
                None => p.to_string(),
            }
        }
        None => "unmatched".to_string(),
    }
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}
