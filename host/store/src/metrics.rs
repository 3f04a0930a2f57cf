//! The store's metrics, through the [`metrics`] facade (recorded once the embedder installs
//! a recorder).
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `capgate_store_operation_duration_seconds` | histogram | `backend` (`sqlite`, `postgres`), `operation` (`journal.claim`, `approvals.create`, …) |
//! | `capgate_store_errors_total` | counter | `backend`, `operation` |
//! | `capgate_audit_events_total` | counter | `result` (`written`, `dropped`, `lost`, `write_through_failed`) |
//! | `capgate_audit_queue_depth` | gauge | |
//! | `capgate_approvals_pending` | gauge | `namespace` |
//!
//! The audit and approval figures are read when [`record_audit`] and
//! [`crate::Store::record_pending_approvals`] run (before each scrape), not on the call path.

use crate::audit::AuditSinkStats;
use crate::db::Backend;
use std::future::Future;
use std::time::Instant;

/// Store operation latency.
pub const STORE_DURATION: &str = "capgate_store_operation_duration_seconds";
/// Store operations that returned an error.
pub const STORE_ERRORS: &str = "capgate_store_errors_total";
/// Audit events by what became of them.
pub const AUDIT_EVENTS: &str = "capgate_audit_events_total";
/// Audit events waiting for the writer.
pub const AUDIT_QUEUE: &str = "capgate_audit_queue_depth";
/// Pending approvals right now, by namespace.
pub const APPROVALS_PENDING: &str = "capgate_approvals_pending";

/// Tell the installed recorder what this crate's series mean (`# HELP` on `/metrics`).
pub fn describe() {
    metrics::describe_histogram!(
        STORE_DURATION,
        "Store operation latency in seconds, by backend and operation."
    );
    metrics::describe_counter!(
        STORE_ERRORS,
        "Store operations that returned an error, by backend and operation."
    );
    metrics::describe_counter!(
        AUDIT_EVENTS,
        "Audit events by what became of them (written, dropped, lost, write_through_failed)."
    );
    metrics::describe_gauge!(AUDIT_QUEUE, "Audit events waiting for the writer.");
    metrics::describe_gauge!(
        APPROVALS_PENDING,
        "Pending approvals right now, by namespace."
    );
}

capgate_core::wire_enum! {
    Backend {
        Sqlite => "sqlite",
        Postgres => "postgres",
    }
}

static DURATIONS: capgate_core::metrics::Handles<&str, metrics::Histogram> =
    capgate_core::metrics::Handles::new();

/// Run one store operation, recording its latency (and its error, if any).
pub(crate) async fn timed<T, E>(
    backend: Backend,
    operation: &'static str,
    op: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let started = Instant::now();
    let result = op.await;
    let backend = backend.as_str();
    DURATIONS
        .get(
            operation,
            backend,
            || metrics::histogram!(STORE_DURATION, "backend" => backend, "operation" => operation),
        )
        .record(started.elapsed().as_secs_f64());
    if result.is_err() {
        metrics::counter!(STORE_ERRORS, "backend" => backend, "operation" => operation)
            .increment(1);
    }
    result
}

/// Publish an audit sink's counters and queue depth.
pub fn record_audit(stats: AuditSinkStats, queued: usize) {
    metrics::counter!(AUDIT_EVENTS, "result" => "written").absolute(stats.written);
    metrics::counter!(AUDIT_EVENTS, "result" => "dropped").absolute(stats.dropped_queue_full);
    metrics::counter!(AUDIT_EVENTS, "result" => "lost").absolute(stats.lost_write_failed);
    metrics::counter!(AUDIT_EVENTS, "result" => "write_through_failed")
        .absolute(stats.write_through_failed);
    metrics::gauge!(AUDIT_QUEUE).set(queued as f64);
}

/// Pending, unexpired approvals by namespace, at most this many namespaces (a hostile or
/// runaway table cannot make unbounded series).
const MAX_PENDING_NAMESPACES: i64 = 1_000;

const PENDING: &str = "SELECT namespace, COUNT(*) AS pending FROM capgate_approvals \
     WHERE status = 'pending' AND expires_at > $1 GROUP BY namespace ORDER BY namespace LIMIT $2";

/// Namespaces a pending gauge was ever set for, so one that empties reads 0, not stale.
static SEEN_NAMESPACES: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

impl crate::Store {
    /// Pending, unexpired approvals per namespace (the approvals API's backlog).
    pub async fn pending_approvals(
        &self,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Vec<(String, u64)>, crate::StoreError> {
        use crate::columns::{ColumnError, Columns};
        let rows: Vec<(String, i64)> = self
            .fetch_all(
                PENDING,
                &[&now, &MAX_PENDING_NAMESPACES],
                |row: &dyn Columns| -> Result<_, ColumnError> {
                    Ok((row.text("namespace")?, row.int("pending")?))
                },
            )
            .await
            // Statements fail with sqlx errors, and these parameters always encode.
            .map_err(|e| {
                e.downcast::<sqlx::Error>()
                    .map_or_else(sqlx::Error::Encode, |e| *e)
            })
            .and_then(|rows| {
                rows.into_iter()
                    .collect::<Result<_, _>>()
                    .map_err(|e| sqlx::Error::Decode(e.into()))
            })
            .map_err(crate::StoreError::Backend)?;
        Ok(rows
            .into_iter()
            .map(|(ns, n)| (ns, u64::try_from(n).unwrap_or(0)))
            .collect())
    }

    /// Set `capgate_approvals_pending{namespace}` from [`Self::pending_approvals`]; a
    /// namespace that had pending approvals and has none now reads 0.
    pub async fn record_pending_approvals(&self) -> Result<(), crate::StoreError> {
        let now = chrono::Utc::now();
        let pending = timed(
            self.backend(),
            "approvals.pending",
            self.pending_approvals(now),
        )
        .await?;
        let Ok(mut seen) = SEEN_NAMESPACES.lock() else {
            return Ok(());
        };
        for ns in seen.iter() {
            if !pending.iter().any(|(p, _)| p == ns) {
                metrics::gauge!(APPROVALS_PENDING, "namespace" => ns.clone()).set(0.0);
            }
        }
        for (ns, n) in pending {
            metrics::gauge!(APPROVALS_PENDING, "namespace" => ns.clone()).set(n as f64);
            seen.insert(ns);
        }
        Ok(())
    }
}
