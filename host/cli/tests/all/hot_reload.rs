//! Reloading `capgate serve`'s configuration without a restart (SIGHUP and
//! `POST /admin/reload`), against the real binary over real HTTP: what new calls see, what
//! a broken file leaves alone, who may ask, what happens to calls, approvals and sessions
//! that span a reload, and that calls under load are all answered.

use crate::common;

use common::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

const DANA: &str = "dana-dev-key";
const PRIYA: &str = "priya-dev-key";
/// An operator: may reload, nothing else.
const OPS: &str = "ops-reload-key";

/// The example's revision line, as the template writes it.
const REVISION_LINE: &str = "revision = \"customer-support-2026-11\"";

/// How the test deployment differs from the example.
struct Variant {
    revision: &'static str,
    max_amount: u32,
    /// Keep `messages.draft` (a capability a reload can add).
    draft: bool,
    /// Extra TOML appended.
    extra: String,
    /// Raw text replacements applied last (to break the file on purpose).
    replace: Vec<(&'static str, String)>,
    /// Another `inputSchema` for `orders.refund` (inline TOML).
    refund_schema: Option<String>,
}

impl Variant {
    fn new(revision: &'static str, max_amount: u32) -> Variant {
        Variant {
            revision,
            max_amount,
            draft: true,
            extra: String::new(),
            replace: Vec::new(),
            refund_schema: None,
        }
    }
}

/// A tenant's key (org_1) holding the `operator` role: no operator for the operator API.
const TENANT_OPERATOR: &str = "tenant-operator-key";

/// Olga's operator key (outside every tenant namespace), and a tenant's key with the
/// `operator` role that opens nothing there.
fn operator_key() -> String {
    format!(
        "[[gateway.operatorKeys]]\nsha256 = \"{}\"\nactor = {{ id = \"u_olga_ops\", kind = \"user\" }}\n\n{}",
        key_hash(OPS),
        key(
            TENANT_OPERATOR,
            "u_tenant_ops",
            "org_1",
            &["operator"],
            &[],
            "org_1"
        )
    )
}

/// Write (or rewrite) `dir/capgate.toml`: the example with the operator API on, an
/// operator key, and `v` applied.
fn write(dir: &Path, v: &Variant) -> PathBuf {
    let extra = format!(
        "[gateway.admin]\nreload = true\n\n{}\n{}",
        operator_key(),
        v.extra
    );
    deployment(
        dir,
        |text| {
            assert!(text.contains(REVISION_LINE), "the example's revision moved");
            assert!(
                text.contains("maxAmount = 500"),
                "refundLimit's maximum moved"
            );
            let mut text = text
                .replace(REVISION_LINE, &format!("revision = \"{}\"", v.revision))
                .replace("maxAmount = 500", &format!("maxAmount = {}", v.max_amount));
            if !v.draft {
                text = without_capability(&text, "messages.draft");
            }
            if let Some(schema) = &v.refund_schema {
                text = text
                    .lines()
                    .map(|l| {
                        if l.starts_with("inputSchema = \"") && l.ends_with("orders.refund.json\"")
                        {
                            format!("inputSchema = {schema}")
                        } else {
                            l.to_string()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
            }
            for (from, to) in &v.replace {
                assert!(text.contains(from), "`{from}` is not in the example");
                text = text.replace(from, to);
            }
            text
        },
        &extra,
    )
}

/// The text without one `[[capabilities]]` block.
fn without_capability(text: &str, id: &str) -> String {
    let marker = format!("[[capabilities]]\nid = \"{id}\"");
    let start = text
        .find(&marker)
        .expect("the capability is in the example");
    let rest = &text[start + marker.len()..];
    let end = rest
        .find("\n[")
        .map_or(text.len(), |i| start + marker.len() + i + 1);
    format!("{}{}", &text[..start], &text[end..])
}

fn refund(order: &str, amount: u32, invocation_id: &str) -> Value {
    json!({
        "capabilityId": "orders.refund",
        "input": {"orderId": order, "amount": amount, "reason": "damaged item"},
        "invocationId": invocation_id,
    })
}

fn id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// `POST /admin/reload` with this key (or none).
async fn reload(base: &str, key: Option<&str>) -> (u16, Value) {
    let http = reqwest::Client::new();
    let mut r = http.post(format!("{base}/admin/reload"));
    if let Some(k) = key {
        r = r.bearer_auth(k);
    }
    let res = r.send().await.expect("send");
    let status = res.status().as_u16();
    let text = res.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| json!({ "raw": text })),
    )
}

/// The contract digest of one capability on `/agent`.
async fn digest_of(agent: &str, capability: &str) -> String {
    let (status, contract) = Caller::new(DANA).get(&format!("{agent}/contract")).await;
    assert_eq!(status, 200, "{contract}");
    let list = contract
        .as_array()
        .or_else(|| contract["capabilities"].as_array())
        .unwrap_or_else(|| panic!("a contract list: {contract}"));
    list.iter()
        .find(|d| d["id"] == capability)
        .and_then(|d| d["contractDigest"].as_str())
        .unwrap_or_else(|| panic!("{capability} in the contract: {contract}"))
        .to_string()
}

/// The audit events of one type, as `capgate audit query` prints them.
fn audited(store: &str, event_type: &str) -> Vec<Value> {
    capgate(&["audit", "query", "--store", store, "--type", event_type])
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON event per line"))
        .collect()
}

fn sqlite(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("capgate.db").display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sighup_reloads_the_file_and_new_calls_see_the_new_threshold() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = sqlite(dir.path());
    let config = write(dir.path(), &Variant::new("rev-1", 500));
    let server = Server::start(&config, &store);
    let agent = format!("{}/agent", server.base);
    let dana = Caller::new(DANA);

    let (status, before) = dana
        .post(
            &format!("{agent}/invoke"),
            &refund("ord_42", 300, &id("before")),
        )
        .await;
    assert_eq!(status, 200, "{before}");
    assert_eq!(before["status"], "completed", "300 is under 500: {before}");
    let digest_before = digest_of(&agent, "orders.refund").await;

    write(dir.path(), &Variant::new("rev-2", 100));
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(sent.success());

    // SIGHUP answers nobody: wait until new calls see the new maximum.
    let mut after = Value::Null;
    for _ in 0..120 {
        let (status, answer) = dana
            .post(
                &format!("{agent}/invoke"),
                &refund("ord_42", 300, &id("after")),
            )
            .await;
        assert_eq!(status, 200, "no call fails across a reload: {answer}");
        after = answer;
        if after["status"] == "approval-required" {
            break;
        }
        assert_eq!(after["status"], "completed", "{after}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(after["status"], "approval-required", "{after}");
    assert_eq!(
        after["approval"]["reasons"],
        json!(["Refund of $300 exceeds $100"])
    );
    assert_ne!(
        digest_of(&agent, "orders.refund").await,
        digest_before,
        "the revision is part of every contract digest"
    );

    let reloads = audited(&store, "capgate.config.reloaded");
    assert_eq!(reloads.len(), 1, "{reloads:?}");
    let data = &reloads[0]["data"];
    assert_eq!(data["trigger"], "signal", "{data}");
    assert_eq!(data["previousRevision"], "rev-1", "{data}");
    assert_eq!(data["revision"], "rev-2", "{data}");
    assert_ne!(data["contractDigest"], data["previousContractDigest"]);
    assert_eq!(reloads[0]["actor"]["id"], "sighup");

    // A broken file on SIGHUP: refused (in the log and the audit), the process keeps
    // serving rev-2.
    let mut broken = Variant::new("rev-3", 1000);
    broken
        .replace
        .push(("risk = \"high\"", "risk = \"catastrophic\"".into()));
    write(dir.path(), &broken);
    let sent = std::process::Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(sent.success());
    let mut refused = Vec::new();
    for _ in 0..120 {
        refused = audited(&store, "capgate.config.reload_refused");
        if !refused.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["data"]["trigger"], "signal");
    assert_eq!(refused[0]["data"]["revision"], "rev-2");
    let (status, still) = dana
        .post(
            &format!("{agent}/invoke"),
            &refund("ord_42", 300, &id("still")),
        )
        .await;
    assert_eq!(status, 200, "{still}");
    assert_eq!(still["status"], "approval-required", "still 100: {still}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_reload_is_refused_without_a_key_and_without_the_operator_role() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = sqlite(dir.path());
    let config = write(dir.path(), &Variant::new("rev-1", 500));
    let server = Server::start(&config, &store);
    write(dir.path(), &Variant::new("rev-2", 100));

    let (status, body) = reload(&server.base, None).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = reload(&server.base, Some("not-a-key")).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = reload(&server.base, Some(DANA)).await;
    assert_eq!(status, 403, "an agent's key is no operator's: {body}");
    let (status, body) = reload(&server.base, Some(PRIYA)).await;
    assert_eq!(status, 403, "an approver is no operator: {body}");
    let (status, body) = reload(&server.base, Some(TENANT_OPERATOR)).await;
    assert_eq!(
        status, 403,
        "a tenant's key with the operator role is no operator's: {body}"
    );
    assert!(
        audited(&store, "capgate.config.reloaded").is_empty(),
        "nothing was reloaded"
    );

    let (status, body) = reload(&server.base, Some(OPS)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["previous"]["revision"], "rev-1", "{body}");
    assert_eq!(body["current"]["revision"], "rev-2", "{body}");
    let reloads = audited(&store, "capgate.config.reloaded");
    assert_eq!(reloads.len(), 1, "{reloads:?}");
    assert_eq!(reloads[0]["data"]["trigger"], "admin");
    assert_eq!(reloads[0]["data"]["namespace"], "capgate.operators");
    assert_eq!(reloads[0]["actor"]["id"], "u_olga_ops");

    let metrics = server
        .metrics
        .as_deref()
        .expect("the example serves metrics");
    let text = reqwest::get(metrics)
        .await
        .expect("scrape")
        .text()
        .await
        .expect("body");
    assert!(
        text.lines()
            .any(|l| l == "capgate_config_reloads_total{result=\"reloaded\"} 1"),
        "{}",
        text.lines()
            .filter(|l| l.contains("reload"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_reload_is_off_unless_configured() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(dir.path(), |t| t, &operator_key());
    let server = Server::start(&config, &sqlite(dir.path()));
    let (status, body) = reload(&server.base, Some(OPS)).await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broken_file_is_refused_with_check_s_located_problems_and_the_old_revision_keeps_serving()
{
    let dir = tempfile::tempdir().expect("tempdir");
    let store = sqlite(dir.path());
    let config = write(dir.path(), &Variant::new("rev-1", 500));
    let server = Server::start(&config, &store);
    let agent = format!("{}/agent", server.base);
    let dana = Caller::new(DANA);
    let digest_before = digest_of(&agent, "orders.refund").await;

    let mut broken = Variant::new("rev-2", 100);
    broken
        .replace
        .push(("risk = \"high\"", "risk = \"catastrophic\"".into()));
    write(dir.path(), &broken);
    let (status, body) = reload(&server.base, Some(OPS)).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["status"], "refused", "{body}");
    assert_eq!(body["current"]["revision"], "rev-1", "{body}");
    let located: Vec<String> = body["problems"]
        .as_array()
        .unwrap_or_else(|| panic!("problems: {body}"))
        .iter()
        .map(|p| p["located"].as_str().expect("located").to_string())
        .collect();
    assert!(!located.is_empty(), "{body}");
    let prefix = format!("{}:", config.display());
    assert!(
        located
            .iter()
            .any(|l| l.starts_with(&prefix) && l.contains("risk")),
        "file:line:column: key: message, naming the risk: {located:?}"
    );
    // Exactly what `capgate check` says about the same file.
    let check = capgate_output(&["check", "--config", &config.display().to_string()]);
    assert!(!check.status.success());
    let stderr = String::from_utf8_lossy(&check.stderr);
    for l in &located {
        assert!(
            stderr.contains(l.as_str()),
            "check says {stderr}, reload {l}"
        );
    }

    // Nothing of the broken file is served: the old maximum, the old digests.
    let (status, still) = dana
        .post(
            &format!("{agent}/invoke"),
            &refund("ord_42", 300, &id("still")),
        )
        .await;
    assert_eq!(status, 200, "{still}");
    assert_eq!(still["status"], "completed", "still 500: {still}");
    assert_eq!(digest_of(&agent, "orders.refund").await, digest_before);

    // What a running process cannot take over is refused by name, also with a sound file.
    let mut moved = Variant::new("rev-2", 100);
    moved.replace.push((
        "listen = \"127.0.0.1:8080\"",
        "listen = \"127.0.0.1:8081\"".into(),
    ));
    write(dir.path(), &moved);
    let (status, body) = reload(&server.base, Some(OPS)).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["problems"][0]["key"], "gateway.listen", "{body}");
    assert!(
        body["problems"][0]["line"].as_u64().unwrap_or(0) > 0,
        "{body}"
    );

    // Fixed, the file is taken.
    write(dir.path(), &Variant::new("rev-2", 100));
    let (status, body) = reload(&server.base, Some(OPS)).await;
    assert_eq!(status, 200, "{body}");
    let (_, now) = dana
        .post(
            &format!("{agent}/invoke"),
            &refund("ord_42", 300, &id("now")),
        )
        .await;
    assert_eq!(now["status"], "approval-required", "{now}");

    let refused = audited(&store, "capgate.config.reload_refused");
    assert_eq!(refused.len(), 2, "{refused:?}");
    for e in &refused {
        assert_eq!(e["data"]["revision"], "rev-1", "{e}");
        assert!(e["data"]["problems"].as_u64().unwrap_or(0) >= 1, "{e}");
        assert!(
            !e.to_string().contains("catastrophic"),
            "the audit carries places, not the file's values: {e}"
        );
    }
    assert_eq!(audited(&store, "capgate.config.reloaded").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_capability_added_by_a_reload_is_callable_and_sessions_survive_the_reload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut without = Variant::new("rev-1", 500);
    without.draft = false;
    let config = write(dir.path(), &without);
    let server = Server::start(&config, &sqlite(dir.path()));
    let agent = format!("{}/agent", server.base);
    let dana = Caller::new(DANA);
    let draft = json!({
        "capabilityId": "messages.draft",
        "input": {"customerId": "cus_1", "body": "Your refund is on its way."},
        "invocationId": "draft_1",
    });
    let (_, missing) = dana.post(&format!("{agent}/invoke"), &draft).await;
    assert_eq!(missing["status"], "failed", "{missing}");
    assert_eq!(
        missing["error"]["code"], "CAPABILITY_NOT_FOUND",
        "{missing}"
    );

    // An MCP session and a console sign-in opened before the reload.
    let mut mcp = Mcp::connect(&server.base, DANA).await;
    let tools = mcp.request("tools/list", json!({})).await;
    assert!(!tools.to_string().contains("messages_draft"), "{tools}");
    let http = reqwest::Client::new();
    let signed = http
        .post(format!("{}/console/session", server.base))
        .json(&json!({"credential": PRIYA}))
        .send()
        .await
        .expect("sign in");
    assert_eq!(signed.status().as_u16(), 200);
    let cookie = signed
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_string();

    write(dir.path(), &Variant::new("rev-2", 500));
    let (status, body) = reload(&server.base, Some(OPS)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["current"]["capabilities"].as_u64(),
        body["previous"]["capabilities"].as_u64().map(|n| n + 1),
        "{body}"
    );

    let mut draft2 = draft.clone();
    draft2["invocationId"] = json!("draft_2");
    let (status, drafted) = dana.post(&format!("{agent}/invoke"), &draft2).await;
    assert_eq!(status, 200, "{drafted}");
    assert_eq!(drafted["status"], "completed", "{drafted}");

    // The same MCP session goes on, served by the new configuration.
    let tools = mcp.request("tools/list", json!({})).await;
    assert!(tools.to_string().contains("messages_draft"), "{tools}");
    // The approver is still signed in.
    let me = http
        .get(format!("{}/console/session", server.base))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("session");
    assert_eq!(me.status().as_u16(), 200, "a reload signs nobody out");
}

/// A backend that holds each call until released, and says when one arrived.
async fn holding_backend() -> (
    String,
    tokio::sync::mpsc::Receiver<()>,
    Arc<tokio::sync::Notify>,
) {
    let (arrived, arrivals) = tokio::sync::mpsc::channel(8);
    let release = Arc::new(tokio::sync::Notify::new());
    let gate = release.clone();
    let app = axum::Router::new().fallback(move || {
        let arrived = arrived.clone();
        let gate = gate.clone();
        async move {
            let _ = arrived.send(()).await;
            gate.notified().await;
            axum::Json(json!({"report": "done"}))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind backend");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), arrivals, release)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_in_flight_finishes_on_the_revision_it_started_on() {
    let (backend, mut arrivals, release) = holding_backend().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut with_report = Variant::new("rev-1", 500);
    with_report.extra = format!(
        "[[capabilities]]\nid = \"reports.build\"\ndescription = \"Build a report\"\n\
         expose = {{ aiSdk = true }}\nsideEffect = \"read\"\nrisk = \"low\"\n\
         procedure = {{ http = {{ target = \"reports\", url = \"{backend}/report\" }} }}\n"
    );
    let config = write(dir.path(), &with_report);
    let server = Server::start(&config, &sqlite(dir.path()));
    let agent = format!("{}/agent", server.base);
    let dana = Caller::new(DANA);

    let url = format!("{agent}/invoke");
    let in_flight = tokio::spawn({
        let dana = dana.clone();
        async move {
            dana.post(
                &url,
                &json!({"capabilityId": "reports.build", "input": {}, "invocationId": "report_1"}),
            )
            .await
        }
    });
    tokio::time::timeout(Duration::from_secs(30), arrivals.recv())
        .await
        .expect("the call reached the backend")
        .expect("arrived");

    // The new revision no longer has the capability at all.
    write(dir.path(), &Variant::new("rev-2", 500));
    let (status, body) = reload(&server.base, Some(OPS)).await;
    assert_eq!(status, 200, "{body}");
    let (_, gone) = dana
        .post(
            &format!("{agent}/invoke"),
            &json!({"capabilityId": "reports.build", "input": {}, "invocationId": "report_2"}),
        )
        .await;
    assert_eq!(gone["error"]["code"], "CAPABILITY_NOT_FOUND", "{gone}");

    release.notify_one();
    let (status, done) = in_flight.await.expect("the call task");
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"]["report"], "done", "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approvals_from_the_previous_configuration_resume_under_the_current_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write(dir.path(), &Variant::new("rev-1", 500));
    let server = Server::start(&config, &sqlite(dir.path()));
    let agent = format!("{}/agent", server.base);
    let dana = Caller::new(DANA);
    let priya = Caller::new(PRIYA);
    let approve = |approval: String| {
        let priya = priya.clone();
        let url = format!("{}/approvals/{approval}/decision", server.base);
        async move {
            let (status, decided) = priya.post(&url, &json!({"decision": "approved"})).await;
            assert_eq!(status, 200, "{decided}");
        }
    };
    let mut held = Vec::new();
    for call in ["held_1", "held_2"] {
        let (_, answer) = dana
            .post(&format!("{agent}/invoke"), &refund("ord_42", 649, call))
            .await;
        assert_eq!(answer["status"], "approval-required", "{answer}");
        let approval = answer["approval"]["id"].as_str().expect("id").to_string();
        approve(approval.clone()).await;
        held.push(approval);
    }
    let mut mcp = Mcp::connect(&server.base, DANA).await;
    let asked = mcp
        .call(
            "orders_refund",
            json!({"orderId": "ord_42", "amount": 649, "reason": "damaged item"}),
        )
        .await;
    let over_mcp = asked["result"]["structuredContent"]["approval"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("an approval over MCP: {asked}"))
        .to_string();
    approve(over_mcp.clone()).await;

    // A lower maximum, same revision: the contract is unchanged, and the resume re-runs the
    // current invocation policies, whose require-approval this very approval satisfies.
    write(dir.path(), &Variant::new("rev-1", 100));
    let (status, body) = reload(&server.base, Some(OPS)).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("revision")),
        "a changed file under the same revision is pointed out: {body}"
    );
    let (_, resumed) = dana
        .post(
            &format!("{agent}/resumeApproval"),
            &json!({"approvalId": held[0], "invocationId": "held_1"}),
        )
        .await;
    assert_eq!(resumed["status"], "completed", "{resumed}");

    // A new revision that changes nothing about orders.refund: the capability's own
    // digest (without the revision) is what the approval recorded, so it still resumes
    // (issue 33; a revision bump used to strand every pending approval).
    write(dir.path(), &Variant::new("rev-2", 100));
    let (status, body) = reload(&server.base, Some(OPS)).await;
    assert_eq!(status, 200, "{body}");
    let (_, resumed) = dana
        .post(
            &format!("{agent}/resumeApproval"),
            &json!({"approvalId": held[1], "invocationId": "held_2"}),
        )
        .await;
    assert_eq!(resumed["status"], "completed", "{resumed}");

    // A schema that no longer admits the approved input changes the capability itself:
    // the MCP door now makes the HTTP door's contract check (issue 33) and refuses the
    // resume before the runtime re-validates anything.
    let mut narrower = Variant::new("rev-2", 100);
    narrower.refund_schema = Some(
        "{ type = \"object\", properties = { orderId = { type = \"string\" }, amount = { type = \"number\", maximum = 600 }, reason = { type = \"string\" } }, required = [\"orderId\", \"amount\"] }".into(),
    );
    write(dir.path(), &narrower);
    let (status, body) = reload(&server.base, Some(OPS)).await;
    assert_eq!(status, 200, "{body}");
    let refused = mcp
        .call("approvals_resume", json!({"approvalId": over_mcp}))
        .await;
    let outcome = &refused["result"]["structuredContent"];
    assert_eq!(outcome["status"], "failed", "{refused}");
    assert_eq!(outcome["error"]["code"], "CONTRACT_MISMATCH", "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_reloads_under_concurrent_load_answer_every_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut start = Variant::new("rev-1", 500);
    start.draft = false;
    let config = write(dir.path(), &start);
    let server = Server::start(&config, &sqlite(dir.path()));
    let agent = format!("{}/agent", server.base);

    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut users = Vec::new();
    for user in 0..8 {
        let (stop, calls, errors) = (stop.clone(), calls.clone(), errors.clone());
        let url = format!("{agent}/invoke");
        users.push(tokio::spawn(async move {
            let dana = Caller::new(DANA);
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let (status, answer) = dana
                    .post(&url, &refund("ord_43", 20, &format!("load_{user}_{n}")))
                    .await;
                calls.fetch_add(1, Ordering::Relaxed);
                if status != 200 || answer["status"] != "completed" {
                    errors
                        .lock()
                        .expect("errors")
                        .push(format!("{status} {answer}"));
                }
            }
        }));
    }
    let pause = || tokio::time::sleep(Duration::from_millis(700));
    pause().await;

    let mut lower = Variant::new("rev-2", 100);
    lower.draft = false;
    write(dir.path(), &lower);
    let (status, first) = reload(&server.base, Some(OPS)).await;
    assert_eq!(status, 200, "threshold: {first}");
    pause().await;

    write(dir.path(), &Variant::new("rev-3", 100));
    let (status, second) = reload(&server.base, Some(OPS)).await;
    assert_eq!(status, 200, "capability: {second}");
    pause().await;

    let mut broken = Variant::new("rev-4", 100);
    broken
        .replace
        .push(("risk = \"high\"", "risk = \"catastrophic\"".into()));
    write(dir.path(), &broken);
    let (status, third) = reload(&server.base, Some(OPS)).await;
    assert_eq!(status, 422, "broken: {third}");
    assert_eq!(third["current"]["revision"], "rev-3", "{third}");
    pause().await;

    stop.store(true, Ordering::Relaxed);
    for u in users {
        u.await.expect("user");
    }
    let errors = errors.lock().expect("errors").clone();
    assert!(
        errors.is_empty(),
        "{} of {} calls failed: {:?}",
        errors.len(),
        calls.load(Ordering::Relaxed),
        &errors[..errors.len().min(5)]
    );
    assert!(calls.load(Ordering::Relaxed) > 0);
    let (_, now) = Caller::new(DANA)
        .post(
            &format!("{agent}/invoke"),
            &refund("ord_42", 300, "after_load"),
        )
        .await;
    assert_eq!(now["status"], "approval-required", "{now}");
}
