//! The trust boundaries (docs/gateway.md, "Doors"), against the real `capgate serve`: tenants, doors, approvers,
//! credentials, quotas and freshness on resume. Each test names the boundary it pins; the
//! store-bound ones run on SQLite and on Postgres.

use crate::common;

use common::*;
use serde_json::{Value, json};
use sha2::Digest;

const DANA: &str = "dana-dev-key";
const PRIYA: &str = "priya-dev-key";
const EVE: &str = "eve-dev-key";
const WORKFLOW: &str = "ops-workflow-key";

fn refund(invocation_id: &str, order: &str) -> Value {
    json!({
        "capabilityId": "orders.refund",
        "input": {"orderId": order, "amount": 649, "reason": "damaged item"},
        "invocationId": invocation_id
    })
}

async fn held(agent: &Caller, base: &str, invocation_id: &str) -> String {
    let (status, held) = agent
        .post(
            &format!("{base}/agent/invoke"),
            &refund(invocation_id, "ord_42"),
        )
        .await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["status"], "approval-required", "{held}");
    held["approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_string()
}

async fn with_stores(test: impl AsyncFn(&str)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = format!("sqlite://{}", dir.path().join("capgate.db").display());
    test(&sqlite).await;
    if let Some(pg) = postgres_db().await {
        capgate(&["migrate", "--store", &pg.url]);
        test(&pg.url).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approver_never_reaches_another_namespaces_approvals_and_they_read_as_missing() {
    with_stores(async |store: &str| {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = deployment(
            dir.path(),
            |t| t,
            &key(
                "olga-key",
                "u_olga",
                "org_2",
                &["approver", "manager"],
                &[],
                "org_2",
            ),
        );
        let s = Server::start(&config, store);
        let id = held(&Caller::new(EVE), &s.base, "eve_1").await;
        let priya = Caller::new(PRIYA);
        let (status, list) = priya.get(&format!("{}/approvals", s.base)).await;
        assert_eq!(status, 200);
        assert!(
            !list.to_string().contains(&id),
            "org_1's approver lists org_2's approval: {list}"
        );
        let (s1, theirs) = priya.get(&format!("{}/approvals/{id}", s.base)).await;
        let (s2, missing) = priya
            .get(&format!("{}/approvals/apr_does_not_exist", s.base))
            .await;
        assert_eq!(
            (s1, &theirs),
            (s2, &missing),
            "another namespace's id reads as missing"
        );
        assert_eq!(s1, 404);
        let decision = json!({"decision": "approved", "comment": "not mine to give"});
        let (s1, theirs) = priya
            .post(&format!("{}/approvals/{id}/decision", s.base), &decision)
            .await;
        let (s2, missing) = priya
            .post(
                &format!("{}/approvals/apr_does_not_exist/decision", s.base),
                &decision,
            )
            .await;
        assert_eq!((s1, &theirs), (s2, &missing));
        // Eve cannot resume what nobody in her namespace approved.
        let (_, resumed) = Caller::new(EVE)
            .post(
                &format!("{}/agent/resumeApproval", s.base),
                &json!({"approvalId": id, "invocationId": "eve_1"}),
            )
            .await;
        assert_ne!(resumed["status"], "completed", "{resumed}");
        // Her own namespace's approver decides it, and the decision records that namespace.
        let (status, decided) = Caller::new("olga-key")
            .post(&format!("{}/approvals/{id}/decision", s.base), &decision)
            .await;
        assert_eq!(status, 200, "{decided}");
        assert_eq!(
            decided["decision"]["approverNamespace"], "org_2",
            "{decided}"
        );
    })
    .await;
}

/// SI-3 (identity and its doors come from the credential, never from the request).
#[tokio::test(flavor = "multi_thread")]
async fn a_key_is_refused_at_every_door_it_is_not_bound_to_like_a_wrong_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let s = Server::start(&example_config(), &store);
    let describe = |route: &str| format!("{}/{route}/describe", s.base);
    let (wrong, wrong_body) = Caller::new("no-such-key")
        .post(&describe("workflow"), &json!({}))
        .await;
    assert_eq!(wrong, 401);
    // Dana's agent key on the workflow route: exactly the wrong-key answer.
    let (status, body) = Caller::new(DANA)
        .post(&describe("workflow"), &json!({}))
        .await;
    assert_eq!((status, &body), (wrong, &wrong_body));
    let (status, body) = Caller::new(DANA)
        .post(
            &format!("{}/workflow/invoke", s.base),
            &json!({"capabilityId": "customers.search", "input": {"query": "x"}, "invocationId": "w1"}),
        )
        .await;
    assert_eq!((status, &body), (wrong, &wrong_body));
    // ... and on the approvals API, which only approvers may use.
    let (status, _) = Caller::new(DANA)
        .get(&format!("{}/approvals", s.base))
        .await;
    assert_eq!(status, 403);
    // The workflow's key is the other way round.
    let (status, _) = Caller::new(WORKFLOW)
        .post(&describe("workflow"), &json!({}))
        .await;
    assert_eq!(status, 200);
    let (status, body) = Caller::new(WORKFLOW)
        .post(&describe("agent"), &json!({}))
        .await;
    assert_eq!((status, &body), (wrong, &wrong_body));
    // An approver's key opens no model door.
    let (status, _) = Caller::new(PRIYA)
        .post(&describe("agent"), &json!({}))
        .await;
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread")]
async fn approval_types_and_self_decisions_are_checked_when_the_decision_is_made() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    // Carol approves but is no manager; Dana also holds an approver key; a second
    // capability asks for an untyped policy approval on top of human-confirmation.
    let extra = format!(
        "{}{}\n[policies.untypedLimit]\nplugin = \"refund-limit\"\nconfig = {{ maxAmount = 500 }}\n\n\
         [[capabilities]]\nid = \"orders.confirmRefund\"\ndescription = \"Refund after the agent confirms.\"\n\
         expose = {{ aiSdk = true }}\nsideEffect = \"write\"\nrisk = \"medium\"\n\
         approval = {{ required = true, type = \"human-confirmation\" }}\n\
         inputSchema = \"{}/schemas/orders.refund.json\"\npolicies = [\"untypedLimit\"]\nprocedure = {{ plugin = \"support-desk\" }}\n",
        key("carol-key", "u_carol", "org_1", &["approver"], &[], "org_1"),
        key(
            "dana-approver-key",
            "u_dana",
            "org_1",
            &["approver", "manager"],
            &[],
            "org_1"
        ),
        example_config().parent().expect("dir").display(),
    );
    let config = deployment(dir.path(), |t| t, &extra);
    let s = Server::start(&config, &store);
    let decision = json!({"decision": "approved"});
    let id = held(&Caller::new(DANA), &s.base, "r1").await;
    let url = format!("{}/approvals/{id}/decision", s.base);
    let (status, body) = Caller::new("carol-key").post(&url, &decision).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.to_string().contains("manager"),
        "the reason names the role: {body}"
    );
    // Dana, even holding the roles, cannot approve her own refund: refused now, not at resume.
    let (status, body) = Caller::new("dana-approver-key").post(&url, &decision).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.to_string().contains("SI-4"), "{body}");
    // Nor from the shell.
    let out = capgate_output(&[
        "approvals",
        "approve",
        &id,
        "--as",
        "u_dana",
        "--config",
        config.to_str().expect("path"),
        "--store",
        &store,
    ]);
    assert!(
        !out.status.success(),
        "the shell refuses a self-decision too"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("SI-4"));
    // Priya, a manager, may.
    let (status, body) = Caller::new(PRIYA).post(&url, &decision).await;
    assert_eq!(status, 200, "{body}");

    // Untyped policy approval + self-confirmable type: not self-confirmable.
    let (_, held) = Caller::new(DANA)
        .post(
            &format!("{}/agent/invoke", s.base),
            &json!({"capabilityId": "orders.confirmRefund", "invocationId": "c1",
                    "input": {"orderId": "ord_42", "amount": 649, "reason": "x"}}),
        )
        .await;
    let confirm = held["approval"]["id"].as_str().expect("held").to_string();
    let (status, body) = Caller::new("dana-approver-key")
        .post(
            &format!("{}/approvals/{confirm}/decision", s.base),
            &decision,
        )
        .await;
    assert_eq!(
        status, 403,
        "an untyped requirement is never self-confirmable: {body}"
    );
}

fn jwt(secret: &str, claims: Value) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).expect("key"),
    )
    .expect("sign")
}

#[tokio::test(flavor = "multi_thread")]
async fn jwts_need_the_configured_issuer_and_audience_and_respect_not_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let extra = "[gateway.jwt]\nhs256SecretEnv = \"CAPGATE_TEST_JWT\"\nissuer = \"https://idp.example\"\naudience = \"capgate\"\n";
    let config = deployment(dir.path(), |t| t, extra);
    let secret = "an-hs256-secret-of-at-least-32-bytes!!";
    let s = Server::start_with_env(&config, &store, &[("CAPGATE_TEST_JWT", secret)]);
    let now = chrono::Utc::now().timestamp();
    let good = json!({"sub": "u_jay", "org": "org_1", "exp": now + 600, "iss": "https://idp.example",
                      "aud": "capgate", "surfaces": ["aiSdk"]});
    let describe = format!("{}/agent/describe", s.base);
    let (status, body) = Caller::new(&jwt(secret, good.clone()))
        .post(&describe, &json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    for (why, mut claims) in [
        ("no aud", good.clone()),
        ("no iss", good.clone()),
        ("not yet valid", good.clone()),
        ("no surfaces", good.clone()),
    ] {
        let map = claims.as_object_mut().expect("object");
        match why {
            "no aud" => drop(map.remove("aud")),
            "no iss" => drop(map.remove("iss")),
            "not yet valid" => drop(map.insert("nbf".into(), json!(now + 300))),
            _ => drop(map.remove("surfaces")),
        }
        let (status, _) = Caller::new(&jwt(secret, claims))
            .post(&describe, &json!({}))
            .await;
        assert_eq!(status, 401, "{why}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_and_unexposed_capability_ids_store_nothing_and_answer_alike() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("capgate.db");
    let store = format!("sqlite://{}", path.display());
    let s = Server::start(&example_config(), &store);
    let ops = Caller::new(WORKFLOW);
    let call = |cap: &str, inv: &str| json!({"capabilityId": cap, "invocationId": inv, "input": {"text": "x".repeat(1000)}});
    // messages.send is not exposed on /workflow; orders.nope does not exist.
    let (_, unexposed) = ops
        .post(
            &format!("{}/workflow/invoke", s.base),
            &call("messages.send", "u1"),
        )
        .await;
    let (_, unknown) = ops
        .post(
            &format!("{}/workflow/invoke", s.base),
            &call("orders.nope", "u2"),
        )
        .await;
    let shape = |v: &Value| {
        let mut v = v.clone();
        v["executionId"] = json!("exe");
        v["invocationId"] = json!("inv");
        v
    };
    assert_eq!(shape(&unexposed), shape(&unknown));
    assert_eq!(
        unknown["error"]["code"], "CAPABILITY_NOT_FOUND",
        "{unknown}"
    );
    for inv in ["u1", "u2"] {
        let (_, receipt) = ops
            .post(
                &format!("{}/workflow/getInvocation", s.base),
                &json!({"invocationId": inv}),
            )
            .await;
        assert_eq!(receipt, Value::Null, "no receipt for {inv}");
    }
    drop(s);
    for inv in ["u1", "u2"] {
        let out = capgate_output(&[
            "invocations",
            "show",
            inv,
            "--namespace",
            "org_1",
            "--actor",
            "service:svc_refund_flow",
            "--surface",
            "workflow",
            "--store",
            &store,
        ]);
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(
            !shown.contains("messages.send") && !shown.contains("orders.nope"),
            "nothing was journaled for {inv}: {shown}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_burst_over_the_quota_gets_429_with_retry_after_at_every_door() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let config = deployment(
        dir.path(),
        |t| {
            t.replace("principalPerSecond = 1000", "principalPerSecond = 1")
                .replace("principalBurst = 2000", "principalBurst = 3")
        },
        "",
    );
    let s = Server::start(&config, &store);
    let http = reqwest::Client::new();
    for (key, method, url) in [
        (DANA, "POST", format!("{}/agent/describe", s.base)),
        (PRIYA, "GET", format!("{}/approvals", s.base)),
        (EVE, "POST", format!("{}/mcp", s.base)),
    ] {
        let mut limited = None;
        for _ in 0..10 {
            let req = if method == "GET" {
                http.get(&url)
            } else {
                http.post(&url).json(&json!({}))
            };
            let r = req
                .bearer_auth(key)
                .header("accept", "application/json, text/event-stream")
                .send()
                .await
                .expect("send");
            if r.status().as_u16() == 429 {
                limited = Some(r);
                break;
            }
        }
        let r = limited
            .unwrap_or_else(|| panic!("{url}: 10 requests in a burst of 3 were never limited"));
        let retry: u64 = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .expect("Retry-After in seconds");
        assert!(retry >= 1);
        let body: Value = r.json().await.expect("json");
        assert_eq!(body["error"]["code"], "RATE_LIMITED");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resume_after_org_isolation_turns_to_deny_is_policy_denied_and_the_approval_stays_unconsumed()
 {
    with_stores(async |store: &str| {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = deployment(dir.path(), |t| t, "");
        let id = {
            let s = Server::start(&config, store);
            let id = held(&Caller::new(DANA), &s.base, "fresh_1").await;
            let (status, _) = Caller::new(PRIYA)
                .post(
                    &format!("{}/approvals/{id}/decision", s.base),
                    &json!({"decision": "approved"}),
                )
                .await;
            assert_eq!(status, 200);
            id
        };
        // Hours later Dana's session belongs to another organisation: orgIsolation denies.
        let moved = deployment(
            dir.path(),
            |t| {
                t.replacen(
                    "context = { orgId = \"org_1\" }",
                    "context = { orgId = \"org_9\" }",
                    1,
                )
            },
            "",
        );
        let s = Server::start(&moved, store);
        let (_, resumed) = Caller::new(DANA)
            .post(
                &format!("{}/agent/resumeApproval", s.base),
                &json!({"approvalId": id, "invocationId": "fresh_1"}),
            )
            .await;
        assert_eq!(resumed["status"], "failed", "{resumed}");
        assert_eq!(resumed["error"]["code"], "POLICY_DENIED", "{resumed}");
        let (_, record) = Caller::new(PRIYA)
            .get(&format!("{}/approvals/{id}", s.base))
            .await;
        assert_eq!(record["status"], "approved", "not consumed: {record}");
        assert!(record.get("consumedByExecutionId").is_none(), "{record}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pooled_policy_instances_never_cross_namespaces() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let extra = "[plugins.counter]\npath = \"hostile_counter.wasm\"\nsha256 = \"@COUNTER@\"\nisolation = \"pooled\"\n\n\
                 [policies.counter]\nplugin = \"counter\"\n\n\
                 [[capabilities]]\nid = \"debug.count\"\ndescription = \"Counts.\"\nexpose = { aiSdk = true }\n\
                 sideEffect = \"read\"\nrisk = \"low\"\npolicies = [\"counter\"]\nprocedure = { plugin = \"support-desk\" }\n";
    let wasm = root().join("plugins/target/wasm32-wasip2/release/hostile_counter.wasm");
    let digest = hex::encode(sha2::Sha256::digest(
        std::fs::read(&wasm).expect("counter plugin built"),
    ));
    let config = deployment(dir.path(), |t| t, &extra.replace("@COUNTER@", &digest));
    let s = Server::start(&config, &store);
    let count = async |key: &str, inv: &str| -> String {
        let (_, r) = Caller::new(key)
            .post(
                &format!("{}/agent/invoke", s.base),
                &json!({"capabilityId": "debug.count", "input": {}, "invocationId": inv}),
            )
            .await;
        r["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    for n in 1..=3 {
        let seen = count(DANA, &format!("d{n}")).await;
        assert!(
            seen.contains(&format!("seen {n} call")),
            "org_1 call {n}: {seen}"
        );
    }
    let eve = count(EVE, "e1").await;
    assert!(
        eve.contains("seen 1 call"),
        "org_2 gets an instance of its own: {eve}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_resume_is_bound_to_the_requesters_namespace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    // The same user id, in another namespace.
    let config = deployment(
        dir.path(),
        |t| t,
        &key("dana-org2-key", "u_dana", "org_2", &[], &["mcp"], "org_1"),
    );
    let s = Server::start(&config, &store);
    let mut dana = Mcp::connect(&s.base, DANA).await;
    let held = dana
        .call(
            "orders_refund",
            json!({"orderId": "ord_42", "amount": 649, "reason": "damaged item"}),
        )
        .await;
    let approval = held["result"]["structuredContent"]["approvalId"]
        .as_str()
        .unwrap_or_else(|| panic!("held: {held}"))
        .to_string();
    let (status, _) = Caller::new(PRIYA)
        .post(
            &format!("{}/approvals/{approval}/decision", s.base),
            &json!({"decision": "approved"}),
        )
        .await;
    assert_eq!(status, 200);
    let mut other = Mcp::connect(&s.base, "dana-org2-key").await;
    let refused = other
        .call("approvals_resume", json!({"approvalId": approval}))
        .await;
    assert_ne!(
        refused["result"]["structuredContent"]["status"], "completed",
        "{refused}"
    );
    let resumed = dana
        .call("approvals_resume", json!({"approvalId": approval}))
        .await;
    assert_eq!(
        resumed["result"]["structuredContent"]["status"], "completed",
        "the requester, in her namespace, still can: {resumed}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_honours_a_denying_authorizer_plugin_for_list_call_and_resume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let wasm = root().join("plugins/target/wasm32-wasip2/release/namespace_gate.wasm");
    let digest = hex::encode(sha2::Sha256::digest(
        std::fs::read(&wasm).expect("namespace-gate plugin built"),
    ));
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "authorize = \"authenticated\"",
                "authorize = { plugin = \"gate\", config = { denyNamespaces = [\"org_2\"] } }",
            )
        },
        &format!("[plugins.gate]\npath = \"namespace_gate.wasm\"\nsha256 = \"{digest}\"\n"),
    );
    let s = Server::start(&config, &store);
    // The HTTP door refuses Eve's namespace...
    let (status, _) = Caller::new(EVE)
        .post(&format!("{}/agent/describe", s.base), &json!({}))
        .await;
    assert_eq!(status, 403);
    // ... and so does /mcp, for listing, calling and resuming.
    let mut eve = Mcp::connect(&s.base, EVE).await;
    let listed = eve.request("tools/list", json!({})).await;
    assert!(listed.get("error").is_some(), "tools/list: {listed}");
    // A call of a real tool by a principal the authorizer refuses everything (it may not
    // even list) is the concealed not-found, exactly as an unknown tool's (issue 55: no
    // enumeration of real names).
    let called = eve.call("customers_search", json!({"query": "acme"})).await;
    let unknown = eve.call("no_such_tool", json!({"query": "acme"})).await;
    let error = |v: &Value| v["result"]["structuredContent"]["error"].clone();
    assert_eq!(
        error(&called)["code"],
        "CAPABILITY_NOT_FOUND",
        "tools/call: {called}"
    );
    assert_eq!(error(&called), error(&unknown), "{called} vs {unknown}");
    let resumed = eve
        .call("approvals_resume", json!({"approvalId": "apr_x"}))
        .await;
    assert!(
        resumed.get("error").is_some(),
        "approvals_resume: {resumed}"
    );
    // org_1 is untouched.
    let mut dana = Mcp::connect(&s.base, DANA).await;
    let listed = dana.request("tools/list", json!({})).await;
    assert!(
        listed["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{listed}"
    );
}
