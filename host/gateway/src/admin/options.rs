//! What the operator API calls and answers: the [`Reloader`] seam of the serving process.

use crate::auth::Authenticated;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// The role an operator holds by default (kept for embedders that map roles; `capgate
/// serve` asks for an operator principal, see the module docs).
pub use capgate_core::actor::OPERATOR_ROLE;

/// Who asked for a reload: the authenticated operator of `POST /admin/reload`.
#[derive(Debug, Clone)]
pub struct ReloadRequester {
    /// The principal, as the door authenticated it.
    pub who: Authenticated,
}

/// How a reload ended, as `POST /admin/reload` answers it (each carries its JSON body).
#[derive(Debug, Clone)]
pub enum ReloadAnswer {
    /// Swapped in: `200`.
    Reloaded(serde_json::Value),
    /// The configuration was refused; nothing changed: `422`.
    Refused(serde_json::Value),
    /// The configuration passed but could not be built; nothing changed: `500`.
    Failed(serde_json::Value),
}

impl IntoResponse for ReloadAnswer {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            ReloadAnswer::Reloaded(b) => (StatusCode::OK, b),
            ReloadAnswer::Refused(b) => (StatusCode::UNPROCESSABLE_ENTITY, b),
            ReloadAnswer::Failed(b) => (StatusCode::INTERNAL_SERVER_ERROR, b),
        };
        (status, Json(body)).into_response()
    }
}

/// What reloads the deployment: implemented by the process serving it (`capgate serve`).
#[async_trait::async_trait]
pub trait Reloader: Send + Sync + 'static {
    /// Reload the configuration for this operator; never leaves the process without a
    /// serving configuration.
    async fn reload(&self, requester: ReloadRequester) -> ReloadAnswer;
}
