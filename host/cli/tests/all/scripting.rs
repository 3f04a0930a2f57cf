//! Scripting `capgate` (issue 36, item 9): distinct exit statuses (0 done, 1 a refusal or
//! a failed check, 2 usage, 3 a runtime error), `--output json` leaving nothing but JSON on
//! stdout, and the approvals commands working with the store alone: a deployment whose
//! plugin file is missing and whose JWT secret and API key hash variables are unset.

use crate::common::*;
use capgate_core::approval::{ApprovalCoordinator, ApprovalRequest};
use capgate_core::journal::{ClaimRequest, InvocationJournal, scope_hash};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// What one run of the binary left.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `capgate ARGS` with `env` set (and the variables this file's configs name left unset,
/// whatever the test process's environment holds), from the repository root.
fn capgate_env(args: &[&str], env: &[(&str, &str)]) -> Ran {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_capgate"));
    cmd.args(args)
        .current_dir(root())
        .env("CAPGATE_LOG", "warn")
        .env_remove("CAPGATE_STORE")
        .env_remove(JWT_VAR)
        .env_remove(KEY_VAR)
        .env_remove(STORE_VAR);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run capgate");
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn run(args: &[&str]) -> Ran {
    capgate_env(args, &[])
}

/// The whole of stdout as one JSON document (nothing before or after it).
fn one_json(r: &Ran) -> Value {
    serde_json::from_str(r.stdout.trim_end()).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}):\n{}\nstderr:\n{}",
            r.stdout, r.stderr
        )
    })
}

/// Every line of stdout as one JSON document (JSON Lines).
fn json_lines(r: &Ran) -> Vec<Value> {
    r.stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}\nstderr:\n{}", r.stderr))
        })
        .collect()
}

const JWT_VAR: &str = "CAPGATE_SCRIPTING_TEST_JWT";
const KEY_VAR: &str = "CAPGATE_SCRIPTING_TEST_KEY_SHA256";
const STORE_VAR: &str = "CAPGATE_SCRIPTING_TEST_STORE_URL";

/// A deployment `check` accepts without any plugin or secret.
fn sound() -> String {
    format!(
        r#"
revision = "r1"

[[capabilities]]
id = "orders.refund"
description = "Refund an order"
expose = {{ aiSdk = true }}
sideEffect = "write"
risk = "high"
procedure = {{ http = {{ target = "orders", url = "http://127.0.0.1:9/refund" }} }}

[[capabilities]]
id = "customers.search"
description = "Find a customer"
expose = {{ aiSdk = true }}
sideEffect = "read"
risk = "low"
procedure = {{ http = {{ target = "customers", url = "http://127.0.0.1:9/search" }} }}

[approvals.types.manager]
roles = ["manager"]

[gateway]
authorize = "authenticated"
routes = [{{ path = "/agent", surface = "aiSdk" }}]

[[gateway.apiKeys]]
sha256 = "{hash}"
actor = {{ id = "u_dana", kind = "user" }}
namespace = "org_1"
"#,
        hash = key_hash("dana-dev-key")
    )
}

/// [`sound`] with what only `serve` needs and this machine lacks: a redactor whose plugin
/// file is missing and a JWT secret in an unset variable. `check` refuses it; the approvals
/// commands need none of it.
fn without_plugins_or_secrets() -> String {
    let sound = sound();
    let mut text = sound.replace(
        "risk = \"low\"\n",
        "risk = \"low\"\nredactors = [\"maskContact\"]\n",
    );
    assert_ne!(text, sound);
    text.push_str(&format!(
        r#"
[gateway.jwt]
hs256SecretEnv = "{JWT_VAR}"
audience = "capgate"
issuer = "https://idp.example"

[plugins.pii]
path = "missing.wasm"
sha256 = "{zeros}"

[redactors.maskContact]
plugin = "pii"
"#,
        zeros = "0".repeat(64)
    ));
    text
}

/// [`without_plugins_or_secrets`] with the API key's hash in an unset variable too: a
/// problem of the file itself for `check` (which then goes no further).
fn without_key_hash() -> String {
    let text = without_plugins_or_secrets();
    let unset = text.replace(
        &format!("sha256 = \"{}\"", key_hash("dana-dev-key")),
        &format!("sha256 = {{ env = \"{KEY_VAR}\" }}"),
    );
    assert_ne!(unset, text);
    unset
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path.display().to_string()
}

/// A migrated SQLite store in `dir` holding two pending approvals requested by Dana:
/// `apr_refund` (orders.refund, no redactor) and `apr_search` (customers.search, whose
/// redactor is a plugin), and one pending receipt `call_1`.
async fn store_with_approvals(dir: &Path) -> String {
    let url = format!("sqlite://{}", dir.join("capgate.db").display());
    let migrated = run(&["migrate", "--store", &url]);
    assert_eq!(migrated.code, 0, "{}", migrated.stderr);
    let store = capgate_store::Store::open(&url).await.expect("open store");
    let now = chrono::Utc::now();
    for (id, capability, input) in [
        (
            "apr_refund",
            "orders.refund",
            json!({"orderId": "ord_42", "amount": 649}),
        ),
        (
            "apr_search",
            "customers.search",
            json!({"email": "dana@example.com"}),
        ),
    ] {
        let request: ApprovalRequest = serde_json::from_value(json!({
            "id": id,
            "capabilityId": capability,
            "surface": "aiSdk",
            "actor": {"id": "u_dana", "kind": "user"},
            "input": input,
            "inputHash": "0".repeat(64),
            "reasons": ["Refund of $649 exceeds $500"],
            "types": ["manager"],
            "risk": "high",
            "sideEffect": "write",
            "requestedAt": now,
            "expiresAt": now + chrono::Duration::hours(1),
            "executionId": format!("exe_{id}"),
            "namespace": "org_1",
        }))
        .expect("an approval request");
        store.approvals().create(request).await.expect("create");
    }
    claim_pending(
        &store,
        ("org_1", "u_dana", capgate_core::actor::Surface::AiSdk),
        "call_1",
        json!({"orderId": "ord_42", "amount": 649}),
    )
    .await;
    store.close().await;
    url
}

/// A pending receipt of `id` for `(namespace, user, surface)`, as a call whose procedure
/// started and never settled leaves it.
async fn claim_pending(
    store: &capgate_store::Store,
    (namespace, user, surface): (&str, &str, capgate_core::actor::Surface),
    id: &str,
    input: Value,
) {
    let actor = capgate_core::actor::ActorRef {
        id: user.into(),
        kind: capgate_core::actor::ActorKind::User,
    };
    let scope = scope_hash(namespace, &actor, surface).expect("scope");
    let input_hash = capgate_core::canonical::input_hash(&input).expect("input hash");
    store
        .journal()
        .claim(
            ClaimRequest {
                scope,
                invocation_id: id.into(),
                capability_id: "orders.refund".into(),
                input,
                input_hash,
                idempotency_key: format!("idem_{namespace}_{id}"),
                correlation_id: None,
                contract_digest: None,
                namespace: Some(namespace.into()),
            },
            chrono::Utc::now(),
        )
        .await
        .expect("claim");
}

#[test]
fn the_exit_status_tells_done_refused_usage_and_runtime_errors_apart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sound = write(dir.path(), "sound.toml", &sound());
    let refused = write(dir.path(), "refused.toml", &without_plugins_or_secrets());

    let ok = run(&["check", "--config", &sound]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);

    // 1: a refused configuration, for `check` and any other command over it.
    let r = run(&["check", "--config", &refused]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains(JWT_VAR), "{}", r.stderr);
    assert!(r.stderr.contains("missing.wasm"), "{}", r.stderr);
    // `inspect` runs every check `check` runs (issue 57): refused for the file itself, and
    // for a plugin that is not there.
    let unset = write(dir.path(), "unset.toml", &without_key_hash());
    let r = run(&["inspect", "--config", &unset]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains(KEY_VAR), "{}", r.stderr);
    let r = run(&["inspect", "--config", &refused]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("missing.wasm"), "{}", r.stderr);

    // 2: the command line.
    for args in [
        &["check"][..],
        &["check", "--config", &sound, "--output", "yaml"],
        &["approvals", "list", "--config", &sound, "--status", "maybe"],
        &["no-such-command"],
    ] {
        let r = run(args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
    }

    // 3: a runtime error: the store is not there (nothing is created).
    let missing = format!("sqlite://{}", dir.path().join("nope.db").display());
    for args in [
        &["approvals", "list", "--config", &sound, "--store", &missing][..],
        &["invocations", "purge", "--store", &missing],
        &["audit", "tail", "--store", &missing],
    ] {
        let r = run(args);
        assert_eq!(r.code, 3, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("no SQLite database"), "{}", r.stderr);
    }
    assert!(!dir.path().join("nope.db").exists());
    // A file that cannot be read is one too.
    let r = run(&[
        "plugin",
        "test",
        "missing.wasm",
        "--cases",
        &dir.path().join("none.toml").display().to_string(),
    ]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    // Issue 57: a configuration file that is not there is a file that cannot be read (3),
    // for `check` as for every command over it, never a refused configuration (1).
    let absent = dir.path().join("absent.toml").display().to_string();
    for args in [
        &["check", "--config", &absent][..],
        &["inspect", "--config", &absent],
        &["approvals", "list", "--config", &absent],
    ] {
        let r = run(args);
        assert_eq!(r.code, 3, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("absent.toml"), "{}", r.stderr);
    }

    // 2 again: a `--store` URL that cannot be used as given is a usage error, said once.
    let bad_tls = "postgres://u:p@127.0.0.1:1/db?sslmode=bogus";
    let r = run(&["approvals", "list", "--config", &sound, "--store", bad_tls]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(r.stderr.matches("unknown value").count(), 1, "{}", r.stderr);
    assert!(
        !r.stderr.contains("u:p@"),
        "the password is never echoed: {}",
        r.stderr
    );
}

#[test]
fn check_json_locates_every_problem_and_nothing_else_is_on_stdout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sound = write(dir.path(), "sound.toml", &sound());
    let refused = write(dir.path(), "refused.toml", &without_plugins_or_secrets());

    let ok = run(&["check", "--config", &sound, "--output", "json"]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    let doc = one_json(&ok);
    assert_eq!(doc["ok"], true, "{doc}");
    assert_eq!(doc["problems"], json!([]), "{doc}");

    let r = run(&["check", "--config", &refused, "--output", "json"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let doc = one_json(&r);
    assert_eq!(doc["ok"], false, "{doc}");
    let problems = doc["problems"].as_array().expect("problems");
    assert!(!problems.is_empty(), "{doc}");
    for p in problems {
        assert_eq!(p["file"], refused.as_str(), "{p}");
        assert!(p["line"].as_u64().is_some_and(|l| l > 1), "{p}");
        assert!(p["column"].as_u64().is_some_and(|c| c >= 1), "{p}");
        assert!(p["message"].as_str().is_some_and(|m| !m.is_empty()), "{p}");
    }
    let keyed = |key: &str| problems.iter().any(|p| p["key"] == key);
    assert!(keyed("gateway.jwt.hs256SecretEnv"), "{doc}");
    assert!(
        problems.iter().any(|p| p["key"]
            .as_str()
            .is_some_and(|k| k.starts_with("plugins.pii"))),
        "{doc}"
    );
    let unset = write(dir.path(), "unset.toml", &without_key_hash());
    let r2 = run(&["check", "--config", &unset, "--output", "json"]);
    assert_eq!(r2.code, 1, "{}", r2.stderr);
    let doc2 = one_json(&r2);
    assert!(
        doc2["problems"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["key"] == "gateway.apiKeys.0.sha256")),
        "{doc2}"
    );
    // The summary is prose: stderr.
    assert!(r.stderr.contains("problem(s)"), "{}", r.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_commands_need_the_store_but_no_plugin_and_no_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write(dir.path(), "capgate.toml", &without_key_hash());
    let store = store_with_approvals(dir.path()).await;
    // `check` refuses it (and would compile the plugin, read the JWT secret); the
    // approvals commands read none of it.
    assert_eq!(run(&["check", "--config", &config]).code, 1);
    let with_store = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--config", config.as_str(), "--store", store.as_str()]);
        run(&all)
    };

    // list: JSON Lines, newest first; the redacted capability's input withheld.
    let listed = with_store(&["approvals", "list", "--output", "json"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let lines = json_lines(&listed);
    assert_eq!(lines.len(), 2, "{}", listed.stdout);
    let by_id = |id: &str| {
        lines
            .iter()
            .find(|l| l["approval"]["id"] == id)
            .unwrap_or_else(|| panic!("{id} not listed: {}", listed.stdout))
            .clone()
    };
    assert_eq!(by_id("apr_refund")["input"]["amount"], 649);
    assert_eq!(by_id("apr_search")["input"], Value::Null);
    assert!(
        listed
            .stderr
            .contains("`customers.search` approvals is withheld"),
        "{}",
        listed.stderr
    );
    // The text output is the same JSON Lines.
    let text = with_store(&["approvals", "list"]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert_eq!(json_lines(&text).len(), 2);

    // show: one document.
    let shown = with_store(&["approvals", "show", "apr_refund", "--output", "json"]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    let record = one_json(&shown);
    assert_eq!(record["capabilityId"], "orders.refund", "{record}");
    assert_eq!(record["input"]["amount"], 649, "{record}");
    let missing = with_store(&["approvals", "show", "apr_nope", "--output", "json"]);
    assert_eq!(missing.code, 1, "{}", missing.stderr);
    assert!(missing.stdout.is_empty(), "{}", missing.stdout);

    // The same rules as the approvals API: the requester cannot approve her own request.
    let own = with_store(&["approvals", "approve", "apr_refund", "--as", "u_dana"]);
    assert_eq!(own.code, 1, "{}", own.stderr);
    assert!(own.stderr.contains("SI-4"), "{}", own.stderr);
    assert!(own.stdout.is_empty(), "{}", own.stdout);

    // approve: the summary on stdout, nothing else; what happens next on stderr.
    let approved = with_store(&[
        "approvals",
        "approve",
        "apr_refund",
        "--as",
        "u_priya",
        "--comment",
        "checked",
        "--output",
        "json",
    ]);
    assert_eq!(approved.code, 0, "{}", approved.stderr);
    let summary = one_json(&approved);
    assert_eq!(summary["id"], "apr_refund", "{summary}");
    assert_eq!(summary["status"], "approved", "{summary}");
    assert!(
        approved.stderr.contains("nothing ran"),
        "{}",
        approved.stderr
    );
    // Issue 57: the audit writer ends before the store closes, so nothing complains.
    assert!(
        !approved.stderr.contains("closed") && !approved.stderr.contains("WARN"),
        "{}",
        approved.stderr
    );
    // Decided once: deciding again is a refusal.
    let again = with_store(&["approvals", "reject", "apr_refund", "--as", "u_priya"]);
    assert_eq!(again.code, 1, "{}", again.stderr);

    // reject, with store.url read from its variable (the one secret read) and no --store.
    let from_file =
        without_plugins_or_secrets() + &format!("\n[store]\nurl = {{ env = \"{STORE_VAR}\" }}\n");
    let config2 = write(dir.path(), "capgate.store.toml", &from_file);
    let rejected = capgate_env(
        &[
            "approvals",
            "reject",
            "apr_search",
            "--as",
            "u_priya",
            "--config",
            &config2,
            "--output",
            "json",
        ],
        &[(STORE_VAR, &store)],
    );
    assert_eq!(rejected.code, 0, "{}", rejected.stderr);
    assert_eq!(one_json(&rejected)["status"], "rejected");
    // Without the variable, the store is unknown: said at its key, as `check` says it.
    let unset = run(&["approvals", "list", "--config", &config2]);
    assert_eq!(unset.code, 1, "{}", unset.stderr);
    assert!(unset.stderr.contains(STORE_VAR), "{}", unset.stderr);
    assert!(!unset.stderr.contains(JWT_VAR), "{}", unset.stderr);

    // Both decisions were recorded as the operator's.
    let decided = run(&[
        "audit",
        "query",
        "--store",
        &store,
        "--since",
        "2020-01-01T00:00:00Z",
    ]);
    assert_eq!(decided.code, 0, "{}", decided.stderr);
    let events = json_lines(&decided);
    for ty in ["capability.approved", "capability.rejected"] {
        let e = events
            .iter()
            .find(|e| e["type"] == ty)
            .unwrap_or_else(|| panic!("no {ty}: {}", decided.stdout));
        assert_eq!(e["data"]["via"], "operator", "{e}");
        assert_eq!(e["actor"]["id"], "u_priya", "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invocations_json_is_one_document_per_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store_with_approvals(dir.path()).await;
    let scope = [
        "--namespace",
        "org_1",
        "--actor",
        "user:u_dana",
        "--surface",
        "aiSdk",
        "--store",
        &store,
    ];
    let with_scope = |args: &[&str]| run(&[args, &scope[..]].concat());

    let shown = with_scope(&["invocations", "show", "call_1", "--output", "json"]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    let receipt = one_json(&shown);
    assert_eq!(receipt["state"], "pending", "{receipt}");
    let claim = receipt["claimToken"].as_str().expect("claim token");

    let missing = with_scope(&["invocations", "show", "call_nope", "--output", "json"]);
    assert_eq!(missing.code, 1, "{}", missing.stderr);
    assert!(missing.stdout.is_empty(), "{}", missing.stdout);

    let bad = with_scope(&[
        "invocations",
        "reconcile",
        "call_1",
        "--claim",
        claim,
        "--outcome",
        "{not json",
    ]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);

    let outcome = json!({
        "status": "failed", "invocationId": "call_1", "executionId": "",
        "error": {"code": "EXECUTION_FAILED", "message": "The operation failed.", "retryable": false}
    })
    .to_string();
    let reconciled = with_scope(&[
        "invocations",
        "reconcile",
        "call_1",
        "--claim",
        claim,
        "--outcome",
        &outcome,
        "--output",
        "json",
    ]);
    assert_eq!(reconciled.code, 0, "{}", reconciled.stderr);
    assert_eq!(
        one_json(&reconciled),
        json!({"reconciled": "call_1", "status": "failed"})
    );

    let purged = run(&[
        "invocations",
        "purge",
        "--store",
        &store,
        "--output",
        "json",
    ]);
    assert_eq!(purged.code, 0, "{}", purged.stderr);
    assert_eq!(
        one_json(&purged),
        json!({"purged": 0, "approvalsPurged": 0, "olderThanHours": 168})
    );
}

/// Issue 57: the outcome-unknown runbook as docs/operations/shutdown-and-crash-recovery.md "After a
/// crash" prints it. `list --status pending` finds the call, `show ID` and `reconcile ID` need only
/// the id, and an id two callers used is refused (exit 2) until the scope flags pick one, so an
/// operator never settles someone else's receipt by accident.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runbook_finds_pending_calls_and_settles_one_by_its_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store_with_approvals(dir.path()).await;

    let pending = run(&[
        "invocations",
        "list",
        "--status",
        "pending",
        "--store",
        &store,
    ]);
    assert_eq!(pending.code, 0, "{}", pending.stderr);
    let row = pending
        .stdout
        .lines()
        .find(|l| l.starts_with("call_1 "))
        .unwrap_or_else(|| panic!("no call_1 row: {}", pending.stdout));
    assert!(
        row.contains("orders.refund") && row.contains("org_1") && row.contains("pending"),
        "{row}"
    );
    let settled = run(&[
        "invocations",
        "list",
        "--status",
        "settled",
        "--store",
        &store,
    ]);
    assert!(!settled.stdout.contains("call_1"), "{}", settled.stdout);
    let listed = run(&[
        "invocations",
        "list",
        "--namespace",
        "org_1",
        "--store",
        &store,
        "--output",
        "json",
    ]);
    let lines: Vec<Value> = listed
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", listed.stdout);
    assert_eq!(lines[0]["invocationId"], "call_1");
    assert!(
        lines[0].get("input").is_none(),
        "a receipt list never shows inputs"
    );

    let shown = run(&[
        "invocations",
        "show",
        "call_1",
        "--store",
        &store,
        "--output",
        "json",
    ]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    let receipt = one_json(&shown);
    assert_eq!(receipt["namespace"], "org_1", "{receipt}");
    let claim = receipt["claimToken"]
        .as_str()
        .expect("claim token")
        .to_string();

    // Another caller (another namespace) used the same id: the id alone is ambiguous.
    {
        let s = capgate_store::Store::open(&store)
            .await
            .expect("open store");
        claim_pending(
            &s,
            ("org_2", "u_eve", capgate_core::actor::Surface::Mcp),
            "call_1",
            json!({"orderId": "ord_7", "amount": 5}),
        )
        .await;
        s.close().await;
    }
    let outcome = json!({
        "status": "failed", "invocationId": "call_1", "executionId": "",
        "error": {"code": "EXECUTION_FAILED", "message": "The operation failed.", "retryable": false}
    })
    .to_string();
    let reconcile = |extra: &[&str]| {
        run(&[
            &[
                "invocations",
                "reconcile",
                "call_1",
                "--claim",
                &claim,
                "--outcome",
                &outcome,
            ][..],
            extra,
            &["--store", &store][..],
        ]
        .concat())
    };
    let ambiguous = reconcile(&[]);
    assert_eq!(ambiguous.code, 2, "{}", ambiguous.stderr);
    assert!(
        ambiguous.stderr.contains("org_1") && ambiguous.stderr.contains("org_2"),
        "{}",
        ambiguous.stderr
    );
    // org_2's receipt has another claim token: the wrong scope cannot settle it either.
    // A stale claim is a refusal (exit 1), as README's exit-code table says.
    let wrong = reconcile(&["--namespace", "org_2"]);
    assert_eq!(wrong.code, 1, "{}", wrong.stderr);
    assert!(wrong.stderr.contains("stale claim"), "{}", wrong.stderr);
    let done = reconcile(&["--namespace", "org_1"]);
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert!(done.stdout.contains("reconciled call_1"), "{}", done.stdout);
    let still = run(&[
        "invocations",
        "list",
        "--status",
        "pending",
        "--store",
        &store,
    ]);
    assert!(still.stdout.contains("org_2"), "{}", still.stdout);
    assert!(!still.stdout.contains("org_1"), "{}", still.stdout);
}

/// The example as the documentation writes it (relative to the repository root).
const EXAMPLE: &str = "examples/customer-support/capgate.toml";

#[test]
fn test_plugin_test_and_inspect_print_one_json_document() {
    let _ = example_config(); // a clear message when the example is not rendered

    let ran = run(&[
        "test",
        "--config",
        EXAMPLE,
        "examples/customer-support/scenarios",
        "--output",
        "json",
    ]);
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    let doc = one_json(&ran);
    let scenarios = doc["scenarios"].as_array().expect("scenarios");
    assert!(!scenarios.is_empty(), "{doc}");
    assert_eq!(doc["ok"], true, "{doc}");
    assert_eq!(doc["passed"].as_u64(), Some(scenarios.len() as u64));
    assert_eq!(doc["failed"], 0);
    assert!(
        scenarios
            .iter()
            .all(|s| s["passed"] == true && s["name"].is_string())
    );
    assert!(ran.stderr.contains(" passed, 0 failed"), "{}", ran.stderr);
    // A refused run: its problems, still one document.
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = write(dir.path(), "bad.toml", "[[scenario]]\nname = 1\n");
    let refused = run(&["test", "--config", EXAMPLE, &bad, "--output", "json"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    let doc = one_json(&refused);
    assert_eq!(doc["ok"], false, "{doc}");
    assert!(
        doc["problems"].as_array().is_some_and(|p| !p.is_empty()),
        "{doc}"
    );
    // --format junit and --output json are one choice too many.
    let both = run(&[
        "test", "--config", EXAMPLE, "--format", "junit", "--output", "json",
    ]);
    assert_eq!(both.code, 2, "{}", both.stderr);

    let plugin = root().join("plugins/target/wasm32-wasip2/release/refund_limit.wasm");
    let cases = root().join("plugins/conformance/refund-limit.toml");
    let tested = run(&[
        "plugin",
        "test",
        plugin.to_str().expect("utf-8"),
        "--cases",
        cases.to_str().expect("utf-8"),
        "--output",
        "json",
    ]);
    assert_eq!(tested.code, 0, "{}\n{}", tested.stdout, tested.stderr);
    let doc = one_json(&tested);
    assert_eq!(doc["ok"], true, "{doc}");
    assert_eq!(doc["failed"], 0, "{doc}");
    assert!(
        doc["cases"].as_array().is_some_and(|c| !c.is_empty()),
        "{doc}"
    );

    let inspected = run(&["inspect", "--config", EXAMPLE, "--output", "json"]);
    assert_eq!(inspected.code, 0, "{}", inspected.stderr);
    let doc = one_json(&inspected);
    let table = run(&["inspect", "--config", EXAMPLE, "--format", "json"]);
    assert_eq!(doc, one_json(&table), "--output json is --format json");
}
