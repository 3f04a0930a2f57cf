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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{Degrades, FnProbe};

    async fn readyz(checks: Vec<(String, Arc<dyn ReadinessProbe>)>) -> (u16, serde_json::Value) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, readiness_router(checks)).await;
        });
        let r = reqwest::get(format!("http://{addr}{READINESS}"))
            .await
            .expect("GET /readyz");
        let status = r.status().as_u16();
        let body = r.json().await.expect("JSON");
        server.abort();
        (status, body)
    }

    fn probe(ok: bool) -> FnProbe<impl Fn() -> Result<(), String> + Send + Sync + 'static> {
        FnProbe(move || if ok { Ok(()) } else { Err("down".into()) })
    }

    /// Issue 55: `/readyz` names its checks (which dependencies the deployment has) only
    /// to a peer on this host; any other peer gets the status alone.
    #[tokio::test]
    async fn readyz_names_its_checks_only_to_a_peer_on_this_host() {
        let store: Arc<dyn ReadinessProbe> = Arc::new(probe(true));
        let router = readiness_router(vec![("store".into(), store)]);
        let ask = |ip: &str| {
            let mut request = axum::http::Request::get(READINESS)
                .body(axum::body::Body::empty())
                .expect("a request");
            let addr: std::net::SocketAddr = format!("{ip}:4000").parse().expect("addr");
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(addr));
            let router = router.clone();
            async move {
                use tower::ServiceExt;
                let r = router.oneshot(request).await.expect("an answer");
                let bytes = axum::body::to_bytes(r.into_body(), 1 << 16)
                    .await
                    .expect("a body");
                serde_json::from_slice::<serde_json::Value>(&bytes).expect("JSON")
            }
        };
        let local = ask("127.0.0.1").await;
        assert_eq!(local["checks"]["store"], "ok", "{local}");
        let remote = ask("203.0.113.7").await;
        assert_eq!(remote, serde_json::json!({"status": "ready"}));
    }

    /// Issue 55: one MCP upstream down does not take the whole gateway out of the load
    /// balancer: a failing check that only degrades answers `200` `degraded`; a required
    /// one still answers `503`.
    #[tokio::test]
    async fn a_failing_check_that_only_degrades_keeps_the_gateway_ready() {
        let store: Arc<dyn ReadinessProbe> = Arc::new(probe(true));
        let upstream: Arc<dyn ReadinessProbe> = Arc::new(Degrades(probe(false)));
        let (status, body) = readyz(vec![
            ("store".into(), store.clone()),
            ("mcp:shop".into(), upstream.clone()),
        ])
        .await;
        assert_eq!(
            (status, body["status"].as_str()),
            (200, Some("degraded")),
            "{body}"
        );
        assert_eq!(body["checks"]["mcp:shop"], "failing");
        let down: Arc<dyn ReadinessProbe> = Arc::new(probe(false));
        let (status, body) =
            readyz(vec![("store".into(), down), ("mcp:shop".into(), upstream)]).await;
        assert_eq!(
            (status, body["status"].as_str()),
            (503, Some("unavailable")),
            "{body}"
        );
        let (status, body) = readyz(vec![("store".into(), store)]).await;
        assert_eq!(
            (status, body["status"].as_str()),
            (200, Some("ready")),
            "{body}"
        );
    }
}
