//! Three gateway replicas (each with its own pools and runtime) on one Postgres database:
//! 50 concurrent invokes of one invocation id, spread over the replicas, execute once.
//!
//! Runs when `CAPGATE_TEST_POSTGRES_URL` points at a server where the test may
//! `CREATE DATABASE` (a fresh database per run, dropped afterwards). Without it the test
//! fails under `CI=true` and is skipped with a notice otherwise.

use crate::gateway_support;

use capgate_client::InvocationOptions;
use capgate_core::journal::InvocationState;
use capgate_gateway::wire::CapabilityOutcome;
use gateway_support::{Counters, TestServer};
use serde_json::json;

use capgate_testkit::postgres::TestDatabase as PgDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_invokes_over_three_replicas_execute_once() {
    let Some(db) = PgDb::create("capgate_gw_test").await else {
        return;
    };
    let counters = Counters::default();
    // Started one after another: the first applies the migrations.
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(TestServer::start(&db.url, counters.clone()).await);
    }
    let clients: Vec<_> = replicas.iter().map(|r| r.client("tok-dana")).collect();
    let input = json!({"orderId": "ord_1", "amount": 20});
    let calls = (0..50).map(|i| {
        let client = clients[i % clients.len()].clone();
        let input = input.clone();
        async move {
            client
                .invoke(
                    "orders.refund",
                    input,
                    InvocationOptions::new("inv-replicated"),
                )
                .await
        }
    });
    let outcomes = futures::future::join_all(calls).await;
    assert_eq!(
        counters.refunds(),
        1,
        "exactly one execution across the replicas"
    );

    let mut completed = Vec::new();
    let mut unknown = 0;
    for outcome in outcomes {
        match outcome {
            Ok(o @ CapabilityOutcome::Completed { .. }) => completed.push(o),
            // A concurrent caller saw the claim pending: never a second run.
            Ok(CapabilityOutcome::OutcomeUnknown { invocation_id }) => {
                assert_eq!(invocation_id, "inv-replicated");
                unknown += 1;
            }
            other => panic!("unexpected outcome: {other:?}"),
        }
    }
    eprintln!(
        "50 concurrent invokes: {} completed (admitted or replayed), {unknown} outcome-unknown (claim pending)",
        completed.len()
    );
    assert!(
        !completed.is_empty(),
        "the admitted call answers its result"
    );
    assert!(completed.windows(2).all(|w| w[0] == w[1]), "one result");

    // Every replica reads the same settled receipt, and replays without running.
    for client in &clients {
        let receipt = client
            .get_invocation("inv-replicated")
            .await
            .unwrap_or_else(|e| panic!("getInvocation: {e}"))
            .unwrap_or_else(|| panic!("a receipt"));
        assert_eq!(receipt.state, InvocationState::Settled);
        assert_eq!(receipt.outcome.as_ref(), Some(&completed[0]));
        let replay = client
            .invoke(
                "orders.refund",
                input.clone(),
                InvocationOptions::new("inv-replicated"),
            )
            .await
            .unwrap_or_else(|e| panic!("invoke: {e}"));
        assert_eq!(replay, completed[0]);
    }
    assert_eq!(counters.refunds(), 1);
    for r in &replicas {
        r.store.close().await;
    }
    drop(replicas);
    drop(db);
}
