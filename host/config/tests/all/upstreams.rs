//! `[upstreams.mcp.NAME]` and `procedure.mcp`: every mistake located at its key in one run,
//! and an accepted entry resolved into the provider's configuration (paths against the file,
//! secrets by source, defaults filled in).

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
fn every_upstream_and_pin_mistake_is_reported_at_its_key_in_one_run() {
    let text = format!(
        "[upstreams.mcp.both]\nurl = \"http://127.0.0.1:1/mcp\"\ncommand = [\"x\"]\n\
         [upstreams.mcp.ftp]\nurl = \"ftp://h/mcp\"\n\
         [upstreams.mcp.empty]\ncommand = [\"\"]\nheaders = {{ A = \"b\" }}\n\
         [upstreams.mcp.secret]\nurl = \"http://127.0.0.1:1/mcp\"\nheaders = {{ Authorization = {{ env = \"T\", file = \"t\" }} }}\n\
         [upstreams.mcp.slow]\ncommand = [\"x\"]\nrelistIntervalMs = 5\n\
         {}{}",
        capability("{ mcp = { upstream = \"nowhere\", tool = \"echo\", toolSha256 = \"abc\" } }"),
        capability(&format!(
            "{{ mcp = {{ upstream = \"slow\", tool = \"echo\", toolSha256 = \"{PIN}\" }}, plugin = \"p\" }}"
        )),
    );
    let problems = parse(&text).expect_err("refused");
    let at = |key: &str, says: &str| {
        assert!(
            problems
                .iter()
                .any(|p| p.key == key && p.message.contains(says)),
            "no `{says}` at {key}: {problems:#?}"
        );
    };
    at("upstreams.mcp.both", "exactly one of `url`");
    at("upstreams.mcp.ftp.url", "http:// or https://");
    at("upstreams.mcp.empty.command", "must name a program");
    at("upstreams.mcp.empty", "apply to a `url`");
    at(
        "upstreams.mcp.secret.headers.Authorization",
        "exactly one of `env` or `file`",
    );
    at("upstreams.mcp.slow.relistIntervalMs", "100");
    at(
        "capabilities.0.procedure.mcp.upstream",
        "no MCP upstream named `nowhere`",
    );
    at("capabilities.0.procedure.mcp.toolSha256", "64-hex-digit");
    at(
        "capabilities.1.procedure",
        "exactly one of `plugin`, `http` or `mcp`",
    );
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
    // caFile must exist and hold a certificate: the reference check reads it.
    let cfg = match parse(&text) {
        Ok(cfg) => cfg,
        Err(problems) => {
            assert!(
                problems
                    .iter()
                    .all(|p| p.key == "upstreams.mcp.remote.caFile"),
                "{problems:#?}"
            );
            parse(&text.replace("caFile = \"ca.pem\"\n", "")).expect("accepted")
        }
    };
    let upstreams = cfg.mcp_upstreams();
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
