//! `/healthz` and `/readyz`.

use super::router::READINESS_TIMEOUT;
use super::{LOG, ReadinessProbe};
use axum::Extension;
use axum::Json;
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The named checks `/readyz` runs.
pub(super) struct Checks(pub(super) Vec<(String, Arc<dyn ReadinessProbe>)>);

pub(super) async fn healthz() -> Json<Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// Whether `/readyz` may name its checks to this peer: one on this host (an operator's
/// `curl`, a sidecar, a port-forward), or an in-process caller with no peer at all. Any
/// other peer gets the status alone: the names say which dependencies the deployment has.
fn names_checks(peer: Option<&ConnectInfo<SocketAddr>>) -> bool {
    peer.is_none_or(|ConnectInfo(addr)| match addr.ip() {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    })
}

pub(super) async fn readyz(
    State(checks): State<Arc<Checks>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
) -> (StatusCode, Json<Value>) {
    let peer = peer.map(|Extension(p)| p);
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
    if !names_checks(peer.as_ref()) {
        return (code, Json(serde_json::json!({ "status": status })));
    }
    (
        code,
        Json(serde_json::json!({ "status": status, "checks": checks })),
    )
}
