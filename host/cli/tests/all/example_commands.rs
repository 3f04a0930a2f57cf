//! Every command the README and `capgate --help` show for the shipped example runs against
//! it, as a process, from the repository root with the path as written
//! (`examples/customer-support/capgate.toml`). The store is a temporary one, given with
//! `--store` where the documented command has it and through `CAPGATE_STORE` where it does
//! not, so the example's own `capgate.db` is never touched.

use crate::common;

use common::*;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The example as the documentation writes it (relative to the repository root).
const EXAMPLE: &str = "examples/customer-support/capgate.toml";

/// What a process did within its deadline (`code` is `None` when it had to be killed).
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Run `capgate ARGS` from the repository root with `stdin` as its input, killed after
/// `secs`.
fn run(args: &[&str], env: &[(&str, &str)], stdin: &str, secs: u64) -> Ran {
    let _ = example_config(); // a clear message when the example is not rendered
    let mut child = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(args)
        .current_dir(root())
        .envs(env.iter().copied())
        .env("CAPGATE_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capgate");
    let mut input = child.stdin.take().expect("stdin");
    let text = stdin.to_string();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(text.as_bytes());
        // Dropping `input` closes stdin: the end of the session.
    });
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(secs);
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = writer.join();
    Ran {
        code,
        stdout: reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    }
}

/// `capgate ARGS` from the repository root; its stdout, failing the test unless it exits 0.
fn ok(args: &[&str], env: &[(&str, &str)]) -> String {
    let r = run(args, env, "", 120);
    assert_eq!(
        r.code,
        Some(0),
        "capgate {args:?}:\n{}\n{}",
        r.stdout,
        r.stderr
    );
    r.stdout
}

/// One MCP session over stdio: `initialize`, `notifications/initialized`, `tools/list`;
/// the answers by id.
fn mcp_session(args: &[&str], env: &[(&str, &str)]) -> (Value, Value) {
    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "example-commands-test", "version": "0"}
        }}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}),
    ];
    let input: String = messages.iter().map(|m| format!("{m}\n")).collect();
    let r = run(args, env, &input, 120);
    assert_eq!(
        r.code,
        Some(0),
        "capgate {args:?} did not end cleanly with its stdin:\n{}\n{}",
        r.stdout,
        r.stderr
    );
    let answers: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("stdout carries only JSON-RPC, not `{l}`: {e}"))
        })
        .collect();
    let by_id = |id: u64| {
        answers
            .iter()
            .find(|a| a["id"] == json!(id))
            .cloned()
            .unwrap_or_else(|| panic!("no answer to id {id}:\n{}\n{}", r.stdout, r.stderr))
    };
    (by_id(1), by_id(2))
}

fn tool_names(list: &Value) -> Vec<String> {
    list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list has no tools: {list}"))
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn the_documented_mcp_stdio_command_answers_initialize_and_tools_list() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let (init, list) = mcp_session(
        &["mcp", "--stdio", "--config", EXAMPLE],
        &[("CAPGATE_STORE", &store)],
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "capgate", "{init}");
    let names = tool_names(&list);
    for tool in ["customers_search", "orders_refund", "messages_send"] {
        assert!(names.iter().any(|n| n == tool), "{tool} missing: {names:?}");
    }
    // The example opts in to the resume tool (`[mcp] resumeTool = true`).
    assert!(
        names.iter().any(|n| n == "approvals_resume"),
        "the example offers approvals_resume: {names:?}"
    );
}

/// The example, copied elsewhere with its relative paths made absolute and `edit` applied.
fn example_copy(edit: impl Fn(String) -> String) -> (tempfile::TempDir, std::path::PathBuf) {
    let example_dir = root()
        .join("examples/customer-support")
        .canonicalize()
        .expect("example dir");
    let text = std::fs::read_to_string(example_config()).expect("read the example");
    let text = text
        .replace(
            "pluginDir = \"../../plugins",
            &format!("pluginDir = \"{}/../../plugins", example_dir.display()),
        )
        .replace(
            "compileCache = \".capgate-cache\"",
            &format!(
                "compileCache = \"{}/.capgate-cache\"",
                example_dir.display()
            ),
        )
        .replace(
            "\"schemas/",
            &format!("\"{}/schemas/", example_dir.display()),
        );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("capgate.toml");
    std::fs::write(&path, edit(text)).expect("write the copy");
    (dir, path)
}

#[test]
fn the_resume_tool_is_absent_unless_the_deployment_opts_in() {
    let (dir, path) = example_copy(|t| t.replace("resumeTool = true\n", ""));
    let config = path.to_str().expect("utf-8 path");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let (_, list) = mcp_session(
        &["mcp", "--stdio", "--config", config],
        &[("CAPGATE_STORE", &store)],
    );
    let names = tool_names(&list);
    assert!(names.iter().any(|n| n == "orders_refund"), "{names:?}");
    assert!(
        !names.iter().any(|n| n == "approvals_resume"),
        "no resumeTool key, no approvals_resume: {names:?}"
    );
}

#[test]
fn mcp_without_a_stdio_actor_is_a_located_problem_that_says_what_to_add() {
    let (dir, path) = example_copy(|t| {
        t.lines()
            .filter(|l| !l.starts_with("stdio"))
            .collect::<Vec<_>>()
            .join("\n")
    });
    let config = path.to_str().expect("utf-8 path");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let r = run(
        &["mcp", "--stdio", "--config", config],
        &[("CAPGATE_STORE", &store)],
        "",
        120,
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let line = r
        .stderr
        .lines()
        .find(|l| l.contains("capgate.toml:") && l.contains("stdioActor"))
        .unwrap_or_else(|| panic!("no located problem about stdioActor:\n{}", r.stderr));
    assert!(line.contains("stdioNamespace"), "{line}");
    assert!(
        r.stdout.is_empty(),
        "nothing on the protocol stream: {}",
        r.stdout
    );
    assert!(
        !dir.path().join("capgate.db").exists(),
        "refused before the store was opened"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_documented_operator_command_runs_against_the_example() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("capgate.db");
    let store = format!("sqlite://{}", db.display());
    let env = [("CAPGATE_STORE", store.as_str())];

    // Validation and the contract need no store.
    let out = ok(&["check", "--config", EXAMPLE], &[]);
    assert!(out.contains(": ok"), "{out}");
    // The README's `printf '%s' "$KEY" | capgate keys hash`: the key on standard input.
    let hashed = run(&["keys", "hash"], &[], "dana-dev-key", 120);
    assert_eq!(hashed.code, Some(0), "{}", hashed.stderr);
    let hash = hashed.stdout;
    assert_eq!(hash.trim().len(), 64, "{hash}");
    let contract: Value = serde_json::from_str(&ok(
        &[
            "contract",
            "export",
            "--config",
            EXAMPLE,
            "--surface",
            "aiSdk",
        ],
        &[],
    ))
    .expect("contract JSON");
    let refund = contract
        .as_array()
        .and_then(|a| a.iter().find(|d| d["id"] == "orders.refund"))
        .unwrap_or_else(|| panic!("orders.refund not in the contract: {contract}"));
    assert!(refund["contractDigest"].is_string(), "{refund}");
    for format in ["openai", "ai-sdk"] {
        let tools = ok(
            &["contract", "tools", "--config", EXAMPLE, "--format", format],
            &[],
        );
        assert!(tools.contains("orders_refund"), "{format}: {tools}");
    }
    assert!(!db.exists(), "no command so far opened a store");

    // The store: migrated, then served; Dana's $649 refund waits for an approval.
    let out = ok(&["migrate", "--store", &store], &[]);
    assert!(
        out.contains("applied") || out.contains("up to date"),
        "{out}"
    );
    if let Some(pg) = postgres_db().await {
        ok(&["migrate", "--store", &pg.url], &[]);
    }
    let server = Server::start(&example_config(), &store);
    let dana = Caller::new("dana-dev-key");
    let (status, body) = dana
        .post(
            &format!("{}/agent/invoke", server.base),
            &json!({
                "capabilityId": "orders.refund",
                "input": {"orderId": "ord_42", "amount": 649, "reason": "damaged item"},
                "invocationId": "call_1"
            }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "approval-required", "{body}");
    let approval = body["approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_string();

    // The operator's shell, next to the running server.
    let list = ok(&["approvals", "list", "--config", EXAMPLE], &env);
    assert!(list.contains(&approval), "{list}");
    let show = ok(&["approvals", "show", &approval, "--config", EXAMPLE], &env);
    assert!(show.contains(&approval), "{show}");
    let approved = run(
        &[
            "approvals",
            "approve",
            &approval,
            "--as",
            "u_priya",
            "--comment",
            "checked",
            "--config",
            EXAMPLE,
        ],
        &env,
        "",
        120,
    );
    assert_eq!(approved.code, Some(0), "{}", approved.stderr);
    // The decided approval on stdout, what happens next on stderr.
    let summary: Value = serde_json::from_str(approved.stdout.trim_end()).expect("one JSON line");
    assert_eq!(summary["status"], "approved", "{summary}");
    assert!(
        approved.stderr.contains("nothing ran"),
        "{}",
        approved.stderr
    );
    let receipt: Value = serde_json::from_str(&ok(
        &[
            "invocations",
            "show",
            "call_1",
            "--namespace",
            "org_1",
            "--actor",
            "user:u_dana",
            "--surface",
            "aiSdk",
            "--store",
            &store,
        ],
        &[],
    ))
    .expect("receipt JSON");
    assert_eq!(receipt["capabilityId"], "orders.refund", "{receipt}");
    // The audit sink writes in batches: give the server's last events a moment.
    let audited = |args: &[&str], want: &dyn Fn(&str) -> bool| -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = ok(args, &[]);
            if want(&out) || Instant::now() > deadline {
                return out;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let tail = audited(&["audit", "tail", "--store", &store, "-n", "20"], &|o| {
        o.contains("capability.approved")
    });
    assert!(tail.contains("capability.approval_requested"), "{tail}");
    assert!(tail.contains("capability.approved"), "{tail}");
    let query_args = [
        "audit",
        "query",
        "--store",
        &store,
        "--capability",
        "orders.refund",
        "--type",
        "capability.approval_requested",
        "--since",
        "2020-01-01T00:00:00Z",
    ];
    let query = audited(&query_args, &|o| o.lines().count() == 1);
    assert_eq!(query.lines().count(), 1, "{query}");
    let purged = ok(
        &[
            "invocations",
            "purge",
            "--older-than-hours",
            "168",
            "--store",
            &store,
        ],
        &[],
    );
    assert!(purged.contains("purged 0"), "{purged}");
    drop(server);
}
