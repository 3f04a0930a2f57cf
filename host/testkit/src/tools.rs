//! The system tools a test drives (Prometheus, kubectl, a registry, Chromium…): found on
//! PATH, or installed from Debian's packages when the tests run as root; missing, a test is
//! skipped loudly, except under `CI=true`, where it fails (CI installs them, so they run).

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Whether the tests run in CI (`CI=true`), where a missing system tool fails a test
/// instead of skipping it.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// `name` on PATH, if it is there.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `apt-get ARGS`, quietly; whether it succeeded.
fn apt_get(args: &[&str]) -> bool {
    eprintln!("notice: apt-get {}", args.join(" "));
    Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether the system tools a test needs are there (`present`), installing Debian's
/// `packages` when they are not and the test runs as root (`apt-get install`, then once
/// more after `apt-get update` on a machine without package lists). When they stay
/// missing: under CI=true the test fails (CI installs them, so it must run); otherwise it
/// is skipped, loudly, past the harness's capture. `test` names the test in the messages.
pub fn debian_tools(packages: &[&str], present: impl Fn() -> bool, test: &str) -> bool {
    if present() {
        return true;
    }
    let list = packages.join(" ");
    if is_root() {
        let mut install = vec!["install", "-y", "-q", "--no-install-recommends"];
        install.extend_from_slice(packages);
        if !apt_get(&install) {
            // A fresh machine may have no package lists yet.
            let _ = apt_get(&["update", "-q"]);
            let _ = apt_get(&install);
        }
        if present() {
            return true;
        }
    }
    let why = if is_root() {
        format!("`apt-get install -y {list}` did not provide them")
    } else {
        format!(
            "not running as root, so they cannot be installed (run `sudo apt-get install -y {list}`)"
        )
    };
    assert!(
        !ci(),
        "CI=true but Debian's {list} are missing: {why}. {test} must run in CI (`cargo xtask test` installs them)."
    );
    let _ = std::io::Write::write_fmt(
        &mut std::io::stderr(),
        format_args!(
            "\n\n**********************************************************************\n\
             SKIPPING {test}: Debian's {list} are missing;\n{why}.\n\
             **********************************************************************\n\n"
        ),
    );
    false
}
