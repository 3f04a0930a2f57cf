//! W3C trace context on HTTP upstream calls: a client span per request (named by its
//! method, with OpenTelemetry's `http.request.method`, `server.address`, `server.port`,
//! `http.response.status_code`) whose
//! context goes to the upstream as `traceparent` / `tracestate`, so the upstream's own spans
//! join the caller's trace. The headers are written by the process's global propagator
//! (the W3C one when `capgate serve` has traces on, the no-op one otherwise).
//!
//! No URL path, query, header or body is recorded (SI-10): only the host and port.

use reqwest::Url;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The client span of one upstream request of `method` to `url` (named by its method, as
/// OpenTelemetry's HTTP client spans are).
pub(crate) fn upstream_span(method: &str, url: &Url) -> tracing::Span {
    tracing::info_span!(
        "http.client.request",
        otel.name = method,
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        http.request.method = method,
        server.address = url.host_str().unwrap_or_default(),
        server.port = url.port_or_known_default().unwrap_or_default(),
        http.response.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// The trace-context headers that make the upstream's work a child of `span` (none when
/// the span is disabled or traces are off).
pub(crate) fn headers_for(span: &tracing::Span) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if span.is_disabled() {
        return headers;
    }
    let cx = span.context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut Injector(&mut headers));
    });
    headers
}

/// Record the upstream's answer (or that there was none) on its span.
pub(crate) fn record_status(span: &tracing::Span, status: Option<u16>) {
    match status {
        Some(s) => {
            span.record("http.response.status_code", s);
            if s >= 400 {
                span.record("error.type", s.to_string().as_str());
                span.record("otel.status_code", "ERROR");
            }
        }
        None => {
            span.record("error.type", "transport");
            span.record("otel.status_code", "ERROR");
        }
    }
}

struct Injector<'a>(&'a mut HeaderMap);

impl opentelemetry::propagation::Injector for Injector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}
