//! The approvals API's routes, under [`PREFIX`], and the state they share.

use super::handlers;
use super::options::{ApprovalsOptions, ExecutionHistory, MAX_DECISION_BODY_BYTES};
use crate::door::{Door, DoorState, Doorkeeper};
use crate::reject::json_refusals;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use capgate_core::runtime::Runtime;
use std::sync::Arc;

/// Where the application mounts the approvals API: its routes are `/approvals`,
/// `/approvals/{id}` and `/approvals/{id}/decision`.
pub const PREFIX: &str = "/approvals";

/// The approvals API's state: its runtime, its doorkeeper, the role asked of an approver
/// and where outcomes are read from.
pub(super) struct ApprovalsApi {
    pub(super) runtime: Runtime,
    pub(super) doorkeeper: Doorkeeper,
    pub(super) role: Arc<str>,
    pub(super) history: Option<Arc<dyn ExecutionHistory>>,
}

impl DoorState for ApprovalsApi {
    fn keeper(&self) -> &Doorkeeper {
        &self.doorkeeper
    }
    fn door(&self) -> Door {
        Door::Approvals
    }
    fn body_limit(&self) -> usize {
        MAX_DECISION_BODY_BYTES
    }
}

/// The approvals API as an axum router (routes under [`PREFIX`]), for principals holding
/// `role` (e.g. `"approver"`), through the same [`Doorkeeper`] as the capability routes.
pub fn approvals_router(
    runtime: Runtime,
    doorkeeper: Doorkeeper,
    role: impl Into<String>,
) -> Router {
    ApprovalsRouter::new(runtime, doorkeeper).role(role).build()
}

/// The approvals API with its options: the role, and where outcomes are read from.
pub struct ApprovalsRouter {
    runtime: Runtime,
    doorkeeper: Doorkeeper,
    options: ApprovalsOptions,
}

impl ApprovalsRouter {
    /// The API over `runtime`, through `doorkeeper`, for the role `approver`.
    pub fn new(runtime: Runtime, doorkeeper: Doorkeeper) -> Self {
        ApprovalsRouter::with_options(runtime, doorkeeper, ApprovalsOptions::default())
    }

    /// The API over `runtime`, through `doorkeeper`, with these options.
    pub fn with_options(
        runtime: Runtime,
        doorkeeper: Doorkeeper,
        options: ApprovalsOptions,
    ) -> Self {
        ApprovalsRouter {
            runtime,
            doorkeeper,
            options,
        }
    }

    /// The role an approver must hold.
    pub fn role(mut self, role: impl Into<String>) -> Self {
        self.options.role = role.into();
        self
    }

    /// Read how resumed calls ended, so views of consumed approvals carry an `outcome`.
    pub fn history(mut self, history: Arc<dyn ExecutionHistory>) -> Self {
        self.options.history = Some(history);
        self
    }

    /// The routes, under [`PREFIX`].
    pub fn build(self) -> Router {
        let api = Arc::new(ApprovalsApi {
            runtime: self.runtime,
            doorkeeper: self.doorkeeper,
            role: Arc::from(self.options.role),
            history: self.options.history,
        });
        Router::new()
            .route(PREFIX, get(handlers::list))
            .route(&format!("{PREFIX}/{{id}}"), get(handlers::one))
            .route(&format!("{PREFIX}/{{id}}/decision"), post(handlers::decide))
            .layer(DefaultBodyLimit::disable())
            .layer(tower_http::limit::RequestBodyLimitLayer::new(
                MAX_DECISION_BODY_BYTES,
            ))
            .layer(axum::middleware::map_response(json_refusals))
            .with_state(api)
    }
}
