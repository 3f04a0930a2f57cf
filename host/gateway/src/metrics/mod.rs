//! The gateway's metrics and the `/metrics` route.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `capgate_http_requests_total` | counter | `route` (the matched route template, `unmatched` otherwise), `method`, `status` |
//! | `capgate_http_request_duration_seconds` | histogram | `route`, `method` |
//! | `capgate_journal_claims_total` | counter | `result` (`admitted`, `replayed`, `pending`, `conflict`) |
//! | `capgate_mcp_tasks_total` | counter | `event` (`created`, `completed`, `failed`, `cancelled`) |
//!
//! Routes are the templates the router matched (`/agent/invoke`, `/approvals/{id}`), never
//! the request's path, so a scan of random URLs adds no series.
//!
//! [`metrics_router`] serves the exposition text a [`MetricsSource`] renders (the `capgate`
//! binary's Prometheus recorder), optionally behind a bearer token.
//!
//! The shape of every door: `options` (the [`MetricsSource`] seam), `router`
//! ([`metrics_router`]), `handlers` (the exposition), plus `layer` ([`track_http`], which
//! the application puts around its doors).

mod handlers;
mod layer;
mod options;
mod router;

pub use layer::track_http;
pub use options::MetricsSource;
pub use router::metrics_router;

use axum::http::Method;
use capgate_core::metrics::Handles;

/// HTTP requests by route, method and status.
pub const HTTP_REQUESTS: &str = "capgate_http_requests_total";
/// HTTP request latency by route.
pub const HTTP_DURATION: &str = "capgate_http_request_duration_seconds";
/// Invocation journal claims by result.
pub const JOURNAL_CLAIMS: &str = "capgate_journal_claims_total";

/// MCP tasks by event: created for a held call, and how each ended.
pub const MCP_TASKS: &str = "capgate_mcp_tasks_total";

/// Tell the installed recorder what this crate's series mean (`# HELP` on `/metrics`).
pub fn describe() {
    metrics::describe_counter!(HTTP_REQUESTS, "HTTP requests, by route, method and status.");
    metrics::describe_histogram!(
        HTTP_DURATION,
        "HTTP request latency in seconds, by route and method."
    );
    metrics::describe_counter!(JOURNAL_CLAIMS, "Invocation journal claims, by result.");
    metrics::describe_counter!(
        MCP_TASKS,
        "MCP tasks created for held calls, and how they ended, by event."
    );
}

static TASKS: Handles<(), metrics::Counter> = Handles::new();

/// Count an MCP task event (`created`, `completed`, `failed`, `cancelled`).
pub(crate) fn mcp_task(event: &'static str) {
    TASKS
        .get(event, (), || metrics::counter!(MCP_TASKS, "event" => event))
        .increment(1);
}

static CLAIMS: Handles<(), metrics::Counter> = Handles::new();

pub(crate) fn journal_claim(result: &'static str) {
    CLAIMS
        .get(
            result,
            (),
            || metrics::counter!(JOURNAL_CLAIMS, "result" => result),
        )
        .increment(1);
}

/// A method as a bounded label: the standard ones by name, anything else `other` (the
/// traces say `_OTHER`, as OpenTelemetry's HTTP conventions ask).
pub(crate) fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}
