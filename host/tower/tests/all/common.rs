//! Serving an axum app on a free local port, and the example shop ready to drive.

use capgate_core::audit::MemorySink;
use capgate_core::runtime::Runtime;
use capgate_example_tower::{Shop, app};
use std::sync::Arc;

/// Serve `app` on 127.0.0.1 (a free port) for the rest of the test; its base URL.
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free local port");
    let addr = listener.local_addr().expect("a bound address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// The example shop, governed, served over HTTP.
pub struct Running {
    /// Its base URL.
    pub base: String,
    /// What its refund handler issued.
    pub shop: Shop,
    /// The runtime behind its gate (approvals, resume).
    pub runtime: Runtime,
    /// Its audit trail.
    pub audit: Arc<MemorySink>,
    /// A client for it.
    pub client: reqwest::Client,
}

/// Start the example exactly as its `main` does, with audit kept in memory.
pub async fn start() -> Running {
    let shop = Shop::default();
    let audit = Arc::new(MemorySink::new());
    let (app, runtime) = app(shop.clone(), audit.clone()).expect("the example assembles");
    Running {
        base: serve(app).await,
        shop,
        runtime,
        audit,
        client: reqwest::Client::new(),
    }
}

impl Running {
    /// `POST /orders/refund` with `body` as JSON, as Dana (`dana-key`) when `as_dana`.
    pub async fn refund(&self, body: serde_json::Value, as_dana: bool) -> reqwest::Response {
        let mut request = self
            .client
            .post(format!("{}/orders/refund", self.base))
            .json(&body);
        if as_dana {
            request = request.bearer_auth("dana-key");
        }
        request.send().await.expect("the shop answers")
    }
}
