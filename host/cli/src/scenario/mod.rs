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

mod file;
mod report;
mod run;

use crate::exit::Status;
use capgate_config::located::Problem;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// One scenario's result.
pub struct Outcome {
    /// The scenario.
    pub scenario: file::Scenario,
    /// Every mismatch (none: passed).
    pub mismatches: Vec<run::Mismatch>,
    /// Wall time.
    pub duration: Duration,
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
    let selected: Vec<file::Scenario> = match &opts.filter {
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

/// Every scenario of every file, or every problem of every file (names unique in the run,
/// stubs only on capabilities the deployment has).
fn load_all(
    paths: &[PathBuf],
    checked: &crate::validate::Checked,
) -> Result<Vec<file::Scenario>, Vec<Problem>> {
    let files = file::files(paths).map_err(|p| vec![p])?;
    if files.is_empty() {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(vec![Problem {
            file: paths.first().cloned().unwrap_or_default(),
            line: 1,
            column: 1,
            key: String::new(),
            message: format!("no scenario files (*.toml) in {}", shown.join(", ")),
        }]);
    }
    let mut problems = Vec::new();
    let mut all = Vec::new();
    for f in &files {
        match file::load(f) {
            Ok(s) => all.extend(s),
            Err(p) => problems.extend(p),
        }
    }
    let registry = checked.registry().ok();
    let mut seen = std::collections::HashMap::new();
    for s in &all {
        if let Some(first) = seen.insert(s.name.clone(), (s.file.clone(), s.line)) {
            problems.push(Problem {
                message: format!(
                    "another scenario is named {:?} ({}:{}); names are unique in a run",
                    s.name,
                    first.0.display(),
                    first.1
                ),
                ..s.name_problem.clone()
            });
        }
        if let (Some(at), Some(r)) = (&s.stub_problem, &registry)
            && r.get(&s.call.capability).is_none()
        {
            problems.push(Problem {
                message: format!(
                    "the deployment has no capability `{}` whose procedure to stub",
                    s.call.capability
                ),
                ..at.clone()
            });
        }
    }
    if problems.is_empty() {
        Ok(all)
    } else {
        Err(problems)
    }
}

/// Run every scenario, at most `jobs` at once; outcomes in the order given.
async fn run_all(
    checked: Arc<crate::validate::Checked>,
    scenarios: Vec<file::Scenario>,
    jobs: usize,
    live: bool,
) -> Vec<Outcome> {
    let gate = Arc::new(tokio::sync::Semaphore::new(jobs));
    let mut tasks = Vec::with_capacity(scenarios.len());
    for s in scenarios {
        let (checked, gate, scenario) = (checked.clone(), gate.clone(), s.clone());
        let task = tokio::spawn(async move {
            let _permit = gate.acquire_owned().await;
            let started = Instant::now();
            let mismatches = run::run(&checked, &scenario, live).await;
            (mismatches, started.elapsed())
        });
        tasks.push((s, task));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for (scenario, task) in tasks {
        let (mismatches, duration) = match task.await {
            Ok(done) => done,
            Err(e) => (
                vec![run::Mismatch::Error {
                    place: "scenario".into(),
                    message: format!("the runner failed: {e}"),
                }],
                Duration::ZERO,
            ),
        };
        out.push(Outcome {
            scenario,
            mismatches,
            duration,
        });
    }
    out
}
