//! `capgate mcp --stdio`: one MCP session over stdin/stdout, as the configured service
//! actor (HTTP MCP is `serve`'s /mcp).

use super::shared::{ConfigArg, StoreOverride, reword};
use crate::runtime;
use crate::store::Access;
use crate::validate::Checked;
use std::process::ExitCode;

/// Serve one MCP session over stdin/stdout as the configured service actor
/// (`[mcp] stdioActor`, `stdioNamespace`).
///
/// Example: capgate mcp --stdio --config examples/customer-support/capgate.toml
#[derive(clap::Args, Debug)]
#[command(mut_arg(
    "store",
    reword(
        "Store URL (overrides store.url; a relative sqlite:// path is relative to the current \
         directory, and created if missing)"
    )
))]
pub struct McpArgs {
    /// Serve over stdio (the only transport of this command; HTTP is `serve`'s /mcp).
    #[arg(long, required = true)]
    stdio: bool,
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    store: StoreOverride,
}

/// `capgate mcp --stdio`: 0 when the client closes the session.
pub fn run(args: McpArgs) -> anyhow::Result<ExitCode> {
    let McpArgs {
        stdio: _,
        config,
        store,
    } = args;
    let checked = config.load()?;
    runtime()?.block_on(serve_stdio(checked, &store))?;
    Ok(ExitCode::SUCCESS)
}

async fn serve_stdio(checked: Checked, store: &StoreOverride) -> anyhow::Result<()> {
    let (actor, namespace, context) = checked.stdio_identity()?;
    // Spans go to the collector over HTTP and the summary to stderr: stdout stays MCP's.
    let traces = crate::telemetry::start_traces(checked.telemetry())?;
    let d = store.deployment(&checked, Access::Create).await?;
    let result = capgate_gateway::mcp::serve_stdio(
        d.runtime.clone(),
        actor,
        namespace,
        context,
        checked.authorizer(),
        capgate_server::serve::mcp_options(&checked, &d),
    )
    .await;
    let _ = d.runtime.drain_audit().await;
    if let Some(traces) = traces {
        traces.shutdown(crate::serve::TRACES_FLUSH_TIMEOUT).await;
    }
    d.audit.close().await;
    d.store.close().await;
    result.map_err(Into::into)
}
