//! `cargo xtask build-plugins`: build the guest plugins (plugins/, its own cargo workspace)
//! for `wasm32-wasip2`, so host tests and benches load real components, never checked-in
//! binaries.
//!
//! Cargo unifies features across the packages of one build. [`BUILT_ALONE`] lists the
//! plugins whose dependencies turn on features that would change every other plugin; they
//! are built in a cargo run of their own, so each plugin is built as its author would build
//! it alone.

use anyhow::{Context, bail};
use std::path::Path;
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";

/// Plugins built in a cargo run of their own, each. `cedar-policy-plugin`: cedar turns on
/// serde_json's `preserve_order`, which built together would make every plugin's JSON
/// objects insertion-ordered maps (slower to build and look up, and a random hash seed
/// from WASI): the Rust plugins of the governed-invoke benchmark were 3-7 % slower for it
/// (docs/contributing/benchmarks.md "Guests built for speed"). `cel-policy` and `redact`: with
/// cedar, the plugins `host/builtin/build.rs` ships, which it builds the same way, one cargo run
/// each, so the two builds share their artifacts instead of relinking each other's.
const BUILT_ALONE: &[&str] = &["cel-policy", "cedar-policy-plugin", "redact"];

/// Install the target if missing, build every plugin in release mode, list the outputs.
pub fn build_plugins(root: &Path) -> anyhow::Result<()> {
    ensure_target()?;
    let plugins = root.join("plugins");
    let mut rest = vec!["--workspace".to_string()];
    rest.extend(BUILT_ALONE.iter().map(|p| format!("--exclude={p}")));
    cargo_build(&plugins, &rest)?;
    for package in BUILT_ALONE {
        cargo_build(&plugins, &[format!("--package={package}")])?;
    }
    let out = plugins.join("target").join(TARGET).join("release");
    let mut built: Vec<String> = std::fs::read_dir(&out)
        .with_context(|| format!("reading {}", out.display()))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".wasm"))
        .collect();
    built.sort();
    println!("plugins built into {}:", out.display());
    for name in built {
        println!("  {name}");
    }
    Ok(())
}

/// One `cargo build --release --target wasm32-wasip2` in the guest workspace.
fn cargo_build(plugins: &Path, selection: &[String]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let status = Command::new(&cargo)
        .current_dir(plugins)
        .args(["build", "--release", "--target", TARGET])
        .args(selection)
        // The host build's flags (e.g. RUSTFLAGS for x86_64) must not leak into guests.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .with_context(|| format!("running `{cargo} build` in {}", plugins.display()))?;
    if !status.success() {
        bail!(
            "building the plugins ({}) failed ({status})",
            selection.join(" ")
        );
    }
    Ok(())
}

fn ensure_target() -> anyhow::Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("running `rustup target list --installed` (is rustup installed?)")?;
    if String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l.trim() == TARGET)
    {
        return Ok(());
    }
    println!("installing the {TARGET} target with rustup");
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status()
        .context("running `rustup target add`")?;
    if !status.success() {
        bail!("`rustup target add {TARGET}` failed ({status})");
    }
    Ok(())
}
