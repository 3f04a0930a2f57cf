//! `capgate inspect`: print a deployment's inventory for review (the inventory itself is
//! crate::inspect).

use super::shared::{ConfigArg, OutputArg};
use crate::table;
use std::process::ExitCode;

/// The inventory a reviewer reads in a pull request: per capability its surfaces, side
/// effect, risk, policies, redactors, static approval, timeout and retry, sorted by id.
///
/// Runs every check `capgate check` runs (plugins loaded and pinned, every problem
/// located): a file `check` refuses has no inventory.
///
/// Example: capgate inspect --config examples/customer-support/capgate.toml
#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// `table` for people, `json` for programs (shape: docs/guides/reviewing-changes.md "Reviewing
    /// a change"); `--output json` is the same JSON.
    #[arg(long, value_enum, default_value = "table")]
    format: table::Format,
    #[command(flatten)]
    output: OutputArg,
}

/// `capgate inspect`: 0 with the inventory printed.
pub fn run(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let inventory = args.config.load()?.inventory();
    match (args.format, args.output.json()) {
        (table::Format::Table, false) => print!("{}", crate::inspect::render_table(&inventory)),
        (table::Format::Json, _) | (_, true) => {
            println!("{}", serde_json::to_string_pretty(&inventory)?)
        }
    }
    Ok(ExitCode::SUCCESS)
}
