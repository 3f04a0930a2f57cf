//! The capability gateway's router: the routes of one surface, their layers, and the state
//! they share.

use super::handlers;
use super::options::{GatewayOptions, GatewayOptionsError};
use crate::door::{Door, DoorState, Doorkeeper};
use crate::reject::json_refusals;
use crate::wire::PortableCapabilityDescriptor;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{get, post};
use capgate_contract::try_export_contract;
use capgate_core::actor::Surface;
use capgate_core::journal::InvocationJournal;
use capgate_core::runtime::Runtime;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

/// The gateway as an axum router (mount it with `Router::nest`). Fails when the
/// configuration is invalid or the contract cannot be computed.
pub fn capability_router(config: GatewayOptions) -> Result<Router, GatewayOptionsError> {
    config.validate()?;
    let contract = try_export_contract(&config.runtime, config.surface, &config.revision)?;
    let by_id = contract
        .iter()
        .enumerate()
        .map(|(i, d)| (d.id.clone(), i))
        .collect();
    let mut descriptor_digests = HashMap::new();
    for d in &contract {
        if let Some(cap) = config.runtime.registry().get(&d.id) {
            descriptor_digests.insert(
                d.id.clone(),
                capgate_contract::descriptor_digest(&config.runtime, cap)?,
            );
        }
    }
    let gateway = Arc::new(Gateway {
        surface: config.surface,
        runtime: config.runtime,
        journal: config.journal,
        doorkeeper: config.doorkeeper,
        request_timeout: config.request_timeout,
        audit_drain_timeout: config.audit_drain_timeout,
        max_body_bytes: config.max_body_bytes,
        contract,
        by_id,
        descriptor_digests,
    });
    // Lookups and listings: tower-http's timeout. invoke and resumeApproval keep their own
    // budget, because running out of it means cancelling the run and answering
    // outcome-unknown, not dropping the request.
    let lookups = Router::new()
        .route("/describe", post(handlers::describe))
        .route("/getInvocation", post(handlers::get_invocation))
        .route("/getApproval", post(handlers::get_approval))
        .route("/contract", get(handlers::get_contract))
        .route("/tools", get(handlers::tools))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::GATEWAY_TIMEOUT,
            gateway.request_timeout,
        ));
    Ok(Router::new()
        .route("/invoke", post(handlers::invoke))
        .route("/resumeApproval", post(handlers::resume_approval))
        .merge(lookups)
        .layer(DefaultBodyLimit::disable())
        .layer(RequestBodyLimitLayer::new(gateway.max_body_bytes))
        // Outermost, so the body limit's and the timeout's bare refusals get JSON bodies.
        .layer(axum::middleware::map_response(json_refusals))
        .with_state(gateway))
}

/// One route's shared state.
pub(crate) struct Gateway {
    pub(crate) surface: Surface,
    pub(crate) runtime: Runtime,
    pub(crate) journal: Arc<dyn InvocationJournal>,
    pub(crate) doorkeeper: Doorkeeper,
    pub(crate) request_timeout: Duration,
    pub(crate) audit_drain_timeout: Duration,
    pub(crate) max_body_bytes: usize,
    pub(crate) contract: Vec<PortableCapabilityDescriptor>,
    pub(crate) by_id: HashMap<String, usize>,
    /// Each capability's own digest without the revision ([`capgate_contract::descriptor_digest`]).
    pub(crate) descriptor_digests: HashMap<String, String>,
}

impl DoorState for Gateway {
    fn keeper(&self) -> &Doorkeeper {
        &self.doorkeeper
    }
    fn door(&self) -> Door {
        Door::Surface(self.surface)
    }
    fn body_limit(&self) -> usize {
        self.max_body_bytes
    }
}
