//! The code of the `capgate` binary (src/main.rs parses its command line and dispatches to
//! [`commands`], one module per subcommand): the operator commands and their presentation
//! over `capgate-server` (checking, assembling and serving a deployment), whose modules it
//! re-exports under their old names. A library so that the integration tests reach the same
//! code; it is not a stable API (embedders use `capgate-server`).

pub mod args;
pub use capgate_server::{
    audit_export, build, metrics, reload, serve, store, telemetry, upstreams, validate,
};
pub mod commands;
pub mod diff;
pub mod exit;
pub mod inspect;
pub mod plugin_test;
pub mod scenario;
pub mod table;

use anyhow::Context;

/// The multi-threaded Tokio runtime every async command (and `capgate test`) runs on.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("could not start the async runtime")
}
