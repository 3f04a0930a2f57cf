//! `/healthz` (the process serves) and `/readyz` (its probe answers in time).

use async_trait::async_trait;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use capgate_core::journal::{InvocationJournal, JournalError};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

const LOG: &str = "capgate::gateway";

/// Why a readiness check failed. Logged (target `capgate::gateway`), never answered:
/// `/readyz` sends only the check's word.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadinessError {
    /// The store could not be asked (or refuses writes): the store's own error, which the
    /// gateway does not know the type of (the binary wires the store in).
    #[error(transparent)]
    Store(capgate_core::error::BoxError),
    /// The invocation journal did not answer.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The process is shutting down.
    #[error("shutting down: draining calls in flight")]
    Draining,
    /// A check from a closure ([`FnProbe`]) failed, for this reason.
    #[error("{0}")]
    Failed(String),
}

/// What `/readyz` asks: can the gateway reach its store?
#[async_trait]
pub trait ReadinessProbe: Send + Sync + 'static {
    /// `Ok` when ready; the error is logged, never sent.
    async fn ready(&self) -> Result<(), ReadinessError>;

    /// The word `/readyz` answers for this check when it fails (default `failing`): a
    /// fixed word, never the error, so nothing about the failure leaks.
    fn failing_word(&self) -> &'static str {
        "failing"
    }
}

/// A readiness probe that reads one (absent) record from an invocation journal.
pub struct JournalProbe(pub Arc<dyn InvocationJournal>);

#[async_trait]
impl ReadinessProbe for JournalProbe {
    async fn ready(&self) -> Result<(), ReadinessError> {
        self.0
            .get("capgate.readyz", "capgate.readyz")
            .await
            .map(|_| ())
            .map_err(ReadinessError::from)
    }
}

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
    let checks = Arc::new(checks);
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({ "status": "ok" })) }),
        )
        .route(
            "/readyz",
            get(move || {
                let checks = checks.clone();
                async move {
                    let results = futures::future::join_all(checks.iter().map(
                        |(name, probe)| async move {
                            let word = probe.failing_word();
                            let ok = match tokio::time::timeout(READINESS_TIMEOUT, probe.ready())
                                .await
                            {
                                Ok(Ok(())) => true,
                                // A deliberate state (such as draining) is no fault.
                                Ok(Err(e)) if word != "failing" => {
                                    tracing::debug!(target: LOG, check = %name, error = %e, "not ready");
                                    false
                                }
                                Ok(Err(e)) => {
                                    tracing::warn!(target: LOG, check = %name, error = %e, "not ready");
                                    false
                                }
                                Err(_) => {
                                    tracing::warn!(target: LOG, check = %name, "readiness check timed out");
                                    false
                                }
                            };
                            (name.clone(), if ok { "ok" } else { word })
                        },
                    ))
                    .await;
                    let ready = results.iter().all(|(_, word)| *word == "ok");
                    let checks: serde_json::Map<String, Value> = results
                        .into_iter()
                        .map(|(n, word)| (n, Value::from(word)))
                        .collect();
                    let (code, status) = if ready {
                        (StatusCode::OK, "ready")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
                    };
                    (
                        code,
                        Json(serde_json::json!({ "status": status, "checks": checks })),
                    )
                }
            }),
        )
}

/// A readiness check from a closure (for checks that need no I/O, such as "the audit
/// writer is running").
pub struct FnProbe<F>(pub F);

#[async_trait]
impl<F> ReadinessProbe for FnProbe<F>
where
    F: Fn() -> Result<(), String> + Send + Sync + 'static,
{
    async fn ready(&self) -> Result<(), ReadinessError> {
        (self.0)().map_err(ReadinessError::Failed)
    }
}

/// The `shutdown` readiness check of a serving process: `ok` until shutdown begins, then
/// `draining` (so a load balancer stops sending before the listener closes).
#[derive(Debug, Clone, Default)]
pub struct ShutdownProbe(pub Arc<std::sync::atomic::AtomicBool>);

impl ShutdownProbe {
    /// Turn `/readyz` unready for good: the process is shutting down.
    pub fn begin(&self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[async_trait]
impl ReadinessProbe for ShutdownProbe {
    async fn ready(&self) -> Result<(), ReadinessError> {
        if self.0.load(std::sync::atomic::Ordering::SeqCst) {
            Err(ReadinessError::Draining)
        } else {
            Ok(())
        }
    }

    fn failing_word(&self) -> &'static str {
        "draining"
    }
}
