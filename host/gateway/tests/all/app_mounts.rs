//! The application builder (issue 34): every door it mounts at a fixed path is reserved, a
//! configured path on a reserved one is refused, and what it keeps outlives a rebuild.

use crate::gateway_support::{self, Counters, RecordingAuthorizer};
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use capgate_core::actor::Surface;
use capgate_core::journal::InMemoryInvocationJournal;
use capgate_core::runtime::Runtime;
use capgate_gateway::admin::{ReloadAnswer, ReloadRequester, Reloader};
use capgate_gateway::app::{AppBuilder, AppError, Kept, RESERVED, reserved_by};
use capgate_gateway::console::ConsoleOptions;
use capgate_gateway::door::{Doorkeeper, Quotas, Rate};
use capgate_gateway::routes::GatewayOptions;
use std::sync::Arc;
use tower::ServiceExt;

/// One request to each door the application mounts at a fixed path, as its docs show it.
const DOOR_REQUESTS: &[(&str, &str)] = &[
    ("GET", "/mcp"),
    ("GET", "/approvals"),
    ("POST", "/admin/reload"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/.well-known/oauth-protected-resource"),
    ("GET", "/.well-known/oauth-protected-resource/mcp"),
];

/// A reloader that is never called here.
struct NoReload;

#[async_trait::async_trait]
impl Reloader for NoReload {
    async fn reload(&self, _: ReloadRequester) -> ReloadAnswer {
        ReloadAnswer::Failed(serde_json::json!({}))
    }
}

fn runtime() -> Runtime {
    Runtime::builder(gateway_support::registry(&Counters::default()))
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
}

fn keeper() -> Doorkeeper {
    Doorkeeper::new(
        gateway_support::authenticator(),
        Arc::new(RecordingAuthorizer::default()),
    )
}

fn route(runtime: &Runtime) -> GatewayOptions {
    GatewayOptions::new(
        Surface::AiSdk,
        "r1",
        runtime.clone(),
        Arc::new(InMemoryInvocationJournal::new()),
        keeper(),
    )
}

async fn status(app: &Router, method: &str, path: &str, token: Option<&str>) -> StatusCode {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let request = request
        .body(Body::empty())
        .unwrap_or_else(|e| panic!("request: {e}"));
    match app.clone().oneshot(request).await {
        Ok(response) => response.status(),
        Err(never) => match never {},
    }
}

#[tokio::test]
async fn every_door_mounted_at_a_fixed_path_is_reserved() {
    let kept = Kept::default();
    assert!(kept.set_reloader(Arc::new(NoReload)).is_ok());
    let rt = runtime();
    let mcp = capgate_gateway::mcp::McpOptions {
        protected_resource: Some(
            capgate_gateway::mcp::oauth::ProtectedResource::new(
                "https://capgate.test/mcp",
                "https://idp.test",
                vec![],
            )
            .unwrap_or_else(|e| panic!("a resource: {e}")),
        ),
        ..Default::default()
    };
    let app = AppBuilder::new(&kept, rt.clone(), keeper())
        .route("/agent", route(&rt))
        .mcp(mcp)
        .console(ConsoleOptions::default())
        .admin(true)
        .http_metrics(true)
        .build()
        .unwrap_or_else(|e| panic!("app: {e}"));
    for (method, path) in DOOR_REQUESTS {
        let answered = status(&app, method, path, None).await;
        assert_ne!(
            answered,
            StatusCode::NOT_FOUND,
            "{method} {path} reaches no door"
        );
        assert!(
            reserved_by(path).is_some(),
            "{path} is mounted but not reserved"
        );
    }
    for r in RESERVED {
        assert!(
            DOOR_REQUESTS.iter().any(|(_, path)| r.covers(path)),
            "{} is reserved but no door is mounted there",
            r.path
        );
    }
    assert_eq!(
        status(&app, "GET", "/nowhere", None).await,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn a_route_or_console_on_a_reserved_path_is_refused() {
    let kept = Kept::default();
    let rt = runtime();
    for path in ["/admin", "/admin/tools", "/mcp", "/approvals/x", "/readyz"] {
        let built = AppBuilder::new(&kept, rt.clone(), keeper())
            .route(path, route(&rt))
            .build();
        match built {
            Err(AppError::Reserved { path: refused, .. }) => assert_eq!(refused, path),
            Err(e) => panic!("{path}: another refusal: {e}"),
            Ok(_) => panic!("a route at {path} was mounted"),
        }
    }
    let refused = AppBuilder::new(&kept, rt.clone(), keeper())
        .route("/admin", route(&rt))
        .build()
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        refused.as_deref(),
        Some("`/admin` is served by capgate itself (the operator API); pick another path")
    );
    // Segment-wise: a path that only starts with the same letters is free.
    assert!(
        AppBuilder::new(&kept, rt.clone(), keeper())
            .route("/administration", route(&rt))
            .build()
            .is_ok()
    );
    for prefix in ["/admin", "/approvals/ui"] {
        let console = ConsoleOptions {
            prefix: prefix.into(),
            ..ConsoleOptions::default()
        };
        let built = AppBuilder::new(&kept, rt.clone(), keeper())
            .console(console)
            .build();
        assert!(
            matches!(built, Err(AppError::Reserved { .. })),
            "a console at {prefix} was mounted"
        );
    }
}

#[tokio::test]
async fn a_rebuilt_application_keeps_the_rate_limits_and_the_shutdown() {
    let kept = Kept::default();
    let rt = runtime();
    let limited = |burst| keeper().quotas(Arc::new(Quotas::new(Rate::new(1, burst), None)));
    let first = AppBuilder::new(&kept, rt.clone(), limited(1))
        .build()
        .unwrap_or_else(|e| panic!("app: {e}"));
    assert_eq!(
        status(&first, "GET", "/approvals", Some("tok-priya")).await,
        StatusCode::OK
    );
    // The same limits: the rebuilt application spends from the same bucket.
    let same = AppBuilder::new(&kept, rt.clone(), limited(1))
        .build()
        .unwrap_or_else(|e| panic!("app: {e}"));
    assert_eq!(
        status(&same, "GET", "/approvals", Some("tok-priya")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Other limits: new buckets.
    let other = AppBuilder::new(&kept, rt.clone(), limited(2))
        .build()
        .unwrap_or_else(|e| panic!("app: {e}"));
    assert_eq!(
        status(&other, "GET", "/approvals", Some("tok-priya")).await,
        StatusCode::OK
    );
    assert_eq!(status(&first, "GET", "/readyz", None).await, StatusCode::OK);
    kept.shutdown().begin();
    let after = AppBuilder::new(&kept, rt, keeper())
        .build()
        .unwrap_or_else(|e| panic!("app: {e}"));
    for app in [&first, &after] {
        assert_eq!(
            status(app, "GET", "/readyz", None).await,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
