//! Serve the MCP test fixture (`tests/all/mcp_support/fixture.rs`) over stdio as the service
//! actor `svc_agent`, the way `capgate mcp --stdio --config F` serves a configured one.
//!
//! Approvals live in the SQLite database named by `CAPGATE_FIXTURE_DB` (`sqlite://…`, so a
//! test process can decide them through its own runtime), and audit events are appended as
//! JSON lines to `CAPGATE_FIXTURE_AUDIT`.
//!
//! ```text
//! CAPGATE_FIXTURE_DB=sqlite:///tmp/f.db CAPGATE_FIXTURE_AUDIT=/tmp/audit.jsonl \
//!   cargo run -p capgate-gateway --example mcp_stdio
//! ```

#[path = "../tests/all/mcp_support/fixture.rs"]
mod fixture;

use capgate_core::actor::{Actor, ActorKind};
use capgate_core::audit::JsonLinesSink;
use capgate_gateway::mcp::{McpOptions, serve_stdio};
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let db = std::env::var("CAPGATE_FIXTURE_DB")
        .map_err(|_| "set CAPGATE_FIXTURE_DB to a sqlite:// URL")?;
    let audit_path = std::env::var("CAPGATE_FIXTURE_AUDIT")
        .map_err(|_| "set CAPGATE_FIXTURE_AUDIT to a file path")?;
    let store = capgate_store::Store::open(&db).await?;
    let runtime = fixture::runtime(
        Arc::new(store.approvals()),
        Arc::new(JsonLinesSink::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(audit_path)?,
        )),
    );
    let actor = Actor::new("svc_agent", ActorKind::Service);
    let options = McpOptions {
        approval_url: Some("https://console.example/approvals/{id}".into()),
        // The Python driver resumes approvals over MCP: this deployment opts in.
        resume_tool: true,
        ..McpOptions::default()
    };
    serve_stdio(
        runtime,
        actor,
        fixture::NAMESPACE.into(),
        serde_json::json!({ "namespace": fixture::NAMESPACE, "via": "stdio" }),
        Arc::new(fixture::AllowAll),
        options,
    )
    .await?;
    store.close().await;
    Ok(())
}
