//! The health door: `GET /healthz` (the process serves) and `GET /readyz` (every named
//! check answers in time). Orchestrators and load balancers call it; it takes no
//! credential and tells nothing but check names and one word each.
//!
//! The shape of every door: `options` (the [`ReadinessProbe`] seam and the probes every
//! deployment has), `router` ([`readiness_router`]), `handlers`.

mod handlers;
mod options;
mod router;

pub use options::{Degrades, FnProbe, JournalProbe, ReadinessError, ReadinessProbe, ShutdownProbe};
pub use router::{LIVENESS, READINESS, READINESS_TIMEOUT, health_router, readiness_router};

const LOG: &str = "capgate::gateway";
