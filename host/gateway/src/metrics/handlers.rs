//! `GET {path}`: the exposition, behind the optional bearer token.

use super::MetricsSource;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// What the exposition route serves, and the token digest it asks for.
pub(super) struct Exposition {
    pub(super) source: Arc<dyn MetricsSource>,
    /// Lower-case hex SHA-256 of the bearer token (`None`: no token asked).
    pub(super) expected: Option<String>,
}

pub(super) async fn expose(
    State(exposition): State<Arc<Exposition>>,
    headers: HeaderMap,
) -> Response {
    if let Some(expected) = &exposition.expected
        && !bearer_matches(&headers, expected)
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
        exposition.source.render().await,
    )
        .into_response()
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
    capgate_core::digest::sha256_hex(token.trim()) == expected_sha256
}
