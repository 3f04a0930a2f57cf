//! `/healthz` (the process serves) and `/readyz` (its probe answers in time).

use async_trait::async_trait;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use capgate_core::journal::InvocationJournal;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

const LOG: &str = "capgate::gateway";

/// What `/readyz` asks: can the gateway reach its store?
#[async_trait]
pub trait ReadinessProbe: Send + Sync + 'static {
    /// `Ok` when ready; the error is logged, never sent.
    async fn ready(&self) -> Result<(), String>;
}

#[async_trait]
impl ReadinessProbe for capgate_store::Store {
    /// Ready when the database answers and every embedded migration is applied.
    async fn ready(&self) -> Result<(), String> {
        let status = self.migration_status().await.map_err(|e| e.to_string())?;
        match status.iter().find(|m| !m.applied) {
            Some(m) => Err(format!(
                "migration {} ({}) is not applied",
                m.version, m.description
            )),
            None => Ok(()),
        }
    }
}

/// A readiness probe that reads one (absent) record from an invocation journal.
pub struct JournalProbe(pub Arc<dyn InvocationJournal>);

#[async_trait]
impl ReadinessProbe for JournalProbe {
    async fn ready(&self) -> Result<(), String> {
        self.0
            .get("capgate.readyz", "capgate.readyz")
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// How long `/readyz` waits for its probe.
pub const READINESS_TIMEOUT: Duration = Duration::from_secs(2);

/// `GET /healthz` (always `200`: the process serves) and `GET /readyz` (`200` when the
/// probe succeeds within [`READINESS_TIMEOUT`], `503` otherwise).
pub fn health_router(probe: impl ReadinessProbe) -> Router {
    let probe: Arc<dyn ReadinessProbe> = Arc::new(probe);
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({ "status": "ok" })) }),
        )
        .route(
            "/readyz",
            get(move || {
                let probe = probe.clone();
                async move {
                    match tokio::time::timeout(READINESS_TIMEOUT, probe.ready()).await {
                        Ok(Ok(())) => (
                            StatusCode::OK,
                            Json(serde_json::json!({ "status": "ready" })),
                        ),
                        Ok(Err(e)) => {
                            tracing::warn!(target: LOG, error = %e, "not ready");
                            unavailable()
                        }
                        Err(_) => {
                            tracing::warn!(target: LOG, "readiness probe timed out");
                            unavailable()
                        }
                    }
                }
            }),
        )
}

fn unavailable() -> (StatusCode, Json<Value>) {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(serde_json::json!({ "status": "unavailable" })),
    )
}
