//! The operator API: `POST /admin/reload` asks the serving process to reload its
//! configuration. Off unless the deployment mounts it (`capgate serve` with
//! `[gateway.admin] reload = true`).
//!
//! The door is the same as every other ([`crate::door`]): the credential is authenticated
//! (`401`), the principal rate-limited (`429`), and it must be an operator principal —
//! a credential configured as an operator's (`[[gateway.operatorKeys]]`), outside every
//! tenant namespace ([`crate::auth::Authenticated::operator`]): a tenant's credential is
//! refused `403` whatever roles it holds in its namespace. The deployment's authorizer is
//! then asked (`reloadConfiguration`, told no surface, the principal's namespace being
//! [`crate::auth::OPERATOR_NAMESPACE`]): `403` when it refuses. An operator credential opens
//! no other door, and no model door (`/agent`, `/workflow`, `/mcp`) reaches this one. The
//! request body is ignored; what is reloaded is the file the process was started with,
//! never anything the caller sends.
//!
//! | answer | when |
//! |---|---|
//! | `200 {"status":"reloaded", "previous":{…}, "current":{…}}` | the new configuration serves new calls |
//! | `422 {"status":"refused", "problems":[…]}` | the file is refused (the located problems of `capgate check`); the previous one keeps serving |
//! | `500 {"status":"failed", "message":…}` | the new configuration passed its checks but could not be built; the previous one keeps serving |

use crate::auth::Authenticated;
use crate::door::{Caller, Door, DoorState, Doorkeeper};
use crate::reject::{Reject, json_refusals};
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use capgate_core::authz::Operation;
use std::sync::Arc;

const LOG: &str = "capgate::admin";

/// The role an operator holds by default (kept for embedders that map roles; `capgate
/// serve` asks for an operator principal, see the module docs).
pub const OPERATOR_ROLE: &str = "operator";

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

struct AdminApi {
    doorkeeper: Doorkeeper,
    role: Arc<str>,
    reloader: Arc<dyn Reloader>,
}

impl DoorState for AdminApi {
    fn keeper(&self) -> &Doorkeeper {
        &self.doorkeeper
    }
    fn door(&self) -> Door {
        Door::Admin
    }
    fn body_limit(&self) -> usize {
        MAX_ADMIN_BODY_BYTES
    }
}

/// Largest body accepted (it is ignored).
const MAX_ADMIN_BODY_BYTES: usize = 1024;

/// `POST /admin/reload` for principals holding `role`, through `doorkeeper`.
pub fn admin_router(
    doorkeeper: Doorkeeper,
    role: impl Into<String>,
    reloader: Arc<dyn Reloader>,
) -> Router {
    let api = Arc::new(AdminApi {
        doorkeeper,
        role: Arc::from(role.into()),
        reloader,
    });
    Router::new()
        .route("/admin/reload", post(reload))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(tower_http::limit::RequestBodyLimitLayer::new(
            MAX_ADMIN_BODY_BYTES,
        ))
        .layer(axum::middleware::map_response(json_refusals))
        .with_state(api)
}

async fn reload(State(api): State<Arc<AdminApi>>, Caller(who): Caller) -> Response {
    if !who.operator || !who.has_role(&api.role) {
        tracing::info!(target: LOG, actor = %who.principal.actor.id, namespace = %who.principal.namespace, role = %api.role, "reload refused: not an operator principal");
        return Reject::forbidden_because(
            "The operator API needs an operator's credential ([[gateway.operatorKeys]]); tenant credentials cannot reload.",
        )
        .into_response();
    }
    if let Err(refused) = api
        .doorkeeper
        .authorize(
            &who,
            Door::Admin,
            Operation::ReloadConfiguration,
            None,
            None,
        )
        .await
    {
        return refused.into_response();
    }
    tracing::info!(target: LOG, actor = %who.principal.actor.id, namespace = %who.principal.namespace, "configuration reload asked");
    api.reloader
        .reload(ReloadRequester { who })
        .await
        .into_response()
}
