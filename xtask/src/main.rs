//! Project automation, so that a fresh machine needs exactly two commands:
//!
//! - `cargo xtask demo`: run capgate's main job on the embedded default.
//! - `cargo xtask test`: install what the tests need, build the guest plugins, run every test.
//! - `cargo xtask build-plugins`: build the Wasm plugins only.

mod plugins;

use anyhow::{Context, bail};
use std::path::Path;
use std::process::Command;

fn main() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .context("xtask must live one level below the repository root")?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("build-plugins") => plugins::build_plugins(&root),
        Some("test") => test(&root, &args[1..]),
        Some("demo") => run(Command::new("cargo").current_dir(&root).args([
            "run",
            "--release",
            "-p",
            "customer-support",
        ])),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n  demo            run the customer-support walkthrough\n  test            set up everything and run the whole test suite\n  build-plugins   build the Wasm guest plugins"
            );
            std::process::exit(2)
        }
    }
}

/// Run a command, failing with its exit status.
pub(crate) fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}");
    eprintln!("xtask: {shown}");
    let status = cmd
        .status()
        .with_context(|| format!("could not start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

fn test(root: &Path, extra: &[String]) -> anyhow::Result<()> {
    plugins::build_plugins(root)?;
    // The JS and Python SDKs: toolchains from npm/PyPI, the plugins built into components,
    // then the SDKs' own unit tests.
    run(Command::new("bash")
        .arg(root.join("sdk/build-polyglot.sh"))
        .current_dir(root))?;
    run(Command::new("node")
        .args(["--test", "test/"])
        .current_dir(root.join("sdk/js")))?;
    run(Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", "sdk/python/tests"])
        .current_dir(root))?;
    if std::env::var_os("CAPGATE_TEST_POSTGRES_URL").is_none() {
        eprintln!(
            "xtask: CAPGATE_TEST_POSTGRES_URL is not set; Postgres tests will {}",
            if std::env::var_os("CI").is_some() {
                "fail"
            } else {
                "be skipped"
            }
        );
    }
    run(Command::new("cargo")
        .current_dir(root)
        .args(["test", "--workspace", "--no-fail-fast"])
        .args(extra))
}
