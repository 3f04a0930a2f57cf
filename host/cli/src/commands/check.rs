//! `capgate check`: validate a deployment file exactly as `serve` would, reporting every
//! problem with its place.

use super::shared::ConfigArg;
use crate::validate;
use std::process::ExitCode;

/// Validate a configuration file: exactly what `serve` (and every command with --config)
/// refuses — unknown keys, bad references and values, schemas, plugin digests and exports,
/// retries (SI-11), upstreams, routes, capabilities that cannot finish inside the gateway's
/// time budget.
///
/// Every problem is reported with file:line:column and its key path, all at once.
///
/// Example: capgate check --config examples/customer-support/capgate.toml
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    config: ConfigArg,
}

/// `capgate check`: exit 0 when `serve` would accept the file, 1 with every located problem
/// otherwise (exactly what `serve` prints and refuses).
pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let path = &args.config.config;
    Ok(match validate::validate(path) {
        Ok(checked) => {
            for w in &checked.warnings {
                eprintln!("warning: {w}");
            }
            println!("{}: ok", path.display());
            ExitCode::SUCCESS
        }
        Err(refused) => {
            refused.report();
            ExitCode::from(1)
        }
    })
}
