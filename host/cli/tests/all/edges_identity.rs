//! Issue 33's identity edges, against the real `capgate serve` over HTTP (and
//! `capgate check`):
//!
//! - a human credential for human decisions: Dana's agent key cannot confirm her own held
//!   `messages.send` (nor sign in to the console), her console credential can; a key that
//!   opens a model door opens the requester door only when it says so, and `check` warns;
//!   a type both self-confirmable and role-mapped is refused;
//! - console sessions are rows in the store (SQLite and Postgres): a session survives a
//!   restart, no raw credential is stored, a removed key ends its sessions, and 10 000
//!   sign-ins with one key leave another approver able to sign in;
//! - the operator API takes an operator's credential only; unauthenticated requests are
//!   throttled per client address at every door (`X-Forwarded-For` believed only from a
//!   trusted proxy); `[gateway.jwt]` needs `audience` and `issuer` unless opted out by
//!   name; `/metrics` refuses to serve unauthenticated off loopback.

use crate::common;

use common::*;
use serde_json::{Value, json};
use std::path::Path;

const DANA: &str = "dana-dev-key";
const DANA_CONSOLE: &str = "dana-console-key";
const PRIYA: &str = "priya-dev-key";

/// Run `test` against a fresh SQLite store, then a fresh Postgres database when one is
/// configured.
async fn with_stores(test: impl AsyncFn(&Path, &str)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = format!("sqlite://{}", dir.path().join("capgate.db").display());
    test(dir.path(), &sqlite).await;
    if let Some(pg) = postgres_db().await {
        capgate(&["migrate", "--store", &pg.url]);
        let dir = tempfile::tempdir().expect("tempdir");
        test(dir.path(), &pg.url).await;
    }
}

/// Dana's `messages.send`, held for her own confirmation; its approval id.
async fn send_held(base: &str, invocation_id: &str) -> String {
    let (status, held) = Caller::new(DANA)
        .post(
            &format!("{base}/agent/invoke"),
            &json!({
                "capabilityId": "messages.send",
                "input": {"customerId": "cus_1", "body": "Your refund is issued."},
                "invocationId": invocation_id,
            }),
        )
        .await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["status"], "approval-required", "{held}");
    held["approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_string()
}

/// A console sign-in: status, body, and the session cookie (`name=value`) when one was set.
async fn sign_in(
    http: &reqwest::Client,
    base: &str,
    credential: &str,
    forwarded_for: Option<&str>,
) -> (u16, Value, Option<String>) {
    let mut req = http
        .post(format!("{base}/console/session"))
        .json(&json!({ "credential": credential }));
    if let Some(ip) = forwarded_for {
        req = req.header("x-forwarded-for", ip);
    }
    let res = req.send().await.expect("sign in");
    let status = res.status().as_u16();
    let cookie = res
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|c| c.split(';').next())
        .filter(|c| c.len() > "capgate_console=".len())
        .map(str::to_owned);
    let text = res.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or_else(|_| json!({ "raw": text }));
    (status, body, cookie)
}

/// `GET` with a session cookie: status and body.
async fn with_cookie(http: &reqwest::Client, url: &str, cookie: &str) -> (u16, Value) {
    let res = http
        .get(url)
        .header("cookie", cookie)
        .send()
        .await
        .expect("get");
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn dana_agent_key_cannot_confirm_her_own_send_while_her_console_credential_can() {
    with_stores(async |_dir: &Path, store: &str| {
        let s = Server::start(&example_config(), store);
        let id = send_held(&s.base, "send_e1").await;
        let one = format!("{}/approvals/{id}", s.base);
        let yes = json!({"decision": "approved"});

        // The agent's key: refused at the requester door, for this id and any other alike
        // (it learns nothing about which approvals exist), and at the console.
        let agent = Caller::new(DANA);
        let (s1, b1) = agent.get(&one).await;
        let (s2, b2) = agent
            .get(&format!("{}/approvals/apr_does_not_exist", s.base))
            .await;
        assert_eq!((s1, &b1), (s2, &b2));
        assert_eq!(s1, 403, "{b1}");
        let (status, body) = agent.post(&format!("{one}/decision"), &yes).await;
        assert_eq!(status, 403, "{body}");
        let http = reqwest::Client::new();
        let (status, body, cookie) = sign_in(&http, &s.base, DANA, None).await;
        assert_eq!(status, 403, "{body}");
        assert!(cookie.is_none());
        let (_, pending) = Caller::new(PRIYA).get(&one).await;
        assert_eq!(pending["status"], "pending", "{pending}");

        // Her console credential, through the console: confirms it.
        let (status, me, cookie) = sign_in(&http, &s.base, DANA_CONSOLE, None).await;
        assert_eq!(status, 200, "{me}");
        assert_eq!(me["actor"]["id"], "u_dana");
        assert_eq!(me["approver"], false);
        let cookie = cookie.expect("a session cookie");
        let csrf = me["csrfToken"].as_str().expect("csrf").to_owned();
        let res = http
            .post(format!("{}/console/api/approvals/{id}/decision", s.base))
            .header("cookie", &cookie)
            .header("x-csrf-token", &csrf)
            .json(&yes)
            .send()
            .await
            .expect("decide");
        assert_eq!(res.status().as_u16(), 200);
        let decided: Value = res.json().await.expect("json");
        assert_eq!(decided["decision"]["via"], "requester", "{decided}");
        assert_eq!(decided["decision"]["approver"]["id"], "u_dana");

        // The agent resumes the confirmed call.
        let (_, sent) = agent
            .post(
                &format!("{}/agent/resumeApproval", s.base),
                &json!({"approvalId": id, "invocationId": "send_e1"}),
            )
            .await;
        assert_eq!(sent["status"], "completed", "{sent}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_key_that_opts_into_the_requester_door_confirms_and_check_warns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "surfaces = [\"aiSdk\", \"mcp\"]\nactor = { id = \"u_dana\"",
                "surfaces = [\"aiSdk\", \"mcp\"]\nrequesterDoor = true\nactor = { id = \"u_dana\"",
            )
        },
        "",
    );
    let out = capgate_output(&["check", "--config", &config.display().to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning:") && err.contains("requesterDoor"),
        "{err}"
    );
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let s = Server::start(&config, &store);
    let id = send_held(&s.base, "send_e2").await;
    let (status, decided) = Caller::new(DANA)
        .post(
            &format!("{}/approvals/{id}/decision", s.base),
            &json!({"decision": "approved"}),
        )
        .await;
    assert_eq!(status, 200, "the operator said so for this key: {decided}");
}

#[test]
fn a_type_both_self_confirmable_and_role_mapped_is_refused_by_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(
        dir.path(),
        |t| t,
        "[approvals.types.human-confirmation]\nroles = [\"manager\"]\n",
    );
    let out = capgate_output(&["check", "--config", &config.display().to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("runtime.selfConfirmableTypes[0]") || err.contains("selfConfirmableTypes"),
        "{err}"
    );
    assert!(
        err.contains("both self-confirmable and mapped to roles"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_console_session_survives_a_restart_and_no_raw_credential_is_stored() {
    with_stores(async |_dir: &Path, store: &str| {
        let http = reqwest::Client::new();
        let s = Server::start(&example_config(), store);
        let id = send_held(&s.base, "send_e3").await;
        let (status, me, cookie) = sign_in(&http, &s.base, DANA_CONSOLE, None).await;
        assert_eq!(status, 200, "{me}");
        let cookie = cookie.expect("a session cookie");
        let csrf = me["csrfToken"].as_str().expect("csrf").to_owned();
        drop(s);

        // A new process on the same store: still signed in, same CSRF token, decides.
        let s = Server::start(&example_config(), store);
        let (status, again) =
            with_cookie(&http, &format!("{}/console/session", s.base), &cookie).await;
        assert_eq!(status, 200, "a restart signs nobody out: {again}");
        assert_eq!(again["csrfToken"], csrf.as_str());
        let res = http
            .post(format!("{}/console/api/approvals/{id}/decision", s.base))
            .header("cookie", &cookie)
            .header("x-csrf-token", &csrf)
            .json(&json!({"decision": "approved"}))
            .send()
            .await
            .expect("decide");
        assert_eq!(res.status().as_u16(), 200);

        // What the store holds: the id's hash and the key's hash, never either in clear.
        let opened = capgate_store::Store::open(store).await.expect("open store");
        let rows = opened.console_sessions();
        let principal = r#"["org_1","user","u_dana"]"#;
        let now = chrono::Utc::now();
        assert_eq!(rows.count_for(principal, now).await.expect("count"), 1);
        let session_id = cookie.trim_start_matches("capgate_console=");
        let by_raw_id = rows.get(session_id, now).await.expect("get");
        assert!(by_raw_id.is_none(), "the raw session id is no key");
        let row = rows
            .get(&key_hash(session_id), now)
            .await
            .expect("get")
            .expect("the session row, by the id's hash");
        assert!(!row.credential.contains(DANA_CONSOLE), "{row:?}");
        assert!(row.credential.contains(&key_hash(DANA_CONSOLE)), "{row:?}");
        opened.close().await;

        // Signing out ends it on every replica: the row is gone.
        let res = http
            .delete(format!("{}/console/session", s.base))
            .header("cookie", &cookie)
            .header("x-csrf-token", &csrf)
            .send()
            .await
            .expect("sign out");
        assert_eq!(res.status().as_u16(), 204);
        let (status, _) = with_cookie(&http, &format!("{}/console/session", s.base), &cookie).await;
        assert_eq!(status, 401);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_removed_key_ends_its_console_sessions_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let http = reqwest::Client::new();
    let config = deployment(dir.path(), |t| t, "");
    let s = Server::start(&config, &store);
    let (status, _, cookie) = sign_in(&http, &s.base, PRIYA, None).await;
    assert_eq!(status, 200);
    let cookie = cookie.expect("a session cookie");
    drop(s);
    // Priya's key is removed from the file: her session is no longer admitted.
    let text = std::fs::read_to_string(&config).expect("read");
    let priya_hash = key_hash(PRIYA);
    assert!(text.contains(&priya_hash));
    std::fs::write(
        &config,
        text.replace(&priya_hash, &key_hash("another-key-entirely")),
    )
    .expect("write");
    let s = Server::start(&config, &store);
    let (status, _) = with_cookie(&http, &format!("{}/console/session", s.base), &cookie).await;
    assert_eq!(status, 401, "a removed key ends its sessions");
}

/// 10 000 sign-ins with one key: with the throttles off, the per-principal cap keeps the
/// key's sessions at its bound (oldest evicted) and another approver signs in; with the
/// default throttles, the flood is refused `429` from its address and another approver at
/// another address (through a trusted proxy) signs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_sign_ins_with_one_key_leave_another_approver_able_to_sign_in() {
    const SIGN_INS: usize = 10_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    // A second approver of org_1.
    let other = key(
        "ana-approver-key",
        "u_ana",
        "org_1",
        &["approver"],
        &[],
        "org_1",
    );
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "principalPerSecond = 1000\nprincipalBurst = 2000\nnamespacePerSecond = 5000\nnamespaceBurst = 10000",
                "principalPerSecond = 0\nprincipalBurst = 0\nnamespacePerSecond = 0\nnamespaceBurst = 0",
            )
        },
        &format!(
            "{other}\n[gateway.console]\nmaxSessionsPerPrincipal = 5\nsignInPerMinute = 0\nsignInBurst = 0\n\
             signInPerAddressPerMinute = 0\nsignInPerAddressBurst = 0\n"
        ),
    );
    let s = Server::start(&config, &store);
    let http = reqwest::Client::new();
    let base = s.base.clone();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let http = http.clone();
        let base = base.clone();
        tasks.spawn(async move {
            let mut ok = 0usize;
            for _ in (worker..SIGN_INS).step_by(8) {
                let (status, body, _) = sign_in(&http, &base, PRIYA, None).await;
                assert_eq!(status, 200, "{body}");
                ok += 1;
            }
            ok
        });
    }
    let mut total = 0;
    while let Some(done) = tasks.join_next().await {
        total += done.expect("a sign-in worker");
    }
    assert_eq!(total, SIGN_INS);
    let opened = capgate_store::Store::open(&store)
        .await
        .expect("open store");
    let rows = opened.console_sessions();
    let now = chrono::Utc::now();
    let priyas = rows
        .count_for(r#"["org_1","user","u_priya"]"#, now)
        .await
        .expect("count");
    assert_eq!(priyas, 5, "the per-principal cap, oldest evicted");
    opened.close().await;
    let (status, me, cookie) = sign_in(&http, &base, "ana-approver-key", None).await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["approver"], true);
    let (status, _) = with_cookie(
        &http,
        &format!("{base}/console/api/approvals"),
        &cookie.expect("cookie"),
    )
    .await;
    assert_eq!(status, 200);
    drop(s);

    // The default throttles, behind a trusted proxy (this test's loopback).
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "[gateway]\n",
                "[gateway]\ntrustedProxies = [\"127.0.0.1\", \"::1\"]\n",
            )
        },
        &other,
    );
    let s = Server::start(&config, &store);
    let mut throttled = 0;
    for _ in 0..SIGN_INS {
        let (status, body, _) = sign_in(&http, &s.base, PRIYA, Some("198.51.100.7")).await;
        match status {
            200 => {}
            429 => throttled += 1,
            other => panic!("{other}: {body}"),
        }
    }
    assert!(throttled >= SIGN_INS - 30, "{throttled} throttled");
    let (status, me, _) = sign_in(&http, &s.base, "ana-approver-key", Some("203.0.113.20")).await;
    assert_eq!(status, 200, "another approver at another address: {me}");
    // Priya herself is throttled per principal, from any address.
    let (status, _, _) = sign_in(&http, &s.base, PRIYA, Some("203.0.113.21")).await;
    assert_eq!(status, 429);
}

#[tokio::test(flavor = "multi_thread")]
async fn unauthenticated_requests_are_throttled_per_client_address_at_every_door() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "[gateway]\n",
                "[gateway]\ntrustedProxies = [\"127.0.0.1\"]\n",
            )
            .replace(
                "namespaceBurst = 10000",
                "namespaceBurst = 10000\nunauthenticatedPerMinute = 1\nunauthenticatedBurst = 6",
            )
        },
        "[gateway.admin]\nreload = true\n",
    );
    let s = Server::start(&config, &store);
    let http = reqwest::Client::new();
    let bad = "Bearer not-a-key";
    let from = |ip: &'static str| move |r: reqwest::RequestBuilder| r.header("x-forwarded-for", ip);
    // Six doors, one wrong key each, from one address: each answers 401...
    let doors: Vec<reqwest::RequestBuilder> = vec![
        http.post(format!("{}/agent/describe", s.base))
            .json(&json!({})),
        http.post(format!("{}/workflow/describe", s.base))
            .json(&json!({})),
        http.post(format!("{}/mcp", s.base))
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})),
        http.get(format!("{}/approvals", s.base)),
        http.post(format!("{}/admin/reload", s.base)),
        http.post(format!("{}/console/session", s.base))
            .json(&json!({"credential": "not-a-key"})),
    ];
    for door in doors {
        let r = from("198.51.100.1")(door.header("authorization", bad))
            .send()
            .await
            .expect("send");
        assert_eq!(r.status().as_u16(), 401, "{:?}", r.url());
    }
    // ... and then the address's further failures answer 429 at every door, with
    // Retry-After ...
    let wrong_keys = [
        http.post(format!("{}/agent/describe", s.base))
            .bearer_auth("still-not-a-key")
            .json(&json!({})),
        http.get(format!("{}/approvals", s.base))
            .bearer_auth("still-not-a-key"),
    ];
    for request in wrong_keys {
        let r = from("198.51.100.1")(request).send().await.expect("send");
        assert_eq!(r.status().as_u16(), 429, "{:?}", r.url());
        assert!(r.headers().get("retry-after").is_some());
    }
    // ... while a right key from the same address is admitted: the credential is tried
    // first, and only failures are throttled.
    let right_keys = [
        http.post(format!("{}/agent/describe", s.base))
            .bearer_auth(DANA)
            .json(&json!({})),
        http.get(format!("{}/approvals", s.base)).bearer_auth(PRIYA),
    ];
    for request in right_keys {
        let r = from("198.51.100.1")(request).send().await.expect("send");
        assert_eq!(r.status().as_u16(), 200, "{:?}", r.url());
    }
    // Another address (through the trusted proxy) is untouched.
    let r = from("198.51.100.2")(
        http.post(format!("{}/agent/describe", s.base))
            .bearer_auth(DANA)
            .json(&json!({})),
    )
    .send()
    .await
    .expect("send");
    assert_eq!(r.status().as_u16(), 200);
}

/// Issue 55: one address sending wrong keys (a NAT, a proxy not listed in
/// `trustedProxies`, a neighbour guessing) never locks out the valid credentials that share
/// it: Dana's agent key, Priya's `/approvals` and her console sign-in keep working while 3
/// wrong keys a second (agent keys and console sign-ins) come from the same address, and
/// the wrong ones are answered 429 once past the budget.
#[tokio::test(flavor = "multi_thread")]
async fn a_valid_credential_is_never_refused_by_the_throttle_of_its_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "namespaceBurst = 10000",
                "namespaceBurst = 10000\nunauthenticatedPerMinute = 1\nunauthenticatedBurst = 3",
            )
        },
        "[gateway.console]\nsignInPerAddressPerMinute = 1\nsignInPerAddressBurst = 3\n",
    );
    let s = Server::start(&config, &store);
    let http = reqwest::Client::new();
    let (mut wrong_401, mut wrong_429) = (0, 0);
    let started = std::time::Instant::now();
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(333));
    for round in 0..12 {
        tick.tick().await;
        // Eve's guesses, every third an (invalid) console sign-in.
        let status = if round % 3 == 2 {
            sign_in(&http, &s.base, "eve-guess", None).await.0
        } else {
            http.post(format!("{}/agent/describe", s.base))
                .bearer_auth(format!("eve-guess-{round}"))
                .json(&json!({}))
                .send()
                .await
                .expect("send")
                .status()
                .as_u16()
        };
        match status {
            401 => wrong_401 += 1,
            429 => wrong_429 += 1,
            other => panic!("a wrong key answered {other}"),
        }
        // Dana's agent key, Priya's approvals API and her console sign-in, all from the
        // same (loopback) address.
        let dana = http
            .post(format!("{}/agent/describe", s.base))
            .bearer_auth(DANA)
            .json(&json!({}))
            .send()
            .await
            .expect("send");
        assert_eq!(dana.status().as_u16(), 200, "round {round}: Dana's key");
        let priya = http
            .get(format!("{}/approvals", s.base))
            .bearer_auth(PRIYA)
            .send()
            .await
            .expect("send");
        assert_eq!(
            priya.status().as_u16(),
            200,
            "round {round}: Priya's /approvals"
        );
        if round % 4 == 0 {
            let (status, body, _) = sign_in(&http, &s.base, PRIYA, None).await;
            assert_eq!(status, 200, "round {round}: Priya's sign-in: {body}");
        }
    }
    assert!(started.elapsed() >= std::time::Duration::from_secs(3));
    assert!(
        wrong_429 >= 6,
        "the guesses past the budget are throttled ({wrong_401} x 401, {wrong_429} x 429)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn x_forwarded_for_is_ignored_from_an_untrusted_peer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "namespaceBurst = 10000",
                "namespaceBurst = 10000\nunauthenticatedPerMinute = 1\nunauthenticatedBurst = 2",
            )
        },
        "",
    );
    let s = Server::start(&config, &store);
    let http = reqwest::Client::new();
    // Each guess claims another address; no proxy is trusted, so they are all loopback's.
    let mut statuses = Vec::new();
    for i in 0..3 {
        let r = http
            .post(format!("{}/agent/describe", s.base))
            .header("x-forwarded-for", format!("198.51.100.{i}"))
            .bearer_auth("not-a-key")
            .json(&json!({}))
            .send()
            .await
            .expect("send");
        statuses.push(r.status().as_u16());
    }
    assert_eq!(statuses, [401, 401, 429]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operator_api_takes_an_operator_key_which_opens_no_other_door() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let ops = "olga-operator-key";
    let tenant_ops = "tenant-with-operator-role";
    let config = deployment(
        dir.path(),
        |t| t,
        &format!(
            "[gateway.admin]\nreload = true\n\n[[gateway.operatorKeys]]\nsha256 = \"{}\"\nactor = {{ id = \"u_olga_ops\", kind = \"user\" }}\n\n{}",
            key_hash(ops),
            key(tenant_ops, "u_t", "org_1", &["operator"], &[], "org_1")
        ),
    );
    let out = capgate_output(&["check", "--config", &config.display().to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning:")
            && err.contains(".roles: the `operator` role of a tenant's key opens nothing"),
        "{err}"
    );
    let s = Server::start(&config, &store);
    let reload = |key: &'static str| {
        let url = format!("{}/admin/reload", s.base);
        async move { Caller::new(key).post(&url, &json!({})).await }
    };
    let (status, body) = reload(tenant_ops).await;
    assert_eq!(
        status, 403,
        "a tenant's operator role opens nothing: {body}"
    );
    let (status, body) = reload(PRIYA).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = reload(ops).await;
    assert_eq!(status, 200, "{body}");
    // The operator's key is refused like a wrong key at every other door.
    let op = Caller::new(ops);
    let (status, _) = op
        .post(&format!("{}/agent/describe", s.base), &json!({}))
        .await;
    assert_eq!(status, 401);
    let (status, _) = op.get(&format!("{}/approvals", s.base)).await;
    assert_eq!(status, 401);
    let (status, _, _) = sign_in(&reqwest::Client::new(), &s.base, ops, None).await;
    assert_eq!(status, 401);
}

#[test]
fn jwt_needs_audience_and_issuer_unless_the_config_opts_out_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |extra: &str| {
        let config = deployment(dir.path(), |t| t, extra);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_capgate"))
            .args(["check", "--config"])
            .arg(&config)
            .env("CAPGATE_TEST_JWT", "an-hs256-secret-of-at-least-32-bytes!!")
            .output()
            .expect("run capgate");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let base = "[gateway.jwt]\nhs256SecretEnv = \"CAPGATE_TEST_JWT\"\n";
    let (code, err) = run(base);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("gateway.jwt.audience"), "{err}");
    assert!(err.contains("gateway.jwt.issuer"), "{err}");
    assert!(err.contains("allowMissingAudience = true"), "{err}");
    let (code, err) = run(&format!(
        "{base}audience = \"capgate\"\nissuer = \"https://idp.example\"\n"
    ));
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = run(&format!(
        "{base}allowMissingAudience = true\nallowMissingIssuer = true\n"
    ));
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn metrics_unauthenticated_on_a_non_loopback_address_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(
        dir.path(),
        |t| t.replace("listen = \"127.0.0.1:9464\"", "listen = \"0.0.0.0:9464\""),
        "",
    );
    let out = capgate_output(&["check", "--config", &config.display().to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("telemetry.metrics.bearerTokenSha256"), "{err}");
    assert!(err.contains("0.0.0.0:9464"), "{err}");
    // With a bearer token it passes.
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "listen = \"127.0.0.1:9464\"",
                &format!(
                    "listen = \"0.0.0.0:9464\"\nbearerTokenSha256 = \"{}\"",
                    key_hash("scrape-token")
                ),
            )
        },
        "",
    );
    let out = capgate_output(&["check", "--config", &config.display().to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The loopback example, moved off loopback on the command line: serve refuses.
    let config = deployment(dir.path(), |t| t, "");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let out = capgate_output(&[
        "serve",
        "--config",
        &config.display().to_string(),
        "--store",
        &store,
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "0.0.0.0:0",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("/telemetry/metrics/bearerTokenSha256"),
        "{err}"
    );
}
