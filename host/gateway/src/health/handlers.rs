//! `/healthz` and `/readyz`.

use super::router::READINESS_TIMEOUT;
use super::{LOG, ReadinessProbe};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::Value;
use std::sync::Arc;

/// The named checks `/readyz` runs.
pub(super) struct Checks(pub(super) Vec<(String, Arc<dyn ReadinessProbe>)>);

pub(super) async fn healthz() -> Json<Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

pub(super) async fn readyz(State(checks): State<Arc<Checks>>) -> (StatusCode, Json<Value>) {
    let results = futures::future::join_all(checks.0.iter().map(|(name, probe)| async move {
        let word = probe.failing_word();
        let required = probe.required();
        let ok = match tokio::time::timeout(READINESS_TIMEOUT, probe.ready()).await {
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
        (name.clone(), if ok { "ok" } else { word }, required)
    }))
    .await;
    let ready = results
        .iter()
        .all(|(_, word, required)| *word == "ok" || !required);
    let whole = results.iter().all(|(_, word, _)| *word == "ok");
    let checks: serde_json::Map<String, Value> = results
        .into_iter()
        .map(|(n, word, _)| (n, Value::from(word)))
        .collect();
    let (code, status) = match (ready, whole) {
        (true, true) => (StatusCode::OK, "ready"),
        // Only checks the gateway serves without failed: still ready, said so.
        (true, false) => (StatusCode::OK, "degraded"),
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
    };
    (
        code,
        Json(serde_json::json!({ "status": status, "checks": checks })),
    )
}
