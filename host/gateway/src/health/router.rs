//! The health routes, at fixed paths.

use super::ReadinessProbe;
use super::handlers::{self, Checks};
use axum::Router;
use axum::routing::get;
use std::sync::Arc;
use std::time::Duration;

/// The liveness path: answers `200` whenever the process serves.
pub const LIVENESS: &str = "/healthz";
/// The readiness path: answers `200` when every check passes, `503` otherwise.
pub const READINESS: &str = "/readyz";

/// How long `/readyz` waits for its probe.
pub const READINESS_TIMEOUT: Duration = Duration::from_secs(2);

/// `GET /healthz` (always `200`: the process serves) and `GET /readyz` (`200` when the
/// probe succeeds within [`READINESS_TIMEOUT`], `503` otherwise), with one check named
/// `store`.
pub fn health_router(probe: impl ReadinessProbe) -> Router {
    let probe: Arc<dyn ReadinessProbe> = Arc::new(probe);
    readiness_router(vec![("store".to_owned(), probe)])
}

/// `GET /healthz` (always `200`, no I/O: the process serves) and `GET /readyz`, which runs
/// every named check concurrently, each within [`READINESS_TIMEOUT`]: `200
/// {"status":"ready","checks":{"store":"ok",…}}` when all pass, `503
/// {"status":"unavailable","checks":{"store":"ok","audit":"failing",…}}` otherwise. Only
/// the check names and `ok`/`failing` are sent; why a check failed is logged (target
/// `capgate::gateway`), never answered.
pub fn readiness_router(checks: Vec<(String, Arc<dyn ReadinessProbe>)>) -> Router {
    Router::new()
        .route(LIVENESS, get(handlers::healthz))
        .route(READINESS, get(handlers::readyz))
        .with_state(Arc::new(Checks(checks)))
}
