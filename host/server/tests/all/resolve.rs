//! The file's sections resolved into the running crates' settings (`capgate_server::resolve`):
//! paths against the configuration file, secrets by source, defaults filled in.

use capgate_config::{Config, Problem};
use capgate_provider::mcp::{McpTransportConfig, SecretValue};
use std::path::Path;
use std::time::Duration;

fn parse(text: &str) -> Result<Config, Vec<Problem>> {
    Config::parse(Path::new("/etc/capgate/capgate.toml"), text.to_string()).map(|(cfg, _)| cfg)
}

const PIN: &str = "c412f3a03e1333e0dee4a8ac92687be94c09e33c2fc3756324cf1d6f1b659ba1";

fn capability(procedure: &str) -> String {
    format!(
        "[[capabilities]]\nid = \"e.echo\"\ndescription = \"d\"\nexpose = {{}}\nsideEffect = \"read\"\nrisk = \"low\"\nprocedure = {procedure}\n"
    )
}

#[test]
fn an_accepted_upstream_resolves_paths_secrets_and_defaults() {
    let text = format!(
        "[upstreams.mcp.files]\ncommand = [\"npx\", \"-y\", \"server\"]\nenv = {{ TOKEN = {{ file = \"token\", prefix = \"t:\" }}, MODE = \"ro\" }}\ninheritEnv = [\"PATH\"]\ncwd = \"work\"\n\
         [upstreams.mcp.remote]\nurl = \"https://mcp.internal/mcp\"\nheaders = {{ Authorization = {{ env = \"REMOTE_TOKEN\", prefix = \"Bearer \" }} }}\ncaFile = \"ca.pem\"\nmaxConcurrentCalls = 4\nrelistIntervalMs = 500\n{}",
        capability(&format!(
            "{{ mcp = {{ upstream = \"files\", tool = \"echo\", toolSha256 = \"{}\" }} }}",
            PIN.to_ascii_uppercase()
        ))
    );
    // The file's own checks accept it (the CA bundle is read by the server's, at `check`).
    let cfg = parse(&text).expect("accepted");
    let upstreams = capgate_server::resolve::mcp_upstreams(&cfg);
    let files = &upstreams["files"];
    assert_eq!(files.relist_interval, Duration::from_secs(60));
    let McpTransportConfig::Stdio {
        program,
        args,
        env,
        inherit,
        cwd,
    } = &files.transport
    else {
        panic!("stdio expected: {files:?}")
    };
    assert_eq!((program.as_str(), args.len()), ("npx", 2));
    assert_eq!(inherit, &["PATH".to_string()]);
    assert_eq!(cwd.as_deref(), Some(Path::new("/etc/capgate/work")));
    assert_eq!(env["MODE"], SecretValue::Literal("ro".into()));
    assert_eq!(
        env["TOKEN"],
        SecretValue::File {
            path: "/etc/capgate/token".into(),
            prefix: "t:".into()
        }
    );
    let remote = &upstreams["remote"];
    assert_eq!(
        (remote.max_concurrent_calls, remote.relist_interval),
        (4, Duration::from_millis(500))
    );
    let McpTransportConfig::Http { headers, .. } = &remote.transport else {
        panic!("http expected")
    };
    assert_eq!(
        headers["Authorization"],
        SecretValue::Env {
            name: "REMOTE_TOKEN".into(),
            prefix: "Bearer ".into()
        }
    );
    // An unset variable is an error naming it, never an empty credential.
    let unset = SecretValue::Env {
        name: "CAPGATE_TEST_SURELY_UNSET_VAR".into(),
        prefix: String::new(),
    };
    assert!(
        unset
            .resolve()
            .unwrap_err()
            .to_string()
            .contains("CAPGATE_TEST_SURELY_UNSET_VAR")
    );
}

#[test]
fn an_http_procedure_resolves_its_ca_file_against_the_config_file() {
    let cfg = parse(&capability(
        "{ http = { target = \"orders\", url = \"https://orders.internal/refund\", caFile = \"ca/orders.pem\", connectTimeoutMs = 250, headers = { X-Key = \"k\" }, request = { method = \"POST\", path = \"/refunds/{orderId}\", body = \"refund\" }, errors = { 404 = \"ORDER_NOT_FOUND\" } } }",
    ))
    .expect("accepted");
    let section = cfg.capabilities[0].procedure.http().expect("http");
    let http = capgate_server::resolve::http_upstream(&cfg, section);
    assert_eq!(
        http.ca_file.as_deref(),
        Some(Path::new("/etc/capgate/ca/orders.pem"))
    );
    assert_eq!(
        (http.target.as_str(), http.connect_timeout_ms),
        ("orders", Some(250))
    );
    assert_eq!(http.headers["X-Key"], "k");
    let request = http.request.expect("a mapping");
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/refunds/{orderId}")
    );
    assert_eq!(http.errors["404"], "ORDER_NOT_FOUND");
}
