//! The MCP server driven by the official MCP Python SDK (PyPI `mcp`, pinned in
//! `tests/mcp/requirements.lock`) over streamable HTTP and over stdio. The scenario itself
//! is `tests/mcp/mcp_client_check.py`; this side serves the fixture runtime, decides
//! approvals through the runtime's approvals API and checks the audit trail.

use crate::mcp_support;

use async_trait::async_trait;
use capgate_core::approval::InMemoryApprovalCoordinator;
use capgate_core::audit::MemorySink;
use mcp_support::{
    InProcess, Referee, approve_on, drive, ensure_toolchain, eventually, fixture,
    is_mcp_cancellation, options, repo_root, serve_http, venv_python,
};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::process::Command;

fn script() -> PathBuf {
    repo_root().join("tests/mcp/mcp_client_check.py")
}

async fn http_round(mode: &str) -> Value {
    let audit = Arc::new(MemorySink::new());
    let runtime = fixture::runtime(Arc::new(InMemoryApprovalCoordinator::new()), audit.clone());
    let url = serve_http(runtime.clone(), options()).await;
    let mut cmd = Command::new(venv_python());
    cmd.arg(script()).args(["http", &url, "--mode", mode]);
    drive(cmd, &InProcess { runtime, audit }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_streamable_http_sessions_lists_calls_holds_resumes_and_cancels() {
    if !ensure_toolchain("python") {
        return;
    }
    let done = http_round("legacy").await;
    assert_eq!(done["transport"], "http-legacy");
    assert_eq!(
        done["concealedExecutions"].as_object().map(|m| m.len()),
        Some(3)
    );
    assert_eq!(done["protocolVersion"], "2025-11-25");
    let tools: Vec<&str> = done["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        tools,
        [
            "approvals_resume",
            "jobs_wait",
            "orders_lookup",
            "orders_refund"
        ]
    );
    let admin: Vec<&str> = done["adminTools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert!(admin.contains(&"orders_purge"), "{admin:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_default_options_the_resume_tool_is_absent_and_concealed_like_an_unknown_tool() {
    if !ensure_toolchain("python") {
        return;
    }
    let audit = Arc::new(MemorySink::new());
    let runtime = fixture::runtime(Arc::new(InMemoryApprovalCoordinator::new()), audit.clone());
    let url = serve_http(runtime.clone(), capgate_gateway::mcp::McpOptions::default()).await;
    let mut cmd = Command::new(venv_python());
    cmd.arg(script()).args(["defaults", &url]);
    let done = drive(cmd, &InProcess { runtime, audit }).await;
    let tools: Vec<&str> = done["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(tools, ["jobs_wait", "orders_lookup", "orders_refund"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_on_the_sessionless_protocol_gets_the_same_behaviour() {
    if !ensure_toolchain("python") {
        return;
    }
    let done = http_round("auto").await;
    assert_eq!(done["transport"], "http-auto");
    assert_eq!(
        done["concealedExecutions"].as_object().map(|m| m.len()),
        Some(3)
    );
    assert_eq!(done["protocolVersion"], "2026-07-28");
}

/// The stdio server is another process: approvals go through a shared SQLite store, and the
/// audit trail is its JSON-lines file.
struct OutOfProcess {
    runtime: capgate_core::runtime::Runtime,
    audit_file: PathBuf,
}

#[async_trait]
impl Referee for OutOfProcess {
    async fn approve(&self, approval_id: &str) {
        approve_on(&self.runtime, approval_id).await;
    }
    fn audit_now(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.audit_file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect()
    }
    async fn assert_cancelled_audited(&self) {
        let path = self.audit_file.clone();
        eventually(
            "capability.cancelled (CANCELLED) in the audit file",
            move || {
                std::fs::read_to_string(&path).is_ok_and(|text| {
                    text.lines()
                        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                        .any(|e| is_mcp_cancellation(&e))
                })
            },
        )
        .await;
    }
}

/// `target/<profile>/examples/mcp_stdio`, built when a filtered `cargo test` did not.
fn stdio_example() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap_or_else(|| panic!("unexpected test binary path {exe:?}"));
    let example = profile_dir.join("examples/mcp_stdio");
    if !example.exists() {
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "-p", "capgate-gateway", "--example", "mcp_stdio"])
            .current_dir(repo_root())
            .status()
            .unwrap_or_else(|e| panic!("cargo build --example mcp_stdio: {e}"));
        assert!(status.success(), "building the mcp_stdio example failed");
    }
    example
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_stdio_runs_as_the_configured_service_actor() {
    if !ensure_toolchain("python") {
        return;
    }
    let example = stdio_example();
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let db = format!("sqlite://{}", dir.path().join("approvals.db").display());
    let audit_file = dir.path().join("audit.jsonl");
    let store = capgate_store::Store::open(&db)
        .await
        .unwrap_or_else(|e| panic!("open {db}: {e}"));
    let runtime = fixture::runtime(Arc::new(store.approvals()), Arc::new(MemorySink::new()));
    let mut cmd = Command::new(venv_python());
    cmd.arg(script())
        .arg("stdio")
        .arg(&example)
        .env("CAPGATE_FIXTURE_DB", &db)
        .env("CAPGATE_FIXTURE_AUDIT", &audit_file);
    let done = drive(
        cmd,
        &OutOfProcess {
            runtime,
            audit_file,
        },
    )
    .await;
    assert_eq!(done["transport"], "stdio");
    assert_eq!(
        done["concealedExecutions"].as_object().map(|m| m.len()),
        Some(3)
    );
    store.close().await;
}
