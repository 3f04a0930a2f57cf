//! The `capgate` binary's commands, one module per subcommand in the shape of wasmtime's
//! `src/commands/*`: each declares its own `#[derive(clap::Args)]` (its doc comments are the
//! `--help` text) and the `run` function src/main.rs dispatches to. The flags several
//! commands take (`--config`, `--store`) are declared once in [`shared`] and flattened in.
//!
//! Every `run` returns the process's exit status; an error is printed by src/main.rs, which
//! maps it to a status by the one table of [`crate::exit`] (a refused configuration with
//! every located problem and status 1, a usage error 2, anything else 3).

pub mod approvals;
pub mod audit;
pub mod check;
pub mod contract;
pub mod import;
pub mod inspect;
pub mod invocations;
pub mod keys;
pub mod mcp;
pub mod migrate;
pub mod plugin;
pub mod replay;
pub mod serve;
pub mod shared;
pub mod test;
pub mod whoami;
