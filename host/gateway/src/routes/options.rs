//! How one capability route is configured, and why a configuration is refused.

use crate::door::Doorkeeper;
use capgate_contract::ContractError;
use capgate_core::actor::Surface;
use capgate_core::journal::InvocationJournal;
use capgate_core::runtime::Runtime;
use std::sync::Arc;
use std::time::Duration;

pub use capgate_core::defaults::routes::{
    DEFAULT_AUDIT_DRAIN_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_REQUEST_TIMEOUT,
};

/// Everything one gateway route needs. Shared pieces (runtime, journal, authenticator,
/// authorizer) are cheap handles; build one config per route/surface.
#[derive(Clone)]
pub struct GatewayOptions {
    /// The surface of this route: fixed here, never a client input (`aiSdk`, `mcp` or
    /// `workflow`).
    pub surface: Surface,
    /// The deployment contract revision (part of every contract digest).
    pub revision: String,
    /// The governed runtime.
    pub runtime: Runtime,
    /// The invocation journal (shared by every replica).
    pub journal: Arc<dyn InvocationJournal>,
    /// Authenticates, binds to this door, rate-limits and authorizes every request (the
    /// same doorkeeper serves every door of a deployment).
    pub doorkeeper: Doorkeeper,
    /// Ceiling of one request, audit drain included.
    pub request_timeout: Duration,
    /// Time reserved at the end of a request for draining audit; smaller than
    /// `request_timeout`.
    pub audit_drain_timeout: Duration,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
}

crate::debug::debug_fields! {
    GatewayOptions { surface, revision, request_timeout, audit_drain_timeout, max_body_bytes }
}

impl GatewayOptions {
    /// A configuration with the default timeouts and body limit.
    pub fn new(
        surface: Surface,
        revision: impl Into<String>,
        runtime: Runtime,
        journal: Arc<dyn InvocationJournal>,
        doorkeeper: Doorkeeper,
    ) -> Self {
        GatewayOptions {
            surface,
            revision: revision.into(),
            runtime,
            journal,
            doorkeeper,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            audit_drain_timeout: DEFAULT_AUDIT_DRAIN_TIMEOUT,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }

    /// Set both timeouts; the audit drain time must be smaller than the request ceiling.
    pub fn with_timeouts(
        mut self,
        request_timeout: Duration,
        audit_drain_timeout: Duration,
    ) -> Result<Self, GatewayOptionsError> {
        self.request_timeout = request_timeout;
        self.audit_drain_timeout = audit_drain_timeout;
        self.validate()?;
        Ok(self)
    }

    /// Set the body limit (must be positive).
    pub fn with_max_body_bytes(
        mut self,
        max_body_bytes: usize,
    ) -> Result<Self, GatewayOptionsError> {
        self.max_body_bytes = max_body_bytes;
        self.validate()?;
        Ok(self)
    }

    /// Check the configuration ([`capability_router`](crate::routes::capability_router)
    /// does too).
    pub fn validate(&self) -> Result<(), GatewayOptionsError> {
        if !self.surface.is_gateway_door() {
            return Err(GatewayOptionsError::Surface(self.surface));
        }
        if self.revision.trim().is_empty() {
            return Err(GatewayOptionsError::EmptyRevision);
        }
        if self.request_timeout.is_zero() {
            return Err(GatewayOptionsError::ZeroRequestTimeout);
        }
        if self.audit_drain_timeout >= self.request_timeout {
            return Err(GatewayOptionsError::DrainNotBelowRequestTimeout {
                audit_drain_timeout: self.audit_drain_timeout,
                request_timeout: self.request_timeout,
            });
        }
        if self.max_body_bytes == 0 {
            return Err(GatewayOptionsError::ZeroBodyLimit);
        }
        Ok(())
    }
}

/// Why a gateway could not be built. Returned before anything is served, so a bad route
/// never takes the application's other routes down with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GatewayOptionsError {
    /// Only model/workflow surfaces are served over HTTP.
    #[error("surface `{0}` cannot be served by a capability gateway (use aiSdk, mcp or workflow)")]
    Surface(Surface),
    /// The revision is empty.
    #[error("the contract revision is empty")]
    EmptyRevision,
    /// The request timeout is zero.
    #[error("the request timeout must be positive")]
    ZeroRequestTimeout,
    /// The audit drain time does not fit inside the request ceiling.
    #[error(
        "the audit drain timeout ({audit_drain_timeout:?}) must be smaller than the request timeout ({request_timeout:?})"
    )]
    DrainNotBelowRequestTimeout {
        /// The configured drain time.
        audit_drain_timeout: Duration,
        /// The configured request ceiling.
        request_timeout: Duration,
    },
    /// The body limit is zero.
    #[error("the body limit must be positive")]
    ZeroBodyLimit,
    /// The contract cannot be exported.
    #[error(transparent)]
    Contract(#[from] ContractError),
}
