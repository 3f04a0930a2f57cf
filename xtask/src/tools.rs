//! What `cargo xtask test` installs before it runs anything: the system tools some tests
//! drive for real. Each test that needs one fails under `CI=true` without it and skips
//! otherwise; here, run as root on Debian, a missing one is installed with apt-get, and
//! anyone else is told what to install. Also finds the local PostgreSQL for the Postgres
//! tests when `CAPGATE_TEST_POSTGRES_URL` is not set.

use anyhow::bail;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A tool some tests need: the commands that must exist and the Debian packages that
/// provide them.
struct Tool {
    /// Command names (looked up on PATH) or absolute paths.
    commands: &'static [&'static str],
    /// The Debian packages to install.
    packages: &'static [&'static str],
    /// Who needs it.
    why: &'static str,
}

const TOOLS: &[Tool] = &[
    Tool {
        commands: &["promtool", "prometheus"],
        packages: &["prometheus"],
        why: "examples/observability's rules (promtool) and host/cli/tests/all/prometheus_e2e.rs (a real server scrapes capgate; no service is started)",
    },
    Tool {
        commands: &["/usr/bin/chromium", "/usr/bin/chromedriver"],
        packages: &["chromium", "chromium-driver"],
        why: "host/cli/tests/all/console_browser.rs drives the approval console with headless Chromium",
    },
    Tool {
        commands: &["docker-registry"],
        packages: &["docker-registry"],
        why: "host/cli/tests/all/oci_registry.rs starts one on loopback (the package's service is not started)",
    },
    Tool {
        commands: &["kubectl"],
        packages: &["kubernetes-client"],
        why: "host/config/tests/all/manifests.rs renders deploy/kubernetes with `kubectl kustomize` (any kubectl on PATH does)",
    },
    Tool {
        commands: &["buildah"],
        packages: &["buildah"],
        why: "`cargo xtask test` builds the container image and runs the example in it",
    },
    Tool {
        commands: &["openssl", "python3"],
        packages: &["openssl", "python3"],
        why: "`cargo xtask dist` signs the archive and the tests verify cosign-shaped signatures with it (openssl); the OCI tests make the registry's bcrypt login with Python's crypt (python3)",
    },
];

/// `cargo auditable`, installed from crates.io (`cargo install --locked cargo-auditable`)
/// when missing: the builds `cargo xtask test` and `cargo xtask dist` package embed the
/// binary's crate list (its `.dep-v0` section), which `cargo audit bin`, syft, trivy and
/// grype read from the binary itself.
pub fn ensure_cargo_auditable() -> anyhow::Result<()> {
    let installed = std::process::Command::new("cargo")
        .args(["auditable", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if installed {
        return Ok(());
    }
    eprintln!("xtask: cargo install --locked cargo-auditable");
    crate::run(std::process::Command::new("cargo").args([
        "install",
        "--locked",
        "--quiet",
        "cargo-auditable",
    ]))
}

/// Whether `CI` is set (a missing tool is then a failure, not a skip).
pub fn ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// Whether `command` (a name or an absolute path) can be run.
pub fn on_path(command: &str) -> bool {
    if command.contains('/') {
        return Path::new(command).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(command).is_file()))
}

/// Install every missing tool (as root, with apt-get), or say what to install. Under `CI`, a
/// tool still missing afterwards is an error.
pub fn ensure() -> anyhow::Result<()> {
    let missing: Vec<&Tool> = TOOLS
        .iter()
        .filter(|t| !t.commands.iter().all(|c| on_path(c)))
        .collect();
    if missing.is_empty() {
        eprintln!("xtask: tools: all present");
        return Ok(());
    }
    let packages: Vec<&str> = missing.iter().flat_map(|t| t.packages).copied().collect();
    for t in &missing {
        eprintln!(
            "xtask: missing {} ({}): {}",
            t.commands.join(", "),
            t.packages.join(" "),
            t.why
        );
    }
    if is_root() && on_path("apt-get") {
        if !apt_install(&packages) {
            eprintln!("xtask: apt-get install failed; updating the package lists and retrying");
            let _ = Command::new("apt-get")
                .args(["update", "-qq"])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdout(std::process::Stdio::null())
                .status();
            apt_install(&packages);
        }
    } else {
        eprintln!(
            "xtask: not root (or no apt-get): install them yourself, e.g.\n  sudo apt-get install --no-install-recommends {}",
            packages.join(" ")
        );
    }
    let still: Vec<&str> = missing
        .iter()
        .flat_map(|t| t.commands)
        .copied()
        .filter(|c| !on_path(c))
        .collect();
    if still.is_empty() {
        return Ok(());
    }
    if ci() {
        bail!("CI: still missing {}", still.join(", "));
    }
    eprintln!(
        "xtask: still missing {}: the tests that need them will be skipped",
        still.join(", ")
    );
    Ok(())
}

fn apt_install(packages: &[&str]) -> bool {
    eprintln!(
        "xtask: apt-get install -y --no-install-recommends {}",
        packages.join(" ")
    );
    Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        // dpkg's progress; errors stay on stderr.
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether this process runs as root (`id -u`).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The local server the Postgres tests use when `CAPGATE_TEST_POSTGRES_URL` is not set.
const LOCAL_POSTGRES: &str = "postgres://postgres:postgres@127.0.0.1:5432/postgres";

/// `CAPGATE_TEST_POSTGRES_URL` for the tests: the environment's, else the local server's
/// when it answers (a TCP connect to 127.0.0.1:5432, then `psql … -Atc 'select 1'` when psql
/// is installed), else none (the Postgres tests then fail under `CI` and skip otherwise).
pub fn postgres_url() -> Option<String> {
    if let Ok(url) = std::env::var("CAPGATE_TEST_POSTGRES_URL") {
        eprintln!("xtask: CAPGATE_TEST_POSTGRES_URL from the environment");
        return Some(url);
    }
    let addr = SocketAddr::from(([127, 0, 0, 1], 5432));
    if TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err() {
        eprintln!(
            "xtask: CAPGATE_TEST_POSTGRES_URL is not set and nothing listens on 127.0.0.1:5432; Postgres tests will {}",
            if ci() { "fail" } else { "be skipped" }
        );
        return None;
    }
    if on_path("psql") {
        let answer = Command::new("psql")
            .args([LOCAL_POSTGRES, "-Atc", "select 1"])
            .output();
        match answer {
            Ok(o) if o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "1" => {
                eprintln!(
                    "xtask: CAPGATE_TEST_POSTGRES_URL={LOCAL_POSTGRES} (the local server answers `select 1`)"
                );
            }
            Ok(o) => {
                eprintln!(
                    "xtask: 127.0.0.1:5432 listens but `psql {LOCAL_POSTGRES} -Atc 'select 1'` failed ({}); Postgres tests will {}",
                    String::from_utf8_lossy(&o.stderr).trim(),
                    if ci() { "fail" } else { "be skipped" }
                );
                return None;
            }
            Err(e) => {
                eprintln!("xtask: could not run psql ({e}); using {LOCAL_POSTGRES} untested");
            }
        }
    } else {
        eprintln!(
            "xtask: CAPGATE_TEST_POSTGRES_URL={LOCAL_POSTGRES} (127.0.0.1:5432 accepts connections; no psql to try the password)"
        );
    }
    Some(LOCAL_POSTGRES.to_string())
}
