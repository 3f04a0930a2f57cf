//! Starting the real `capgate` binary: the example deployment, a temporary store, the port
//! read from the "listening on" line.
#![allow(dead_code)]

pub mod lifecycle;
pub mod walkthrough;

use serde_json::{Value, json};
use sha2::Digest;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const PG_ENV: &str = "CAPGATE_TEST_POSTGRES_URL";

/// The test-only key of Olga, org_2's manager and approver (see [`olga_key`]).
pub const OLGA: &str = "olga-test-key";

/// Olga's `[[gateway.apiKeys]]` entry, for tests that need an approver of another
/// namespace than the example's org_1 (append it with [`deployment`]).
pub fn olga_key() -> String {
    key(
        OLGA,
        "u_olga",
        "org_2",
        &["approver", "manager"],
        &[],
        "org_2",
    )
}

/// A free loopback port (for a helper process that takes its port on the command line).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

// The benches include this module too and use none of these.
#[allow(unused_imports)]
pub use capgate_testkit::tools::{ci, debian_tools, on_path};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The example deployment as `cargo xtask demo` serves it (rendered by `cargo xtask test`
/// before the tests run).
pub fn example_config() -> PathBuf {
    capgate_testkit::paths::example_config()
}

/// A running `capgate serve`, killed on drop.
pub struct Server {
    child: Child,
    pub base: String,
    /// The metrics URL (`http://127.0.0.1:PORT/metrics`) when the deployment serves its
    /// metrics on a listener of their own.
    pub metrics: Option<String>,
}

impl Server {
    /// Start `capgate serve --config CONFIG --store STORE --listen 127.0.0.1:0` (and
    /// `--metrics-listen 127.0.0.1:0` when the configuration turns metrics on, so tests
    /// running side by side never share the example's fixed metrics port).
    pub fn start(config: &std::path::Path, store: &str) -> Server {
        Server::start_with_env(config, store, &[])
    }

    /// [`Server::start`] with extra environment variables for the server process.
    pub fn start_with_env(config: &std::path::Path, store: &str, env: &[(&str, &str)]) -> Server {
        Server::start_at(config, store, "127.0.0.1:0", env)
    }

    /// [`Server::start_with_env`] on a given listen address (a test that must know the
    /// port before the server starts: an OIDC redirect URL registered at the provider).
    pub fn start_at(
        config: &std::path::Path,
        store: &str,
        listen: &str,
        env: &[(&str, &str)],
    ) -> Server {
        let text = std::fs::read_to_string(config).expect("read the config");
        let metrics_listen: &[&str] = if text.contains("[telemetry.metrics]") {
            &["--metrics-listen", "127.0.0.1:0"]
        } else {
            &[]
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_capgate"))
            .args(["serve", "--listen", listen, "--store", store])
            .args(metrics_listen)
            .arg("--config")
            .arg(config)
            .env("CAPGATE_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start capgate serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut metrics = None;
        let base = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(url) = line.split("metrics on ").nth(1) {
                        metrics = Some(url.trim().to_string());
                    }
                    if let Some(addr) = line.split("listening on ").nth(1) {
                        break addr.trim().to_string();
                    }
                }
                _ => {
                    let status = child.wait().expect("wait");
                    panic!("capgate serve exited before listening: {status}");
                }
            }
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server {
            child,
            base,
            metrics,
        }
    }
}

impl Server {
    /// The server's process id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill -9`: the process dies at once, mid-call, with nothing flushed.
    pub fn kill_hard(&mut self) {
        self.child.kill().expect("SIGKILL capgate serve");
        let _ = self.child.wait();
    }

    /// Send SIGTERM (what an orchestrator sends to stop a replica).
    pub fn terminate(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid");
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(rc, 0, "SIGTERM capgate serve");
    }

    /// The exit status, waiting up to `timeout` for the process to end.
    pub fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let until = std::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                std::time::Instant::now() < until,
                "capgate serve did not exit within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP client for one API key.
#[derive(Clone)]
pub struct Caller {
    http: reqwest::Client,
    key: String,
}

impl Caller {
    pub fn new(key: &str) -> Caller {
        Caller {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("client"),
            key: key.to_string(),
        }
    }

    pub async fn post(&self, url: &str, body: &Value) -> (u16, Value) {
        let r = self
            .http
            .post(url)
            .bearer_auth(&self.key)
            .json(body)
            .send()
            .await
            .expect("send");
        answer(r).await
    }

    /// Approve `approval` through the approvals API of the server at `base` as this key's
    /// holder, and require the API to accept it.
    pub async fn approve(&self, base: &str, approval: &str) {
        let (status, decided) = self
            .post(
                &format!("{base}/approvals/{approval}/decision"),
                &serde_json::json!({"decision": "approved"}),
            )
            .await;
        assert_eq!(status, 200, "{decided}");
    }

    pub async fn post_raw(&self, url: &str, body: Vec<u8>) -> (u16, Value) {
        let r = self
            .http
            .post(url)
            .bearer_auth(&self.key)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("send");
        answer(r).await
    }

    pub async fn get(&self, url: &str) -> (u16, Value) {
        let r = self
            .http
            .get(url)
            .bearer_auth(&self.key)
            .send()
            .await
            .expect("send");
        answer(r).await
    }
}

/// Status and JSON body (a non-JSON body as `{"raw": text}`).
async fn answer(r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| json!({ "raw": text })),
    )
}

/// A fresh Postgres database for one test (see [`capgate_testkit::postgres`]).
pub async fn postgres_db() -> Option<PgDb> {
    PgDb::create("capgate_e2e").await
}

/// A test database on the Postgres server, dropped with the value.
pub use capgate_testkit::postgres::TestDatabase as PgDb;

/// The scope of Dana's calls through `/agent`, as `capgate invocations` takes it.
pub const DANA_AGENT_SCOPE: [&str; 6] = [
    "--namespace",
    "org_1",
    "--actor",
    "user:u_dana",
    "--surface",
    "aiSdk",
];

/// Run the binary; whatever it did (for the cases that must fail).
pub fn capgate_output(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(args)
        .output()
        .expect("run capgate")
}

/// Run the binary; its stdout, failing the test on a non-zero exit.
pub fn capgate(args: &[&str]) -> String {
    let out = capgate_output(args);
    assert!(
        out.status.success(),
        "capgate {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The example deployment, made self-contained in `dir` (absolute plugin, schema and cache
/// paths), with `edit` applied to its text and `extra` TOML appended.
pub fn deployment(dir: &Path, edit: impl Fn(String) -> String, extra: &str) -> PathBuf {
    capgate_testkit::paths::example_in(dir, |text| format!("{}\n{extra}\n", edit(text)))
}

pub fn key_hash(key: &str) -> String {
    hex::encode(sha2::Sha256::digest(key.as_bytes()))
}

/// One more API key, as TOML.
pub fn key(
    key: &str,
    id: &str,
    namespace: &str,
    roles: &[&str],
    surfaces: &[&str],
    org: &str,
) -> String {
    format!(
        "[[gateway.apiKeys]]\nsha256 = \"{}\"\nnamespace = \"{namespace}\"\nroles = {}\nsurfaces = {}\n\
         actor = {{ id = \"{id}\", kind = \"user\", attributes = {{ orgId = \"{org}\" }} }}\ncontext = {{ orgId = \"{org}\" }}\n",
        key_hash(key),
        serde_json::to_string(roles).expect("roles"),
        serde_json::to_string(surfaces).expect("surfaces"),
    )
}

/// A minimal MCP client over streamable HTTP (JSON-RPC; answers as JSON or as SSE), enough
/// to list, call and resume as one principal.
pub struct Mcp {
    http: reqwest::Client,
    url: String,
    key: String,
    session: Option<String>,
    next: u64,
}

impl Mcp {
    pub async fn connect(base: &str, key: &str) -> Mcp {
        let mut m = Mcp {
            http: reqwest::Client::new(),
            url: format!("{base}/mcp"),
            key: key.to_string(),
            session: None,
            next: 1,
        };
        let init = m
            .request(
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "trust-boundaries", "version": "0"}}),
            )
            .await;
        assert!(init.get("result").is_some(), "initialize: {init}");
        m.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        m
    }

    /// Send the next requests to another replica (`base`), with the same session.
    pub fn at(&mut self, base: &str) {
        self.url = format!("{base}/mcp");
    }

    /// The session id the server handed out at `initialize`.
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    pub async fn send(&mut self, body: Value) -> Option<Value> {
        let mut req = self
            .http
            .post(&self.url)
            .bearer_auth(&self.key)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        let r = req.send().await.expect("send");
        assert!(r.status().is_success(), "MCP HTTP {}", r.status());
        if let Some(s) = r
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            self.session = Some(s.to_string());
        }
        let text = r.text().await.expect("body");
        let id = body.get("id").cloned()?;
        text.lines()
            .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v.get("id") == Some(&id))
    }

    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await
            .unwrap_or_else(|| panic!("no answer to {method}"))
    }

    pub async fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }
}

/// `orders.lookup` over HTTP to a closed port (never called): the capability the small
/// deployments these tests write share.
pub const LOOKUP_OVER_HTTP: &str = r#"[[capabilities]]
id = "orders.lookup"
description = "Look an order up"
expose = { aiSdk = true }
sideEffect = "read"
risk = "low"
procedure = { http = { target = "lookup", url = "http://127.0.0.1:9/lookup" } }
"#;

/// `/agent` on the AI SDK surface for authenticated callers, and an API key of Dana's in
/// `org_1` (the hash of no key any test sends).
pub const AGENT_ROUTE_WITH_DANAS_KEY: &str = r#"[gateway]
authorize = "authenticated"
routes = [{ path = "/agent", surface = "aiSdk" }]

[[gateway.apiKeys]]
sha256 = "0d3b4f6a1b2c5e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f"
namespace = "org_1"
surfaces = ["aiSdk"]
actor = { id = "u_dana", kind = "user" }
"#;

/// `orders.refund` over HTTP to a closed port.
pub const REFUND_OVER_HTTP: &str = r#"[[capabilities]]
id = "orders.refund"
description = "Refund an order"
expose = { aiSdk = true }
sideEffect = "write"
risk = "high"
procedure = { http = { target = "orders", url = "http://127.0.0.1:9/refund" } }
"#;
