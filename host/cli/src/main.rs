//! `capgate`: the operator's binary. `serve` runs a deployment (HTTP gateway, MCP, human
//! approvals); `mcp --stdio` serves one MCP session; `check` validates a deployment file and
//! reports every problem with its place; `plugin test` is a plugin author's inner loop;
//! `migrate`, `audit tail`, `approvals` and `invocations` operate the store; `contract`
//! exports what models and hosts may call and `contract diff` compares two revisions of it;
//! `inspect` prints a deployment's inventory for review; `test` runs governance scenarios
//! against a deployment without a model; `import openapi` prints capability entries for an
//! existing service from its OpenAPI document.
//!
//! This file only parses and dispatches: each command's arguments (its `--help`) and body
//! are one file of src/commands/, in the `capgate` library (src/lib.rs), so the fuzz
//! targets (host/fuzz) reach the same configuration loader `check` runs.

/// Request threads allocate what the Wasm reaper thread frees; mimalloc's per-thread heaps
/// make that cross-thread free cheap (glibc's arena lock did not).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use capgate::commands::{
    approvals, audit, check, contract, import, inspect, invocations, keys, mcp, migrate, plugin,
    replay, serve, test, whoami,
};
use capgate::exit::{self, Status};
use capgate::{telemetry, validate};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "capgate",
    version,
    about = "A governed capability runtime for AI agents",
    after_help = "Exit status: 0 done; 1 a refusal or a failed check (a refused configuration, a failing \
scenario or plugin case, a breaking contract change, `import mcp --diff` finding changes, an approval \
decision the rules refuse); 2 usage (the command line, or an input it names, cannot be used); \
3 a runtime error (the store unreachable or missing, I/O, anything else).\n\n\
`--output json` (check, test, replay, plugin test, inspect, approvals, invocations, audit verify, \
whoami): stdout carries only JSON, every message goes to stderr."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How log lines are written on stderr: `text` for a person, `json` for a log pipeline
    /// (one object per line, with the trace and span ids of the call when traces are on).
    /// Colour only at a terminal.
    #[arg(
        long,
        global = true,
        value_enum,
        env = "CAPGATE_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: LogFormatArg,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormatArg {
    /// Text lines.
    Text,
    /// JSON lines.
    Json,
}

/// The subcommands, in the order `capgate --help` lists them; each one's help is the doc
/// comment of its arguments in src/commands/.
#[derive(Subcommand)]
enum Command {
    Serve(serve::ServeArgs),
    Mcp(mcp::McpArgs),
    Contract(contract::ContractArgs),
    Approvals(approvals::ApprovalsArgs),
    Invocations(invocations::InvocationsArgs),
    Check(check::CheckArgs),
    Inspect(inspect::InspectArgs),
    Test(test::TestArgs),
    Replay(replay::ReplayArgs),
    Plugin(plugin::PluginArgs),
    Migrate(migrate::MigrateArgs),
    Audit(audit::AuditArgs),
    Keys(keys::KeysArgs),
    Whoami(whoami::WhoamiArgs),
    Import(import::ImportArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init_logging(match cli.log_format {
        LogFormatArg::Text => capgate_server::logs::LogFormat::Text,
        LogFormatArg::Json => capgate_server::logs::LogFormat::Json,
    });
    match run(cli.command) {
        Ok(code) => code,
        // The one place an error becomes an exit status (the table: src/exit.rs).
        Err(e) => {
            let status = exit::status_of(&e);
            match e
                .chain()
                .find_map(|c| c.downcast_ref::<validate::Refused>())
            {
                // The same lines and the same exit status as `capgate check`.
                Some(refused) => refused.report(),
                None => eprintln!("error: {}", exit::one_line(&e)),
            }
            debug_assert_ne!(status, Status::Ok);
            status.code()
        }
    }
}

fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve(args) => serve::run(args),
        Command::Mcp(args) => mcp::run(args),
        Command::Contract(args) => contract::run(args),
        Command::Approvals(args) => approvals::run(args),
        Command::Invocations(args) => invocations::run(args),
        Command::Check(args) => check::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Test(args) => test::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Plugin(args) => plugin::run(args),
        Command::Migrate(args) => migrate::run(args),
        Command::Audit(args) => audit::run(args),
        Command::Keys(args) => keys::run(args),
        Command::Whoami(args) => whoami::run(args),
        Command::Import(args) => import::run(args),
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// clap's own consistency checks (no two flags share a name, every default parses…),
    /// which a flattened shared flag could otherwise break at run time.
    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// Issue 57: `--help` names every command that takes `--output json`, and no other.
    #[test]
    fn help_names_every_command_that_takes_output_json() {
        fn walk(c: &clap::Command, path: &str, out: &mut Vec<String>) {
            if c.get_arguments().any(|a| a.get_id() == "output") {
                out.push(path.to_string());
            }
            for sub in c.get_subcommands() {
                let p = if path.is_empty() {
                    sub.get_name().to_string()
                } else {
                    format!("{path} {}", sub.get_name())
                };
                walk(sub, &p, out);
            }
        }
        let cli = Cli::command();
        let mut taking = Vec::new();
        walk(&cli, "", &mut taking);
        let help = cli
            .get_after_help()
            .map(|h| h.to_string())
            .unwrap_or_default();
        let (_, listed) = help
            .split_once("`--output json` (")
            .expect("the help lists the commands taking --output json");
        let listed: Vec<&str> = listed
            .split_once(')')
            .map_or("", |(l, _)| l)
            .split(',')
            .map(str::trim)
            .collect();
        // A listed name covers its subcommands (`approvals` for `approvals list`…).
        for t in &taking {
            assert!(
                listed
                    .iter()
                    .any(|l| t == l || t.starts_with(&format!("{l} "))),
                "`{t}` takes --output but --help does not say so: {listed:?}"
            );
        }
        for l in &listed {
            assert!(
                taking
                    .iter()
                    .any(|t| t == l || t.starts_with(&format!("{l} "))),
                "--help lists `{l}`, which takes no --output"
            );
        }
    }

    /// The book's CLI reference (`docs/reference/cli.md`) is generated from this clap tree:
    /// every command's long help, as `capgate … --help` prints it. A changed flag or doc
    /// comment fails this test until the page is regenerated with `CAPGATE_BLESS=1`.
    #[test]
    fn cli_reference_is_current() {
        fn walk(c: &mut clap::Command, path: &str, out: &mut String) {
            let help = c.render_long_help().to_string();
            out.push_str(&format!("## `{path}`\n\n```text\n"));
            for line in help.lines() {
                out.push_str(line.trim_end());
                out.push('\n');
            }
            out.push_str("```\n\n");
            let names: Vec<String> = c
                .get_subcommands()
                .filter(|s| s.get_name() != "help")
                .map(|s| s.get_name().to_string())
                .collect();
            for name in names {
                if let Some(sub) = c.find_subcommand_mut(&name) {
                    walk(sub, &format!("{path} {name}"), out);
                }
            }
        }
        let mut cli = Cli::command().term_width(100);
        cli.build();
        let mut page = String::from(
            "# CLI reference\n\n\
             Every `capgate` command and flag, as `capgate … --help` prints them. Generated from \
             the binary's clap declarations by the test `cli_reference_is_current` \
             (`CAPGATE_BLESS=1 cargo nextest run --workspace -E 'test(cli_reference_is_current)'` \
             regenerates it); exit statuses are in [Exit codes and JSON output](exit-codes.md).\n\n",
        );
        walk(&mut cli, "capgate", &mut page);
        let page = page.trim_end().to_string() + "\n";
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/reference/cli.md");
        if std::env::var_os("CAPGATE_BLESS").is_some() {
            std::fs::write(&path, &page).expect("write the CLI reference");
            return;
        }
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            current == page,
            "{} is out of date: run CAPGATE_BLESS=1 cargo nextest run --workspace -E 'test(cli_reference_is_current)'",
            path.display()
        );
    }
}
