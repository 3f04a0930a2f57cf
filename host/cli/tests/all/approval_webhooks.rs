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
        if n >= 11 {
            break;
        }
        assert!(
            Instant::now() < end,
            "11 notifications, got {n}: {:?}",
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
    assert_eq!(json.len(), 5, "{json:?}");
    assert_eq!(json[2]["type"], "approval.requested", "{json:?}");
    assert_eq!(json[3]["type"], "approval.escalated", "{json:?}");
    assert_eq!(json[3]["escalateTo"], "director", "{json:?}");
    assert_eq!(json[4]["type"], "approval.expired", "{json:?}");
    assert_eq!(json[4]["approvalId"], left.as_str(), "{json:?}");
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
    assert_eq!(
        json[0]["reasons"][0], "Refund of $649 exceeds $500",
        "{json:?}"
    );
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
        5
    );
    let slack: Vec<&str> = inbox
        .got
        .iter()
        .filter(|g| g.0 == "slack")
        .filter_map(|g| g.2["text"].as_str())
        .collect();
    assert_eq!(slack.len(), 5, "{slack:?}");
    assert!(
        slack[3].starts_with("*Approval waiting*, escalated to director: `orders.refund`"),
        "{slack:?}"
    );
    assert!(
        slack[4].starts_with("*Approval expired* undecided: `orders.refund`"),
        "{slack:?}"
    );
    assert!(
        slack[0].starts_with("*Approval requested* for `orders.refund`: Refund of $649"),
        "{slack:?}"
    );
    assert!(
        slack[0].contains(&format!("<{link}|{approval}>")),
        "{slack:?}"
    );
    assert!(slack[1].starts_with("*Approved* by u_priya"), "{slack:?}");
}
