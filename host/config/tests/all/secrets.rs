//! Secret-bearing keys (`#[key(secret)]`: `store.url`, API and operator key hashes, the
//! metrics bearer hash) may be given as `{ env = "VAR" }` or `{ file = "path" }`: the loader
//! puts the value in their place before anything reads them, a missing variable or file is
//! a problem at the key (never an empty secret), and the value never appears in a message.
//! `runtime.stateDir` is where what capgate writes goes.

use capgate_config::{Config, Problem, keys};
use std::path::Path;

fn parse(dir: &Path, text: &str) -> Result<Config, Vec<Problem>> {
    Config::parse(&dir.join("capgate.toml"), text.to_string()).map(|(cfg, _)| cfg)
}

const HASH: &str = "7d6fc6560c49ea495669e75517203a3bbe69d2ab27434854c98f1a2311a577a3";

#[test]
fn a_secret_key_reads_its_value_from_a_file_or_the_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("metrics.sha256"), format!("{HASH}\n")).expect("write");
    // SAFETY: the variable's name is this test's own; nothing else reads or writes it.
    unsafe { std::env::set_var("CAPGATE_TEST_SECRETS_STORE_URL", "sqlite://from-env.db") };
    let text = format!(
        "[store]\nurl = {{ env = \"CAPGATE_TEST_SECRETS_STORE_URL\" }}\n\
         [telemetry.metrics]\nbearerTokenSha256 = {{ file = \"metrics.sha256\" }}\n\
         [[gateway.apiKeys]]\nsha256 = \"{HASH}\"\nnamespace = \"n\"\nactor = {{ id = \"u\", kind = \"user\" }}\n"
    );
    let cfg = parse(dir.path(), &text).expect("accepted");
    assert_eq!(cfg.store.url, "sqlite://from-env.db");
    let metrics = cfg.telemetry.metrics.expect("metrics on");
    assert_eq!(metrics.bearer_token_sha256.as_deref(), Some(HASH));
}

#[test]
fn a_missing_secret_is_a_problem_at_its_key_and_its_value_is_never_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = "[store]\nurl = { env = \"CAPGATE_TEST_SECRETS_SURELY_UNSET\" }\n\
         [[gateway.apiKeys]]\nsha256 = { file = \"no-such-file\" }\nnamespace = \"n\"\nactor = { id = \"u\", kind = \"user\" }\n\
         [[gateway.operatorKeys]]\nsha256 = { env = \"A\", file = \"b\" }\nactor = { id = \"o\", kind = \"user\" }\n";
    let problems = parse(dir.path(), text).expect_err("refused");
    let at = |key: &str, says: &str| {
        assert!(
            problems
                .iter()
                .any(|p| p.key == key && p.message.contains(says)),
            "no `{says}` at {key}: {problems:#?}"
        );
    };
    at(
        "store.url",
        "`CAPGATE_TEST_SECRETS_SURELY_UNSET` this key names is not set",
    );
    at("gateway.apiKeys.0.sha256", "no-such-file");
    at(
        "gateway.operatorKeys.0.sha256",
        "`{ env = \"VAR\" }` or `{ file = \"path\" }`",
    );
    // A value read from a file is not echoed back in any problem.
    std::fs::write(dir.path().join("bad.sha256"), "hunter2-not-a-digest").expect("write");
    let text = "[[gateway.apiKeys]]\nsha256 = { file = \"bad.sha256\" }\nnamespace = \"n\"\nactor = { id = \"u\", kind = \"user\" }\n";
    if let Err(problems) = parse(dir.path(), text) {
        for p in problems {
            assert!(!p.message.contains("hunter2"), "{p}");
        }
    }
}

#[test]
fn secret_keys_are_declared_and_the_reference_says_how_to_give_them() {
    let secret: Vec<String> = keys::all()
        .into_iter()
        .filter(|k| k.secret)
        .map(|k| k.pointer)
        .collect();
    for pointer in [
        "/store/url",
        "/gateway/apiKeys/*/sha256",
        "/gateway/operatorKeys/*/sha256",
        "/telemetry/metrics/bearerTokenSha256",
    ] {
        assert!(
            secret.iter().any(|p| p == pointer),
            "{pointer} in {secret:?}"
        );
    }
    let reference = keys::reference();
    let row = reference
        .lines()
        .find(|l| l.starts_with("| `store.url` |"))
        .expect("store.url row");
    assert!(
        row.contains("{ env = \\\"VAR\\\" }") || row.contains("{ env = \"VAR\" }"),
        "{row}"
    );
}

#[test]
fn the_state_directory_holds_what_capgate_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = parse(dir.path(), "").expect("empty file");
    assert_eq!(cfg.state_dir(), dir.path().join(""));
    let cfg = parse(dir.path(), "[runtime]\nstateDir = \"/var/lib/capgate\"\n").expect("accepted");
    assert_eq!(cfg.state_dir(), Path::new("/var/lib/capgate"));
    assert_eq!(
        cfg.state_path(&cfg.runtime.compile_cache),
        Path::new("/var/lib/capgate/.capgate-cache")
    );
    let cfg = parse(dir.path(), "[runtime]\nstateDir = \"state\"\n").expect("accepted");
    assert_eq!(cfg.state_dir(), dir.path().join("state"));
}

/// `Secrets::StoreOnly` (the approvals commands): `store.url` is read as always, every other
/// secret is left unread, unset or not, and no problem of its value is reported; a problem
/// of the file itself still is. `Secrets::None` leaves `store.url` unread too.
#[test]
fn the_operator_modes_read_only_the_store_url_or_no_secret_at_all() {
    use capgate_config::Secrets;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("capgate.toml");
    // SAFETY: the variable's name is this test's own; nothing else reads or writes it.
    unsafe { std::env::set_var("CAPGATE_TEST_SECRETS_OPERATOR_STORE", "sqlite://ops.db") };
    let text = "[store]\nurl = { env = \"CAPGATE_TEST_SECRETS_OPERATOR_STORE\" }\n\
         [[gateway.apiKeys]]\nsha256 = { env = \"CAPGATE_TEST_SECRETS_SURELY_UNSET\" }\nnamespace = \"n\"\nactor = { id = \"u\", kind = \"user\" }\n\
         [telemetry.metrics]\nbearerTokenSha256 = { file = \"no-such-file\" }\n";
    let load = |secrets| Config::parse_with(&path, text.to_string(), secrets).map(|(c, _)| c);
    let all = load(Secrets::All).expect_err("every secret is read");
    assert!(
        all.iter().any(|p| p.key == "gateway.apiKeys.0.sha256"),
        "{all:#?}"
    );
    let cfg = load(Secrets::StoreOnly).expect("only store.url is read");
    assert_eq!(cfg.store.url, "sqlite://ops.db");
    assert_eq!(cfg.gateway.api_keys[0].sha256, "", "left unread");
    let cfg = load(Secrets::None).expect("nothing is read");
    assert_eq!(cfg.store.url, "", "left unread");
    // A problem of the file itself is still one.
    let broken = text.replace("namespace = \"n\"", "namespace = 7");
    let problems = Config::parse_with(&path, broken, Secrets::None)
        .map(|(c, _)| c)
        .expect_err("refused");
    assert!(
        problems
            .iter()
            .any(|p| p.key.starts_with("gateway.apiKeys.0")),
        "{problems:#?}"
    );
}

#[test]
fn an_http_upstreams_static_headers_may_be_secrets_with_a_prefix() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("tenant.txt"), "acme\n").expect("write");
    // SAFETY: the variable's name is this test's own; nothing else reads or writes it.
    unsafe { std::env::set_var("CAPGATE_TEST_SECRETS_ORDERS_TOKEN", "tok-123") };
    let capability = |headers: &str| {
        format!(
            "[[capabilities]]\nid = \"orders.get\"\ndescription = \"d\"\nexpose = {{}}\nsideEffect = \"read\"\nrisk = \"low\"\n\
             procedure = {{ http = {{ target = \"orders\", url = \"http://127.0.0.1:9/get\", headers = {headers} }} }}\n"
        )
    };
    let cfg = parse(
        dir.path(),
        &capability(
            "{ Authorization = { env = \"CAPGATE_TEST_SECRETS_ORDERS_TOKEN\", prefix = \"Bearer \" }, X-Tenant = { file = \"tenant.txt\" }, X-Plain = \"p\" }",
        ),
    )
    .expect("accepted");
    let http = cfg.capabilities[0]
        .procedure
        .http()
        .expect("an http procedure");
    assert_eq!(http.headers["Authorization"].0, "Bearer tok-123");
    assert_eq!(http.headers["X-Tenant"].0, "acme");
    assert_eq!(http.headers["X-Plain"].0, "p");

    // An unset variable is a problem at the header, and a prefix must be a string.
    let problems = parse(
        dir.path(),
        &capability(
            "{ Authorization = { env = \"CAPGATE_TEST_SECRETS_SURELY_UNSET_TOKEN\" }, X-Bad = { file = \"tenant.txt\", prefix = 1 } }",
        ),
    )
    .expect_err("refused");
    let at = |key: &str, says: &str| {
        assert!(
            problems
                .iter()
                .any(|p| p.key == key && p.message.contains(says)),
            "no `{says}` at {key}: {problems:#?}"
        );
    };
    at(
        "capabilities.0.procedure.http.headers.Authorization",
        "`CAPGATE_TEST_SECRETS_SURELY_UNSET_TOKEN` this key names is not set",
    );
    at(
        "capabilities.0.procedure.http.headers.X-Bad",
        "optional string `prefix`",
    );
}
