//! Three gateway replicas (each with its own pools and runtime) on one Postgres database:
//! 50 concurrent invokes of one invocation id, spread over the replicas, execute once.
//!
//! Runs when `CAPGATE_TEST_POSTGRES_URL` points at a server where the test may
//! `CREATE DATABASE` (a fresh database per run, dropped afterwards). Without it the test
//! fails under `CI=true` and is skipped with a notice otherwise.

mod gateway_support;

use capgate_gateway::client::InvocationOptions;
use capgate_gateway::wire::CapabilityOutcome;
use gateway_support::{Counters, TestServer};
use serde_json::json;
use sqlx::Connection;

const PG_ENV: &str = "CAPGATE_TEST_POSTGRES_URL";

/// `base` with its database name replaced by `name`.
fn with_database(base: &str, name: &str) -> String {
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let rest = &base[scheme_end..];
    let query = rest.find('?').map(|q| &rest[q..]).unwrap_or("");
    let authority_end = rest
        .find('/')
        .or_else(|| rest.find('?'))
        .unwrap_or(rest.len());
    format!("{}/{name}{query}", &base[..scheme_end + authority_end])
}

/// A fresh database, dropped (with FORCE) when this value is.
struct PgDb {
    base: String,
    name: String,
    url: String,
}

impl PgDb {
    async fn create() -> Option<PgDb> {
        let Ok(base) = std::env::var(PG_ENV) else {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "{PG_ENV} is not set but CI=true: the replica test must run in CI \
                     (point it at a Postgres server where the test may CREATE DATABASE)"
                );
            }
            eprintln!("notice: {PG_ENV} is not set; skipping the Postgres replica test");
            return None;
        };
        let name = format!("capgate_gw_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&base)
            .await
            .unwrap_or_else(|e| panic!("cannot reach {PG_ENV}: {e}"));
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("CREATE DATABASE: {e}"));
        let _ = admin.close().await;
        let url = with_database(&base, &name);
        Some(PgDb { base, name, url })
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        // Drop runs inside the test's runtime, which cannot block: use a thread with a
        // runtime of its own.
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(async {
                    if let Ok(mut admin) = sqlx::PgConnection::connect(&base).await {
                        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                        )))
                        .execute(&mut admin)
                        .await;
                        let _ = admin.close().await;
                    }
                });
            }
        })
        .join();
    }
}

#[test]
fn database_names_are_replaced_in_urls() {
    assert_eq!(
        with_database("postgres://u:p@h:5432/postgres?sslmode=disable", "x"),
        "postgres://u:p@h:5432/x?sslmode=disable"
    );
    assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_invokes_over_three_replicas_execute_once() {
    let Some(db) = PgDb::create().await else {
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
        assert_eq!(receipt.state, "settled");
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
