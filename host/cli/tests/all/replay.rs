//! `capgate replay` on the customer-support example: a day of mixed traffic recorded by a
//! real `capgate serve` (refunds under and over `refundLimit`'s 500, by three identities
//! through two doors, one held refund approved and resumed, reads, a held message), then
//! replayed under the same file with the limit raised to 1000. It reports exactly the held
//! refunds up to 1000 as `require-approval → allow`, per capability and per policy; the
//! unchanged file reports no change; and the replay runs no procedure and writes nothing
//! (the audit trail, the approvals and the journal read the same before and after), on
//! SQLite and on Postgres.

use crate::common;

use common::lifecycle::TestStore;
use common::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;

const DANA: &str = "dana-dev-key";
const EVE: &str = "eve-dev-key";
const OPS: &str = "ops-workflow-key";
const PRIYA: &str = "priya-dev-key";

fn invoke(capability: &str, input: Value, invocation_id: &str) -> Value {
    json!({"capabilityId": capability, "input": input, "invocationId": invocation_id})
}

fn refund(order: &str, amount: u32) -> Value {
    json!({"orderId": order, "amount": amount, "reason": "damaged"})
}

/// Record the traffic; returns the invocation ids of the refunds held under 500 < amount
/// ≤ 1000 (what raising the limit to 1000 must let through).
async fn record_a_day(server: &Server) -> BTreeSet<String> {
    let agent = format!("{}/agent/invoke", server.base);
    let workflow = format!("{}/workflow/invoke", server.base);
    let (dana, eve, ops) = (Caller::new(DANA), Caller::new(EVE), Caller::new(OPS));
    let mut would_pass = BTreeSet::new();
    let calls: [(&Caller, &str, &str, Value, &str, &str); 10] = [
        (
            &dana,
            &agent,
            "orders.refund",
            refund("ord_43", 20),
            "r-small",
            "completed",
        ),
        (
            &dana,
            &agent,
            "orders.refund",
            refund("ord_42", 600),
            "r-600",
            "approval-required",
        ),
        (
            &dana,
            &agent,
            "orders.refund",
            refund("ord_42", 800),
            "r-800",
            "approval-required",
        ),
        (
            &dana,
            &agent,
            "orders.refund",
            refund("ord_42", 1500),
            "r-1500",
            "approval-required",
        ),
        (
            &eve,
            &agent,
            "orders.refund",
            refund("ord_77", 700),
            "r-eve-700",
            "approval-required",
        ),
        (
            &ops,
            &workflow,
            "orders.refund",
            refund("ord_44", 1000),
            "r-ops-1000",
            "approval-required",
        ),
        (
            &ops,
            &workflow,
            "orders.refund",
            refund("ord_44", 1001),
            "r-ops-1001",
            "approval-required",
        ),
        (
            &dana,
            &agent,
            "customers.search",
            json!({"query": "Ada"}),
            "s-1",
            "completed",
        ),
        (
            &dana,
            &agent,
            "orders.checkEligibility",
            json!({"orderId": "ord_42"}),
            "e-1",
            "completed",
        ),
        (
            &dana,
            &agent,
            "messages.send",
            json!({"customerId": "cus_1", "body": "Your refund is on its way."}),
            "m-1",
            "approval-required",
        ),
    ];
    for (caller, url, capability, input, id, expected) in calls {
        let amount = input["amount"].as_u64();
        let (status, body) = caller.post(url, &invoke(capability, input, id)).await;
        assert_eq!(status, 200, "{id}: {body}");
        assert_eq!(body["status"], expected, "{id}: {body}");
        if amount.is_some_and(|a| a > 500 && a <= 1000) {
            would_pass.insert(id.to_string());
        }
    }

    // One held refund is approved and resumed: it still was held, and would now pass.
    let (_, held) = dana
        .post(
            &agent,
            &invoke("orders.refund", refund("ord_42", 649), "r-649"),
        )
        .await;
    assert_eq!(held["status"], "approval-required", "{held}");
    let approval = held["approval"]["id"].as_str().expect("approval id");
    Caller::new(PRIYA).approve(&server.base, approval).await;
    let (status, done) = dana
        .post(
            &format!("{}/agent/resumeApproval", server.base),
            &json!({"approvalId": approval, "invocationId": "r-649"}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    would_pass.insert("r-649".to_string());
    would_pass
}

/// The example with `refundLimit`'s `maxAmount` raised to 1000, beside `config`.
fn raised_limit(config: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(config).expect("read the config");
    let old = "config = { maxAmount = 500, approvalType = \"manager\" }";
    assert!(text.contains(old), "the example's refundLimit changed");
    let next = config.with_file_name("capgate.next.toml");
    std::fs::write(
        &next,
        text.replace(
            old,
            "config = { maxAmount = 1000, approvalType = \"manager\" }",
        ),
    )
    .expect("write the new config");
    next
}

fn replay_json(config: &Path, store: &str, extra: &[&str]) -> Value {
    let config = config.to_str().expect("utf-8 path");
    let args = [
        &[
            "replay", "--config", config, "--store", store, "--since", "1d",
        ][..],
        extra,
        &["--output", "json"][..],
    ]
    .concat();
    serde_json::from_str(&capgate(&args)).expect("one JSON document")
}

/// Everything the store holds that a replay could have touched.
fn store_state(config: &Path, store: &str) -> String {
    let audit = capgate(&["audit", "tail", "--store", store, "-n", "100000"]);
    let approvals = capgate(&[
        "approvals",
        "list",
        "--config",
        config.to_str().expect("utf-8 path"),
        "--store",
        store,
        "--status",
        "all",
        "--output",
        "json",
    ]);
    let receipts = [
        lifecycle::show(store, "r-600"),
        lifecycle::show(store, "r-649"),
    ];
    format!("{audit}\n{approvals}\n{receipts:?}")
}

async fn held_refunds_that_would_now_pass(store: TestStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(dir.path(), |t| t, "");
    let server = lifecycle::serve(&config, &store);
    let would_pass = record_a_day(&server).await;
    let url = store.url();
    let before = store_state(&config, url);

    let next = raised_limit(&config);
    let report = replay_json(&next, url, &[]);

    // Exactly the held refunds up to the new limit, each require-approval → allow, by
    // whoever made them, through whichever door.
    let changed: BTreeSet<String> = report["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            assert_eq!(c["capabilityId"], "orders.refund", "{c}");
            assert_eq!(c["from"], "require-approval", "{c}");
            assert_eq!(c["to"], "allow", "{c}");
            assert_eq!(c["recordedFrom"], "audit", "{c}");
            c["invocationId"]
                .as_str()
                .expect("invocationId")
                .to_string()
        })
        .collect();
    assert_eq!(changed, would_pass, "{report:#}");
    assert_eq!(report["changed"], would_pass.len(), "{report:#}");
    assert_eq!(report["calls"], 11, "{report:#}");
    assert_eq!(report["replayed"], 11, "{report:#}");
    assert_eq!(report["unknownRecorded"], 0, "{report:#}");
    assert_eq!(report["skipped"]["unknownActor"], 0, "{report:#}");
    assert_eq!(report["procedureCalls"], 0, "{report:#}");
    let actors: BTreeSet<&str> = report["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| c["actor"]["id"].as_str().expect("actor id"))
        .collect();
    assert_eq!(
        actors,
        BTreeSet::from(["u_dana", "u_eve", "svc_refund_flow"]),
        "{report:#}"
    );

    // Per capability: the refunds' transitions; nothing else moved.
    let refunds = report["capabilities"]
        .as_array()
        .expect("capabilities")
        .iter()
        .find(|c| c["capabilityId"] == "orders.refund")
        .expect("orders.refund");
    assert_eq!(refunds["calls"], 8, "{refunds}");
    assert_eq!(refunds["changed"], would_pass.len(), "{refunds}");
    let transitions: BTreeSet<(String, String, u64)> = refunds["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .map(|t| {
            (
                t["from"].as_str().expect("from").to_string(),
                t["to"].as_str().expect("to").to_string(),
                t["count"].as_u64().expect("count"),
            )
        })
        .collect();
    assert_eq!(
        transitions,
        BTreeSet::from([
            ("allow".into(), "allow".into(), 1),
            (
                "require-approval".into(),
                "allow".into(),
                would_pass.len() as u64
            ),
            ("require-approval".into(), "require-approval".into(), 2),
        ]),
        "{refunds}"
    );
    for c in report["capabilities"].as_array().expect("capabilities") {
        if c["capabilityId"] != "orders.refund" {
            assert_eq!(c["changed"], 0, "{c}");
        }
    }
    // Per policy: refundLimit, and only it.
    assert_eq!(
        report["policies"],
        json!([{
            "policy": "refundLimit",
            "capabilityId": "orders.refund",
            "phase": "invocation",
            "transitions": [{"from": "require-approval", "to": "allow", "count": would_pass.len()}],
        }]),
        "{report:#}"
    );

    // The table says the same for people.
    let table = capgate(&[
        "replay",
        "--config",
        next.to_str().expect("utf-8 path"),
        "--store",
        url,
        "--since",
        "1d",
    ]);
    assert!(
        table.contains(&format!(
            "11 calls recorded from {}",
            report["since"]
                .as_str()
                .expect("since")
                .get(..10)
                .expect("a date")
        )),
        "{table}"
    );
    assert!(
        table.lines().any(|l| l.starts_with("orders.refund")
            && l.contains("require-approval → allow")
            && l.contains("changed")),
        "{table}"
    );
    for id in &would_pass {
        assert!(
            table
                .lines()
                .any(|l| l.contains(id.as_str()) && l.contains("require-approval → allow")),
            "{id} missing from:\n{table}"
        );
    }

    // The file it was recorded under changes nothing: the recorded decisions were read
    // back right.
    let same = replay_json(&config, url, &[]);
    assert_eq!(same["changed"], 0, "{same:#}");
    assert_eq!(same["replayed"], 11, "{same:#}");
    assert_eq!(same["policies"], json!([]), "{same:#}");
    // `--limit` stops early and says so; a limit the window fits in does not.
    let first = replay_json(&next, url, &["--limit", "3"]);
    assert_eq!(
        (first["calls"].clone(), first["truncated"].clone()),
        (json!(3), json!(true)),
        "{first:#}"
    );
    let all = replay_json(&next, url, &["--limit", "11"]);
    assert_eq!(
        (all["calls"].clone(), all["truncated"].clone()),
        (json!(11), json!(false)),
        "{all:#}"
    );
    assert_eq!(report["truncated"], false, "{report:#}");
    // A window before the traffic holds nothing; a release gate fails on a change.
    let none = replay_json(&next, url, &["--until", "1h"]);
    assert_eq!(none["calls"], 0, "{none:#}");
    let gate = capgate_output(&[
        "replay",
        "--config",
        next.to_str().expect("utf-8 path"),
        "--store",
        url,
        "--fail-on-change",
    ]);
    assert_eq!(gate.status.code(), Some(1), "{gate:?}");

    // Nothing was written: no event, no approval, no receipt changed.
    assert_eq!(store_state(&config, url), before);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_the_refund_limit_reports_exactly_the_held_refunds_that_would_now_pass_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    held_refunds_that_would_now_pass(TestStore::sqlite(dir.path())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_the_refund_limit_reports_exactly_the_held_refunds_that_would_now_pass_postgres() {
    let Some(store) = TestStore::postgres().await else {
        return;
    };
    held_refunds_that_would_now_pass(store).await;
}
