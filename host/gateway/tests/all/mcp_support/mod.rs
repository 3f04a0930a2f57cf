//! Shared plumbing of the MCP client tests: toolchain setup, the HTTP server on a loopback
//! port, and the referee that answers a client driver's requests (decide an approval, check
//! the audit trail) from the test process.

#![allow(dead_code)]

pub mod fixture;

use async_trait::async_trait;
use capgate_core::actor::{ActorKind, ActorRef};
use capgate_core::approval::DecisionStatus;
use capgate_core::audit::MemorySink;
use capgate_core::runtime::{DecideRequest, Runtime};
use capgate_gateway::mcp::{McpOptions, streamable_http_router};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|e| panic!("repository root: {e}"))
}

/// The approval console every fixture server is configured with.
pub const CONSOLE: &str = "https://console.example/approvals/{id}";

/// The MCP options of the fixture servers.
pub fn options() -> McpOptions {
    McpOptions {
        approval_url: Some(CONSOLE.into()),
        resume_tool: true,
        ..McpOptions::default()
    }
}

/// Install a client toolchain with `tests/mcp/setup.sh` (`python` or `node`). When the
/// language toolchain itself is missing, the test fails under CI and is skipped (loudly)
/// elsewhere; never silently.
pub fn ensure_toolchain(kind: &str) -> bool {
    let tool = if kind == "python" { "python3" } else { "npm" };
    let present = std::process::Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        if std::env::var_os("CI").is_some() {
            panic!("`{tool}` is required by this test and missing (CI=true: no skipping)");
        }
        eprintln!("SKIPPED: `{tool}` is not installed; this test fails under CI");
        return false;
    }
    let status = std::process::Command::new("bash")
        .arg(repo_root().join("tests/mcp/setup.sh"))
        .arg(kind)
        .status()
        .unwrap_or_else(|e| panic!("tests/mcp/setup.sh: {e}"));
    assert!(
        status.success(),
        "tests/mcp/setup.sh {kind} failed: {status}"
    );
    true
}

/// Serve the MCP router at `http://127.0.0.1:PORT/mcp`; returns that URL.
pub async fn serve_http(runtime: Runtime, options: McpOptions) -> String {
    let router = axum::Router::new().nest(
        "/mcp",
        streamable_http_router(
            runtime,
            capgate_gateway::door::Doorkeeper::new(
                Arc::new(fixture::FixtureAuth),
                Arc::new(fixture::AllowAll),
            ),
            options,
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("local_addr: {e}"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{addr}/mcp")
}

/// What a client driver may ask of the test process.
#[async_trait]
pub trait Referee: Send + Sync {
    /// A human (`u_manager`) approves through the runtime's approvals API.
    async fn approve(&self, approval_id: &str);
    /// The audit trail must show `jobs.slow` cancelled with CANCELLED on the mcp surface.
    async fn assert_cancelled_audited(&self);
    /// The audit events written so far (as JSON), read at once: no waiting.
    fn audit_now(&self) -> Vec<Value>;
}

/// The driver's concealed calls (`{reason: executionId}`): each execution must already be
/// in the audit, as `capability.requested` then `capability.denied` with that reason —
/// unknown tools included (stage 2 audits every request) — on the mcp surface.
pub fn assert_concealed_audited(referee: &dyn Referee, executions: &Value) {
    let events = referee.audit_now();
    let map = executions
        .as_object()
        .unwrap_or_else(|| panic!("concealed executions: {executions}"));
    assert_eq!(map.len(), 3, "{executions}");
    for (reason, id) in map {
        let of: Vec<&Value> = events.iter().filter(|e| e["executionId"] == *id).collect();
        let types: Vec<&str> = of.iter().filter_map(|e| e["type"].as_str()).collect();
        assert_eq!(
            types,
            ["capability.requested", "capability.denied"],
            "{reason} ({id}): answered before its audit was written?"
        );
        assert_eq!(of[1]["data"]["reason"], reason.as_str(), "{reason}");
        assert_eq!(of[1]["surface"], "mcp");
    }
}

/// The approver of every fixture approval.
pub fn manager() -> ActorRef {
    ActorRef {
        id: "u_manager".into(),
        kind: ActorKind::User,
    }
}

/// Decide `approval_id` as the manager on `runtime`.
pub async fn approve_on(runtime: &Runtime, approval_id: &str) {
    runtime
        .approvals()
        .decide(
            approval_id,
            DecideRequest {
                status: DecisionStatus::Approved,
                approver: manager(),
                comment: Some("ok".into()),
                decider: capgate_core::runtime::Decider::Approver {
                    namespace: fixture::NAMESPACE.into(),
                    roles: Vec::new(),
                },
            },
        )
        .await
        .unwrap_or_else(|e| panic!("decide {approval_id}: {e}"));
}

/// Whether an audit event (as JSON) is the cancellation the driver caused.
pub fn is_mcp_cancellation(event: &Value) -> bool {
    event["type"] == "capability.cancelled"
        && event["data"]["code"] == "CANCELLED"
        && event["capabilityId"] == "jobs.slow"
        && event["surface"] == "mcp"
}

/// Poll `probe` for up to ten seconds.
pub async fn eventually(what: &str, mut probe: impl FnMut() -> bool) {
    for _ in 0..100 {
        if probe() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

/// A memory sink's events as JSON.
pub fn events_json(audit: &MemorySink) -> Vec<Value> {
    audit
        .events()
        .iter()
        .filter_map(|e| serde_json::to_value(e).ok())
        .collect()
}

/// The in-process referee: the same runtime and its memory audit sink.
pub struct InProcess {
    /// The runtime the server runs.
    pub runtime: Runtime,
    /// Its audit sink.
    pub audit: Arc<MemorySink>,
}

#[async_trait]
impl Referee for InProcess {
    async fn approve(&self, approval_id: &str) {
        approve_on(&self.runtime, approval_id).await;
    }
    fn audit_now(&self) -> Vec<Value> {
        events_json(&self.audit)
    }
    async fn assert_cancelled_audited(&self) {
        let audit = self.audit.clone();
        eventually(
            "capability.cancelled (CANCELLED) in the audit trail",
            move || {
                audit
                    .events()
                    .iter()
                    .any(|e| serde_json::to_value(e).is_ok_and(|v| is_mcp_cancellation(&v)))
            },
        )
        .await;
    }
}

/// Run a client driver (one of the `tests/mcp` scripts) to completion, answering its
/// requests; returns its final `done` event.
pub async fn drive(mut command: tokio::process::Command, referee: &dyn Referee) -> Value {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut lines = BufReader::new(stdout).lines();
    let mut done = None;
    let run = async {
        while let Some(line) = lines
            .next_line()
            .await
            .unwrap_or_else(|e| panic!("driver stdout: {e}"))
        {
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                eprintln!("driver: {line}");
                continue;
            };
            eprintln!("driver event: {event}");
            let reply = match event["event"].as_str() {
                Some("approval") => {
                    let id = event["approvalId"]
                        .as_str()
                        .unwrap_or_else(|| panic!("approval event without id: {event}"));
                    referee.approve(id).await;
                    Some("approved")
                }
                Some("cancelled") => {
                    referee.assert_cancelled_audited().await;
                    Some("audited")
                }
                Some("concealed") => {
                    assert_concealed_audited(referee, &event["executions"]);
                    Some("audited")
                }
                Some("done") => {
                    done = Some(event.clone());
                    None
                }
                _ => None,
            };
            if let Some(reply) = reply {
                stdin
                    .write_all(format!("{reply}\n").as_bytes())
                    .await
                    .unwrap_or_else(|e| panic!("driver stdin: {e}"));
                stdin
                    .flush()
                    .await
                    .unwrap_or_else(|e| panic!("driver stdin: {e}"));
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .unwrap_or_else(|_| panic!("the client driver did not finish in 120 s"));
    let status = child
        .wait()
        .await
        .unwrap_or_else(|e| panic!("driver wait: {e}"));
    assert!(status.success(), "the client driver failed: {status}");
    done.unwrap_or_else(|| panic!("the client driver ended without its `done` event"))
}

/// The Python of the MCP venv.
pub fn venv_python() -> PathBuf {
    repo_root().join("tests/mcp/.venv/bin/python")
}
