//! Test plumbing shared by the store tests: a throwaway database per test on either
//! backend, the refund fixture, and a macro that runs one test body on both backends.
#![allow(dead_code)]

use capgate_core::prelude::*;
use capgate_core::runtime::Runtime;
use capgate_store::{AuditSinkOptions, SqlAuditSink, Store, StoreOptions};
use serde_json::json;
use sqlx::Connection;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Run one async test body (`async fn name(db: &TestDb)`) on SQLite and on Postgres, as
/// `name::sqlite` and `name::postgres`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                let db = $crate::common::TestDb::sqlite();
                super::$name(&db).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                if let Some(db) = $crate::common::TestDb::postgres().await {
                    super::$name(&db).await;
                }
            }
        }
    )*};
}

/// Which backend a [`TestDb`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// A database that exists for one test: a temp file, or a fresh Postgres database that is
/// dropped when the value is.
pub struct TestDb {
    pub kind: Kind,
    pub url: String,
    dir: Option<tempfile::TempDir>,
    pg: Option<capgate_testkit::postgres::TestDatabase>,
}

impl TestDb {
    /// A SQLite file in a new temporary directory (not created yet: the store creates it).
    pub fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}", dir.path().join("capgate.db").display());
        TestDb {
            kind: Kind::Sqlite,
            url,
            dir: Some(dir),
            pg: None,
        }
    }

    /// A fresh database on the server in `CAPGATE_TEST_POSTGRES_URL` (see
    /// [`capgate_testkit::postgres`]).
    pub async fn postgres() -> Option<TestDb> {
        let pg = capgate_testkit::postgres::TestDatabase::create("capgate_test").await?;
        Some(TestDb {
            kind: Kind::Postgres,
            url: pg.url.clone(),
            dir: None,
            pg: Some(pg),
        })
    }

    /// A new store (its own pools) on this database, migrated.
    pub async fn open(&self) -> Store {
        let store = Store::open(&self.url).await.expect("store opens");
        store.migrate().await.expect("migrations apply");
        store
    }

    /// A store whose writes cannot succeed: the SQLite file made read-only, or the
    /// Postgres database dropped under the pool. Call it last: for Postgres the database
    /// is gone afterwards.
    pub async fn unreachable_store(&self) -> Store {
        match self.kind {
            Kind::Sqlite => {
                self.open().await.close().await;
                let path = self.url.trim_start_matches("sqlite://").to_string();
                let mut perms = std::fs::metadata(&path).expect("db file").permissions();
                perms.set_readonly(true);
                std::fs::set_permissions(&path, perms).expect("chmod");
                // Root ignores file modes, so the file is also opened read-only.
                Store::open_with(
                    &self.url,
                    StoreOptions {
                        read_only: true,
                        ..StoreOptions::default()
                    },
                )
                .await
                .expect("read-only store opens")
            }
            Kind::Postgres => {
                let store = Store::open_with(
                    &self.url,
                    StoreOptions {
                        acquire_timeout: Duration::from_secs(2),
                        ..StoreOptions::default()
                    },
                )
                .await
                .expect("store opens");
                store.migrate().await.expect("migrations apply");
                self.drop_postgres().await;
                store
            }
        }
    }

    /// Run one statement with one text parameter on a fresh connection (tampering).
    pub async fn raw_execute(&self, sql: &'static str, param: &str) -> u64 {
        // The statement on a fresh connection of type `$conn`.
        macro_rules! on_fresh {
            ($conn:ty) => {{
                let mut c = <$conn>::connect(&self.url).await.expect("connect");
                let n = sqlx::query(sql)
                    .bind(param)
                    .execute(&mut c)
                    .await
                    .expect("tamper statement")
                    .rows_affected();
                let _ = c.close().await;
                n
            }};
        }
        match self.kind {
            Kind::Sqlite => on_fresh!(sqlx::SqliteConnection),
            Kind::Postgres => on_fresh!(sqlx::PgConnection),
        }
    }

    async fn drop_postgres(&self) {
        if let Some(pg) = &self.pg {
            pg.drop_now().await;
        }
    }
}

/// Counts procedure executions.
#[derive(Clone, Default)]
pub struct Counter(pub Arc<AtomicUsize>);

impl Counter {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

pub use capgate_testkit::actors::{dana, priya, priya_decides};

/// `orders.refund`: approval above $500, the procedure counts its runs.
pub fn registry(counter: &Counter) -> Registry {
    let c = counter.0.clone();
    Registry::builder()
        .capability(
            CapabilityDef::new(
                "orders.refund",
                CapabilityMeta::new("Refund an order", SideEffect::Write, Risk::High)
                    .exposed_on([Surface::AiSdk, Surface::Direct]),
            )
            .input_schema(json!({
                "type": "object",
                "properties": {
                    "orderId": {"type": "string"},
                    "amount": {"type": "number"}
                },
                "required": ["orderId", "amount"],
                "additionalProperties": false
            }))
            .policy(capgate_testkit::walkthrough::refund_limit(
                "refund-limit",
                None,
            ))
            .procedure(handler(move |call| {
                let c = c.clone();
                async move {
                    c.fetch_add(1, Ordering::SeqCst);
                    Ok(json!({ "refundId": "ref_77", "amount": call.input["amount"] }))
                }
            })),
        )
        .build()
        .expect("a valid registry")
}

/// A runtime on `store`: durable approvals and the store audit sink.
pub fn runtime(store: &Store, counter: &Counter, strict: bool) -> (Runtime, SqlAuditSink) {
    let sink = store
        .audit_sink(AuditSinkOptions {
            write_timeout: Duration::from_secs(5),
            keep_failed_write_through: !strict,
            ..AuditSinkOptions::default()
        })
        .expect("sink");
    let rt = Runtime::builder(registry(counter))
        .approvals(Arc::new(store.approvals()))
        .audit_sink(Arc::new(sink.clone()))
        .strict_audit(strict)
        .build()
        .expect("a valid runtime");
    (rt, sink)
}

pub fn refund(amount: f64) -> InvokeRequest {
    InvokeRequest::new(
        Surface::AiSdk,
        "orders.refund",
        json!({ "orderId": "ord_42", "amount": amount }),
        dana(),
    )
}

/// Ask for a $649 refund and approve it as priya; returns the approval id.
pub async fn approved_refund(rt: &Runtime) -> String {
    let r = rt.invoke(refund(649.0)).await;
    let id = r.approval().expect("approval-required").id.clone();
    rt.approvals()
        .decide(&id, priya_decides(DecisionStatus::Approved, Some("ok")))
        .await
        .expect("decided");
    id
}

pub fn code(r: &capgate_core::result::ExecutionResult) -> Option<&'static str> {
    r.error().map(|e| e.code().as_str())
}

/// Event `i` of emitter `t`: its own execution id, `i` in the correlation id, and every
/// fifth one a `capability.started` (written through: `emit` waits for its commit).
pub fn numbered_event(t: usize, i: usize) -> capgate_core::audit::AuditEvent {
    use capgate_core::audit::{AuditEvent, EventPayload};
    AuditEvent {
        timestamp: chrono::Utc::now(),
        surface: Surface::AiSdk,
        actor: priya(),
        execution_id: Some(format!("exe_{t}")),
        capability_id: Some("orders.refund".into()),
        correlation_id: Some(i.to_string()),
        input_hash: None,
        payload: if i % 5 == 4 {
            EventPayload::Started {
                attempt: 1,
                approval_id: None,
                resume_correlation_id: None,
                policy_decisions: None,
            }
        } else {
            EventPayload::Requested {
                side_effect: None,
                risk: None,
            }
        },
    }
}
