//! `capgate check`: every problem of a configuration file, located, reported at once.

use crate::common;
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
            "revision = \"r1\"\n[telemetri]\nenabled = true",
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
        "telemetri",
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

/// A reserve too large, one on a pooled plugin, and a refill mark not below the size: each
/// is a located problem of its own key.
#[test]
fn bad_reserve_settings_are_located_problems() {
    let plugin = "[plugins.limits]\npath = \"policy.wasm\"";
    let with = |extra: &str| GOOD.replace(plugin, &format!("{plugin}\n{extra}"));
    for (extra, key, says) in [
        ("reserve = 65", "reserve", "at most 64"),
        (
            "isolation = \"pooled\"\nreserve = 2",
            "reserve",
            "fresh isolation only",
        ),
        (
            "reserve = 4\nreserveRefillAt = 4",
            "reserveRefillAt",
            "below `reserve` (4)",
        ),
        (
            "reserveRefillAt = 8",
            "reserveRefillAt",
            "below `reserve` (8)",
        ),
    ] {
        let (code, _out, err) = check(&with(extra));
        assert_eq!(code, 1, "{extra}: {err}");
        assert!(
            err.lines()
                .any(|l| l.contains("capgate.toml:") && l.contains(key) && l.contains(says)),
            "{extra}: no located problem at {key} saying {says}:\n{err}"
        );
    }
}

#[test]
fn bad_metrics_settings_are_located_problems() {
    for (table, key, says) in [
        ("listen = \"nowhere\"", "listen", "is not a listen address"),
        (
            "listen = \"127.0.0.1:8080\"",
            "listen",
            "the gateway's own listen address",
        ),
        ("path = \"metrics\"", "path", "is not a path"),
        ("path = \"/agent/metrics\"", "path", "already served"),
        ("path = \"/healthz\"", "path", "already served"),
        (
            "bearerTokenSha256 = \"abc\"",
            "bearerTokenSha256",
            "64 hex digits",
        ),
    ] {
        let config = format!("{GOOD}\n[telemetry.metrics]\n{table}\n");
        let (code, _out, err) = check(&config);
        assert_eq!(code, 1, "{table}: {err}");
        assert!(
            err.lines()
                .any(|l| l.contains("capgate.toml:") && l.contains(key) && l.contains(says)),
            "{table}: no located problem at {key} saying {says}:\n{err}"
        );
    }
    // On a listener of its own, a path the gateway serves is fine (GOOD's other, unrelated
    // problems remain).
    let own =
        format!("{GOOD}\n[telemetry.metrics]\nlisten = \"127.0.0.1:9464\"\npath = \"/healthz\"\n");
    let (_code, _out, err) = check(&own);
    assert!(!err.contains("telemetry"), "{err}");
}

#[test]
fn bad_console_settings_are_located_problems() {
    for (table, key, says) in [
        ("path = \"console/\"", "path", "must start with `/`"),
        (
            "path = \"/agent\"",
            "path",
            "overlaps the gateway route `/agent`",
        ),
        ("path = \"/approvals\"", "path", "served by capgate itself"),
        (
            "path = \"/admin\"",
            "path",
            "`/admin` is served by capgate itself",
        ),
        ("sessionMinutes = 0", "sessionMinutes", "between 1 and"),
        (
            "secureCookie = \"sometimes\"",
            "secureCookie",
            "must be \"auto\"",
        ),
        ("colour = \"blue\"", "colour", "unknown field"),
    ] {
        let config = format!("{GOOD}\n[gateway.console]\n{table}\n");
        let (code, _out, err) = check(&config);
        assert_eq!(code, 1, "{table}: {err}");
        assert!(
            err.lines()
                .any(|l| l.contains("capgate.toml:") && l.contains(key) && l.contains(says)),
            "{table}: no located problem at {key} saying {says}:\n{err}"
        );
    }
    // Turned off, its path is not checked.
    let off = format!("{GOOD}\n[gateway.console]\nenabled = false\npath = \"/agent\"\n");
    let (_code, _out, err) = check(&off);
    assert!(!err.contains("console"), "{err}");
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

// ---- `check` refuses exactly what `serve` refuses --------------------------------------

/// A deployment `serve` runs: two HTTP capabilities, an API key, one route. Every broken
/// variant below changes one thing.
static SERVABLE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "revision = \"r1\"\n\n{}\n{}\n{}",
        common::REFUND_OVER_HTTP,
        common::LOOKUP_OVER_HTTP,
        common::AGENT_ROUTE_WITH_DANAS_KEY
    )
});

/// What one process did.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The `file:line:column: key: message` lines.
    fn located(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.contains("capgate.toml:"))
            .collect()
    }
}

/// Run the binary with a deadline: a `serve` that wrongly starts is killed after `secs` and
/// reported with whatever it printed.
fn run_for(args: &[&std::ffi::OsStr], secs: u64) -> Run {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(args)
        .env("CAPGATE_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run capgate");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut stdout);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    Run {
        code,
        stdout,
        stderr,
    }
}

/// `capgate check` and `capgate serve` on the same file (in its own directory, whose
/// default store would be `capgate.db` there).
/// `serve` is given `serve_secs` to refuse before it is killed.
fn check_and_serve(
    config: &str,
    serve_secs: u64,
) -> (Run, Run, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("capgate.toml");
    std::fs::write(&path, config).expect("write config");
    let check = run_for(
        &["check".as_ref(), "--config".as_ref(), path.as_os_str()],
        60,
    );
    let serve = run_for(
        &[
            "serve".as_ref(),
            "--listen".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--config".as_ref(),
            path.as_os_str(),
        ],
        serve_secs,
    );
    let db = dir.path().join("capgate.db");
    (check, serve, db, dir)
}

fn assert_located(line: &str) {
    let rest = line.split("capgate.toml:").nth(1).unwrap_or_default();
    let mut parts = rest.split(':');
    let line_no: usize = parts.next().unwrap_or("0").parse().unwrap_or(0);
    let col: usize = parts.next().unwrap_or("0").parse().unwrap_or(0);
    assert!(line_no > 0 && col > 0, "unlocated: {line}");
}

#[test]
fn the_servable_config_passes_check_and_serve_listens() {
    let (check, serve, db, _dir) = check_and_serve(&SERVABLE, 10);
    assert_eq!(check.code, Some(0), "{}", check.stderr);
    // Still running at the deadline: it was serving.
    assert_eq!(serve.code, None, "{}", serve.stderr);
    assert!(serve.stdout.contains("listening on"), "{}", serve.stdout);
    assert!(db.is_file(), "serve creates its SQLite store");
}

#[test]
fn serve_refuses_every_config_check_refuses_with_the_same_located_problems() {
    let second_refund = r#"
[[capabilities]]
id = "orders.cancel"
description = "Cancel an order"
expose = { aiSdk = true }
sideEffect = "write"
risk = "low"
procedure = { http = { target = "orders", url = "http://127.0.0.1:9/cancel" } }
"#;
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "a retried write that is not idempotent (SI-11)",
            SERVABLE.replace(
                "risk = \"high\"",
                "risk = \"high\"\nretry = { maxAttempts = 2 }",
            ),
            "SI-11",
        ),
        (
            "a negative stall timeout",
            SERVABLE.replace(
                "url = \"http://127.0.0.1:9/refund\" }",
                "url = \"http://127.0.0.1:9/refund\" }, responseStallTimeoutMs = -1",
            ),
            "responseStallTimeoutMs",
        ),
        (
            "an integer beyond 64 bits",
            SERVABLE.replace(
                "risk = \"high\"",
                "risk = \"high\"\ntimeoutMs = 99999999999999999999",
            ),
            "does not fit in 64 bits",
        ),
        (
            "a timeout beyond any clock",
            SERVABLE.replace(
                "risk = \"high\"",
                "risk = \"high\"\napproval = { required = true, expiresInMs = 9000000000000000000 }",
            ),
            "expiresInMs",
        ),
        (
            "two capabilities on one upstream target",
            SERVABLE.replace("[gateway]", &format!("{second_refund}\n[gateway]")),
            "already uses the procedure provider",
        ),
        (
            "no authorizer",
            SERVABLE.replace("authorize = \"authenticated\"\n", ""),
            "gateway.authorize: is not set",
        ),
        (
            "no way to authenticate",
            SERVABLE
                .split("[[gateway.apiKeys]]")
                .next()
                .unwrap_or_default()
                .to_string(),
            "no way to authenticate",
        ),
        (
            "a route on a path capgate serves itself",
            SERVABLE.replace("path = \"/agent\"", "path = \"/mcp\""),
            "served by capgate itself",
        ),
        (
            "a route on the operator API's path",
            SERVABLE.replace("path = \"/agent\"", "path = \"/admin\""),
            "`/admin` is served by capgate itself (the operator API)",
        ),
        (
            "one path mounted twice",
            SERVABLE.replace(
                "routes = [{ path = \"/agent\", surface = \"aiSdk\" }]",
                "routes = [{ path = \"/agent\", surface = \"aiSdk\" }, { path = \"/agent\", surface = \"workflow\" }]",
            ),
            "mounted twice",
        ),
        (
            "an empty revision",
            SERVABLE.replace("revision = \"r1\"", "revision = \"\""),
            "revision",
        ),
        (
            "a rate limit whose burst switches it off",
            SERVABLE.replace(
                "[[gateway.apiKeys]]",
                "[gateway.rateLimit]\nprincipalPerSecond = 10\nprincipalBurst = 0\n\n[[gateway.apiKeys]]",
            ),
            "principalBurst",
        ),
        (
            "a capability that cannot finish inside the gateway's budget",
            SERVABLE.replace(
                "routes = [",
                "requestTimeoutMs = 20000\nroutes = [",
            ),
            "outcome-unknown",
        ),
    ];
    for (what, config, needle) in cases {
        let (check, serve, db, _dir) = check_and_serve(&config, 60);
        assert_eq!(check.code, Some(1), "{what}: check:\n{}", check.stderr);
        let located = check.located();
        assert!(
            located.iter().any(|l| l.contains(needle)),
            "{what}: no located problem says `{needle}`:\n{}",
            check.stderr
        );
        located.iter().for_each(|l| assert_located(l));
        assert_eq!(serve.code, Some(1), "{what}: serve:\n{}", serve.stderr);
        assert!(
            !serve.stdout.contains("listening"),
            "{what}: serve listened:\n{}",
            serve.stdout
        );
        assert_eq!(
            serve.located(),
            located,
            "{what}: serve and check disagree:\ncheck:\n{}\nserve:\n{}",
            check.stderr,
            serve.stderr
        );
        assert!(
            !db.exists(),
            "{what}: serve created its store before refusing"
        );
    }
}

#[test]
fn the_default_timeouts_fit_the_default_gateway_budget() {
    // Neither capability sets timeoutMs, the gateway sets no timeouts: 30 s per attempt
    // must fit the default 45 s − 5 s budget.
    assert!(!SERVABLE.contains("timeoutMs") && !SERVABLE.contains("TimeoutMs"));
    let (code, _out, err) = check(&SERVABLE);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_capability_whose_retries_outlast_the_gateway_budget_is_located_at_its_retry() {
    let config = SERVABLE.replace(
        "risk = \"low\"",
        "risk = \"low\"\ntimeoutMs = 15000\nretry = { maxAttempts = 2, backoffMs = 1000 }",
    );
    let (code, _out, err) = check(&config);
    assert_eq!(code, 1, "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("orders.lookup"))
        .unwrap_or_else(|| panic!("nothing about orders.lookup:\n{err}"));
    // 3 × 15 000 + 1 000 + 2 000 = 48 000 > 45 000 − 5 000.
    assert!(line.contains("capabilities.1.retry"), "{line}");
    assert!(line.contains("48000 ms"), "{line}");
    assert!(line.contains("40000 ms"), "{line}");
    assert_located(line);
    // The same capability with one retry fits: 2 × 15 000 + 1 000 = 31 000.
    let fits = config.replace("maxAttempts = 2", "maxAttempts = 1");
    let (code, _out, err) = check(&fits);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_capability_only_on_a_surface_no_route_serves_has_no_gateway_budget() {
    let config = SERVABLE
        .replace("risk = \"low\"", "risk = \"low\"\ntimeoutMs = 100000")
        .replace(
            "id = \"orders.lookup\"\ndescription = \"Look an order up\"\nexpose = { aiSdk = true }",
            "id = \"orders.lookup\"\ndescription = \"Look an order up\"\nexpose = { mcp = true }",
        );
    assert!(config.contains("expose = { mcp = true }"));
    let (code, _out, err) = check(&config);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_missing_authorizer_and_a_registry_problem_are_reported_in_one_run() {
    let config = SERVABLE
        .replace("authorize = \"authenticated\"\n", "")
        .replace(
            "risk = \"high\"",
            "risk = \"high\"\nretry = { maxAttempts = 2 }",
        );
    let (code, _out, err) = check(&config);
    assert_eq!(code, 1, "{err}");
    for needle in ["gateway.authorize", "SI-11"] {
        assert!(
            err.lines()
                .any(|l| l.contains("capgate.toml:") && l.contains(needle)),
            "no located problem says {needle}:\n{err}"
        );
    }
}

#[test]
fn a_binding_to_a_plugin_without_that_export_is_located_at_the_binding() {
    let (dir, text) = example();
    let dir = dir.canonicalize().expect("example dir");
    // refundLimit bound to the redactor component: it exports no policy.
    let broken = text
        .replace(
            "pluginDir = \"../../plugins",
            &format!("pluginDir = \"{}/../../plugins", dir.display()),
        )
        .replace(
            "compileCache = \".capgate-cache\"",
            &format!("compileCache = \"{}/.capgate-cache\"", dir.display()),
        )
        .replace("\"schemas/", &format!("\"{}/schemas/", dir.display()))
        .replace(
            "[policies.refundLimit]\nplugin = \"refund-limit\"",
            "[policies.refundLimit]\nplugin = \"pii-redactor\"",
        );
    assert!(broken.contains("plugin = \"pii-redactor\"\nconfig = { maxAmount"));
    let (code, _out, err) = check(&broken);
    assert_eq!(code, 1, "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("does not export"))
        .unwrap_or_else(|| panic!("no problem says `does not export`:\n{err}"));
    assert!(line.contains("policies.refundLimit.plugin"), "{line}");
    assert_located(line);
}

#[test]
fn traces_over_grpc_are_refused_at_the_key_saying_what_is_supported_and_why() {
    let (code, _out, err) = check(&format!(
        "{GOOD}\n[telemetry.traces]\nendpoint = \"http://127.0.0.1:4317\"\nprotocol = \"grpc\"\n"
    ));
    assert_eq!(code, 1, "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("telemetry.traces.protocol"))
        .unwrap_or_else(|| panic!("no located problem at the protocol:\n{err}"));
    assert_located(line);
    assert!(
        line.contains("http/protobuf") && line.contains("tonic"),
        "says what is supported and why: {line}"
    );
}

#[test]
fn a_capability_that_fits_only_without_its_policy_batches_is_refused_at_its_policies() {
    let (dir, text) = example();
    let dir = dir.canonicalize().expect("example dir");
    // The example with absolute paths and a 40 000 − 5 000 ms gateway budget: each
    // capability's procedure fits (messages.draft: the 30 000 ms default timeout), and so
    // does its one invocation-phase batch of 5 000 ms.
    let tight = text
        .replace(
            "pluginDir = \"../../plugins",
            &format!("pluginDir = \"{}/../../plugins", dir.display()),
        )
        .replace(
            "compileCache = \".capgate-cache\"",
            &format!("compileCache = \"{}/.capgate-cache\"", dir.display()),
        )
        .replace("\"schemas/", &format!("\"{}/schemas/", dir.display()))
        .replace(
            "authorize = \"authenticated\"\n",
            "authorize = \"authenticated\"\nrequestTimeoutMs = 40000\n",
        );
    assert!(tight.contains("requestTimeoutMs = 40000"));
    let (code, _out, err) = check(&tight);
    assert_eq!(code, 0, "30 000 + 5 000 ms fits 35 000 ms: {err}");

    // orgIsolation also at stage 9: a second batch, 40 000 ms > 35 000 ms.
    let both_phases = tight.replace(
        "[policies.orgIsolation]\nplugin = \"org-isolation\"",
        "[policies.orgIsolation]\nplugin = \"org-isolation\"\nphases = [\"invocation\", \"execution\"]",
    );
    assert!(both_phases.contains("phases = [\"invocation\", \"execution\"]"));
    // A longer policy deadline: one batch of 6 000 ms, 36 000 ms > 35 000 ms.
    let slower_policies = tight.replace("[runtime]\n", "[runtime]\npolicyTimeoutMs = 6000\n");
    for (what, config, total, batches) in [
        (
            "two batches",
            both_phases,
            "40000 ms",
            "2 policy batches × 5000 ms",
        ),
        (
            "a longer deadline",
            slower_policies,
            "36000 ms",
            "1 policy batch × 6000 ms",
        ),
    ] {
        let (code, _out, err) = check(&config);
        assert_eq!(code, 1, "{what}: {err}");
        let line = err
            .lines()
            .find(|l| l.contains("`messages.draft`"))
            .unwrap_or_else(|| panic!("{what}: nothing about messages.draft:\n{err}"));
        assert!(line.contains("capabilities.3.policies"), "{what}: {line}");
        for needle in [total, batches, "35000 ms", "outcome-unknown"] {
            assert!(line.contains(needle), "{what}: no `{needle}` in {line}");
        }
        assert_located(line);
    }
}
