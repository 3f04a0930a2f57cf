//! `capgate check`: every problem of a configuration file, located, reported at once.

use std::process::Command;

fn check(config: &str) -> (i32, String, String) {
    check_with(config, &[])
}

/// [`check`] with more files (name, contents) beside the config file.
fn check_with(config: &str, files: &[(&str, &str)]) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("capgate.toml");
    std::fs::write(&path, config).expect("write config");
    std::fs::write(dir.path().join("policy.wasm"), b"not really wasm").expect("write plugin");
    for (name, contents) in files {
        std::fs::write(dir.path().join(name), contents).expect("write file");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("run capgate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const GOOD: &str = r#"
revision = "r1"

[plugins.limits]
path = "policy.wasm"
sha256 = "1f7e1b1c3f0bdb6d1c57a5b1e0ba0f3c3a8c6be3d27ad2dd4dd3c0b0b0bf1b6a"

[policies.refundLimit]
plugin = "limits"
config = { maxAmount = 500 }

[[capabilities]]
id = "orders.refund"
description = "Refund an order"
expose = { aiSdk = true }
sideEffect = "write"
risk = "high"
inputSchema = { type = "object", properties = { amount = { type = "number" } } }
policies = ["refundLimit"]
procedure = { http = { target = "orders", url = "http://127.0.0.1:9/refund" } }

[gateway]
authorize = "authenticated"
routes = [{ path = "/agent", surface = "aiSdk" }]
"#;

#[test]
fn a_sound_config_passes_except_for_a_wrong_plugin_digest_which_names_both() {
    let (code, _out, err) = check(GOOD);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("has sha256"), "{err}");
    assert!(err.contains("1f7e1b1c3f0bdb6d"), "{err}");
}

#[test]
fn a_config_with_five_mistakes_reports_all_five_with_locations() {
    let broken = GOOD
        .replace("risk = \"high\"", "risk = \"extreme\"") // 1: bad enum value
        .replace(
            "policies = [\"refundLimit\"]",
            "policies = [\"refundLimitt\"]",
        ) // 2: bad reference
        .replace("[gateway]", "[gateway]\nlisten_port = 8080") // 3: unknown key
        .replace(
            "revision = \"r1\"",
            "revision = \"r1\"\n[telemetry]\nenabled = true",
        ) // 4: unknown section
        .replace(
            "inputSchema = { type = \"object\"",
            "inputSchema = { type = \"objekt\"",
        ); // 5: schema error
    let (code, _out, err) = check(&broken);
    assert_eq!(code, 1, "{err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("capgate.toml:"))
        .collect();
    for needle in [
        "extreme",
        "refundLimitt",
        "listen_port",
        "telemetry",
        "inputSchema",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(needle)),
            "no located problem mentions {needle}:\n{err}"
        );
    }
    // file:line:column on each.
    for l in &lines {
        let rest = l.split("capgate.toml:").nth(1).unwrap_or_default();
        let mut parts = rest.split(':');
        let line: usize = parts.next().unwrap_or("0").parse().unwrap_or(0);
        let col: usize = parts.next().unwrap_or("0").parse().unwrap_or(0);
        assert!(line > 0 && col > 0, "unlocated: {l}");
    }
    assert!(err.contains("nothing was started"), "{err}");
}

/// Two HTTPS upstreams with extra trusted roots: one file missing, one without a certificate.
const CA_FILES: &str = r#"
revision = "r1"

[[capabilities]]
id = "orders.refund"
description = "Refund an order"
expose = { aiSdk = true }
sideEffect = "write"
risk = "high"
procedure = { http = { target = "orders", url = "https://127.0.0.1:9/refund", caFile = "missing.pem" } }

[[capabilities]]
id = "orders.cancel"
description = "Cancel an order"
expose = { aiSdk = true }
sideEffect = "write"
risk = "low"
procedure = { http = { target = "cancel", url = "https://127.0.0.1:9/cancel", caFile = "notes.txt" } }

[gateway]
authorize = "authenticated"
routes = [{ path = "/agent", surface = "aiSdk" }]
"#;

#[test]
fn an_upstream_ca_file_that_is_missing_or_holds_no_certificate_is_a_located_problem() {
    let (code, _out, err) = check_with(CA_FILES, &[("notes.txt", "not a certificate\n")]);
    assert_eq!(code, 1, "{err}");
    for (needle, file) in [
        ("cannot read the CA file", "missing.pem"),
        ("holds no certificate", "notes.txt"),
    ] {
        let line = err
            .lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no problem says {needle}:\n{err}"));
        assert!(line.contains("caFile") && line.contains(file), "{line}");
        let rest = line.split("capgate.toml:").nth(1).unwrap_or_default();
        let mut parts = rest.split(':');
        let line_no: usize = parts.next().unwrap_or("0").parse().unwrap_or(0);
        let col: usize = parts.next().unwrap_or("0").parse().unwrap_or(0);
        assert!(line_no > 0 && col > 0, "unlocated: {line}");
    }
}

#[test]
fn invalid_toml_is_one_located_problem() {
    let (code, _out, err) = check("revision = \n[[capabilities]\n");
    assert_eq!(code, 1);
    assert!(err.contains("not valid TOML"), "{err}");
}

fn example() -> (std::path::PathBuf, String) {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/customer-support");
    let path = dir.join("capgate.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run `cargo xtask example-config` (or `cargo xtask test`) first",
            path.display()
        )
    });
    (dir, text)
}

#[test]
fn the_example_deployment_passes_check() {
    let (dir, _) = example();
    let out = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["check", "--config"])
        .arg(dir.join("capgate.toml"))
        .output()
        .expect("run capgate");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(": ok"));
}

#[test]
fn a_broken_copy_of_the_example_fails_with_located_errors() {
    let (dir, text) = example();
    let dir = dir.canonicalize().expect("example dir");
    // The same file elsewhere: relative paths made absolute, then three mistakes.
    let broken = text
        .replace(
            "pluginDir = \"../../plugins",
            &format!("pluginDir = \"{}/../../plugins", dir.display()),
        )
        .replace("\"schemas/", &format!("\"{}/schemas/", dir.display()))
        .replace("sideEffect = \"read\"", "sideEffect = \"reads\"")
        .replace(
            "redactors = [\"stripGatewayRef\"]",
            "redactors = [\"stripGatewayRefs\"]",
        )
        .replace("timeoutMs = 5000", "timeoutMs = 5000\nfuel = -1");
    let (code, _out, err) = check(&broken);
    assert_eq!(code, 1, "{err}");
    for needle in ["reads", "stripGatewayRefs", "fuel"] {
        assert!(
            err.lines()
                .any(|l| l.contains("capgate.toml:") && l.contains(needle)),
            "no located problem mentions {needle}:\n{err}"
        );
    }
}
