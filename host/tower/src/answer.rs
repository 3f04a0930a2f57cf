//! The HTTP answer of a governed route: a runtime envelope as a status and a JSON body, and
//! the door refusals the gate makes before the runtime runs anything.

use axum_core::body::Body;
use capgate_core::error::{ErrorCode, PublicError};
use capgate_core::result::ExecutionResult;
use http::{HeaderValue, Response, StatusCode, header};
use serde::Serialize;

/// The HTTP status of a failed or cancelled governed call, from its *public* error (what
/// the body carries), so the status tells a caller no more than the body does: every
/// hidden error is `INTERNAL_ERROR` there, and `500` here (SI-9).
///
/// The gateway's capability routes answer every governed result `200` with a
/// `CapabilityOutcome` (their clients read its `status`); a governed route of an
/// application keeps HTTP's meaning for the application's own clients instead.
pub fn status_for(error: &PublicError) -> StatusCode {
    match error.code {
        ErrorCode::CapabilityNotFound => StatusCode::NOT_FOUND,
        ErrorCode::InputInvalid => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorCode::Forbidden | ErrorCode::PolicyDenied => StatusCode::FORBIDDEN,
        // Resume outcomes: the approval is in a state that does not let the call run.
        ErrorCode::ApprovalRequired
        | ErrorCode::ApprovalPending
        | ErrorCode::ApprovalRejected
        | ErrorCode::ApprovalExpired
        | ErrorCode::ApprovalConsumed
        | ErrorCode::ApprovalSelfApproval => StatusCode::CONFLICT,
        // Exposed only as a defined failure of the operation, which the caller may act on.
        ErrorCode::ExecutionFailed => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorCode::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorCode::Cancelled => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::PolicyFailed
        | ErrorCode::ApprovalInputMismatch
        | ErrorCode::ApprovalUnserializableInput
        | ErrorCode::ApprovalResumeMismatch
        | ErrorCode::OutputInvalid
        | ErrorCode::AuditUnavailable
        | ErrorCode::AdapterError
        | ErrorCode::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The HTTP answer of a runtime envelope, for the gate's own calls and for an embedder
/// that resumes a held call ([`Runtime::resume`](capgate_core::runtime::Runtime::resume))
/// behind a route of its own:
///
/// - `completed`: `200`, the validated and redacted output itself;
/// - `approval-required`: `202`, the envelope (`status`, `executionId`, `approval`);
/// - `failed`, `cancelled`: [`status_for`] its public error, the envelope (`status`,
///   `executionId`, the model-safe `error`, `effectStatus` when the procedure was entered).
pub fn answer(result: &ExecutionResult) -> Response<Body> {
    match result {
        ExecutionResult::Completed { output, .. } => json(StatusCode::OK, output),
        ExecutionResult::ApprovalRequired { .. } => json(StatusCode::ACCEPTED, result),
        ExecutionResult::Failed { error, .. } | ExecutionResult::Cancelled { error, .. } => {
            let status =
                application_status(error).unwrap_or_else(|| status_for(&error.to_public()));
            json(status, result)
        }
    }
}

/// The procedure code of the application's own 4xx refusal of a governed request:
/// `HTTP_` and the status (`HTTP_409`).
pub(crate) const APP_STATUS_CODE: &str = "HTTP_";

/// The application's own 4xx, when the call failed because the wrapped service refused it
/// (its defined, exposed failure): the governed route answers with that status, as the
/// application would have.
fn application_status(error: &capgate_core::error::CapabilityError) -> Option<StatusCode> {
    if error.code() != ErrorCode::ExecutionFailed || !error.expose_to_model() {
        return None;
    }
    let code = error.private_details()?.get("procedureCode")?.as_str()?;
    let status = code.strip_prefix(APP_STATUS_CODE)?.parse::<u16>().ok()?;
    StatusCode::from_u16(status)
        .ok()
        .filter(StatusCode::is_client_error)
}

/// A door refusal in the gateway's error body (`capgate_client::wire::GatewayErrorBody`):
/// `{"error": {"code", "message", "retryable": false}}`.
pub(crate) fn refusal(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    json(
        status,
        &serde_json::json!({
            "error": { "code": code, "message": message, "retryable": false }
        }),
    )
}

/// `value` as a JSON body with `status` (an envelope or a JSON value always serializes;
/// should one not, the answer is `500` with the constant internal error).
fn json(status: StatusCode, value: &impl Serialize) -> Response<Body> {
    let (status, bytes) = match serde_json::to_vec(value) {
        Ok(bytes) => (status, bytes),
        Err(e) => {
            tracing::error!(target: crate::gate::LOG, error = %e, "a governed answer could not be serialized");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                br#"{"error":{"code":"INTERNAL_ERROR","message":"The operation failed.","retryable":false}}"#
                    .to_vec(),
            )
        }
    };
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
