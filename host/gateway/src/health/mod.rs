//! The health door: `GET /healthz` (the process serves) and `GET /readyz` (every named
//! check answers in time). Orchestrators and load balancers call it; it takes no
//! credential and tells nothing but one word per check, and the checks' names (which
//! dependencies the deployment has) only to a peer on this host.
//!
//! The shape of every door: `options` (the [`ReadinessProbe`] seam and the probes every
//! deployment has), `router` ([`readiness_router`]), `handlers`.

mod handlers;
mod options;
mod router;

pub use options::{Degrades, FnProbe, JournalProbe, ReadinessError, ReadinessProbe, ShutdownProbe};
pub use router::{LIVENESS, READINESS, READINESS_TIMEOUT, health_router, readiness_router};

const LOG: &str = "capgate::gateway";
