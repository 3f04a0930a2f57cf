//! The procedure of a governed route: the wrapped service, called with a request rebuilt
//! from the validated input, during the original request or long after it (a resume).

use crate::{Governed, Principal};
use axum_core::body::Body;
use capgate_core::procedure::{Procedure, ProcedureCall, ProcedureError};
use http::{HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use std::sync::{Arc, OnceLock};
use tower::BoxError;
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

/// The wrapped service, boxed so every route's procedure can hold a clone of it.
pub(crate) type Inner = BoxCloneSyncService<Request<Body>, Response<Body>, BoxError>;

/// What [`GateLayer::layer`](crate::GateLayer) binds: the service it wraps and how much of
/// an answer a procedure reads.
pub(crate) struct Bound {
    pub(crate) service: Inner,
    pub(crate) max_output_bytes: usize,
}

/// Filled once, when the layer wraps its service; shared by the gate's procedures (which
/// the registry holds before there is a service to wrap).
pub(crate) type Slot = Arc<OnceLock<Bound>>;

/// The procedure [`Gate::route`](crate::Gate::route) gives a governed route's capability:
/// it calls the service the gate's layer wraps with `method path`, the validated input as
/// JSON body, and the [`Principal`] and [`Governed`] extensions, and reads the answer as
/// the capability's output (see the crate docs for how answers map).
pub struct RouteProcedure {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) capability_id: String,
    pub(crate) slot: Slot,
}

#[async_trait::async_trait]
impl Procedure for RouteProcedure {
    async fn call(&self, call: ProcedureCall) -> Result<serde_json::Value, ProcedureError> {
        if call.agent.capability_id != self.capability_id {
            return Err(ProcedureError::internal(format!(
                "the procedure of `{} {}` (capability `{}`) was called for capability `{}`",
                self.method, self.path, self.capability_id, call.agent.capability_id
            )));
        }
        let Some(bound) = self.slot.get() else {
            return Err(ProcedureError::internal(
                "the gate's layer has not wrapped a service yet",
            ));
        };
        let request = self.request(&call)?;
        let response =
            bound.service.clone().oneshot(request).await.map_err(|e| {
                ProcedureError::internal(format!("the wrapped service failed: {e}"))
            })?;
        let status = response.status();
        if !status.is_success() {
            // The body stays unread: nothing of it may reach the caller (SI-9).
            let cause = format!(
                "the wrapped service answered `{} {}` with {status}",
                self.method, self.path
            );
            return Err(match status {
                StatusCode::UNAUTHORIZED => ProcedureError::Unauthorized(cause),
                StatusCode::FORBIDDEN => ProcedureError::Forbidden(cause),
                // The application's own refusal of the request (a 404 of an unknown order,
                // a 409): a defined failure the caller may act on, answered with the same
                // status and a message naming only the status (its body stays unread).
                s if s.is_client_error() => ProcedureError::Defined {
                    code: format!("{}{}", crate::answer::APP_STATUS_CODE, s.as_u16()),
                    message: format!("The application refused the request ({s})."),
                    data: Some(serde_json::json!({ "cause": cause })),
                    retryable: false,
                },
                _ => ProcedureError::Internal(cause),
            });
        }
        let bytes = Limited::new(response.into_body(), bound.max_output_bytes)
            .collect()
            .await
            .map_err(|e| {
                ProcedureError::internal(if e.downcast_ref::<LengthLimitError>().is_some() {
                    format!(
                        "the wrapped service's answer is over {} bytes",
                        bound.max_output_bytes
                    )
                } else {
                    format!("the wrapped service's answer could not be read: {e}")
                })
            })?
            .to_bytes();
        if bytes.is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            ProcedureError::internal(format!("the wrapped service's answer is not JSON: {e}"))
        })
    }
}

impl RouteProcedure {
    /// The request the wrapped service gets: the route, the validated input as JSON body,
    /// who the call runs as and the governance facts. No header of the original request.
    fn request(&self, call: &ProcedureCall) -> Result<Request<Body>, ProcedureError> {
        let body = serde_json::to_vec(&call.input)
            .map_err(|e| ProcedureError::internal(format!("the input is not JSON: {e}")))?;
        let uri = Uri::try_from(self.path.as_str())
            .map_err(|e| ProcedureError::internal(format!("the route's path: {e}")))?;
        let mut request = Request::new(Body::from(body));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = uri;
        request.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let extensions = request.extensions_mut();
        extensions.insert(Principal {
            actor: call.agent.actor.clone(),
            namespace: call.agent.namespace.clone(),
            context: call.context.clone(),
        });
        extensions.insert(Governed(call.agent.clone()));
        Ok(request)
    }
}
