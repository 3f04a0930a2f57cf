//! `capgate test`: governance scenarios against a deployment, without a model (the runner
//! is crate::scenario).

use super::shared::{ConfigArg, OutputArg};
use crate::scenario;
use std::path::PathBuf;
use std::process::ExitCode;

/// Run governance scenarios against a deployment, without a model: each scenario is a
/// call (actor, surface, capability, input, context, optionally a stubbed procedure),
/// approval steps (decide, move the clock, resume) and what must come out (envelope
/// status, error code, output fields, policy stances, audit event types in order).
///
/// Every scenario runs the deployment's real pipeline and Wasm plugins on a fresh
/// in-memory store, in parallel; no configured procedure runs unless `--live`. Exit status: 0 all passed, 1 some failed, 2 the
/// configuration or a scenario file was refused (every problem located) or nothing ran.
/// Format: docs/guides/reviewing-changes.md "Testing a deployment". `--output json` prints one
/// document instead: `{"ok", "passed", "failed", "durationMs", "scenarios", "problems"}`
/// (docs/reference/exit-codes.md).
///
/// Example: capgate test --config examples/customer-support/capgate.toml examples/customer-support/scenarios
#[derive(clap::Args, Debug)]
pub struct TestArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Scenario files, or directories of them (their *.toml files). Default: the
    /// `scenarios` directory beside the configuration file.
    paths: Vec<PathBuf>,
    /// Only scenarios whose name contains this text (case-insensitive).
    #[arg(long)]
    filter: Option<String>,
    /// `text` for people; `junit` writes JUnit XML to stdout for CI (the summary line
    /// goes to stderr).
    #[arg(long, value_enum, default_value = "text", conflicts_with = "output")]
    format: scenario::Format,
    #[command(flatten)]
    output: OutputArg,
    /// How many scenarios run at once.
    #[arg(long, default_value_t = 8)]
    jobs: usize,
    /// Call the configured procedure of a scenario that has no stub for real: an HTTP
    /// upstream is sent the request with its configured credential headers, a Wasm
    /// procedure runs. Without it, no configured procedure runs: a scenario that reaches
    /// one without a stub fails and nothing reaches the backend.
    #[arg(long)]
    live: bool,
}

/// `capgate test`: 0 all passed, 1 some failed, 2 refused or nothing ran.
pub fn run(args: TestArgs) -> anyhow::Result<ExitCode> {
    scenario::main(scenario::Options {
        config: args.config.config,
        paths: args.paths,
        filter: args.filter,
        format: if args.output.json() {
            scenario::Format::Json
        } else {
            args.format
        },
        jobs: args.jobs,
        live: args.live,
    })
}
