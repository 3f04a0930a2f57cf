//! The exposition route, at the configured path.

use super::MetricsSource;
use super::handlers::{self, Exposition};
use axum::Router;
use axum::routing::get;
use std::sync::Arc;

/// `GET {path}`: the exposition text (`text/plain; version=0.0.4`). With `bearer_sha256`
/// (hex SHA-256 of the token, as `capgate keys hash` prints it), a request without
/// `Authorization: Bearer <token>` matching it gets `401`.
pub fn metrics_router(
    path: &str,
    source: impl MetricsSource,
    bearer_sha256: Option<String>,
) -> Router {
    let exposition = Exposition {
        source: Arc::new(source),
        expected: bearer_sha256.map(|h| h.to_ascii_lowercase()),
    };
    Router::new()
        .route(path, get(handlers::expose))
        .with_state(Arc::new(exposition))
}
