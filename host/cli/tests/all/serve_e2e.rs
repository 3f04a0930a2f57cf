//! The real `capgate serve` binary, driven over HTTP: the lifecycle walkthrough on SQLite,
//! the same on three replicas sharing one Postgres (50 concurrent resumes → one execution),
//! and bad input as a new user would try it.

use crate::common;

use common::walkthrough::*;
use common::*;
use serde_json::{Value, json};

const EVE: &str = "eve-dev-key";

/// The audit trail of one execution, as event types, read back from the store.
async fn trail(store: &str, correlation: &str) -> Vec<String> {
    let store = capgate_store::Store::open(store).await.expect("open store");
    let rows = store.audit_log().tail(10_000).await.expect("tail");
    rows.into_iter()
        .filter_map(|r| r.event.ok())
        .map(|e| serde_json::to_value(&e).expect("json"))
        .filter(|e| e["correlationId"] == correlation || e["data"]["correlationId"] == correlation)
        .map(|e| e["type"].as_str().unwrap_or("?").to_string())
        .collect()
}

async fn count_started(store: &str, capability: &str) -> usize {
    let store = capgate_store::Store::open(store).await.expect("open store");
    let rows = store.audit_log().tail(100_000).await.expect("tail");
    rows.into_iter()
        .filter_map(|r| r.event.ok())
        .map(|e| serde_json::to_value(&e).expect("json"))
        .filter(|e| e["type"] == "capability.started" && e["capabilityId"] == capability)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_walkthrough_over_http_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&example_config(), &store);
    let agent = format!("{}/agent", server.base);

    let approval_id = request_and_approve(&agent, &server.base, "call_1").await;
    // The operator's view of the same approval, from the shell: it loads no plugin, so the
    // input of orders.refund (which has a redactor, a plugin) is withheld, and says so.
    let listed = capgate_output(&[
        "approvals",
        "list",
        "--status",
        "approved",
        "--config",
        &example_config().display().to_string(),
        "--store",
        &store,
    ]);
    let (out, err) = (
        String::from_utf8_lossy(&listed.stdout),
        String::from_utf8_lossy(&listed.stderr),
    );
    assert!(listed.status.success(), "{err}");
    assert!(out.contains(&approval_id), "{out}");
    assert!(out.contains("\"input\":null"), "{out}");
    assert!(
        err.contains("`orders.refund` approvals is withheld"),
        "{err}"
    );

    // Act 4–5: Dana's host resumes with the original invocation id.
    let dana = Caller::new(DANA);
    let (status, done) = dana
        .post(
            &format!("{agent}/resumeApproval"),
            &resume_body(&approval_id, "call_1"),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_refund_completed(&done);
    assert_eq!(done["invocationId"], "call_1");

    // The receipt is settled with the same outcome; a replay returns it without executing.
    let (_, receipt) = dana
        .post(
            &format!("{agent}/getInvocation"),
            &json!({"invocationId": "call_1"}),
        )
        .await;
    assert_eq!(receipt["state"], "settled", "{receipt}");
    assert_eq!(receipt["capabilityId"], "orders.refund");
    assert_eq!(receipt["approvalId"], approval_id.as_str());
    assert_eq!(receipt["outcome"], done, "{receipt}");
    let (_, replay) = dana
        .post(&format!("{agent}/invoke"), &refund_649("call_1"))
        .await;
    assert_eq!(replay, done, "a settled call replays its recorded outcome");

    // Same id, different input: a conflict, nothing runs.
    let mut changed = refund_649("call_1");
    changed["input"]["amount"] = json!(648);
    let (_, conflict) = dana.post(&format!("{agent}/invoke"), &changed).await;
    assert_eq!(conflict["status"], "failed", "{conflict}");
    assert_eq!(
        conflict["error"]["code"], "INVOCATION_CONFLICT",
        "{conflict}"
    );
    assert_eq!(conflict["executionId"], "");

    // Another organisation's agent sees nothing of Dana's call.
    let (_, foreign) = Caller::new(EVE)
        .post(
            &format!("{agent}/getInvocation"),
            &json!({"invocationId": "call_1"}),
        )
        .await;
    assert_eq!(foreign, Value::Null);

    // The audit trail of the walkthrough, in order, and exactly one execution.
    assert_eq!(
        trail(&store, "run_1").await,
        [
            "capability.requested",
            "capability.approval_requested",
            "capability.approved",
            "capability.started",
            "capability.completed",
        ]
    );
    assert_eq!(count_started(&store, "orders.refund").await, 1);

    let show_call_1 = [
        &["invocations", "show", "call_1", "--store", &store][..],
        &DANA_AGENT_SCOPE[..],
    ]
    .concat();
    let shown = capgate(&show_call_1);
    let shown: Value = serde_json::from_str(&shown).expect("invocations show prints JSON");
    assert_eq!(shown["state"], "settled", "{shown}");
    assert_eq!(shown["outcome"], done, "{shown}");

    // The audit trail from the operator's shell: the last events, and a query by execution.
    let lines = |out: &str| -> Vec<Value> {
        out.lines()
            .map(|l| serde_json::from_str(l).expect("one JSON event per line"))
            .collect()
    };
    let tail = lines(&capgate(&["audit", "tail", "--store", &store, "-n", "3"]));
    assert_eq!(tail.len(), 3, "{tail:?}");
    let execution = done["executionId"].as_str().expect("executionId");
    let queried = lines(&capgate(&[
        "audit",
        "query",
        "--store",
        &store,
        "--execution",
        execution,
    ]));
    let types: Vec<&str> = queried.iter().filter_map(|e| e["type"].as_str()).collect();
    assert!(
        types.ends_with(&["capability.started", "capability.completed"]),
        "{types:?}"
    );
    assert!(queried.iter().all(|e| e["executionId"] == execution));
    let started = lines(&capgate(&[
        "audit",
        "query",
        "--store",
        &store,
        "--capability",
        "orders.refund",
        "--type",
        "capability.started",
    ]));
    assert_eq!(started.len(), 1, "{started:?}");
    let bad = capgate_output(&["audit", "query", "--store", &store, "--since", "yesterday"]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("is not an RFC 3339 time"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    // Receipts past the replay horizon are purged; a receipt within it stays.
    let kept = capgate(&["invocations", "purge", "--store", &store]);
    assert!(kept.starts_with("purged 0 settled receipt(s)"), "{kept}");
    let purged = capgate(&[
        "invocations",
        "purge",
        "--older-than-hours",
        "0",
        "--store",
        &store,
    ]);
    assert!(!purged.starts_with("purged 0 "), "{purged}");
    let gone = capgate_output(&show_call_1);
    assert!(!gone.status.success(), "call_1 survived the purge");
}

#[test]
fn the_contract_and_tool_definitions_of_the_example() {
    let config = example_config().display().to_string();
    let contract: Value = serde_json::from_str(&capgate(&[
        "contract",
        "export",
        "--config",
        &config,
        "--surface",
        "aiSdk",
    ]))
    .expect("contract JSON");
    let ids: Vec<&str> = contract
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|d| d["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "customers.search",
            "orders.checkEligibility",
            "orders.refund",
            "messages.draft",
            "messages.send"
        ]
    );
    for d in contract.as_array().expect("array") {
        assert_eq!(d["version"], 1);
        assert_eq!(d["contractDigest"].as_str().map(str::len), Some(64), "{d}");
    }
    let tools: Value = serde_json::from_str(&capgate(&[
        "contract", "tools", "--config", &config, "--format", "openai",
    ]))
    .expect("tools JSON");
    let send = tools
        .as_array()
        .and_then(|t| t.iter().find(|t| t["function"]["name"] == "messages_send"))
        .expect("messages_send");
    assert!(
        send["function"]["description"]
            .as_str()
            .is_some_and(|d| d.ends_with(" Requires approval.")),
        "{send}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_on_one_postgres_execute_a_resumed_call_exactly_once() {
    let Some(db) = postgres_db().await else {
        return;
    };
    let config = example_config();
    let migrate = std::process::Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["migrate", "--store", &db.url])
        .output()
        .expect("run capgate migrate");
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    let servers: Vec<Server> = (0..3).map(|_| Server::start(&config, &db.url)).collect();
    let agent = |i: usize| format!("{}/agent", servers[i % 3].base);

    // Requested on replica 0, approved on replica 1.
    let approval_id = request_and_approve(&agent(0), &servers[1].base, "call_pg").await;

    // 50 concurrent resumes spread over the three replicas.
    let mut tasks = Vec::new();
    for i in 0..50 {
        let url = format!("{}/resumeApproval", agent(i));
        let body = resume_body(&approval_id, "call_pg");
        tasks.push(tokio::spawn(async move {
            Caller::new(DANA).post(&url, &body).await
        }));
    }
    let mut completed = Vec::new();
    for t in tasks {
        let (status, outcome) = t.await.expect("task");
        assert_eq!(status, 200, "{outcome}");
        match outcome["status"].as_str() {
            Some("completed") => completed.push(outcome),
            Some("outcome-unknown") => {}
            _ => panic!("unexpected resume outcome: {outcome}"),
        }
    }
    assert!(!completed.is_empty(), "someone completed the call");
    for c in &completed {
        assert_refund_completed(c);
        assert_eq!(c, &completed[0], "every completion is the one execution");
    }
    assert_eq!(
        count_started(&db.url, "orders.refund").await,
        1,
        "exactly one execution across three replicas"
    );
    // Every replica now reports the settled receipt.
    for i in 0..3 {
        let (_, receipt) = Caller::new(DANA)
            .post(
                &format!("{}/getInvocation", agent(i)),
                &json!({"invocationId": "call_pg"}),
            )
            .await;
        assert_eq!(receipt["state"], "settled", "replica {i}: {receipt}");
        assert_eq!(receipt["outcome"], completed[0]);
    }
    drop(servers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_gets_a_clear_error_and_nothing_is_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&example_config(), &store);
    let invoke = format!("{}/agent/invoke", server.base);
    let dana = Caller::new(DANA);

    let (status, body) = dana
        .post_raw(&invoke, b"{\"capabilityId\": ".to_vec())
        .await;
    assert_eq!(status, 400, "malformed JSON: {body}");
    assert!(body["error"]["message"].as_str().is_some(), "{body}");

    let mut unknown = refund_649("call_x");
    unknown["actor"] = json!({"id": "u_admin", "kind": "user"});
    let (status, body) = dana.post(&invoke, &unknown).await;
    assert_eq!(status, 400, "unknown field: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("actor")),
        "the message names the field: {body}"
    );

    // A 2 MiB body, declared: the server answers before reading it (and then closes), so the
    // client sends only the head and reads the answer; sending the whole body would race
    // the close and could end in a broken pipe instead of the 413.
    let addr = server.base.trim_start_matches("http://").to_string();
    let head = format!(
        "POST /agent/invoke HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {DANA}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        2 << 20
    );
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut tcp = std::net::TcpStream::connect(&addr).expect("connect");
        tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("timeout");
        tcp.write_all(head.as_bytes()).expect("send the head");
        let mut answer = Vec::new();
        let mut chunk = [0u8; 4096];
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            match tcp.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
            }
        }
        String::from_utf8_lossy(&answer).into_owned()
    })
    .await
    .expect("oversized request");
    assert!(
        answer.starts_with("HTTP/1.1 413"),
        "oversized body: {answer}"
    );

    let (status, body) = dana.post(&invoke, &refund_649(&"i".repeat(257))).await;
    assert_eq!(status, 400, "257-character id: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("256")),
        "{body}"
    );

    let (status, _) = Caller::new("not-a-key")
        .post(&invoke, &refund_649("call_y"))
        .await;
    assert_eq!(status, 401, "unknown key");

    // Nothing above reached the runtime or the journal.
    assert!(trail(&store, "run_1").await.is_empty());
    let (_, receipt) = dana
        .post(
            &format!("{}/agent/getInvocation", server.base),
            &json!({"invocationId": "call_x"}),
        )
        .await;
    assert_eq!(receipt, Value::Null);
}

#[test]
fn serve_refuses_to_start_without_an_authorizer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("capgate.toml");
    std::fs::write(
        &config,
        format!(
            "revision = \"r1\"\n\n{}\n[gateway]\nroutes = [{{ path = \"/agent\", surface = \"aiSdk\" }}]\n",
            common::REFUND_OVER_HTTP
        ),
    )
    .expect("write config");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .output()
        .expect("run capgate");
    let err = String::from_utf8_lossy(&out.stderr);
    // A configuration problem: exit 1 and located, exactly as `capgate check` reports it.
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("capgate.toml:"), "{err}");
    assert!(err.contains("gateway.authorize"), "{err}");
    assert!(
        err.contains("authorize = \"authenticated\""),
        "the error says what to write: {err}"
    );
    assert!(
        !dir.path().join("capgate.db").exists(),
        "nothing was created"
    );
}

const JWT_SECRET: &str = "an-hs256-secret-of-at-least-32-bytes!";

fn jwt(secret: &str, sub: &str, org: Option<&str>, exp_from_now: i64) -> String {
    let mut claims = json!({
        "sub": sub,
        "exp": chrono::Utc::now().timestamp() + exp_from_now,
        "attributes": {"orgId": "org_1"},
        "surfaces": ["aiSdk"],
    });
    if let Some(org) = org {
        claims["org"] = json!(org);
    }
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).expect("key"),
    )
    .expect("encode")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jwt_bearer_tokens_are_verified_on_every_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("capgate.toml");
    std::fs::write(
        &config,
        format!(
            "revision = \"r1\"\n\n{}\n{}",
            common::LOOKUP_OVER_HTTP,
            r#"[gateway]
authorize = "authenticated"
routes = [{ path = "/agent", surface = "aiSdk" }]
jwt = { hs256SecretEnv = "CAPGATE_TEST_JWT_SECRET", allowMissingAudience = true, allowMissingIssuer = true }
"#
        ),
    )
    .expect("write config");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server =
        Server::start_with_env(&config, &store, &[("CAPGATE_TEST_JWT_SECRET", JWT_SECRET)]);
    let describe = format!("{}/agent/describe", server.base);

    let good = jwt(JWT_SECRET, "u_dana", Some("org_1"), 300);
    let (status, tools) = Caller::new(&good).post(&describe, &json!({})).await;
    assert_eq!(status, 200, "{tools}");
    assert_eq!(tools[0]["id"], "orders.lookup", "{tools}");

    for (what, token) in [
        (
            "wrong signature",
            jwt(
                "another-secret-of-at-least-32-bytes!!",
                "u_dana",
                Some("org_1"),
                300,
            ),
        ),
        ("expired", jwt(JWT_SECRET, "u_dana", Some("org_1"), -5)),
        ("no namespace claim", jwt(JWT_SECRET, "u_dana", None, 300)),
        ("not a JWT", "not.a.jwt".to_string()),
    ] {
        let (status, body) = Caller::new(&token).post(&describe, &json!({})).await;
        assert_eq!(status, 401, "{what}: {body}");
        assert!(body["error"]["code"].is_string(), "{what}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_rejects_from_the_shell_and_the_resume_fails_without_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&example_config(), &store);
    let agent = format!("{}/agent", server.base);
    let dana = Caller::new(DANA);
    let (status, held) = dana
        .post(&format!("{agent}/invoke"), &refund_649("call_cli"))
        .await;
    assert_eq!(status, 200, "{held}");
    let approval_id = held["approval"]["id"].as_str().expect("approval id");
    let config = example_config().display().to_string();
    let decide = |verb: &str, approver: &str| {
        capgate_output(&[
            "approvals",
            verb,
            approval_id,
            "--as",
            approver,
            "--comment",
            "not eligible",
            "--config",
            &config,
            "--store",
            &store,
        ])
    };

    let reject = decide("reject", "u_priya");
    assert!(
        reject.status.success(),
        "{}",
        String::from_utf8_lossy(&reject.stderr)
    );
    // Decided once: a second decision is refused.
    assert!(!decide("approve", "u_priya").status.success());

    let (status, out) = dana
        .post(
            &format!("{agent}/resumeApproval"),
            &resume_body(approval_id, "call_cli"),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["status"], "failed", "{out}");
    assert_eq!(out["error"]["code"], "APPROVAL_REJECTED", "{out}");
    assert_eq!(count_started(&store, "orders.refund").await, 0);
}
