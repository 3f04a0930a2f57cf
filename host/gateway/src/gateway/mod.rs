//! The HTTP capability gateway (docs/gateway.md): five JSON operations over one
//! [`Runtime`], on one fixed surface, with an [`InvocationJournal`] that admits every
//! caller-chosen invocation id at most once.
//!
//! | route | operation |
//! |---|---|
//! | `POST /describe` | actor-filtered portable descriptors |
//! | `POST /invoke` | a governed call under a stable invocation id |
//! | `POST /getInvocation` | the caller's receipt, or `null` |
//! | `POST /getApproval` | the caller's approval, or `null` |
//! | `POST /resumeApproval` | continue an approved call under its original invocation id |
//! | `GET /contract` | the portable contract of what this caller may discover here |
//! | `GET /tools?format=ai-sdk\|openai` | the caller's tool list in an agent framework's shape |
//!
//! Every request passes its door ([`crate::door`]): authenticated, bound to this surface
//! (a credential that does not name it is refused like a bad one, `401`), within its
//! quota (`429`), and each operation authorized (`403`). Receipt and approval lookups hand
//! the authorizer the *stored* capability and input; a record that does not exist in the
//! caller's scope (namespace + actor + surface) answers `null` exactly like a missing one.
//! A malformed body (bad JSON, unknown field, an id over 256 characters, a scope over 1000
//! entries) is `400`; a body over the limit is `413`; all with a
//! [`GatewayErrorBody`](crate::wire::GatewayErrorBody).
//!
//! `invoke` follows one admission order (docs/gateway.md, "Invocation semantics"): the
//! authorizer sees only names this surface has (its refusal for a capability the caller
//! cannot discover is the concealed not-found); a stale `contractDigest` is
//! `CONTRACT_MISMATCH` for a capability this caller can discover (for one it cannot, the
//! concealed not-found); a read-only journal lookup replays a settled identical call
//! (after fresh authorization), answers `outcome-unknown` for a pending one and
//! `INVOCATION_CONFLICT` for the same id with another capability or input; otherwise the
//! runtime runs the call, and its admission step claims the journal only once the call
//! resolved, passed its schema and was not hidden by policy, within the namespace's storage
//! budget (`507 STORAGE_QUOTA_EXCEEDED` past it). So nothing concealed and nothing invalid
//! is ever stored. A failure or cancellation after the procedure was entered leaves the
//! receipt pending and answers `outcome-unknown`: the effect may have happened.
//!
//! `resumeApproval` re-checks the current invocation-phase policies with the caller's
//! current identity and context before the approval is consumed (the runtime does it).
//!
//! Timing: the execution gets `request_timeout − audit_drain_timeout`; then its
//! cancellation token fires (it also fires when the client goes away), and the audit is
//! drained in the time that is left. The execution itself runs on its own task, so a
//! dropped request still settles (or deliberately leaves pending) its receipt. Lookups run
//! under tower-http's timeout layer, and every body under its body-limit layer.
//!
//! Nothing here decides approvals: that is [`crate::approvals_api`], for humans.
//!
//! The module is cut by job: [`config`](GatewayConfig), `health`, `admission` (what a
//! request is before it runs: preflight, journal claim), `execution` (the run and its
//! receipt) and `handlers` (one short function per route, over the extractors of
//! [`crate::door`]).

mod admission;
mod config;
mod execution;
mod handlers;
mod health;

pub use config::{
    DEFAULT_AUDIT_DRAIN_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_REQUEST_TIMEOUT, GatewayConfig,
    GatewayConfigError,
};
pub use health::{
    FnProbe, JournalProbe, READINESS_TIMEOUT, ReadinessError, ReadinessProbe, ShutdownProbe,
    health_router, readiness_router,
};

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

const LOG: &str = "capgate::gateway";

/// The gateway as an axum router (mount it with `Router::nest`). Fails when the
/// configuration is invalid or the contract cannot be computed.
pub fn capability_router(config: GatewayConfig) -> Result<Router, GatewayConfigError> {
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
