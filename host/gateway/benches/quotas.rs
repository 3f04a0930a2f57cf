//! What a shared rate limit costs at the door: `Quotas::take` (one principal bucket and one
//! namespace bucket per request, as every door runs it) with the buckets in this process
//! (`gateway.rateLimit.scope = "replica"`) and in the store (`scope = "store"`) on SQLite
//! and, when `CAPGATE_TEST_POSTGRES_URL` is set, Postgres. Each prints p50 and p99 over
//! 5 000 sequential requests (1 000 principals, none over quota) and the throughput of 16
//! concurrent tasks, in one run so the figures compare.
//!
//! `cargo bench -p capgate-gateway --bench quotas`

use capgate_core::actor::{Actor, ActorKind};
use capgate_core::authz::Principal;
use capgate_gateway::auth::{Authenticated, Credential};
use capgate_gateway::door::{Quotas, Rate};
use std::sync::Arc;
use std::time::Instant;

const REQUESTS: usize = 5_000;
const PRINCIPALS: usize = 1_000;
const TASKS: usize = 16;

fn who(i: usize) -> Authenticated {
    Authenticated {
        principal: Principal {
            actor: Actor {
                id: format!("u_{}", i % PRINCIPALS),
                kind: ActorKind::User,
                attributes: serde_json::json!({}),
            },
            namespace: format!("org_{}", i % 10),
        },
        context: serde_json::Value::Null,
        roles: vec![],
        surfaces: vec![],
        expires_at: None,
        requester_door: false,
        operator: false,
        credential: Credential::Token,
    }
}

fn rates() -> (Option<Rate>, Option<Rate>) {
    // The defaults: nobody here goes over them.
    (Rate::new(1_000, 2_000), Rate::new(5_000, 10_000))
}

async fn measure(name: &str, quotas: Arc<Quotas>) {
    let callers: Vec<Authenticated> = (0..REQUESTS).map(who).collect();
    // Warm up: every bucket exists, the pool is connected.
    for w in callers.iter().take(PRINCIPALS) {
        let _ = quotas.take(w).await;
    }
    let mut latencies = Vec::with_capacity(REQUESTS);
    for w in &callers {
        let t = Instant::now();
        let taken = quotas.take(w).await;
        latencies.push(t.elapsed());
        assert!(taken.is_ok(), "{name}: refused {taken:?}");
    }
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|k| {
            let (q, callers) = (quotas.clone(), callers.clone());
            tokio::spawn(async move {
                for w in callers.iter().skip(k).step_by(TASKS) {
                    let _ = q.take(w).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    let per_sec = REQUESTS as f64 / start.elapsed().as_secs_f64();
    println!(
        "{name:<28} p50 {:>9.1?}  p99 {:>9.1?}  {TASKS} tasks: {per_sec:>9.0} requests/s",
        at(0.50),
        at(0.99),
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let (p, n) = rates();
    measure("replica (in process)", Arc::new(Quotas::new(p, n))).await;

    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("quotas.db").display());
    let sqlite = capgate_store::Store::open(&url).await.expect("sqlite");
    measure(
        "store (SQLite)",
        Arc::new(Quotas::shared(p, n, Arc::new(sqlite.quotas()))),
    )
    .await;

    if let Some(db) = capgate_testkit::postgres::TestDatabase::create("capgate_bench").await {
        let pg = capgate_store::Store::open(&db.url).await.expect("postgres");
        pg.migrate().await.expect("migrate");
        measure(
            "store (Postgres)",
            Arc::new(Quotas::shared(p, n, Arc::new(pg.quotas()))),
        )
        .await;
        pg.close().await;
    }
}
