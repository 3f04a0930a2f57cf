//! `capgate test --config F [PATHS…]`: governance scenarios without a model. Each scenario
//! runs the deployment's real pipeline (its Wasm plugins, policies, redactors, schemas and
//! approval rules) on a fresh in-memory store, in parallel, and is reported like a test:
//! `PASS`/`FAIL` with an expected-vs-actual diff per field, `N passed, M failed`, or JUnit
//! XML for CI (`--format junit`).
//!
//! No configured procedure runs unless `--live`: a scenario that reaches a procedure it
//! does not stub fails, naming itself and what to do, and nothing reaches the backend.
//!
//! Exit status: 0 every scenario passed, 1 some failed, 2 the configuration or a scenario
//! file was refused (every problem located, `file:line:column: key: message`) or nothing
//! was run (bad input, as a usage error: crate::exit).
//!
//! The scenarios' files and their runner are `capgate_server::scenario`; this is the
//! command's presentation.

mod report;

use crate::exit::Status;
use capgate_server::scenario::{Scenario, load_all, run_all};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

/// How `capgate test` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// PASS/FAIL lines with a diff per failure, for people.
    Text,
    /// JUnit XML on stdout (the summary line goes to stderr), for CI.
    Junit,
    /// One JSON document on stdout (`--output json`, not a `--format`; the summary line
    /// goes to stderr).
    #[value(skip)]
    Json,
}

/// What `capgate test` was asked.
pub struct Options {
    /// The deployment file.
    pub config: PathBuf,
    /// Scenario files and directories (default: `scenarios/` beside the deployment file).
    pub paths: Vec<PathBuf>,
    /// Only scenarios whose name contains this (case-insensitive).
    pub filter: Option<String>,
    /// How to report.
    pub format: Format,
    /// Scenarios run at once.
    pub jobs: usize,
    /// Run the configured procedure of a scenario without a stub for real (HTTP upstreams
    /// with their configured credentials, Wasm procedures); without it, such a scenario
    /// fails and nothing reaches a backend.
    pub live: bool,
}

/// Run `capgate test`.
pub fn main(opts: Options) -> anyhow::Result<ExitCode> {
    let checked = match crate::validate::validate(&opts.config) {
        Ok(c) => Arc::new(c),
        Err(refused) => {
            if opts.format == Format::Json {
                crate::commands::shared::print_json(&report::json_refused(&refused.problems))?;
                eprintln!("{refused}");
            } else {
                refused.report();
            }
            return Ok(Status::Usage.code());
        }
    };
    let paths = if opts.paths.is_empty() {
        let dir = opts
            .config
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("scenarios");
        vec![dir]
    } else {
        opts.paths.clone()
    };
    let scenarios = match load_all(&paths, &checked) {
        Ok(s) => s,
        Err(problems) => {
            if opts.format == Format::Json {
                crate::commands::shared::print_json(&report::json_refused(&problems))?;
            } else {
                for p in &problems {
                    eprintln!("{p}");
                }
            }
            eprintln!(
                "\n{} problem(s) in the scenario files; nothing was run.",
                problems.len()
            );
            return Ok(Status::Usage.code());
        }
    };
    let selected: Vec<Scenario> = match &opts.filter {
        Some(f) => {
            let f = f.to_lowercase();
            scenarios
                .into_iter()
                .filter(|s| s.name.to_lowercase().contains(&f))
                .collect()
        }
        None => scenarios,
    };
    if selected.is_empty() {
        eprintln!(
            "error: no scenario to run{}",
            opts.filter
                .as_deref()
                .map(|f| format!(" (none matches --filter {f:?})"))
                .unwrap_or_default()
        );
        if opts.format == Format::Json {
            crate::commands::shared::print_json(&report::json_refused(&[]))?;
        }
        return Ok(Status::Usage.code());
    }
    let started = Instant::now();
    let outcomes =
        crate::runtime()?.block_on(run_all(checked, selected, opts.jobs.max(1), opts.live));
    let elapsed = started.elapsed();
    let failed = outcomes.iter().filter(|o| !o.mismatches.is_empty()).count();
    let summary = report::summary(outcomes.len() - failed, failed, elapsed);
    match opts.format {
        Format::Text => {
            print!("{}", report::text(&outcomes));
            println!("{summary}");
        }
        Format::Junit => {
            print!("{}", report::junit(&outcomes, elapsed));
            eprintln!("{summary}");
        }
        Format::Json => {
            crate::commands::shared::print_json(&report::json(&outcomes, elapsed))?;
            eprintln!("{summary}");
        }
    }
    Ok(if failed == 0 {
        Status::Ok.code()
    } else {
        Status::Failed.code()
    })
}
