//! Store benchmarks: the approval round trip (create → decide → consume) and journal
//! claim + settle with 16 concurrent tasks, on SQLite and (when
//! `CAPGATE_TEST_POSTGRES_URL` is set) Postgres.
//!
//! Besides criterion's estimates, each backend prints the round trip's p50/p99 over 2 000
//! sequential runs and the claim + settle throughput over 16 tasks, the figures the goals
//! are stated in (round trip ≤ 1 ms p50 on SQLite; ≥ 3 000 claim+settle/s on SQLite,
//! ≥ 2 000/s on Postgres).
//!
//! `cargo bench -p capgate-store --bench store`

use capgate_core::actor::{Actor, ActorKind, ActorRef, Surface};
use capgate_core::approval::{ApprovalCoordinator, ApprovalRequest, Decision, DecisionStatus};
use capgate_core::journal::{
    ClaimOutcome, ClaimRequest, InvocationJournal, Settlement, scope_hash,
};
use capgate_core::meta::{Risk, SideEffect};
use capgate_store::{SqlApprovalCoordinator, SqlInvocationJournal, Store};
use chrono::Utc;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use sqlx::Connection;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const TASKS: u64 = 16;

static SEQ: AtomicU64 = AtomicU64::new(0);

fn next_id(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

fn request() -> ApprovalRequest {
    let now = Utc::now();
    let input = json!({"orderId": "ord_42", "amount": 649});
    ApprovalRequest {
        id: next_id("apr"),
        capability_id: "orders.refund".into(),
        surface: Surface::AiSdk,
        actor: Actor::user("u_dana", json!({"orgId": "org_1"})),
        input_hash: capgate_core::canonical::input_hash(&input).unwrap_or_default(),
        input,
        reasons: vec!["Refund of $649 exceeds $500".into()],
        types: vec!["manager".into()],
        risk: Risk::High,
        side_effect: SideEffect::Write,
        requested_at: now,
        expires_at: now + chrono::Duration::minutes(15),
        execution_id: next_id("exe"),
        correlation_id: None,
        namespace: String::new(),
        untyped: false,
        descriptor_digest: None,
        policies: vec![],
    }
}

async fn round_trip(c: &SqlApprovalCoordinator) {
    let r = request();
    let id = r.id.clone();
    c.create(r).await.expect("create");
    let now = Utc::now();
    let decision = Decision {
        status: DecisionStatus::Approved,
        approver: ActorRef {
            id: "u_priya".into(),
            kind: ActorKind::User,
        },
        comment: None,
        decided_at: now,
        approver_namespace: None,
        via: capgate_core::approval::DecidedVia::Approver,
    };
    c.decide(&id, decision, now).await.expect("decide");
    c.mark_consumed(&id, &next_id("exe"), now)
        .await
        .expect("consume");
}

fn scope() -> String {
    let actor = ActorRef {
        id: "u_dana".into(),
        kind: ActorKind::User,
    };
    scope_hash("org_1", &actor, Surface::AiSdk).expect("scope")
}

async fn claim_settle(j: &SqlInvocationJournal, scope: &str) {
    let id = next_id("inv");
    let req = ClaimRequest::new(
        scope,
        id.as_str(),
        "orders.refund",
        json!({"orderId": "ord_1", "amount": 20}),
    )
    .expect("claim request");
    let ClaimOutcome::Admitted { claim_token, .. } = j.claim(req, Utc::now()).await.expect("claim")
    else {
        panic!("fresh ids are admitted");
    };
    j.settle(
        scope,
        &id,
        &claim_token,
        Settlement::final_outcome(json!({"status": "completed"})),
        Utc::now(),
    )
    .await
    .expect("settle");
}

/// `total` claim + settle pairs spread over 16 tasks; the wall time.
async fn concurrent_claims(j: &SqlInvocationJournal, total: u64) -> Duration {
    let scope = Arc::new(scope());
    let per_task = total.div_ceil(TASKS);
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let j = j.clone();
            let scope = scope.clone();
            tokio::spawn(async move {
                for _ in 0..per_task {
                    claim_settle(&j, &scope).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    start.elapsed()
}

fn report(rt: &tokio::runtime::Runtime, name: &str, store: &Store) {
    let approvals = store.approvals();
    let journal = store.journal();
    rt.block_on(async {
        for _ in 0..200 {
            round_trip(&approvals).await;
        }
        let mut samples = Vec::with_capacity(2000);
        for _ in 0..2000 {
            let t = Instant::now();
            round_trip(&approvals).await;
            samples.push(t.elapsed());
        }
        samples.sort();
        let pct = |p: usize| samples[samples.len() * p / 100];
        println!(
            "[{name}] approval round trip (create→decide→consume), 2000 sequential: p50 {:?}  p99 {:?}",
            pct(50),
            pct(99)
        );
        let n = 8000;
        let elapsed = concurrent_claims(&journal, n).await;
        println!(
            "[{name}] journal claim+settle, {TASKS} tasks, {n} pairs: {:.0}/s",
            n as f64 / elapsed.as_secs_f64()
        );
    });
}

fn bench_backend(c: &mut Criterion, rt: &tokio::runtime::Runtime, name: &str, store: &Store) {
    report(rt, name, store);
    let approvals = store.approvals();
    let journal = store.journal();
    let mut g = c.benchmark_group(format!("store/{name}"));
    g.throughput(Throughput::Elements(1));
    g.bench_function("approval_round_trip", |b| {
        b.to_async(rt).iter(|| round_trip(&approvals));
    });
    // One iteration = one claim + settle pair in each of the 16 tasks.
    g.throughput(Throughput::Elements(TASKS));
    g.bench_function("journal_claim_settle_16_tasks", |b| {
        b.to_async(rt)
            .iter_custom(|iters| concurrent_claims(&journal, iters * TASKS));
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");

    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    let sqlite = rt.block_on(Store::open(&url)).expect("sqlite store");
    bench_backend(c, &rt, "sqlite", &sqlite);
    rt.block_on(sqlite.close());

    let Ok(base) = std::env::var("CAPGATE_TEST_POSTGRES_URL") else {
        eprintln!("notice: CAPGATE_TEST_POSTGRES_URL is not set; skipping the Postgres benches");
        return;
    };
    let name = format!("capgate_bench_{}", std::process::id());
    let db_url = rt.block_on(async {
        let mut admin = sqlx::PgConnection::connect(&base)
            .await
            .expect("postgres reachable");
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name}"
        )))
        .execute(&mut admin)
        .await
        .expect("drop");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .expect("create");
        let slash = base.rfind('/').expect("a database path in the URL");
        format!("{}/{name}", &base[..slash])
    });
    let pg = rt.block_on(async {
        let s = Store::open(&db_url).await.expect("postgres store");
        s.migrate().await.expect("migrate");
        s
    });
    bench_backend(c, &rt, "postgres", &pg);
    rt.block_on(async {
        pg.close().await;
        if let Ok(mut admin) = sqlx::PgConnection::connect(&base).await {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
            )))
            .execute(&mut admin)
            .await;
        }
    });
}

criterion_group! {
    name = store;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = benches
}
criterion_main!(store);
