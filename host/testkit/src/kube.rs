//! `kubectl` for the tests of the Kubernetes manifests (`deploy/kubernetes`): found on PATH
//! or installed from Debian's `kubernetes-client` when the tests run as root; missing, a
//! test is skipped loudly, except under `CI=true`, where it fails.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Whether this runs in CI (`CI=true`), where a missing tool is a failure, not a skip.
fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// `name` on PATH, if it is there.
fn on_path(name: &str) -> Option<PathBuf> {
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

/// `kubectl`: on PATH, or Debian's `kubernetes-client` installed as root (once more after
/// `apt-get update` on a machine without package lists). Missing: a failure under
/// `CI=true`, else `None` and a loud notice.
pub fn kubectl(test: &str) -> Option<PathBuf> {
    if let Some(k) = on_path("kubectl") {
        return Some(k);
    }
    let install = [
        "install",
        "-y",
        "-q",
        "--no-install-recommends",
        "kubernetes-client",
    ];
    if is_root() && !apt_get(&install) {
        let _ = apt_get(&["update", "-q"]);
        let _ = apt_get(&install);
    }
    if let Some(k) = on_path("kubectl") {
        return Some(k);
    }
    let why = if is_root() {
        "`apt-get install -y kubernetes-client` did not provide it".to_string()
    } else {
        "not running as root, so it cannot be installed (run `sudo apt-get install -y kubernetes-client`)".to_string()
    };
    assert!(
        !ci(),
        "CI=true but kubectl (Debian's kubernetes-client) is missing: {why}. {test} must run in CI (`cargo xtask test` installs it)."
    );
    eprintln!(
        "\n\n**********************************************************************\n\
         SKIPPING {test}: kubectl (Debian's kubernetes-client) is missing;\n{why}.\n\
         **********************************************************************\n"
    );
    None
}

/// Every object `kubectl kustomize DIR` renders (`DIR` relative to the repository; empty
/// documents left out), as JSON values.
pub fn render(kubectl: &Path, dir: &str) -> Vec<Value> {
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(crate::paths::repo_root().join(dir))
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {dir} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8 YAML");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("the rendering is YAML");
    docs.into_iter()
        .filter(|d| d.get("kind").is_some())
        .collect()
}
