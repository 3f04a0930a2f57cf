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
//! Head sampling happens here, before any span exists: with traces on
//! ([`set_head_sampling`]), a request whose *authenticated* caller sent a `traceparent`
//! follows its sampled flag, any other is sampled at the configured ratio. The caller's
//! context is believed only when its credential authenticates ([`TraceTrust`]: the same
//! authenticator as the doors, asked only when a valid `traceparent` arrives and traces
//! are on); an unauthenticated request's `traceparent` is ignored altogether (no parent,
//! no forced sampling), so nobody can make capgate trace, and export, every request they
//! send. An unsampled request opens no span at
//! all: it runs inside [`unsampled`], which tells the process's trace filter
//! ([`in_unsampled_trace`]) that nothing under it is wanted, so the nine calls in ten a 10 %
//! ratio leaves out pay a task-local lookup per would-be span and nothing else.
//!
//! Nothing from the request but its method and matched route is recorded: no URL, query,
//! headers or body (SI-10). With traces off the span is disabled at its call site and the
//! global propagator is the no-op one, so the layer costs next to nothing.

use crate::auth::{Authenticator, check_principal};
use axum::extract::{MatchedPath, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::propagation::Extractor;
use std::sync::atomic::{AtomicU64, Ordering};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The field of the request span that carries the head decision ([`head_decision`]: the
/// caller's sampled flag, else the ratio's coin), so the process's trace switch does not
/// decide a second time for the root span. Absent while traces are off.
pub const PARENT_SAMPLED: &str = "capgate.trace.parent_sampled";

/// The span of the HTTP request a handler serves (see the module docs).
#[derive(Clone, Debug)]
pub struct RequestSpan(pub tracing::Span);

/// Marks a request the head decision left out of the traces (see the module docs), for
/// handlers that run its work on a task of their own: they run it in [`unsampled`] too.
#[derive(Clone, Copy, Debug)]
pub struct UnsampledRequest;

/// The span of the request these extensions belong to, or the current span.
pub fn request_span(extensions: &axum::http::Extensions) -> tracing::Span {
    extensions
        .get::<RequestSpan>()
        .map_or_else(tracing::Span::current, |s| s.0.clone())
}

/// Whether the request these extensions belong to was left out of the traces.
pub fn is_unsampled(extensions: &axum::http::Extensions) -> bool {
    extensions.get::<UnsampledRequest>().is_some()
}

pub use capgate_core::trace::{in_current_trace, in_unsampled_trace, unsampled};

/// The head sampling ratio as `f64` bits; `u64::MAX` (a NaN) while traces are off.
static HEAD_RATIO: AtomicU64 = AtomicU64::new(u64::MAX);

/// Turn head sampling on at `ratio` (0 to 1), or off (`None`: traces are off, and the
/// middleware decides nothing). Set by whoever starts the traces.
pub fn set_head_sampling(ratio: Option<f64>) {
    HEAD_RATIO.store(ratio.map_or(u64::MAX, f64::to_bits), Ordering::Relaxed);
}

/// The head decision for a new trace: as the caller said (`parent_sampled`), else at the
/// configured ratio. `None` while traces are off.
pub fn head_decision(parent_sampled: Option<bool>) -> Option<bool> {
    let ratio = f64::from_bits(HEAD_RATIO.load(Ordering::Relaxed));
    if ratio.is_nan() {
        return None;
    }
    if let Some(sampled) = parent_sampled {
        return Some(sampled);
    }
    Some(if ratio >= 1.0 {
        true
    } else if ratio <= 0.0 {
        false
    } else {
        // 53 random bits from the standard library's per-process random keys (no RNG
        // crate for a coin flip): uniform in [0, 1).
        use std::hash::{BuildHasher, Hasher};
        let bits = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        ((bits >> 11) as f64 / (1u64 << 53) as f64) < ratio
    })
}

/// The caller's trace context in `headers` (`traceparent`, `tracestate`), as the global
/// propagator reads it; an empty context when there is none or traces are off.
pub fn extract(headers: &HeaderMap) -> opentelemetry::Context {
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&Headers(headers)))
}

/// Whose `traceparent` [`continue_trace`] believes: callers this authenticator admits.
#[derive(Clone)]
pub struct TraceTrust {
    authenticator: Option<std::sync::Arc<dyn Authenticator>>,
}

impl TraceTrust {
    /// Believe the trace context of callers `authenticator` admits.
    pub fn new(authenticator: std::sync::Arc<dyn Authenticator>) -> Self {
        TraceTrust {
            authenticator: Some(authenticator),
        }
    }

    /// Believe no caller's trace context (every request decided by the ratio).
    pub fn nobody() -> Self {
        TraceTrust {
            authenticator: None,
        }
    }

    /// Whether the request's credential authenticates (and passes the principal checks).
    pub async fn trusts(&self, headers: &HeaderMap) -> bool {
        let Some(a) = &self.authenticator else {
            return false;
        };
        match a.authenticate(headers).await {
            Ok(who) => check_principal(&who, chrono::Utc::now()).is_ok(),
            Err(_) => false,
        }
    }
}

impl std::fmt::Debug for TraceTrust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceTrust")
            .field("authenticated", &self.authenticator.is_some())
            .finish()
    }
}

/// Whether traces are on (a head decision will be made).
fn tracing_on() -> bool {
    !f64::from_bits(HEAD_RATIO.load(Ordering::Relaxed)).is_nan()
}

/// The axum middleware (use with `axum::middleware::from_fn_with_state` and a
/// [`TraceTrust`]); see the module docs.
pub async fn continue_trace(
    State(trust): State<TraceTrust>,
    mut request: Request,
    next: Next,
) -> Response {
    // OpenTelemetry's HTTP conventions: a method outside the known set is `_OTHER`, so a
    // caller cannot put arbitrary text into span names and attributes.
    let method = match crate::metrics::method_label(request.method()) {
        "other" => "_OTHER",
        known => known,
    };
    let started = std::time::Instant::now();
    let route = route_of(&request);
    let mut parent = extract(request.headers());
    let mut parent_sampled = {
        use opentelemetry::trace::TraceContextExt;
        let caller = parent.span();
        let sc = caller.span_context();
        sc.is_valid().then(|| sc.is_sampled())
    };
    if parent_sampled.is_some() && tracing_on() && !trust.trusts(request.headers()).await {
        // An unauthenticated caller's context is not believed: a fresh trace, sampled
        // at the ratio.
        parent = opentelemetry::Context::new();
        parent_sampled = None;
    }
    // The head decision (module docs): an unsampled request opens no span.
    let parent_sampled = match head_decision(parent_sampled) {
        Some(false) => {
            request.extensions_mut().insert(UnsampledRequest);
            let response = unsampled(next.run(request)).await;
            access(method, &route, response.status(), started);
            return response;
        }
        decided => decided,
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
    // Inside the request's span, so a JSON log line carries its trace and span ids.
    span.in_scope(|| access(method, &route, status, started));
    response
}

/// One access-log event per request (target `capgate::access`, info level: shown with
/// `CAPGATE_LOG=info`): the method, the route template (never the raw path), the status and
/// the time taken. Nothing the caller wrote.
fn access(method: &str, route: &str, status: axum::http::StatusCode, started: std::time::Instant) {
    tracing::info!(
        target: "capgate::access",
        method,
        route,
        status = status.as_u16(),
        duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "request"
    );
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
