//! Issue 33's identity edges on the approvals API, over real HTTP: the authorizer is given
//! the approval's stored input on reads and decisions, and an agent's key (one that opens
//! model doors) is refused at the requester door before any lookup.

use crate::gateway_support;

use capgate_client::InvocationOptions;
use capgate_core::authz::Operation;
use capgate_gateway::wire::CapabilityOutcome;
use gateway_support::TestServer;
use serde_json::{Value, json};

fn ok<T, E: std::fmt::Debug>(r: Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("unexpected error: {e:?}"),
    }
}

async fn held_refund(s: &TestServer, input: Value, id: &str) -> String {
    let held = ok(s
        .client("tok-dana")
        .invoke("orders.refund", input, InvocationOptions::new(id))
        .await);
    let CapabilityOutcome::ApprovalRequired { approval, .. } = &held else {
        panic!("expected approval-required, got {held:?}");
    };
    approval.id.clone()
}

async fn call(
    method: reqwest::Method,
    url: String,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method, url)
        .bearer_auth(token);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = ok(req.send().await);
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_authorizer_is_given_the_stored_input_on_approval_reads_and_decisions() {
    let s = TestServer::sqlite().await;
    let input = json!({"orderId": "ord_91", "amount": 900});
    let id = held_refund(&s, input.clone(), "inv-authz-1").await;
    let one = format!("{}/approvals/{id}", s.origin);
    let (status, shown) = call(reqwest::Method::GET, one.clone(), "tok-priya", None).await;
    assert_eq!(status, 200, "{shown}");
    let (status, decided) = call(
        reqwest::Method::POST,
        format!("{one}/decision"),
        "tok-priya",
        Some(json!({"decision": "approved"})),
    )
    .await;
    assert_eq!(status, 200, "{decided}");
    let asked = s.authorizer.asked();
    for operation in [Operation::ReviewApproval, Operation::DecideApproval] {
        let q = asked
            .iter()
            .find(|a| a.actor == "u_priya" && a.operation == operation)
            .unwrap_or_else(|| panic!("{operation:?} was asked: {asked:?}"));
        assert_eq!(q.capability_id.as_deref(), Some("orders.refund"));
        let given = q.input.as_ref().expect("the stored input");
        assert_eq!(given["orderId"], "ord_91", "{given}");
        assert_eq!(given["amount"], 900, "{given}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_key_is_refused_at_the_requester_door_before_any_lookup() {
    let s = TestServer::sqlite().await;
    let id = held_refund(
        &s,
        json!({"orderId": "ord_92", "amount": 900}),
        "inv-authz-2",
    )
    .await;
    let asked_before = s.authorizer.asked().len();
    let (s1, b1) = call(
        reqwest::Method::GET,
        format!("{}/approvals/{id}", s.origin),
        "tok-dana",
        None,
    )
    .await;
    let (s2, b2) = call(
        reqwest::Method::GET,
        format!("{}/approvals/apr_missing", s.origin),
        "tok-dana",
        None,
    )
    .await;
    assert_eq!(
        (s1, &b1),
        (s2, &b2),
        "its own approval and a missing one alike"
    );
    assert_eq!(s1, 403, "{b1}");
    assert!(b1.to_string().contains("console credential"), "{b1}");
    assert_eq!(
        s.authorizer.asked().len(),
        asked_before,
        "refused before the authorizer or the store is asked"
    );
    // Dana's console credential (no model door) is admitted to her own approval's door:
    // this refund is not self-confirmable here, so it is hers but needs an approver (403
    // with that reason), while a missing id is 404.
    let (status, body) = call(
        reqwest::Method::GET,
        format!("{}/approvals/{id}", s.origin),
        "tok-dana-console",
        None,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.to_string().contains("approver"), "{body}");
    let (status, _) = call(
        reqwest::Method::GET,
        format!("{}/approvals/apr_missing", s.origin),
        "tok-dana-console",
        None,
    )
    .await;
    assert_eq!(status, 404);
}
