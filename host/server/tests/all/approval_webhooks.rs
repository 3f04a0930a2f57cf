//! A `webhook` export sink started by [`capgate_server::serve::start`] (docs/guides/approvals.md
//! "Approvals that reach people"): a call held for approval over HTTP reaches a real receiver as an
//! `approval.requested` notification, and its decision as `approval.decided`, each signed as
//! Standard Webhooks specifies (verified here with HMAC-SHA256 computed from the spec, not with
//! capgate's own signer); a refused delivery comes again with the same `webhook-id`; another
//! tenant's approval never reaches a sink limited to `org_1`, and no notification carries the
//! call's input.

use crate::support::{self, DANA, PATIENCE, PRIYA, post, refund};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use hmac::{KeyInit, Mac};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

const EVE: &str = "eve-dev-key";
/// The signing key, and the secret as the file gives it: `whsec_` + its base64.
const KEY: &[u8] = b"capgate-webhook-test-key";
const SECRET: &str = "whsec_Y2FwZ2F0ZS13ZWJob29rLXRlc3Qta2V5";

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Delivery {
    id: String,
    timestamp: String,
    signature: String,
    body: Bytes,
    /// What the receiver answered.
    answered: u16,
}

/// Standard Webhooks: `v1,` + base64 of HMAC-SHA256 over `id.timestamp.body`.
fn expected_signature(d: &Delivery) -> String {
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(KEY).expect("any key");
    mac.update(format!("{}.{}.", d.id, d.timestamp).as_bytes());
    mac.update(&d.body);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

/// Answers `503` to the first request, `200` to every later one.
async fn receive(
    State(got): State<Arc<Mutex<Vec<Delivery>>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let h = |k: &str| {
        headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let mut got = got.lock().expect("inbox");
    let status = if got.is_empty() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    got.push(Delivery {
        id: h("webhook-id"),
        timestamp: h("webhook-timestamp"),
        signature: h("webhook-signature"),
        body,
        answered: status.as_u16(),
    });
    status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_calls_approval_reaches_a_signed_webhook_and_another_tenants_does_not() {
    let inbox: Arc<Mutex<Vec<Delivery>>> = Arc::default();
    let app = axum::Router::new()
        .route("/hooks", axum::routing::post(receive))
        .with_state(inbox.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the receiver");
    let hooks = format!("http://{}/hooks", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().expect("tempdir");
    let config = support::example_in(dir.path(), |text| {
        text.replace(
            "[telemetry.metrics]\n",
            &format!(
                "[audit.export.approvers]\nto = \"webhook\"\nendpoint = \"{hooks}\"\nsecret = \"{SECRET}\"\n\
                 consoleUrl = \"https://capgate.example/console\"\nnamespaces = [\"org_1\"]\n\n\
                 [telemetry.metrics]\n"
            ),
        )
    });
    let s = support::serve(&config, dir.path()).await;
    let http = reqwest::Client::new();
    let invoke = format!("{}/agent/invoke", s.base);
    // Eve (org_2) first, then Dana (org_1): both held by refundLimit.
    let mut held = Vec::new();
    for (key, id) in [(EVE, "webhook_eve"), (DANA, "webhook_dana")] {
        let (status, answer) = post(&http, &invoke, key, &refund(649, id)).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["status"], "approval-required", "{answer}");
        held.push(support::text(&answer["approval"]["id"]));
    }
    let (eves, danas) = (&held[0], &held[1]);
    let (status, decided) = post(
        &http,
        &format!("{}/approvals/{danas}/decision", s.base),
        PRIYA,
        &json!({"decision": "approved"}),
    )
    .await;
    assert_eq!(status, 200, "{decided}");

    // Delivered in the trail's order: once the decision is in, Eve's request, stored before
    // Dana's, was passed over rather than still to come.
    let accepted = support::until("the decision's notification", PATIENCE, async || {
        let got = inbox.lock().expect("inbox").clone();
        let accepted: Vec<(Delivery, Value)> = got
            .into_iter()
            .filter(|d| d.answered == 200)
            .map(|d| {
                let v = serde_json::from_slice(&d.body).expect("a JSON notification");
                (d, v)
            })
            .collect();
        accepted
            .iter()
            .any(|(_, v)| v["type"] == "approval.decided")
            .then_some(accepted)
    })
    .await;
    let got = inbox.lock().expect("inbox").clone();
    s.served.stop().await.expect("a clean stop");

    for d in &got {
        assert_eq!(d.signature, expected_signature(d), "signed: {d:?}");
        let sent: i64 = d.timestamp.parse().expect("a unix timestamp");
        assert!((chrono::Utc::now().timestamp() - sent).abs() < 300, "{d:?}");
    }
    // The refused first delivery came again, the same notification under the same id.
    assert_eq!(got[0].answered, 503, "{got:?}");
    assert_eq!(got[1].id, got[0].id, "a retry keeps its webhook-id");
    assert_eq!(got[1].body, got[0].body);

    let types: Vec<&Value> = accepted.iter().map(|(_, v)| &v["type"]).collect();
    assert_eq!(
        types,
        [&json!("approval.requested"), &json!("approval.decided")],
        "{accepted:?}"
    );
    let (requested, decision) = (&accepted[0].1, &accepted[1].1);
    assert_eq!(requested["approvalId"], danas.as_str(), "{requested}");
    assert_eq!(requested["capabilityId"], "orders.refund");
    assert_eq!(requested["namespace"], "org_1");
    assert_eq!(
        requested["reasons"],
        json!(["refundLimit"]),
        "a code, not the text"
    );
    assert_eq!(
        requested["link"],
        format!("https://capgate.example/console/approvals/{danas}")
    );
    assert_eq!(
        accepted[0].0.id,
        requested["id"].as_str().unwrap_or_default()
    );
    assert_eq!(decision["approvalId"], danas.as_str());
    assert_eq!(decision["decision"], "approved");
    assert_eq!(decision["approver"]["id"], "u_priya");
    for d in &got {
        let body = String::from_utf8_lossy(&d.body);
        assert!(
            !body.contains(eves.as_str()),
            "org_2's approval left: {body}"
        );
        let v: Value = serde_json::from_slice(&d.body).expect("JSON");
        assert!(!carries_amount(&v), "the amount left: {body}");
        assert!(!body.contains("damaged item"), "the reason left: {body}");
    }
}

/// Whether `v` carries the amount 649 anywhere: as a number, or as a word of its own in a
/// string (not as digits inside an id, which random identifiers contain by chance).
fn carries_amount(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.as_u64() == Some(649),
        Value::String(s) => s
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|w| w == "649"),
        Value::Array(a) => a.iter().any(carries_amount),
        Value::Object(o) => o.values().any(carries_amount),
        _ => false,
    }
}
