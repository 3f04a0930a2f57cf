//! `kubectl` for the tests of the Kubernetes manifests (`deploy/kubernetes`): found on PATH
//! or installed from Debian's `kubernetes-client` when the tests run as root; missing, a
//! test is skipped loudly, except under `CI=true`, where it fails.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `kubectl`: on PATH, or Debian's `kubernetes-client` installed as root. Missing: a
/// failure under `CI=true`, else `None` and a loud notice naming `test`.
pub fn kubectl(test: &str) -> Option<PathBuf> {
    let present = || crate::tools::on_path("kubectl").is_some();
    crate::tools::debian_tools(&["kubernetes-client"], present, test)
        .then(|| crate::tools::on_path("kubectl"))
        .flatten()
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
