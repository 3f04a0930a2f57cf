//! The customer-support example's tenancy and human confirmation, against the real
//! `capgate serve` over HTTP:
//!
//! - tenant isolation is the application's own check at stage 11: the support-desk
//!   procedure re-verifies the actor's organisation (and `orders:refund`) against the
//!   order's, so Eve of org_2 — who holds `orders:refund` — can neither refund nor read
//!   org_1's `ord_42`, while Dana of org_1 can; the refusal is FORBIDDEN in the audit
//!   trail (over HTTP a failure after the procedure was entered answers `outcome-unknown`,
//!   spec: distributed-capability-runtimes);
//! - the requester door: Dana confirms her own `messages.send` (`human-confirmation`)
//!   through the approvals API with her console credential, without the approver role, and
//!   her agent resumes it; her agent's key cannot confirm it; Eve cannot see or decide it;
//!   Dana cannot decide her own refund, which needs a manager.
//!
//! The store-bound tests run on SQLite and on Postgres.

use crate::common;

use common::*;
use serde_json::{Value, json};

const DANA: &str = "dana-dev-key";
/// Dana's own console credential (no model door): what she confirms with.
const DANA_CONSOLE: &str = "dana-console-key";
const PRIYA: &str = "priya-dev-key";
const EVE: &str = "eve-dev-key";
const WORKFLOW: &str = "ops-workflow-key";

/// Run `test` against a fresh SQLite store, then a fresh Postgres database when one is
/// configured.
async fn with_stores(test: impl AsyncFn(&str)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = format!("sqlite://{}", dir.path().join("capgate.db").display());
    test(&sqlite).await;
    if let Some(pg) = postgres_db().await {
        capgate(&["migrate", "--store", &pg.url]);
        test(&pg.url).await;
    }
}

fn invoke(capability: &str, input: Value, invocation_id: &str) -> Value {
    json!({"capabilityId": capability, "input": input, "invocationId": invocation_id})
}

fn refund(order: &str, amount: u32) -> Value {
    json!({"orderId": order, "amount": amount, "reason": "damaged item"})
}

/// The audit events `capgate audit query` prints for these filters.
fn audit(store: &str, filters: &[&str]) -> Vec<Value> {
    let out = capgate(&[&["audit", "query", "--store", store][..], filters].concat());
    out.lines()
        .map(|l| serde_json::from_str(l).expect("one JSON event per line"))
        .collect()
}

/// The terminal event of each of an actor's executions of a capability.
fn terminals(store: &str, actor: &str, capability: &str) -> Vec<Value> {
    let events = audit(store, &["--actor", actor, "--capability", capability]);
    let mut executions: Vec<String> = Vec::new();
    for e in &events {
        if let Some(x) = e["executionId"].as_str()
            && !executions.iter().any(|seen| seen == x)
        {
            executions.push(x.to_string());
        }
    }
    executions
        .iter()
        .filter_map(|x| {
            events
                .iter()
                .rev()
                .find(|e| e["executionId"] == x.as_str())
                .cloned()
        })
        .collect()
}

/// Assert that the procedure was entered and refused the call as FORBIDDEN.
fn assert_refused_at_stage_11(store: &str, actor: &str, capability: &str, execution: &Value) {
    let x = execution["executionId"].as_str().expect("execution id");
    let types: Vec<String> = audit(store, &["--execution", x])
        .iter()
        .filter_map(|e| e["type"].as_str().map(str::to_string))
        .collect();
    // A fresh call starts with capability.requested; a resumed one with capability.started.
    let from = usize::from(types.first().is_some_and(|t| t == "capability.requested"));
    assert_eq!(
        types[from..],
        ["capability.started", "capability.failed"],
        "{actor} {capability}: policies let it through, the procedure refused it"
    );
    assert_eq!(execution["type"], "capability.failed", "{execution}");
    assert_eq!(execution["data"]["code"], "FORBIDDEN", "{execution}");
    assert_eq!(execution["data"]["stage"], "authorization", "{execution}");
}

#[tokio::test(flavor = "multi_thread")]
async fn eve_of_org_2_can_neither_refund_nor_read_org_1s_order_and_the_audit_says_forbidden() {
    with_stores(async |store: &str| {
        let s = Server::start(&example_config(), store);
        let agent = format!("{}/agent/invoke", s.base);
        let eve = Caller::new(EVE);

        // Eve holds orders:refund and orgIsolation lets her ask (her actor and context
        // agree); only the order's organisation stops her, at stage 11.
        let (status, read) = eve
            .post(
                &agent,
                &invoke(
                    "orders.checkEligibility",
                    json!({"orderId": "ord_42"}),
                    "eve_read",
                ),
            )
            .await;
        assert_eq!(status, 200, "{read}");
        assert_eq!(read["status"], "outcome-unknown", "{read}");
        assert!(!read.to_string().contains("649"), "{read}");
        let (status, refunded) = eve
            .post(
                &agent,
                &invoke("orders.refund", refund("ord_42", 100), "eve_refund"),
            )
            .await;
        assert_eq!(status, 200, "{refunded}");
        assert_eq!(refunded["status"], "outcome-unknown", "{refunded}");
        assert!(refunded.get("output").is_none(), "{refunded}");

        // Her own organisation's order she may refund: the permission is real.
        let (_, own) = eve
            .post(
                &agent,
                &invoke("orders.refund", refund("ord_44", 50), "eve_own"),
            )
            .await;
        assert_eq!(own["status"], "completed", "{own}");
        assert_eq!(own["output"]["status"], "issued", "{own}");

        // Dana, of org_1, reads and refunds ord_42.
        let dana = Caller::new(DANA);
        let (_, checked) = dana
            .post(
                &agent,
                &invoke(
                    "orders.checkEligibility",
                    json!({"orderId": "ord_42"}),
                    "dana_read",
                ),
            )
            .await;
        assert_eq!(checked["status"], "completed", "{checked}");
        assert_eq!(
            checked["output"]["maxRefund"].as_f64(),
            Some(649.0),
            "{checked}"
        );
        let (_, done) = dana
            .post(
                &agent,
                &invoke("orders.refund", refund("ord_42", 100), "dana_refund"),
            )
            .await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["output"]["amount"], 100, "{done}");

        // The audit trail says why Eve's calls failed: FORBIDDEN at the authorization stage,
        // after the policies allowed them, with no completion.
        let refunds = terminals(store, "u_eve", "orders.refund");
        assert_eq!(refunds.len(), 2, "{refunds:?}");
        assert_refused_at_stage_11(store, "u_eve", "orders.refund", &refunds[0]);
        assert_eq!(refunds[1]["type"], "capability.completed", "{refunds:?}");
        let reads = terminals(store, "u_eve", "orders.checkEligibility");
        assert_eq!(reads.len(), 1, "{reads:?}");
        assert_refused_at_stage_11(store, "u_eve", "orders.checkEligibility", &reads[0]);
        let danas = terminals(store, "u_dana", "orders.refund");
        assert!(
            danas.iter().all(|e| e["type"] == "capability.completed"),
            "{danas:?}"
        );

        // The receipts of Eve's refused calls stay pending (the effect is unknown to the
        // gateway), so a retry under the same id runs nothing.
        let (_, receipt) = eve
            .post(
                &format!("{}/agent/getInvocation", s.base),
                &json!({"invocationId": "eve_refund"}),
            )
            .await;
        assert_eq!(receipt["state"], "pending", "{receipt}");
        let (_, again) = eve
            .post(
                &agent,
                &invoke("orders.refund", refund("ord_42", 100), "eve_refund"),
            )
            .await;
        assert_eq!(again["status"], "outcome-unknown", "{again}");
        assert_eq!(terminals(store, "u_eve", "orders.refund").len(), 2);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn customer_search_shows_each_organisation_only_its_own_customers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let s = Server::start(&example_config(), &store);
    let search = async |key: &str, inv: &str| -> Vec<String> {
        let (_, found) = Caller::new(key)
            .post(
                &format!("{}/agent/invoke", s.base),
                &invoke("customers.search", json!({"query": ""}), inv),
            )
            .await;
        assert_eq!(found["status"], "completed", "{found}");
        found["output"]["customers"]
            .as_array()
            .expect("customers")
            .iter()
            .filter_map(|c| c["id"].as_str().map(str::to_string))
            .collect()
    };
    assert_eq!(search(DANA, "d1").await, ["cus_1", "cus_2"]);
    assert_eq!(search(EVE, "e1").await, ["cus_3"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_workflow_key_refunds_its_own_organisations_orders_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let s = Server::start(&example_config(), &store);
    let ops = Caller::new(WORKFLOW);
    let url = format!("{}/workflow/invoke", s.base);
    let (_, own) = ops
        .post(
            &url,
            &invoke("orders.refund", refund("ord_43", 20), "w_own"),
        )
        .await;
    assert_eq!(own["status"], "completed", "{own}");
    let (_, foreign) = ops
        .post(
            &url,
            &invoke("orders.refund", refund("ord_44", 20), "w_foreign"),
        )
        .await;
    assert_eq!(foreign["status"], "outcome-unknown", "{foreign}");
    let refused = terminals(&store, "svc_refund_flow", "orders.refund");
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert_refused_at_stage_11(&store, "svc_refund_flow", "orders.refund", &refused[1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_from_eves_own_manager_does_not_open_org_1s_order_to_her() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let config = deployment(dir.path(), |t| t, &olga_key());
    let s = Server::start(&config, &store);
    let eve = Caller::new(EVE);
    let (_, held) = eve
        .post(
            &format!("{}/agent/invoke", s.base),
            &invoke("orders.refund", refund("ord_42", 649), "eve_big"),
        )
        .await;
    assert_eq!(held["status"], "approval-required", "{held}");
    let id = held["approval"]["id"].as_str().expect("approval id");
    let (status, decided) = Caller::new(OLGA)
        .post(
            &format!("{}/approvals/{id}/decision", s.base),
            &json!({"decision": "approved"}),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    let (_, resumed) = eve
        .post(
            &format!("{}/agent/resumeApproval", s.base),
            &json!({"approvalId": id, "invocationId": "eve_big"}),
        )
        .await;
    assert_eq!(resumed["status"], "outcome-unknown", "{resumed}");
    let refunds = terminals(&store, "u_eve", "orders.refund");
    let last = refunds.last().expect("the resumed execution");
    assert_refused_at_stage_11(&store, "u_eve", "orders.refund", last);
}

/// Dana's `messages.send`, held for her own confirmation; returns the approval id.
async fn send_held(base: &str, invocation_id: &str) -> String {
    let (status, held) = Caller::new(DANA)
        .post(
            &format!("{base}/agent/invoke"),
            &invoke(
                "messages.send",
                json!({"customerId": "cus_1", "body": "Your refund of $649 is issued."}),
                invocation_id,
            ),
        )
        .await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["status"], "approval-required", "{held}");
    assert_eq!(
        held["approval"]["types"],
        json!(["human-confirmation"]),
        "{held}"
    );
    held["approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn dana_confirms_her_own_message_send_through_the_requester_door_and_resumes_it() {
    with_stores(async |store: &str| {
        let s = Server::start(&example_config(), store);
        let id = send_held(&s.base, "send_1").await;
        let one = format!("{}/approvals/{id}", s.base);
        let decision = format!("{one}/decision");
        let dana = Caller::new(DANA_CONSOLE);
        let agent = Caller::new(DANA);

        // Eve — another organisation, no approver role — finds nothing: exactly a missing id
        // (her key is an agent's, so the requester door refuses it before any lookup).
        let eve = Caller::new(EVE);
        let missing = format!("{}/approvals/apr_does_not_exist", s.base);
        let (s1, theirs) = eve.get(&one).await;
        let (s2, nothing) = eve.get(&missing).await;
        assert_eq!((s1, &theirs), (s2, &nothing));
        assert_eq!(s1, 403);
        let yes = json!({"decision": "approved", "comment": "send it"});
        let (s1, theirs) = eve.post(&decision, &yes).await;
        let (s2, nothing) = eve.post(&format!("{missing}/decision"), &yes).await;
        assert_eq!((s1, &theirs), (s2, &nothing));
        assert_eq!(s1, 403);

        // Her agent's key opens model doors: it cannot confirm the agent's own held call.
        let yes_agent = json!({"decision": "approved"});
        let (status, body) = agent.get(&one).await;
        assert_eq!(status, 403, "{body}");
        let (status, body) = agent.post(&decision, &yes_agent).await;
        assert_eq!(status, 403, "{body}");
        assert!(body.to_string().contains("console credential"), "{body}");

        // Dana, with her console credential, sees her own pending confirmation...
        let (status, shown) = dana.get(&one).await;
        assert_eq!(status, 200, "{shown}");
        assert_eq!(shown["status"], "pending", "{shown}");
        assert_eq!(shown["ownRequest"], true, "{shown}");
        assert_eq!(shown["requester"]["id"], "u_dana", "{shown}");
        // ... confirms it (executing nothing) ...
        let (status, decided) = dana.post(&decision, &yes).await;
        assert_eq!(status, 200, "{decided}");
        assert_eq!(decided["status"], "approved", "{decided}");
        assert_eq!(decided["decision"]["via"], "requester", "{decided}");
        assert_eq!(decided["decision"]["approver"]["id"], "u_dana", "{decided}");
        assert_eq!(
            decided["decision"]["approverNamespace"], "org_1",
            "{decided}"
        );
        // ... and her agent resumes it with the original invocation id.
        let (_, sent) = agent
            .post(
                &format!("{}/agent/resumeApproval", s.base),
                &json!({"approvalId": id, "invocationId": "send_1"}),
            )
            .await;
        assert_eq!(sent["status"], "completed", "{sent}");
        assert_eq!(sent["output"]["status"], "sent", "{sent}");

        // The store and the audit trail record who confirmed, and how.
        let (_, stored) = Caller::new(PRIYA).get(&one).await;
        assert_eq!(stored["status"], "consumed", "{stored}");
        assert_eq!(stored["decision"]["via"], "requester", "{stored}");
        let approved = audit(
            store,
            &[
                "--type",
                "capability.approved",
                "--capability",
                "messages.send",
            ],
        );
        assert_eq!(approved.len(), 1, "{approved:?}");
        assert_eq!(approved[0]["actor"]["id"], "u_dana", "{approved:?}");
        assert_eq!(approved[0]["data"]["approvalId"], id.as_str());
        assert_eq!(approved[0]["data"]["via"], "requester", "{approved:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dana_cannot_decide_her_own_refund_that_needs_a_manager_and_eve_cannot_see_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let s = Server::start(&example_config(), &store);
    let (_, held) = Caller::new(DANA)
        .post(
            &format!("{}/agent/invoke", s.base),
            &invoke("orders.refund", refund("ord_42", 649), "big_1"),
        )
        .await;
    assert_eq!(held["status"], "approval-required", "{held}");
    let id = held["approval"]["id"].as_str().expect("approval id");
    let one = format!("{}/approvals/{id}", s.base);
    let dana = Caller::new(DANA_CONSOLE);
    let (status, body) = dana.get(&one).await;
    assert_eq!(status, 403, "{body}");
    for decision in ["approved", "rejected"] {
        let (status, body) = dana
            .post(&format!("{one}/decision"), &json!({ "decision": decision }))
            .await;
        assert_eq!(status, 403, "{decision}: {body}");
        assert!(body.to_string().contains("approver"), "{body}");
    }
    // Listing stays for approvers.
    let (status, _) = dana.get(&format!("{}/approvals", s.base)).await;
    assert_eq!(status, 403);
    // Eve's agent key: refused at the requester door before any lookup.
    let (status, _) = Caller::new(EVE).get(&one).await;
    assert_eq!(status, 403);
    let (_, record) = Caller::new(PRIYA).get(&one).await;
    assert_eq!(record["status"], "pending", "{record}");
    assert!(record.get("decision").is_none(), "{record}");
    assert!(
        audit(&store, &["--type", "capability.approved"]).is_empty(),
        "nothing was decided"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_model_door_offers_a_way_to_decide_an_approval() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let s = Server::start(&example_config(), &store);
    let id = send_held(&s.base, "send_m").await;
    let dana = Caller::new(DANA);
    let (status, tools) = dana
        .get(&format!("{}/agent/tools?format=openai", s.base))
        .await;
    assert_eq!(status, 200, "{tools}");
    let names: Vec<&str> = tools
        .as_array()
        .expect("tool list")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(!names.is_empty());
    assert!(
        names
            .iter()
            .all(|n| !n.contains("approv") && !n.contains("decid") && !n.contains("confirm")),
        "{names:?}"
    );
    // The decision route exists only under /approvals, never under a model route.
    for route in ["agent", "workflow", "mcp"] {
        let (status, _) = dana
            .post(
                &format!("{}/{route}/approvals/{id}/decision", s.base),
                &json!({"decision": "approved"}),
            )
            .await;
        assert!([401, 404, 405, 406].contains(&status), "{route}: {status}");
    }
    let (_, record) = Caller::new(PRIYA)
        .get(&format!("{}/approvals/{id}", s.base))
        .await;
    assert_eq!(record["status"], "pending", "{record}");
}
