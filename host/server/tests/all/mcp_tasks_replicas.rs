//! MCP tasks across replicas (issue 58): three `capgate serve` replicas of the example, in
//! process, on one Postgres database. A held refund's task is created on one replica,
//! polled on another, approved through the approvals API of the third; the first replica
//! stops and a new one takes its place in the middle, and nothing is lost; polls racing on
//! every replica at once run the call once; another tenant's agent cannot see or cancel
//! the task.
//!
//! Runs when `CAPGATE_TEST_POSTGRES_URL` points at a server where the test may create a
//! database; skipped with a notice otherwise, and a failure under `CI=true`.

use crate::support::{self, Serving};
use capgate_testkit::mcp_tasks::{Client, assert_detailed, assert_task_handle};
use capgate_testkit::postgres::TestDatabase;
use serde_json::{Value, json};

fn refund() -> Value {
    json!({"orderId": "ord_42", "amount": 649, "reason": "damaged item"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_created_on_one_replica_is_polled_on_another_and_completed_by_an_approval_on_the_third()
 {
    let Some(db) = TestDatabase::create("capgate_mcp_tasks").await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = support::example_in(dir.path(), |text| text);
    // Postgres is migrated by the operator, once (`capgate migrate`), never by a replica.
    let store = capgate_store::Store::open(&db.url).await.expect("open");
    store.migrate().await.expect("migrate");
    store.close().await;
    let a = support::serve_on(&config, &db.url).await;
    let b = support::serve_on(&config, &db.url).await;
    let c = support::serve_on(&config, &db.url).await;
    let dana_on =
        |r: &Serving| Client::with_tasks(&format!("{}/mcp", r.base), "dana-dev-key", false);

    let created = dana_on(&a).call("orders_refund", refund()).await;
    let task = assert_task_handle(&created);
    let approval = created["result"]["_meta"]["capgate/approval"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    assert_detailed(&dana_on(&b).get(&task).await, "working");

    // Eve, an agent of another tenant, reads it as an unknown task on every replica.
    for r in [&a, &b, &c] {
        let eve = Client::with_tasks(&format!("{}/mcp", r.base), "eve-dev-key", false);
        let theirs = eve.get(&task).await;
        let unknown = eve.get("tsk_00000000000000000000000000000000").await;
        assert_eq!(theirs["error"], unknown["error"], "{theirs}");
        let cancel = eve.rpc("tasks/cancel", json!({"taskId": task})).await;
        assert_eq!(cancel["error"], unknown["error"], "{cancel}");
    }

    // The replica that created it stops; a new one takes its place. Nothing is lost.
    a.served.stop().await.expect("a clean stop");
    let a2 = support::serve_on(&config, &db.url).await;
    assert_detailed(&dana_on(&a2).get(&task).await, "working");

    // Priya approves on the third replica.
    let http = reqwest::Client::new();
    let (status, decided) = support::post(
        &http,
        &format!("{}/approvals/{approval}/decision", c.base),
        "priya-dev-key",
        &json!({"decision": "approved", "comment": "ok"}),
    )
    .await;
    assert_eq!(status, 200, "{decided}");

    // Every replica polls at once: one claim runs the call.
    let polls = [&a2, &b, &c].map(|r| {
        let client = dana_on(r);
        let task = task.clone();
        async move { client.until_ended(&task).await }
    });
    let ended = futures::future::join_all(polls).await;
    for e in &ended {
        assert_detailed(e, "completed");
        assert_eq!(e["result"]["result"], ended[0]["result"]["result"]);
    }
    let output = &ended[0]["result"]["result"]["structuredContent"];
    assert_eq!(output["status"], "completed", "{output}");
    assert_eq!(output["output"]["amount"], 649, "{output}");
    let (_, record) = support::get(
        &http,
        &format!("{}/approvals/{approval}", b.base),
        "priya-dev-key",
    )
    .await;
    assert_eq!(record["status"], "consumed", "{record}");
    // Counted in /metrics (one recorder for the process, so any replica shows it).
    let metrics = http
        .get(format!("{}/metrics", b.base))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    for event in ["created", "completed"] {
        assert!(
            metrics.contains(&format!("capgate_mcp_tasks_total{{event=\"{event}\"}}")),
            "{event} tasks counted: {}",
            metrics
                .lines()
                .filter(|l| l.contains("mcp_tasks"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    for r in [a2, b, c] {
        r.served.stop().await.expect("a clean stop");
    }
    let events = support::audit_events(&db.url).await;
    let of_task: Vec<&str> = events
        .iter()
        .filter(|e| e["data"]["taskId"] == task.as_str())
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(
        of_task,
        ["capgate.mcp.task_created", "capgate.mcp.task_finished"],
        "created once, ended once"
    );
    let started = events
        .iter()
        .filter(|e| e["type"] == "capability.started" && e["capabilityId"] == "orders.refund")
        .count();
    assert_eq!(
        started, 1,
        "the refund ran exactly once across the replicas"
    );
}
