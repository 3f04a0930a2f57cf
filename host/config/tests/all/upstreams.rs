//! `[upstreams.mcp.NAME]` and `procedure.mcp`: every mistake located at its key in one run
//! (resolving an accepted entry is `capgate-server`'s: its `resolve` tests).

use capgate_config::{Config, Problem};
use std::path::Path;

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
