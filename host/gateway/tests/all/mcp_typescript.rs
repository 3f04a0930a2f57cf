//! The MCP server driven by the official TypeScript MCP SDK (npm
//! `@modelcontextprotocol/sdk`, pinned in `tests/mcp/package-lock.json`) over streamable
//! HTTP: the list/call round trip of `tests/mcp/mcp_client_check.mjs`.

use crate::mcp_support;

use capgate_core::approval::InMemoryApprovalCoordinator;
use capgate_core::audit::MemorySink;
use capgate_core::runtime::Runtime;
use mcp_support::{InProcess, drive, ensure_toolchain, fixture, options, repo_root, serve_http};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::process::Command;

/// Serve the fixture and run `tests/mcp/SCRIPT` against it with node: its `done` event,
/// and the runtime and audit sink it drove.
async fn run_script(script: &str) -> (Value, Runtime, Arc<MemorySink>) {
    let audit = Arc::new(MemorySink::new());
    let runtime = fixture::runtime(Arc::new(InMemoryApprovalCoordinator::new()), audit.clone());
    let url = serve_http(runtime.clone(), options()).await;
    let mut cmd = Command::new("node");
    cmd.arg(repo_root().join("tests/mcp").join(script))
        .arg(&url)
        .current_dir(repo_root().join("tests/mcp"));
    let referee = InProcess {
        runtime: runtime.clone(),
        audit: audit.clone(),
    };
    (drive(cmd, &referee).await, runtime, audit)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_lists_calls_holds_resumes_and_cancels_over_streamable_http() {
    if !ensure_toolchain("node") {
        return;
    }
    let (done, _, _) = run_script("mcp_client_check.mjs").await;
    assert_eq!(
        done["tools"],
        json!([
            "approvals_resume",
            "jobs_wait",
            "orders_lookup",
            "orders_refund"
        ])
    );
    assert_eq!(
        done["adminTools"],
        json!([
            "approvals_resume",
            "jobs_wait",
            "orders_lookup",
            "orders_purge",
            "orders_refund"
        ])
    );
}

/// The TypeScript SDK's client with the MCP tasks extension declared
/// (`tests/mcp/task_client_check.mjs`; the SDK has no client of the 2026-07-28 extension,
/// so its requests go through the SDK's own `client.request`): a held refund answers with a
/// task, another principal cannot read it, the task completes after the approval, and a
/// cancelled task withdraws its approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_client_polls_a_held_call_as_an_mcp_task() {
    if !ensure_toolchain("node") {
        return;
    }
    let (done, runtime, audit) = run_script("task_client_check.mjs").await;
    assert_eq!(done["approvedStatuses"], json!(["completed", "working"]));
    let withdrawn = done["cancelledApproval"].as_str().unwrap_or_default();
    let record = runtime.approvals().get(withdrawn).await.ok().flatten();
    assert_eq!(
        record.map(|r| r.status.as_str()),
        Some("cancelled"),
        "{done}"
    );
    let started = mcp_support::events_json(&audit)
        .iter()
        .filter(|e| e["type"] == "capability.started" && e["capabilityId"] == "orders.refund")
        .count();
    assert_eq!(
        started, 1,
        "the approved refund ran once, the cancelled one never"
    );
}
