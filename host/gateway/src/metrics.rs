//! The gateway's metrics and the `/metrics` route.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `capgate_http_requests_total` | counter | `route` (the matched route template, `unmatched` otherwise), `method`, `status` |
//! | `capgate_http_request_duration_seconds` | histogram | `route`, `method` |
//! | `capgate_journal_claims_total` | counter | `result` (`admitted`, `replayed`, `pending`, `conflict`) |
//!
//! Routes are the templates the router matched (`/agent/invoke`, `/approvals/{id}`), never
//! the request's path, so a scan of random URLs adds no series.
//!
//! [`metrics_router`] serves the exposition text a [`MetricsSource`] renders (the `capgate`
//! binary's Prometheus recorder), optionally behind a bearer token.

use async_trait::async_trait;
use axum::Router;
use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use capgate_core::digest::sha256_hex;
use capgate_core::metrics::Handles;
use std::sync::Arc;
use std::time::Instant;

/// HTTP requests by route, method and status.
pub const HTTP_REQUESTS: &str = "capgate_http_requests_total";
/// HTTP request latency by route.
pub const HTTP_DURATION: &str = "capgate_http_request_duration_seconds";
/// Invocation journal claims by result.
pub const JOURNAL_CLAIMS: &str = "capgate_journal_claims_total";

static CLAIMS: Handles<(), metrics::Counter> = Handles::new();
static REQUESTS: Handles<(&str, u16), metrics::Counter> = Handles::new();
static DURATIONS: Handles<&str, metrics::Histogram> = Handles::new();

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

/// Middleware (`axum::middleware::from_fn`) counting and timing every request by its
/// matched route. Add it with `Router::layer` on the whole application.
pub async fn track_http(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = request.extensions().get::<MatchedPath>().cloned();
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    let method = method_label(request.method());
    let response = next.run(request).await;
    let status = response.status().as_u16();
    REQUESTS
        .get(route, (method, status), || {
            metrics::counter!(
                HTTP_REQUESTS,
                "route" => route.to_owned(),
                "method" => method,
                "status" => status.to_string(),
            )
        })
        .increment(1);
    DURATIONS
        .get(
            route,
            method,
            || metrics::histogram!(HTTP_DURATION, "route" => route.to_owned(), "method" => method),
        )
        .record(started.elapsed().as_secs_f64());
    response
}

/// What `/metrics` serves: gauges read at scrape time are refreshed, then the text is
/// rendered.
#[async_trait]
pub trait MetricsSource: Send + Sync + 'static {
    /// The Prometheus text exposition.
    async fn render(&self) -> String;
}

/// `GET {path}`: the exposition text (`text/plain; version=0.0.4`). With `bearer_sha256`
/// (hex SHA-256 of the token, as `capgate keys hash` prints it), a request without
/// `Authorization: Bearer <token>` matching it gets `401`.
pub fn metrics_router(
    path: &str,
    source: impl MetricsSource,
    bearer_sha256: Option<String>,
) -> Router {
    let source: Arc<dyn MetricsSource> = Arc::new(source);
    let expected = bearer_sha256.map(|h| h.to_ascii_lowercase());
    Router::new().route(
        path,
        get(move |headers: HeaderMap| {
            let source = source.clone();
            let expected = expected.clone();
            async move {
                if let Some(expected) = expected
                    && !bearer_matches(&headers, &expected)
                {
                    return (
                        StatusCode::UNAUTHORIZED,
                        [(header::WWW_AUTHENTICATE, "Bearer")],
                        "unauthorized\n",
                    )
                        .into_response();
                }
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    source.render().await,
                )
                    .into_response()
            }
        }),
    )
}

fn bearer_matches(headers: &HeaderMap, expected_sha256: &str) -> bool {
    let Some(token) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    // Compare digests, not the token: equal-length, and the secret never meets `==`.
    sha256_hex(token.trim()) == expected_sha256
}
