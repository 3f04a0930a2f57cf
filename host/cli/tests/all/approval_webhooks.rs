//! Approvals that reach people (issue 39, item 6, in part): a served deployment notifies a
//! webhook receiver (real HTTP) when an approval is requested, when it is decided, when one
//! still pending is escalated to a second role and when it expires (each once), signed as
//! Standard Webhooks, retried through the audit outbox while the receiver answers 503; a
//! Slack-compatible receiver gets the same as messages with the console link, and a third
//! sink, for the second role, only the escalation.

use crate::common::{Caller, Server, deployment};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DANA: &str = "dana-dev-key";
const PRIYA: &str = "priya-dev-key";
/// `whsec_` + base64 of the 24 bytes "capgate-webhook-test-key".
const SECRET: &str = "whsec_Y2FwZ2F0ZS13ZWJob29rLXRlc3Qta2V5";

#[derive(Default)]
struct Inbox {
    /// (path, webhook-id, body) of every request answered 200.
    got: Vec<(String, String, Value)>,
    /// Requests answered 503 (the first two to `/json`).
    refused: usize,
    /// Requests whose signature did not verify.
    bad: usize,
}

async fn hook(
    State(inbox): State<Arc<Mutex<Inbox>>>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let h = |k: &str| {
        headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let (id, ts) = (h("webhook-id"), h("webhook-timestamp"));
    let mut inbox = inbox.lock().expect("inbox");
    let key = b"capgate-webhook-test-key";
    let valid = ts
        .parse::<i64>()
        .is_ok_and(|t| capgate_export::signature(key, &id, t, &body) == h("webhook-signature"));
    if !valid {
        inbox.bad += 1;
        return StatusCode::UNAUTHORIZED;
    }
    if path == "json" && inbox.refused < 2 {
        inbox.refused += 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let Ok(v) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    inbox.got.push((path, id, v));
    StatusCode::OK
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_requests_decisions_escalations_and_expiries_reach_signed_webhooks_and_slack() {
    let inbox = Arc::new(Mutex::new(Inbox::default()));
    let app = axum::Router::new()
        .route("/hooks/{path}", axum::routing::post(hook))
        .with_state(inbox.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().expect("tempdir");
    // Approvals expire after 4 s: the first is decided at once, the second left to expire.
    let config = deployment(
        dir.path(),
        |t| t.replacen("[runtime]\n", "[runtime]\napprovalExpiresInMs = 4000\n", 1),
        &format!(
            "[audit.export.approvers]\nto = \"webhook\"\nendpoint = \"{base}/hooks/json\"\nsecret = \"{SECRET}\"\nconsoleUrl = \"https://capgate.example/console\"\n\n\
             [approvals]\nescalateAfterMs = 1500\nescalateTo = \"director\"\n\n\
             [audit.export.directors]\nto = \"webhook\"\nendpoint = \"{base}/hooks/directors\"\nsecret = \"{SECRET}\"\nevents = [\"approval.escalated\"]\n\n\
             [audit.export.chat]\nto = \"webhook\"\nformat = \"slack\"\nendpoint = \"{base}/hooks/slack\"\nsecret = \"{SECRET}\"\nconsoleUrl = \"https://capgate.example/console\"\n"
        ),
    );
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&config, &store);
    let (status, held) = Caller::new(DANA)
        .post(
            &format!("{}/agent/invoke", server.base),
            &json!({
                "capabilityId": "orders.refund",
                "input": {"orderId": "ord_42", "amount": 649, "reason": "damaged item"},
                "invocationId": "webhook_1",
            }),
        )
        .await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["status"], "approval-required", "{held}");
    let approval = held["approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_string();
    Caller::new(PRIYA).approve(&server.base, &approval).await;

    let (status, left) = Caller::new(DANA)
        .post(
            &format!("{}/agent/invoke", server.base),
            &json!({
                "capabilityId": "orders.refund",
                "input": {"orderId": "ord_42", "amount": 700, "reason": "damaged item"},
                "invocationId": "webhook_2",
            }),
        )
        .await;
    assert_eq!(status, 200, "{left}");
    let left = left["approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_string();

    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let n = inbox.lock().expect("inbox").got.len();
        if n >= 13 {
            break;
        }
        assert!(
            Instant::now() < end,
            "13 notifications, got {n}: {:?}",
            inbox.lock().expect("inbox").got
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The sweeper runs every 2 s: time enough to announce an expiry twice if it would.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let inbox = inbox.lock().expect("inbox");
    assert_eq!(inbox.bad, 0, "every request was signed");
    assert_eq!(inbox.refused, 2, "the outage was retried");
    let json: Vec<&Value> = inbox
        .got
        .iter()
        .filter(|g| g.0 == "json")
        .map(|g| &g.2)
        .collect();
    // The first approval was approved and never run: it lapses at its expiry and is
    // announced too (issue 55), as `lapsed`, beside the second one nobody decided.
    assert_eq!(json.len(), 6, "{json:?}");
    assert_eq!(json[2]["type"], "approval.requested", "{json:?}");
    assert_eq!(json[3]["type"], "approval.escalated", "{json:?}");
    assert_eq!(json[3]["escalateTo"], "director", "{json:?}");
    let expired: Vec<&&Value> = json
        .iter()
        .filter(|n| n["type"] == "approval.expired")
        .collect();
    assert_eq!(expired.len(), 2, "{json:?}");
    let of = |id: &str| {
        expired
            .iter()
            .find(|n| n["approvalId"] == id)
            .unwrap_or_else(|| panic!("no expiry of {id}: {json:?}"))
    };
    assert_eq!(of(&approval)["lapsed"], true, "{json:?}");
    assert!(of(&left).get("lapsed").is_none(), "{json:?}");
    // The second role's channel got the escalation only, once.
    let directors: Vec<&Value> = inbox
        .got
        .iter()
        .filter(|g| g.0 == "directors")
        .map(|g| &g.2)
        .collect();
    assert_eq!(directors.len(), 1, "{directors:?}");
    assert_eq!(directors[0]["type"], "approval.escalated");
    assert_eq!(directors[0]["approvalId"], left.as_str());
    assert!(
        directors[0]["pendingMs"]
            .as_u64()
            .is_some_and(|ms| ms >= 1500)
    );
    let link = format!("https://capgate.example/console/approvals/{approval}");
    assert_eq!(json[0]["type"], "approval.requested", "{json:?}");
    assert_eq!(json[0]["approvalId"], approval.as_str());
    assert_eq!(json[0]["capabilityId"], "orders.refund");
    assert_eq!(json[0]["link"], link.as_str());
    // The reason as a code (the policy that asked), never its text: the text quotes the
    // input (SI-10) and stays with the approval record, which approvers read.
    assert_eq!(json[0]["reasons"][0], "refundLimit", "{json:?}");
    assert_eq!(json[0]["namespace"], "org_1", "{json:?}");
    assert!(!carries_amount(json[0], 649), "{json:?}");
    assert_eq!(json[1]["type"], "approval.decided");
    assert_eq!(json[1]["decision"], "approved");
    assert_eq!(json[1]["approver"]["id"], "u_priya", "{json:?}");
    let ids: Vec<&str> = inbox
        .got
        .iter()
        .filter(|g| g.0 == "json")
        .map(|g| g.1.as_str())
        .collect();
    assert_eq!(
        ids.iter().collect::<std::collections::BTreeSet<_>>().len(),
        6
    );
    let slack: Vec<&str> = inbox
        .got
        .iter()
        .filter(|g| g.0 == "slack")
        .filter_map(|g| g.2["text"].as_str())
        .collect();
    assert_eq!(slack.len(), 6, "{slack:?}");
    assert!(
        slack[3].starts_with("*Approval waiting*, escalated to director: `orders.refund`"),
        "{slack:?}"
    );
    assert!(
        slack[4..]
            .iter()
            .any(|t| t.starts_with("*Approval expired* undecided: `orders.refund`")),
        "{slack:?}"
    );
    assert!(
        slack[4..]
            .iter()
            .any(|t| t.starts_with("*Approval lapsed* approved but never run: `orders.refund`")),
        "{slack:?}"
    );
    assert!(
        slack[0].starts_with("*Approval requested* for `orders.refund`: refundLimit"),
        "{slack:?}"
    );
    assert!(
        slack[0].contains(&format!("<{link}|{approval}>")),
        "{slack:?}"
    );
    assert!(slack[1].starts_with("*Approved* by u_priya"), "{slack:?}");
}

/// Every JSON value inside `v`, depth first.
/// Whether `v` carries `amount` anywhere: as a number, as `$amount` (a filled reason), or
/// as a word of its own in a string. Not as digits inside an id or a time, which random
/// identifiers contain by chance (`…a947-6490d07…`).
fn carries_amount(v: &Value, amount: u64) -> bool {
    let mut all = Vec::new();
    values(v, &mut all);
    let word = amount.to_string();
    all.iter().any(|v| match v {
        Value::Number(n) => n.as_u64() == Some(amount),
        Value::String(s) => {
            s.contains(&format!("${word}"))
                || s.split(|c: char| !c.is_ascii_alphanumeric())
                    .any(|w| w == word)
        }
        _ => false,
    })
}

fn values(v: &Value, out: &mut Vec<Value>) {
    out.push(v.clone());
    match v {
        Value::Array(a) => a.iter().for_each(|x| values(x, out)),
        Value::Object(o) => o.values().for_each(|x| values(x, out)),
        _ => {}
    }
}

/// Issue 55 (SI-10): a CEL policy whose approval reason quotes the model's `reason` field
/// (`${input.reason}`), given `<!channel> <https://evil.example|click>` by the model. No
/// exported event (JSON lines) and no notification (JSON webhook, Slack) carries the
/// call's amount, order id or reason text, so nothing of it is posted to Slack; every
/// notification names its namespace, and a sink limited to `org_1` receives nothing of
/// `org_2`'s approvals. The approver still reads the reason, with the input, from the
/// approvals API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_input_value_leaves_in_events_or_notifications_and_sinks_keep_to_their_namespaces() {
    const EVE: &str = "eve-dev-key";
    const EVIL: &str = "<!channel> <https://evil.example|click>";
    let inbox = Arc::new(Mutex::new(Inbox {
        refused: 2,
        ..Inbox::default()
    }));
    let app = axum::Router::new()
        .route("/hooks/{path}", axum::routing::post(hook))
        .with_state(inbox.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().expect("tempdir");
    let exported = dir.path().join("exported");
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "policies = [\"orgIsolation\", \"refundLimit\"]",
                "policies = [\"orgIsolation\", \"refundLimitCel\"]",
            )
            .replace(
                "reason = \"Refund of $${input.amount} exceeds $500\"",
                "reason = \"Refund of $${input.amount} for ${input.orderId} exceeds $500: ${input.reason}\"",
            )
        },
        &format!(
            "[audit.export.everything]\nto = \"jsonl\"\ndirectory = \"{}\"\n\n\
             [audit.export.all]\nto = \"webhook\"\nendpoint = \"{base}/hooks/all\"\nsecret = \"{SECRET}\"\n\n\
             [audit.export.org1]\nto = \"webhook\"\nendpoint = \"{base}/hooks/org1\"\nsecret = \"{SECRET}\"\nnamespaces = [\"org_1\"]\n\n\
             [audit.export.chat]\nto = \"webhook\"\nformat = \"slack\"\nendpoint = \"{base}/hooks/slack\"\nsecret = \"{SECRET}\"\n",
            exported.display()
        ),
    );
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&config, &store);
    let mut approvals = Vec::new();
    for (key, id) in [(DANA, "si10_dana"), (EVE, "si10_eve")] {
        let (status, held) = Caller::new(key)
            .post(
                &format!("{}/agent/invoke", server.base),
                &json!({
                    "capabilityId": "orders.refund",
                    "input": {"orderId": "ord_SECRET_42", "amount": 64917, "reason": EVIL},
                    "invocationId": id,
                }),
            )
            .await;
        assert_eq!(status, 200, "{held}");
        assert_eq!(held["status"], "approval-required", "{held}");
        approvals.push(held["approval"]["id"].as_str().expect("id").to_string());
    }
    // The approver reads the reason the policy wrote, with the input it quotes.
    let (status, record) = Caller::new(PRIYA)
        .get(&format!("{}/approvals/{}", server.base, approvals[0]))
        .await;
    assert_eq!(status, 200, "{record}");
    assert!(record.to_string().contains("ord_SECRET_42"), "{record}");
    Caller::new(PRIYA)
        .approve(&server.base, &approvals[0])
        .await;

    // all: 2 requested + 1 decided; org1: Dana's requested + decided; slack: 3.
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let n = inbox.lock().expect("inbox").got.len();
        if n >= 8 {
            break;
        }
        assert!(Instant::now() < end, "8 notifications, got {n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Time for anything that should not come.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let inbox = {
        let guard = inbox.lock().expect("inbox");
        Inbox {
            got: guard.got.clone(),
            refused: guard.refused,
            bad: guard.bad,
        }
    };
    assert_eq!(inbox.bad, 0);
    let at = |path: &str| -> Vec<&Value> {
        inbox
            .got
            .iter()
            .filter(|g| g.0 == path)
            .map(|g| &g.2)
            .collect()
    };
    let (all, org1, slack) = (at("all"), at("org1"), at("slack"));
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(slack.len(), 3, "{slack:?}");
    assert_eq!(org1.len(), 2, "{org1:?}");
    for n in &all {
        assert!(
            n["namespace"] == "org_1" || n["namespace"] == "org_2",
            "every notification names its namespace: {n}"
        );
    }
    for n in &org1 {
        assert_eq!(n["namespace"], "org_1", "{n}");
        assert_ne!(n["approvalId"], approvals[1].as_str(), "{n}");
    }
    for text in slack.iter().filter_map(|n| n["text"].as_str()) {
        assert!(!text.contains("<!channel>"), "{text}");
        assert!(!text.contains("evil.example"), "{text}");
    }

    // Neither the notifications nor any exported event carries the amount, the order id
    // or the reason text.
    let mut everything: Vec<Value> = inbox.got.iter().map(|g| g.2.clone()).collect();
    let end = Instant::now() + Duration::from_secs(30);
    let lines = loop {
        let mut lines = Vec::new();
        for f in std::fs::read_dir(&exported).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(f.path()).unwrap_or_default();
            lines.extend(
                text.lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok()),
            );
        }
        let decided = lines
            .iter()
            .any(|l| l.to_string().contains("capability.approved"));
        if decided || Instant::now() > end {
            break lines;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        lines
            .iter()
            .any(|l| l.to_string().contains("capability.approval_requested")),
        "the trail was exported"
    );
    everything.extend(lines);
    let mut all_values = Vec::new();
    for v in &everything {
        values(v, &mut all_values);
    }
    for v in all_values {
        assert!(!carries_amount(&v, 64917), "the amount left the box: {v}");
        if let Value::String(s) = &v {
            assert!(
                !s.contains("ord_SECRET_42"),
                "the order id left the box: {s}"
            );
            assert!(!s.contains("evil.example"), "the reason left the box: {s}");
        }
    }
}
