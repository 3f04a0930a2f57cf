//! Project automation, so that a fresh machine needs exactly two commands:
//!
//! - `cargo xtask demo`: run capgate's main job on the embedded default.
//! - `cargo xtask test`: install what the tests need, build the guest plugins, run every test.
//! - `cargo xtask build-plugins`: build the Wasm plugins only.
//! - `cargo xtask fuzz [--seconds N] [TARGET…]`: run the libFuzzer targets for a fixed time.
//! - `cargo xtask dist [--debug]`, `cargo xtask image [--debug]`: the release archive and the
//!   container image; `dist-check` and `image-check` serve the example from them.

mod client;
mod dist;
mod example;
mod fuzz;
mod image;
mod load;
mod plugins;
mod sbom;
mod sign;
mod smoke;
mod soak;
mod tools;

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
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
        Some("demo") => demo(&root, &args[1..]),
        Some("fuzz") => fuzz::fuzz(&root, &args[1..]),
        Some("tools") => tools::ensure(),
        Some("dist") => dist::dist(&root, &args[1..]),
        Some("dist-check") => smoke::dist_check(&root, &args[1..]),
        Some("image") => image::image(&root, &args[1..]),
        Some("image-check") => smoke::image_check(&args[1..]),
        Some("load") => {
            // A plain `error: …` like cargo's, without anyhow's backtrace: these are
            // usage and connection errors, each saying what to do next.
            if let Err(e) = load::load(&args[1..]) {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
            Ok(())
        }
        Some("soak") => {
            if let Err(e) = soak::soak(&root, &args[1..]) {
                eprintln!("error: {e:#}");
                std::process::exit(1);
            }
            Ok(())
        }
        Some("bench-mcp") => bench_mcp(&root, &args[1..]),
        Some("example-config") => match args.get(1).map(String::as_str) {
            None => example::render(&root).map(|_| ()),
            Some("--load") => example::render_load(&root).map(|_| ()),
            Some("--soak") => example::render_soak(&root).map(|_| ()),
            Some(other) => bail!(
                "unexpected argument '{other}' for example-config\n\nUsage: cargo xtask example-config [--load | --soak]\n  --load  write capgate.load.toml instead: rate limits off, store capgate-load.db (for `cargo xtask load`)\n  --soak  write capgate.soak.toml instead: the same plus three capabilities behind hostile policies, store capgate-soak.db (for `cargo xtask soak`)"
            ),
        },
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n  demo            build the plugins, pin them, serve the customer-support example\n  example-config  write examples/customer-support/capgate.toml (plugins pinned);\n                  --load writes capgate.load.toml for `cargo xtask load` instead,\n                  --soak capgate.soak.toml for `cargo xtask soak`\n  load            load-test a running gateway (`cargo xtask load --help`)\n  soak            mixed load at a fixed rate for minutes, watching for leaks (`cargo xtask soak --help`)\n  test            set up everything and run the whole test suite\n  build-plugins   build the Wasm guest plugins\n  tools           install the system tools the tests drive (as root, with apt-get), or name them\n  bench-mcp       what an MCP upstream behind capgate adds per call, stdio and HTTP (--calls N)\n  fuzz            run each fuzz target for a fixed time (--seconds N, default 60; nightly + cargo-fuzz)\n  dist            the release archive in target/dist/ (--debug: from target/debug/capgate, no release build)\n  dist-check      unpack an archive, serve its example read-only, check /healthz and a governed call (--debug, or ARCHIVE)\n  image           the container image with buildah, from the dist tree (--debug; --tag NAME)\n  image-check     run the image's example with `buildah run`, check /healthz and a governed call (--debug, or IMAGE)"
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

/// The main job: the customer-support example served by `capgate serve` on SQLite.
fn demo(root: &Path, extra: &[String]) -> anyhow::Result<()> {
    plugins::build_plugins(root)?;
    let config = example::render(root)?;
    run(Command::new("cargo")
        .current_dir(root)
        .args([
            "run",
            "--release",
            "-p",
            "capgate",
            "--",
            "serve",
            "--config",
        ])
        .arg(config)
        .args(extra))
}

/// What an MCP upstream behind capgate adds per call over calling the same server directly
/// (docs/guides/upstreams.md "MCP servers behind capgate"): the release binary, the official MCP
/// Python client and `@modelcontextprotocol/server-everything`, side by side in one run.
fn bench_mcp(root: &Path, extra: &[String]) -> anyhow::Result<()> {
    run(Command::new("bash")
        .arg(root.join("tests/mcp/setup.sh"))
        .current_dir(root))?;
    run(Command::new("cargo")
        .current_dir(root)
        .args(["build", "--release", "-p", "capgate"]))?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    run(Command::new(root.join("tests/mcp/.venv/bin/python"))
        .current_dir(root)
        .arg(root.join("tests/mcp/bench_upstream_cost.py"))
        .arg(target.join("release/capgate"))
        .args(extra))
}

fn test(root: &Path, extra: &[String]) -> anyhow::Result<()> {
    // The system tools some tests drive (installed as root on Debian, else named).
    tools::ensure()?;
    // The example alerting rules and Prometheus configuration, with their rule unit tests.
    if tools::on_path("promtool") {
        let observability = root.join("examples/observability");
        for args in [
            &["check", "rules", "capgate.rules.yml"][..],
            &["check", "config", "prometheus.yml"],
            &["test", "rules", "capgate.rules.test.yml"],
        ] {
            run(Command::new("promtool")
                .args(args)
                .current_dir(&observability))?;
        }
    }
    let postgres = tools::postgres_url();
    plugins::build_plugins(root)?;
    // The end-to-end tests serve the example exactly as `cargo xtask demo` does.
    example::render(root)?;
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
    // The TypeScript gateway client: the registry's packages (incl. `ai`), its unit tests;
    // its test against a running server is a Rust test (host/cli/tests/all/ai_sdk_client.rs).
    let ts = root.join("clients/ts");
    run(Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&ts))?;
    run(Command::new("npm").args(["test"]).current_dir(&ts))?;
    // The official MCP client SDKs (PyPI `mcp`, npm `@modelcontextprotocol/sdk`) the MCP
    // tests drive the server with.
    run(Command::new("bash")
        .arg(root.join("tests/mcp/setup.sh"))
        .current_dir(root))?;
    // The OpenID Provider (npm `oidc-provider`) the OIDC tests start on loopback
    // (tests/oidc/provider.mjs, driven by capgate-testkit's `oidc` module).
    run(Command::new("bash")
        .arg(root.join("tests/oidc/setup.sh"))
        .current_dir(root))?;
    // Built through `cargo auditable`, so the `capgate` binary the packages are made from
    // carries its crate list (one build: the packages reuse it).
    tools::ensure_cargo_auditable()?;
    let mut cargo_test = Command::new("cargo");
    cargo_test
        .current_dir(root)
        .args(["auditable", "test", "--workspace", "--no-fail-fast"])
        .args(extra);
    if let Some(url) = postgres {
        cargo_test.env("CAPGATE_TEST_POSTGRES_URL", url);
    }
    run(&mut cargo_test)?;
    // The example's governance scenarios (docs/guides/reviewing-changes.md "Testing a deployment"),
    // on the `capgate` binary the tests just built (`cargo run -p capgate` would resolve features
    // for one package instead of the workspace and build half the dependencies again). Only after
    // the whole suite: a filtered run may not have built the binary.
    if !extra.is_empty() {
        return Ok(());
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    run(Command::new(target.join("debug/capgate"))
        .current_dir(root)
        .args([
            "test",
            "--config",
            "examples/customer-support/capgate.toml",
            "examples/customer-support/scenarios",
        ]))?;
    // The support desk's own checks need its real procedure: `--live` (the example's local
    // Wasm component; no network, no credentials).
    run(Command::new(target.join("debug/capgate"))
        .current_dir(root)
        .args([
            "test",
            "--live",
            "--config",
            "examples/customer-support/capgate.toml",
            "examples/customer-support/scenarios/live",
        ]))?;
    packages(root)
}

/// The release archive and the container image, made from the debug binary the tests just
/// built (CI builds no second profile), each serving the example
/// (docs/getting-started/installing.md).
fn packages(root: &Path) -> anyhow::Result<()> {
    let d = dist::build(root, &dist::Binary::Debug)?;
    smoke::check_archive(&d.archive)?;
    let missing = if !tools::on_path("buildah") {
        Some("buildah is not installed")
    } else if !tools::is_root() {
        Some("not root (the check gives the state directory to user 10001)")
    } else {
        None
    };
    if let Some(why) = missing {
        if tools::ci() {
            bail!("CI: {why}; the container image cannot be checked");
        }
        eprintln!("xtask: {why}: the container image is not built or checked");
        return Ok(());
    }
    let tag = image::default_tag(&dist::Binary::Debug);
    image::build(root, &d, &tag)?;
    eprintln!("xtask: built {tag} ({})", image::size(&tag)?);
    let checked = smoke::check_image(&tag)
        .and_then(|()| image::check_metadata(&d, &tag))
        .and_then(|()| {
            let exported = image::export(root, &d, &tag)?;
            sign::check(&d.public_key, &exported)
        });
    let removed = image::remove(&tag);
    checked.and(removed)
}
