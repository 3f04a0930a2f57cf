//! `capgate serve`: run a deployment until SIGTERM or Ctrl-C (the runtime itself is
//! crate::serve; this is its command line).

use super::shared::{ConfigArg, StoreOverride, reword};
use crate::{runtime, serve};
use std::process::ExitCode;

/// Serve a deployment: a capability gateway per configured route, MCP at /mcp, the
/// human approvals API at /approvals, /healthz and /readyz.
///
/// Example: capgate serve --config examples/customer-support/capgate.toml
#[derive(clap::Args, Debug)]
#[command(mut_arg(
    "store",
    reword(
        "Store URL (overrides store.url), e.g. postgres://user:pass@host/db for replicas. A \
         relative sqlite:// path is relative to the current directory"
    )
))]
pub struct ServeArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Listen address (overrides gateway.listen; `127.0.0.1:0` picks a free port).
    #[arg(long)]
    listen: Option<String>,
    /// Serve the metrics on this address of their own (overrides [telemetry.metrics]
    /// listen, which must be on; `127.0.0.1:0` picks a free port).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    #[command(flatten)]
    store: StoreOverride,
}

/// `capgate serve`: 0 after a graceful shutdown.
pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let checked = args.config.load()?;
    let rt = runtime()?;
    let served = rt.block_on(serve::serve(
        checked,
        args.store.store,
        serve::Listen {
            gateway: args.listen,
            metrics: args.metrics_listen,
        },
    ));
    // Calls still running past the drain time are abandoned (their receipts stay
    // pending), and a Wasm call on a blocking thread does not hold the exit.
    rt.shutdown_timeout(serve::ABANDON_TIMEOUT);
    served?;
    Ok(ExitCode::SUCCESS)
}
