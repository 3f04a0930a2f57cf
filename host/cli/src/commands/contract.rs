//! `capgate contract export|tools|diff`: the portable contract of a deployment (what a
//! surface offers, with its digest), tool definitions for agent frameworks, and the
//! comparison of two revisions of it.

use super::shared::ConfigArg;
use crate::validate::Checked;
use crate::{diff, table};
use anyhow::Context;
use capgate_contract::tools::{ToolFormat, export_contract_tools};
use capgate_core::actor::Surface;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The portable contract: what a surface offers, with its digest.
#[derive(clap::Args, Debug)]
pub struct ContractArgs {
    #[command(subcommand)]
    command: ContractCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ContractCommand {
    /// Print the PortableCapabilityDescriptor[] of a surface as JSON.
    ///
    /// Example: capgate contract export --config examples/customer-support/capgate.toml --surface aiSdk
    Export {
        #[command(flatten)]
        config: ConfigArg,
        /// The surface (aiSdk, mcp, workflow).
        #[arg(long, default_value = "aiSdk")]
        surface: Surface,
    },
    /// Print tool definitions for an agent framework.
    ///
    /// Example: capgate contract tools --config examples/customer-support/capgate.toml --format openai
    Tools {
        #[command(flatten)]
        config: ConfigArg,
        /// The surface (aiSdk, mcp, workflow).
        #[arg(long, default_value = "aiSdk")]
        surface: Surface,
        /// `ai-sdk` or `openai`.
        #[arg(long, default_value = "ai-sdk")]
        format: ToolFormat,
    },
    /// Compare two contracts: added, removed and changed capabilities, each change breaking
    /// (a call that worked may fail now) or additive.
    ///
    /// OLD and NEW are contract files (`contract export` output) or .toml deployment files.
    /// Exit status: 0 nothing breaking, 1 something breaking (0 with --allow-breaking), 2 bad
    /// input.
    ///
    /// Example: capgate contract diff contract.json examples/customer-support/capgate.toml
    Diff {
        /// The contract before (a .json contract file or a .toml deployment file).
        old: PathBuf,
        /// The contract after (a .json contract file or a .toml deployment file).
        new: PathBuf,
        /// Compare this surface only (aiSdk, mcp, workflow). Default: every one of them for
        /// two deployment files, else aiSdk (what `contract export` writes by default).
        #[arg(long)]
        surface: Option<Surface>,
        /// `table` for people, `json` for programs (shape: docs/guides/reviewing-changes.md
        /// "Reviewing a change").
        #[arg(long, value_enum, default_value = "table")]
        format: table::Format,
        /// Exit 0 even when a change is breaking (the report still says which).
        #[arg(long)]
        allow_breaking: bool,
    },
}

/// `capgate contract …`.
pub fn run(args: ContractArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ContractCommand::Export { config, surface } => {
            export(&config.load()?, surface, None)?;
            Ok(ExitCode::SUCCESS)
        }
        ContractCommand::Tools {
            config,
            surface,
            format,
        } => {
            export(&config.load()?, surface, Some(format))?;
            Ok(ExitCode::SUCCESS)
        }
        ContractCommand::Diff {
            old,
            new,
            surface,
            format,
            allow_breaking,
        } => contract_diff(&old, &new, surface, format, allow_breaking),
    }
}

/// `capgate contract export|tools`: the contract as JSON, or as tool definitions in
/// `format`.
fn export(checked: &Checked, s: Surface, format: Option<ToolFormat>) -> anyhow::Result<()> {
    // The contract is the configuration's alone: no store is opened.
    let runtime = checked
        .scratch_runtime()
        .context("the capability registry")?;
    let contract = capgate_contract::export_contract(&runtime, s, checked.revision());
    let out = match format {
        None => serde_json::to_value(&contract)?,
        Some(format) => export_contract_tools(&contract, s, format),
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// `capgate contract diff`: 0 when nothing is breaking (or `--allow-breaking`), 1 when
/// something is, 2 when an input is unreadable or not a contract (a refused deployment file
/// has its located problems printed first).
fn contract_diff(
    old: &Path,
    new: &Path,
    surface: Option<Surface>,
    format: table::Format,
    allow_breaking: bool,
) -> anyhow::Result<ExitCode> {
    let report = match diff_report(old, new, surface) {
        Ok(r) => r,
        Err(e) => {
            if let diff::DiffError::Refused(refused) = &e {
                for p in &refused.problems {
                    eprintln!("{p}");
                }
                eprintln!();
            }
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    match format {
        table::Format::Table => print!("{}", report.render_table(table::render)),
        table::Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(match (report.breaking, allow_breaking) {
        (false, _) => ExitCode::SUCCESS,
        (true, true) => {
            eprintln!("breaking changes allowed by --allow-breaking");
            ExitCode::SUCCESS
        }
        (true, false) => {
            eprintln!(
                "error: {} breaking change(s); review them, then pass --allow-breaking to accept them",
                report.summary.breaking_changes
            );
            ExitCode::from(1)
        }
    })
}

fn diff_report(
    old: &Path,
    new: &Path,
    surface: Option<Surface>,
) -> Result<diff::Report, diff::DiffError> {
    let (a, b) = (diff::Side::read(old)?, diff::Side::read(new)?);
    let surfaces = diff::surfaces(surface, &a, &b)?;
    Ok(diff::diff(
        &a.contract(&surfaces)?,
        &b.contract(&surfaces)?,
        &old.display().to_string(),
        &new.display().to_string(),
    ))
}
