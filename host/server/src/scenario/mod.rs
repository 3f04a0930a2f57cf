//! Governance scenarios without a model (`capgate test`): scenario files read with every
//! problem located ([`mod@file`]), each run on the deployment's real pipeline over a fresh
//! in-memory store ([`run`]), in parallel ([`run_all`]). The command prints the outcomes.

pub mod file;
pub mod run;

pub use file::Scenario;
pub use run::Mismatch;

use crate::validate::Checked;
use capgate_config::located::Problem;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One scenario's result.
pub struct Outcome {
    /// The scenario.
    pub scenario: Scenario,
    /// Every mismatch (none: passed).
    pub mismatches: Vec<Mismatch>,
    /// Wall time.
    pub duration: Duration,
}

/// Every scenario of every file, or every problem of every file (names unique in the run,
/// stubs only on capabilities the deployment has).
pub fn load_all(paths: &[PathBuf], checked: &Checked) -> Result<Vec<Scenario>, Vec<Problem>> {
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
pub async fn run_all(
    checked: Arc<Checked>,
    scenarios: Vec<Scenario>,
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
