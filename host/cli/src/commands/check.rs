//! `capgate check`: validate a deployment file exactly as `serve` would, reporting every
//! problem with its place.

use super::shared::{ConfigArg, OutputArg, print_json, problem_json};
use crate::exit::Status;
use crate::validate;
use std::process::ExitCode;

/// Validate a configuration file: exactly what `serve` (and every command with --config)
/// refuses — unknown keys, bad references and values, schemas, plugin digests and exports,
/// retries (SI-11), upstreams, routes, capabilities that cannot finish inside the gateway's
/// time budget.
///
/// Every problem is reported with file:line:column and its key path, all at once.
///
/// With `--output json`, stdout is one JSON document: `{"ok", "file", "problems",
/// "warnings"}`, each problem and warning `{"file", "line", "column", "key", "message"}`.
///
/// Example: capgate check --config examples/customer-support/capgate.toml
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    output: OutputArg,
}

/// `capgate check`: exit 0 when `serve` would accept the file, 1 with every located problem
/// otherwise (exactly what `serve` prints and refuses).
pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let path = &args.config.config;
    args.config.readable()?;
    let json = args.output.json();
    Ok(match validate::validate(path) {
        Ok(checked) if json => {
            print_json(&serde_json::json!({
                "ok": true,
                "file": path.display().to_string(),
                "problems": [],
                "warnings": checked.warnings.iter().map(problem_json).collect::<Vec<_>>(),
            }))?;
            Status::Ok.code()
        }
        Ok(checked) => {
            for w in &checked.warnings {
                eprintln!("warning: {w}");
            }
            println!("{}: ok", path.display());
            Status::Ok.code()
        }
        Err(refused) if json => {
            print_json(&serde_json::json!({
                "ok": false,
                "file": path.display().to_string(),
                "problems": refused.problems.iter().map(problem_json).collect::<Vec<_>>(),
                "warnings": [],
            }))?;
            eprintln!("{refused}");
            Status::Failed.code()
        }
        Err(refused) => {
            refused.report();
            Status::Failed.code()
        }
    })
}
