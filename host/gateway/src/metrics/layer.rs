//! The HTTP request metrics every door is counted by.

use super::{HTTP_DURATION, HTTP_REQUESTS, method_label};
use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use capgate_core::metrics::Handles;
use std::time::Instant;

static REQUESTS: Handles<(&str, u16), metrics::Counter> = Handles::new();
static DURATIONS: Handles<&str, metrics::Histogram> = Handles::new();

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
