//! The code of the `capgate` binary (src/main.rs parses its command line and dispatches to
//! [`commands`], one module per subcommand): assembling a deployment from its checked
//! configuration (`capgate-config`), `serve`, and the operator commands. A library so
//! that the integration tests reach the same code; it is not a stable API.

pub mod args;
pub mod audit_export;
pub mod build;
pub mod commands;
pub mod diff;
pub mod exit;
pub mod inspect;
pub mod mcp_import;
pub mod metrics;
pub mod openapi;
pub mod plugin_test;
pub mod reload;
pub mod replay;
pub mod scenario;
pub mod serve;
pub mod store;
pub mod table;
pub mod telemetry;
pub mod upstreams;
pub mod validate;

use anyhow::Context;

/// The multi-threaded Tokio runtime every async command (and `capgate test`) runs on.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the async runtime")
}
