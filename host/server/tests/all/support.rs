//! What the in-process tests share: the example written into a temporary directory so that
//! tests running side by side never share a port, a deployment served from it over a
//! SQLite store in that directory, a backend that holds calls until released, polling with
//! a deadline, and readers of the store once the server has stopped.

use capgate_server::serve::Served;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Dana's agent key (org_1, `/agent` and `/mcp`).
pub const DANA: &str = "dana-dev-key";
/// Priya's key: org_1's approver and manager.
pub const PRIYA: &str = "priya-dev-key";

/// How long a test waits for anything before it fails.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// The example written into `dir` after `edit`, with its metrics on the gateway's own
/// listener (the example gives them the fixed port 9464, which two tests serving at once,
/// or a demo left running, would share).
pub fn example_in(dir: &Path, edit: impl Fn(String) -> String) -> PathBuf {
    capgate_testkit::paths::example_in(dir, |text| {
        let metrics_port = "[telemetry.metrics]\nlisten = \"127.0.0.1:9464\"\n";
        assert!(text.contains(metrics_port), "the example's metrics moved");
        let text = edit(text.replace(metrics_port, "[telemetry.metrics]\n"));
        // Stop without a load balancer's grace unless the test sets one.
        if text.contains("shutdownUnreadyDelayMs") {
            text
        } else {
            text.replace("[gateway]\n", "[gateway]\nshutdownUnreadyDelayMs = 0\n")
        }
    })
}

/// A deployment served in process from `dir/capgate.toml` over `dir/capgate.db`.
pub struct Serving {
    pub served: Served,
    pub base: String,
    pub store: String,
}

/// Check and serve `config` as an embedder does, on a loopback port of its own.
pub async fn serve(config: &Path, dir: &Path) -> Serving {
    serve_on(
        config,
        &format!("sqlite://{}", dir.join("capgate.db").display()),
    )
    .await
}

/// [`serve`] over the store `store` (a replica of several on one Postgres, say).
pub async fn serve_on(config: &Path, store: &str) -> Serving {
    let store = store.to_owned();
    let checked = capgate_server::validate::validate(config)
        .unwrap_or_else(|e| panic!("{} does not check: {e:?}", config.display()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let served = capgate_server::serve::start(checked, Some(store.clone()), listener)
        .await
        .expect("serves");
    let base = format!("http://{}", served.addr());
    Serving {
        served,
        base,
        store,
    }
}

/// `POST url` with `key` as the bearer: the status and the JSON answer.
pub async fn post(http: &reqwest::Client, url: &str, key: &str, body: &Value) -> (u16, Value) {
    let answer = http
        .post(url)
        .bearer_auth(key)
        .json(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("POST {url}: {e}"));
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

/// `GET url` with `key` as the bearer: the status and the JSON answer.
pub async fn get(http: &reqwest::Client, url: &str, key: &str) -> (u16, Value) {
    let answer = http
        .get(url)
        .bearer_auth(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

/// An `orders.refund` call of `amount` on ord_42 whose invocation and correlation id are
/// `id`.
pub fn refund(amount: u32, id: &str) -> Value {
    json!({
        "capabilityId": "orders.refund",
        "input": {"orderId": "ord_42", "amount": amount, "reason": "damaged item"},
        "invocationId": id,
        "correlationId": id,
    })
}

/// Poll `probe` every 20 ms until it gives a value; fail naming `what` after `timeout`.
pub async fn until<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let end = Instant::now() + timeout;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every audit event in a store no server holds open, as JSON, in the order stored.
pub async fn audit_events(store: &str) -> Vec<Value> {
    let store = capgate_store::Store::open(store)
        .await
        .expect("the store opens again");
    let events = store
        .audit_log()
        .query(&capgate_store::AuditQuery {
            limit: Some(100_000),
            ..capgate_store::AuditQuery::default()
        })
        .await
        .expect("query the trail")
        .into_iter()
        .filter_map(|e| serde_json::to_value(e.event.ok()?).ok())
        .collect();
    store.close().await;
    events
}

/// An exported or stored chained event: its chain, its place in it, its type and its
/// correlation id.
pub type Chained = (String, i64, String, String);

/// Every chained event in a store no server holds open, in the order stored (what an
/// export sink must deliver).
pub async fn audit_chained(store: &str) -> Vec<Chained> {
    let store = capgate_store::Store::open(store)
        .await
        .expect("the store opens again");
    let mut all = Vec::new();
    let mut after = 0;
    loop {
        let page = store
            .audit_log()
            .export_page(None, None, after, 1000)
            .await
            .expect("read the trail");
        let Some(last) = page.last() else { break };
        after = last.id;
        all.extend(page.into_iter().filter_map(|e| {
            Some((
                e.chain?,
                e.seq?,
                text(&e.event["type"]),
                text(&e.event["correlationId"]),
            ))
        }));
    }
    store.close().await;
    all
}

/// A JSON string's text, or empty.
pub fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// The types of the events correlated as `id`, in order.
pub fn types_of(events: &[Value], id: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["correlationId"] == id)
        .filter_map(|e| e["type"].as_str().map(str::to_owned))
        .collect()
}

/// The receipt of Dana's `/agent` call `id` in a store no server holds open: its state and
/// its outcome's status.
pub async fn receipt(store: &str, id: &str) -> Option<(String, Value)> {
    use capgate_core::actor::{ActorKind, ActorRef, Surface};
    let scope = capgate_core::journal::scope_hash(
        "org_1",
        &ActorRef {
            id: "u_dana".into(),
            kind: ActorKind::User,
        },
        Surface::AiSdk,
    )
    .expect("scope");
    let store = capgate_store::Store::open(store)
        .await
        .expect("the store opens again");
    let found = capgate_core::journal::InvocationJournal::get(&store.journal(), &scope, id)
        .await
        .expect("read the receipt")
        .map(|r| {
            let status = r
                .outcome
                .as_ref()
                .map_or(Value::Null, |o| o["status"].clone());
            (r.state.as_str().to_owned(), status)
        });
    store.close().await;
    found
}

/// A backend on loopback that holds every request until released, and says when one
/// arrived (its path).
pub struct Holding {
    pub base: String,
    pub arrivals: tokio::sync::mpsc::Receiver<String>,
    pub release: Arc<tokio::sync::Notify>,
}

impl Holding {
    pub async fn start() -> Holding {
        let (arrived, arrivals) = tokio::sync::mpsc::channel(16);
        let release = Arc::new(tokio::sync::Notify::new());
        let gate = release.clone();
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let (arrived, gate) = (arrived.clone(), gate.clone());
            async move {
                let _ = arrived.send(uri.path().to_owned()).await;
                gate.notified().await;
                axum::Json(json!({"report": "done"}))
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the backend");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Holding {
            base,
            arrivals,
            release,
        }
    }

    /// Wait until a request arrived.
    pub async fn arrived(&mut self) -> String {
        tokio::time::timeout(PATIENCE, self.arrivals.recv())
            .await
            .expect("a call reached the backend in time")
            .expect("the backend runs")
    }
}

/// `[[capabilities]]` `reports.build`: a write whose HTTP procedure is `backend`'s
/// `/report`, for Dana's `/agent`.
pub fn report_capability(backend: &str) -> String {
    format!(
        "\n[[capabilities]]\nid = \"reports.build\"\ndescription = \"Build a report\"\n\
         expose = {{ aiSdk = true }}\nsideEffect = \"write\"\nrisk = \"low\"\n\
         procedure = {{ http = {{ target = \"reports\", url = \"{backend}/report\" }} }}\n"
    )
}
