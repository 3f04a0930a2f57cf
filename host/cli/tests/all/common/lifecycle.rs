//! What the crash-safety and graceful-shutdown tests share: a test-owned HTTP upstream that
//! counts every request it receives (so a second execution cannot go unnoticed), a
//! deployment over it on SQLite or Postgres, and readers of the store's receipts and audit.

use super::{DANA_AGENT_SCOPE, Server, capgate, key_hash, postgres_db};
use axum::Router;
use axum::routing::post;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One drill `async fn(TestStore, &Path)`, as two tests: on SQLite in a temporary directory,
/// and on Postgres (a fresh database; skipped outside CI when no server is configured).
#[macro_export]
macro_rules! on_sqlite_and_postgres {
    ($drill:ident => $on_sqlite:ident, $on_postgres:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $on_sqlite() {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = TestStore::sqlite(dir.path());
            $drill(store, dir.path()).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $on_postgres() {
            let Some(store) = TestStore::postgres().await else {
                return;
            };
            let dir = tempfile::tempdir().expect("tempdir");
            $drill(store, dir.path()).await;
        }
    };
}

/// Dana's key (org_1, the `/agent` route on surface aiSdk).
pub const DANA: &str = "dana-dev-key";
/// Priya's key: org_1's approver.
pub const PRIYA: &str = "priya-dev-key";

/// The application's backend, on loopback. `/hang` takes the request and never answers (a
/// slow procedure that is surely inside its effect when the test acts); `/work` answers
/// after 200 ms; `/send` answers at once. Every request is counted by its input's `ref`.
#[derive(Clone)]
pub struct Upstream {
    pub base: String,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let hits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let count = |hits: Arc<Mutex<HashMap<String, usize>>>, call: &Value| {
            let r = call["input"]["ref"].as_str().unwrap_or("?").to_string();
            *hits.lock().expect("hits").entry(r).or_default() += 1;
        };
        let (h1, h2, h3) = (hits.clone(), hits.clone(), hits.clone());
        let app = Router::new()
            .route(
                "/hang",
                post(move |axum::Json(call): axum::Json<Value>| async move {
                    count(h1, &call);
                    std::future::pending::<()>().await;
                    axum::Json(json!({}))
                }),
            )
            .route(
                "/work",
                post(move |axum::Json(call): axum::Json<Value>| async move {
                    count(h2, &call);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    axum::Json(json!({ "done": call["input"]["ref"] }))
                }),
            )
            .route(
                "/send",
                post(move |axum::Json(call): axum::Json<Value>| async move {
                    count(h3, &call);
                    axum::Json(json!({ "sent": call["input"]["ref"] }))
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the upstream");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Upstream { base, hits }
    }

    /// How many requests the upstream received for this `ref`.
    pub fn hits(&self, r: &str) -> usize {
        self.hits.lock().expect("hits").get(r).copied().unwrap_or(0)
    }

    /// Wait (up to 20 s) until the upstream has received a request for `r`.
    pub async fn wait_for(&self, r: &str) {
        let until = Instant::now() + Duration::from_secs(20);
        while self.hits(r) == 0 {
            assert!(Instant::now() < until, "the upstream never saw {r}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The plugin directory the seeded build wrote the guest plugins to.
pub fn plugin_dir() -> std::path::PathBuf {
    super::root().join("plugins/target/wasm32-wasip2/release")
}

/// A deployment in `dir` over `upstream`: `orders.refund` (write, `/hang`), `jobs.run`
/// (write, `/work`) and `messages.send` (needs a manager's approval; its execution-phase
/// re-check is the CPU-bound `hostile_slow` policy, so a resumed call spends seconds between
/// the approval's consumption and the procedure), plus `gateway` TOML appended.
pub fn upstream_deployment(dir: &Path, upstream: &Upstream, gateway: &str) -> std::path::PathBuf {
    let plugins = plugin_dir();
    let slow = plugins.join("hostile_slow.wasm");
    let bytes = std::fs::read(&slow)
        .unwrap_or_else(|e| panic!("{}: {e} (run `cargo xtask build-plugins`)", slow.display()));
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    let u = &upstream.base;
    let text = format!(
        r#"
revision = "lifecycle-test"

[runtime]
pluginDir = "{plugins}"
compileCache = "{cache}"
policyTimeoutMs = 600000

[plugins.slow]
path = "hostile_slow.wasm"
sha256 = "{digest}"
fuel = 0
timeoutMs = 600000

# Burns CPU for tens of seconds on the execution-phase re-check (stage 9), after the
# approval was consumed and before the procedure: the window a crash test needs.
[policies.slowRecheck]
plugin = "slow"
phases = ["execution"]
config = {{ iterations = 200000000000 }}

[[capabilities]]
id = "orders.refund"
description = "Refund an order"
expose = {{ aiSdk = true }}
sideEffect = "write"
risk = "high"
inputSchema = {{ type = "object", properties = {{ ref = {{ type = "string" }} }}, required = ["ref"] }}
procedure = {{ http = {{ target = "orders", url = "{u}/hang" }} }}

[[capabilities]]
id = "jobs.run"
description = "Run a short job"
expose = {{ aiSdk = true }}
sideEffect = "write"
risk = "low"
inputSchema = {{ type = "object", properties = {{ ref = {{ type = "string" }} }}, required = ["ref"] }}
procedure = {{ http = {{ target = "jobs", url = "{u}/work" }} }}

[[capabilities]]
id = "messages.send"
description = "Send a message"
expose = {{ aiSdk = true }}
sideEffect = "external"
risk = "medium"
approval = {{ required = true, type = "manager" }}
inputSchema = {{ type = "object", properties = {{ ref = {{ type = "string" }} }}, required = ["ref"] }}
policies = ["slowRecheck"]
procedure = {{ http = {{ target = "messages", url = "{u}/send" }} }}

[gateway]
authorize = "authenticated"
routes = [{{ path = "/agent", surface = "aiSdk" }}]
# The slow re-check's policy batch (policyTimeoutMs) must fit the request budget (`check`).
requestTimeoutMs = 700000
{gateway}

[[gateway.apiKeys]]
sha256 = "{dana}"
namespace = "org_1"
surfaces = ["aiSdk"]
actor = {{ id = "u_dana", kind = "user", attributes = {{ orgId = "org_1" }} }}

[[gateway.apiKeys]]
sha256 = "{priya}"
namespace = "org_1"
roles = ["approver"]
actor = {{ id = "u_priya", kind = "user", attributes = {{ orgId = "org_1" }} }}
"#,
        plugins = plugins.display(),
        cache = dir.join(".capgate-cache").display(),
        dana = key_hash(DANA),
        priya = key_hash(PRIYA),
    );
    let path = dir.join("capgate.toml");
    std::fs::write(&path, text).expect("write the config");
    path
}

/// Where a test's store lives: a SQLite file in its directory, or a fresh Postgres
/// database (migrated). `None` when Postgres is not configured outside CI.
pub enum TestStore {
    Sqlite(String),
    Postgres(super::PgDb),
}

impl TestStore {
    pub fn sqlite(dir: &Path) -> TestStore {
        TestStore::Sqlite(format!("sqlite://{}", dir.join("capgate.db").display()))
    }

    pub async fn postgres() -> Option<TestStore> {
        let db = postgres_db().await?;
        capgate(&["migrate", "--store", &db.url]);
        Some(TestStore::Postgres(db))
    }

    pub fn url(&self) -> &str {
        match self {
            TestStore::Sqlite(u) => u,
            TestStore::Postgres(db) => &db.url,
        }
    }
}

/// `capgate invocations show ID` for Dana's `/agent` scope, read from the store.
pub fn show(store: &str, id: &str) -> Value {
    let scope = [&DANA_AGENT_SCOPE[..], &["--store", store][..]].concat();
    serde_json::from_str(&capgate(
        &[&["invocations", "show", id][..], &scope[..]].concat(),
    ))
    .expect("show prints JSON")
}

/// Settle a pending receipt as `outcome` (a CapabilityOutcome) with the operator command,
/// using the claim token `show` prints.
pub fn reconcile(store: &str, id: &str, outcome: &Value) -> String {
    let shown = show(store, id);
    let claim = shown["claimToken"].as_str().expect("claim token");
    let scope = [&DANA_AGENT_SCOPE[..], &["--store", store][..]].concat();
    capgate(
        &[
            &[
                "invocations",
                "reconcile",
                id,
                "--claim",
                claim,
                "--outcome",
                &outcome.to_string(),
            ][..],
            &scope[..],
        ]
        .concat(),
    )
}

/// Every audit event in the store, as JSON.
pub async fn audit_events(store: &str) -> Vec<Value> {
    let store = capgate_store::Store::open(store)
        .await
        .expect("open the store");
    let events = store
        .audit_log()
        .tail(100_000)
        .await
        .expect("read the audit log")
        .into_iter()
        .filter_map(|r| r.event.ok())
        .map(|e| serde_json::to_value(&e).expect("event JSON"))
        .collect();
    store.close().await;
    events
}

/// How many events of type `ty` carry correlation id `id`.
pub fn count(events: &[Value], id: &str, ty: &str) -> usize {
    events
        .iter()
        .filter(|e| {
            (e["correlationId"] == id || e["data"]["correlationId"] == id) && e["type"] == ty
        })
        .count()
}

/// An `/invoke` body whose invocation id, correlation id and input `ref` are all `id`.
pub fn invoke(capability: &str, id: &str) -> Value {
    json!({
        "capabilityId": capability,
        "input": { "ref": id },
        "invocationId": id,
        "correlationId": id,
    })
}

/// Start `capgate serve` over `config` and `store`.
pub fn serve(config: &Path, store: &TestStore) -> Server {
    Server::start(config, store.url())
}

/// The receipts of Dana's `/agent` scope for `ids`, read from the store in one go:
/// `(state, outcome status)` per id that has one.
pub async fn receipts(store: &str, ids: &[String]) -> HashMap<String, (String, Value)> {
    use capgate_core::actor::{ActorKind, ActorRef, Surface};
    use capgate_core::journal::InvocationJournal;
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
        .expect("open the store");
    let journal = store.journal();
    let mut found = HashMap::new();
    for id in ids {
        if let Some(r) = journal.get(&scope, id).await.expect("read a receipt") {
            let status = r
                .outcome
                .as_ref()
                .map_or(Value::Null, |o| o["status"].clone());
            found.insert(id.clone(), (r.state.as_str().to_string(), status));
        }
    }
    store.close().await;
    found
}
