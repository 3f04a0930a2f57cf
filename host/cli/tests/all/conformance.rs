//! One conformance suite for every language: `capgate plugin test` runs the same case file
//! against the Rust, JavaScript and Python builds of each shipped plugin.
//! The builds come from `cargo xtask build-plugins` and `bash sdk/build-polyglot.sh` (both run
//! by `cargo xtask test`); a missing build fails the test, it never skips.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn plugin_test(plugin: &Path, cases: &str) {
    assert!(
        plugin.exists(),
        "{} is missing: run `cargo xtask build-plugins` and `bash sdk/build-polyglot.sh` first (cargo xtask test does both)",
        plugin.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["plugin", "test"])
        .arg(plugin)
        .arg("--cases")
        .arg(root().join("plugins/conformance").join(cases))
        .output()
        .expect("run capgate plugin test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} failed its conformance cases:\n{stdout}\n{stderr}",
        plugin.display()
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

fn builds(rust: &str, other: &str) -> [PathBuf; 3] {
    let r = root();
    [
        r.join("plugins/target/wasm32-wasip2/release").join(rust),
        r.join("plugins/js/dist").join(other),
        r.join("plugins/python/dist").join(other),
    ]
}

#[test]
fn refund_limit_conforms_in_rust_javascript_and_python() {
    for p in builds("refund_limit.wasm", "refund-limit.wasm") {
        plugin_test(&p, "refund-limit.toml");
    }
}

#[test]
fn pii_redactor_conforms_in_rust_javascript_and_python() {
    for p in builds("pii_redactor.wasm", "pii-redactor.wasm") {
        plugin_test(&p, "pii-redactor.toml");
    }
}

#[test]
fn a_failing_case_exits_non_zero_with_the_failure_in_the_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = dir.path().join("wrong.toml");
    std::fs::write(
        &cases,
        r#"
[[case]]
name = "649 is not allowed"
config = { maxAmount = 500 }
request = { phase = "invocation", input = { amount = 649 } }
expect = { decision = "allow" }
"#,
    )
    .expect("write cases");
    let plugin = &builds("refund_limit.wasm", "refund-limit.wasm")[0];
    let out = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["plugin", "test"])
        .arg(plugin)
        .arg("--cases")
        .arg(&cases)
        .output()
        .expect("run capgate plugin test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("FAIL"), "{stdout}");
    assert!(
        stdout.contains("expected allow, got require-approval"),
        "{stdout}"
    );
}
