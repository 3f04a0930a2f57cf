//! `cargo xtask fuzz [--seconds N] [TARGET…]`: run each libFuzzer target of `fuzz/` for a
//! fixed time and print its executions, exec/s and whether it crashed
//! (docs/contributing/reliability.md).
//!
//! Each target runs as `cargo +nightly fuzz run -s none --codegen-units 16 TARGET
//! fuzz/work/TARGET fuzz/corpus/TARGET -- -max_total_time=N -print_final_stats=1`: libFuzzer writes what it
//! finds to the first (ignored) directory and only reads the checked-in seeds of the second,
//! so a run never rewrites the corpus in git. No sanitizer: the targets are safe Rust, a
//! panic is what they report, and an ASan build of the tree (wasmtime included) would be a
//! second, much slower build.

use anyhow::{Context, bail};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

/// Every target of fuzz/Cargo.toml, in the order they run.
const TARGETS: &[&str] = &[
    "canonical",
    "config",
    "gateway_bodies",
    "approvals_bodies",
    "mcp_messages",
    "plugin_outputs",
];

/// How the harness is built, the same for `build` and `run` (else `run` rebuilds): no
/// sanitizer, and 16 codegen units instead of cargo-fuzz's 1, which builds the tree
/// (wasmtime included) several times faster for a slightly slower executable.
const BUILD_FLAGS: &[&str] = &["-s", "none", "--codegen-units", "16"];

struct Outcome {
    target: String,
    executions: u64,
    per_second: u64,
    crashed: bool,
}

/// The subcommand: parse its arguments, build once, run each target, print the table.
pub fn fuzz(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let mut seconds: u64 = 60;
    let mut targets: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => {
                let n = it.next().context("--seconds needs a number")?;
                seconds = n
                    .parse()
                    .with_context(|| format!("--seconds {n}: not a number of seconds"))?;
            }
            t if TARGETS.contains(&t) => targets.push(t.to_string()),
            other => bail!(
                "unexpected argument '{other}'\n\nUsage: cargo xtask fuzz [--seconds N] [TARGET…]\n  targets: {}",
                TARGETS.join(", ")
            ),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.iter().map(|t| t.to_string()).collect();
    }
    let fuzz_dir = root.join("fuzz");
    // The build first, once, so each target's time is fuzzing, not compiling. Its own
    // target directory (fuzz/target): never the workspace's.
    crate::run(
        Command::new("cargo")
            .current_dir(&fuzz_dir)
            .env_remove("CARGO_TARGET_DIR")
            .args(["+nightly", "fuzz", "build"])
            .args(BUILD_FLAGS),
    )?;
    let mut outcomes = Vec::new();
    for target in &targets {
        let work = fuzz_dir.join("work").join(target);
        std::fs::create_dir_all(&work).with_context(|| format!("{}", work.display()))?;
        let mut child = Command::new("cargo")
            .current_dir(&fuzz_dir)
            .env_remove("CARGO_TARGET_DIR")
            .args(["+nightly", "fuzz", "run"])
            .args(BUILD_FLAGS)
            .arg(target)
            .arg(&work)
            .arg(fuzz_dir.join("corpus").join(target))
            .args([
                "--",
                &format!("-max_total_time={seconds}"),
                "-print_final_stats=1",
                "-timeout=10",
            ])
            .stderr(Stdio::piped())
            .spawn()
            .context("could not start cargo fuzz (cargo install cargo-fuzz)")?;
        let mut executions = 0;
        let mut per_second = 0;
        if let Some(stderr) = child.stderr.take() {
            for line in BufReader::new(stderr).lines() {
                let line = line.context("reading libFuzzer's output")?;
                eprintln!("{line}");
                let stat = |name: &str| {
                    line.strip_prefix(name)
                        .and_then(|v| v.trim().parse::<u64>().ok())
                };
                if let Some(n) = stat("stat::number_of_executed_units:") {
                    executions = n;
                }
                if let Some(n) = stat("stat::average_exec_per_sec:") {
                    per_second = n;
                }
            }
        }
        let status = child.wait().context("waiting for cargo fuzz")?;
        outcomes.push(Outcome {
            target: target.clone(),
            executions,
            per_second,
            crashed: !status.success(),
        });
    }
    println!(
        "\n{:<18} {:>14} {:>10}  result",
        "target", "executions", "exec/s"
    );
    for o in &outcomes {
        println!(
            "{:<18} {:>14} {:>10}  {}",
            o.target,
            o.executions,
            o.per_second,
            if o.crashed {
                "CRASH (see fuzz/artifacts/)"
            } else {
                "ok"
            }
        );
    }
    if outcomes.iter().any(|o| o.crashed) {
        bail!("a target crashed: its input is in fuzz/artifacts/<target>/");
    }
    Ok(())
}
