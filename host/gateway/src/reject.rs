//! The one refusal type of every door: an HTTP status plus a [`GatewayErrorBody`], and the
//! layer that gives tower's bare refusals (body too large, timeout) the same JSON shape.

use crate::wire::{GatewayError, GatewayErrorBody};
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use capgate_core::journal::JournalError;

const LOG: &str = "capgate::gateway";

/// A door's refusal: an HTTP status plus a [`GatewayErrorBody`]. Public only because
/// [`crate::door::WireBody::check`] returns it; its module is private.
#[derive(Debug)]
pub struct Reject {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
    pub(crate) retryable: bool,
    /// Seconds to wait before retrying (`Retry-After`), for 429.
    pub(crate) retry_after: Option<u64>,
}

impl Reject {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Reject {
            status,
            code,
            message: message.into(),
            retryable: false,
            retry_after: None,
        }
    }
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Reject::new(StatusCode::BAD_REQUEST, "BAD_REQUEST", message)
    }
    pub(crate) fn unauthenticated() -> Self {
        Reject::new(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            "Authentication is required.",
        )
    }
    pub(crate) fn forbidden() -> Self {
        Reject::new(
            StatusCode::FORBIDDEN,
            "FORBIDDEN",
            "The operation is not authorized.",
        )
    }
    /// A refusal whose reason the caller may read (an approver told which role is missing).
    pub(crate) fn forbidden_because(message: impl Into<String>) -> Self {
        Reject::new(StatusCode::FORBIDDEN, "FORBIDDEN", message)
    }
    pub(crate) fn too_large(limit: Option<usize>) -> Self {
        Reject::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PAYLOAD_TOO_LARGE",
            match limit {
                Some(limit) => format!("The request body is larger than {limit} bytes."),
                None => "The request body is too large.".to_string(),
            },
        )
    }
    pub(crate) fn too_many_requests(retry_after_secs: u64) -> Self {
        Reject {
            retryable: true,
            retry_after: Some(retry_after_secs.max(1)),
            ..Reject::new(
                StatusCode::TOO_MANY_REQUESTS,
                "RATE_LIMITED",
                "Too many requests; retry after the time in Retry-After.",
            )
        }
    }
    pub(crate) fn timeout() -> Self {
        Reject {
            retryable: true,
            ..Reject::new(
                StatusCode::GATEWAY_TIMEOUT,
                "TIMEOUT",
                "The request ran out of time.",
            )
        }
    }
    pub(crate) fn unavailable(what: &str) -> Self {
        Reject {
            retryable: true,
            ..Reject::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "INTERNAL_ERROR",
                format!("The {what} is unavailable."),
            )
        }
    }
    pub(crate) fn internal() -> Self {
        Reject::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_ERROR",
            capgate_core::error::OPERATION_FAILED,
        )
    }

    /// The caller's namespace holds as many receipts (or bytes of them) as its journal
    /// budget allows: `507`, not retryable until receipts pass the replay horizon.
    pub(crate) fn quota_exceeded(limit: &str) -> Self {
        Reject::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "STORAGE_QUOTA_EXCEEDED",
            format!(
                "This namespace's invocation journal is at its {limit} budget; nothing was stored or run. Receipts leave it as they pass the replay horizon."
            ),
        )
    }

    pub(crate) fn journal(e: JournalError) -> Self {
        match e {
            JournalError::Invalid(m) => Reject::bad_request(m),
            JournalError::QuotaExceeded { namespace, limit } => {
                tracing::warn!(target: LOG, namespace = %namespace, limit, "journal claim refused: namespace over its storage budget");
                Reject::quota_exceeded(limit)
            }
            other => {
                tracing::error!(target: LOG, error = %other, "invocation journal failed");
                match other {
                    JournalError::Malformed { .. } => Reject::internal(),
                    _ => Reject::unavailable("invocation journal"),
                }
            }
        }
    }
}

impl IntoResponse for Reject {
    fn into_response(self) -> Response {
        let body = GatewayErrorBody {
            error: GatewayError {
                code: self.code.to_string(),
                message: self.message,
                retryable: self.retryable,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// Response mapper for the tower layers in front of the handlers: a body-limit `413` or a
/// timeout `504` that carries no JSON of its own gets the gateway's error body.
pub(crate) async fn json_refusals(response: Response) -> Response {
    let bare = !response.headers().contains_key(header::CONTENT_TYPE)
        || response
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/plain"));
    match response.status() {
        StatusCode::PAYLOAD_TOO_LARGE if bare => Reject::too_large(None).into_response(),
        StatusCode::GATEWAY_TIMEOUT if bare => Reject::timeout().into_response(),
        _ => response,
    }
}
