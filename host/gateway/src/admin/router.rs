//! The operator API's routes, under [`PREFIX`], and the state they share.

use super::Reloader;
use super::handlers;
use crate::door::{Door, DoorState, Doorkeeper};
use crate::reject::json_refusals;
use axum::Router;
use axum::routing::post;
use std::sync::Arc;

/// Where the application mounts the operator API (its one route is `POST /admin/reload`).
pub const PREFIX: &str = "/admin";

/// The operator API's state: its doorkeeper, the role asked of an operator, and what
/// reloads.
pub(super) struct AdminApi {
    pub(super) doorkeeper: Doorkeeper,
    pub(super) role: Arc<str>,
    pub(super) reloader: Arc<dyn Reloader>,
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
        .route(&format!("{PREFIX}/reload"), post(handlers::reload))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(tower_http::limit::RequestBodyLimitLayer::new(
            MAX_ADMIN_BODY_BYTES,
        ))
        .layer(axum::middleware::map_response(json_refusals))
        .with_state(api)
}
