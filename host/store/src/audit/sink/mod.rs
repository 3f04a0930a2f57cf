//! The write side of the audit table: [`SqlAuditSink`], its bounded queue, the one writer
//! task that inserts events in batches (retrying a batch that fails to commit), and the
//! counters a health endpoint reads.
//!
//! By job: this file is the sink itself (its options, counters and queue), [`writer`] the
//! writer task (batches, retries, the chain's links and checkpoints), [`insert`] the batched
//! INSERT statements.

mod insert;
mod writer;

use super::chain::{CheckpointSigner, Linked};
use crate::db::{Store, StoreError};
use crate::params::Json;
use crate::time::trunc;
use async_trait::async_trait;
use capgate_core::audit::{AuditEvent, AuditSink, AuditSinkError};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use writer::Writer;

const SINK_NAME: &str = "store";

/// Batching and queue bounds of a [`SqlAuditSink`] (reference defaults: 50 events,
/// 250 ms).
#[derive(Debug, Clone)]
pub struct AuditSinkOptions {
    /// Most events in one INSERT. Default 50.
    pub batch_size: usize,
    /// Longest an event waits in a partial batch. Default 250 ms.
    pub flush_interval: Duration,
    /// Events that may wait for the writer; beyond this, events are dropped and counted.
    /// Default 10 000.
    pub queue_capacity: usize,
    /// Bound on a write-through (`capability.started`) or a flush, queueing included.
    /// Default 5 s.
    pub write_timeout: Duration,
    /// Keep a write-through event whose write failed, and retry it with the batch, instead
    /// of dropping it. Set it for best-effort audit, where the call runs anyway and its
    /// `capability.started` must still reach the table once the database is back; leave it
    /// off (the default) for strict audit, where the failure refused the call.
    pub keep_failed_write_through: bool,
    /// Sign this writer's chain (see `chain`): a start record before its first event, then
    /// a checkpoint every `every_events` events, about a second after a commit leaves
    /// events uncovered, at every flush and at a clean stop, each chained to the one
    /// before. `None`: nothing is signed (the chain is still written, but a forged,
    /// rewritten or truncated chain goes unnoticed).
    pub checkpoints: Option<CheckpointSigner>,
}

impl Default for AuditSinkOptions {
    fn default() -> Self {
        AuditSinkOptions {
            batch_size: 50,
            flush_interval: Duration::from_millis(250),
            queue_capacity: 10_000,
            write_timeout: Duration::from_secs(5),
            keep_failed_write_through: false,
            checkpoints: None,
        }
    }
}

/// Counters of a [`SqlAuditSink`], for health endpoints and `capgate` status output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuditSinkStats {
    /// Events committed to the table.
    pub written: u64,
    /// Events refused because the queue was full.
    pub dropped_queue_full: u64,
    /// Events given up on: more than the queue capacity were waiting for a failing
    /// database, or the writer stopped before it could commit them.
    pub lost_write_failed: u64,
    /// Write-through events (`capability.started`) that failed and were dropped; the emitter
    /// got the error. (With [`AuditSinkOptions::keep_failed_write_through`] they are kept for
    /// retry instead and counted only if finally lost.)
    pub write_through_failed: u64,
    /// Events held by the writer right now because their batch failed to commit; they are
    /// retried until the database takes them.
    pub awaiting_retry: u64,
}

impl AuditSinkStats {
    /// Events that never reached the table after `emit` accepted or refused them.
    pub fn lost(&self) -> u64 {
        self.dropped_queue_full + self.lost_write_failed + self.write_through_failed
    }
}

#[derive(Default)]
struct Counters {
    written: AtomicU64,
    dropped_queue_full: AtomicU64,
    lost_write_failed: AtomicU64,
    write_through_failed: AtomicU64,
    /// Lost (queue full or given up) since the last flush reported them.
    unreported: AtomicU64,
    /// Rows held for retry after a failed commit (0 when the last write succeeded).
    awaiting_retry: AtomicU64,
}

/// One row to insert.
struct AuditRow {
    ty: &'static str,
    at: DateTime<Utc>,
    surface: &'static str,
    actor_id: String,
    actor_kind: &'static str,
    execution_id: Option<String>,
    capability_id: Option<String>,
    correlation_id: Option<String>,
    input_hash: Option<String>,
    data: Json<Value>,
    /// Its place in the writer's chain, assigned at each write attempt (see `Writer::link`).
    seq: i64,
    prev_hash: Option<String>,
    hash: String,
    /// Written through for an emitter that waits: the index of its answer in the writer's
    /// pending acks (set by the writer). Dropped if its write fails (strict).
    through: Option<usize>,
}

impl AuditRow {
    fn from_event(event: &AuditEvent) -> Result<AuditRow, String> {
        // The payload serializes as {"type": …, "data": {…}}; the table keeps `data`.
        let payload = serde_json::to_value(&event.payload).map_err(|e| e.to_string())?;
        let data = match payload {
            Value::Object(mut m) => m.remove("data").unwrap_or(Value::Object(Map::new())),
            _ => return Err("audit payload is not an object".into()),
        };
        Ok(AuditRow {
            ty: event.type_name(),
            at: trunc(event.timestamp),
            surface: event.surface.as_str(),
            actor_id: event.actor.id.clone(),
            actor_kind: event.actor.kind.as_str(),
            execution_id: event.execution_id.clone(),
            capability_id: event.capability_id.clone(),
            correlation_id: event.correlation_id.clone(),
            input_hash: event.input_hash.clone(),
            data: Json("data", data),
            seq: 0,
            prev_hash: None,
            hash: String::new(),
            through: None,
        })
    }
}

impl AuditRow {
    /// What its hash covers, in `chain`.
    fn linked<'a>(&'a self, chain: &'a str) -> Linked<'a> {
        Linked {
            chain,
            seq: self.seq,
            prev: self.prev_hash.as_deref(),
            ty: self.ty,
            at: self.at,
            surface: self.surface,
            actor_id: &self.actor_id,
            actor_kind: self.actor_kind,
            execution_id: self.execution_id.as_deref(),
            capability_id: self.capability_id.as_deref(),
            correlation_id: self.correlation_id.as_deref(),
            input_hash: self.input_hash.as_deref(),
            data: &self.data.1,
        }
    }
}

enum Msg {
    Event(AuditRow),
    WriteThrough(AuditRow, oneshot::Sender<Result<(), String>>),
    Flush(oneshot::Sender<Result<(), String>>),
    Close(oneshot::Sender<()>),
}

/// The [`AuditSink`] on a [`Store`]. Cheap to clone (clones share the queue and the
/// writer); the writer task ends once every clone is dropped and the queue is drained.
#[derive(Clone)]
pub struct SqlAuditSink {
    tx: mpsc::Sender<Msg>,
    counters: Arc<Counters>,
    write_timeout: Duration,
    keep_failed_write_through: bool,
}

fn sink_err(message: impl Into<String>) -> AuditSinkError {
    AuditSinkError {
        sink: SINK_NAME.into(),
        message: message.into(),
    }
}

impl SqlAuditSink {
    pub(crate) fn spawn(store: Store, options: AuditSinkOptions) -> Result<Self, StoreError> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| StoreError::NoRuntime)?;
        let (tx, rx) = mpsc::channel(options.queue_capacity.max(1));
        let counters = Arc::new(Counters::default());
        let writer = Writer::new(store, rx, counters.clone(), &options);
        handle.spawn(writer.run());
        Ok(SqlAuditSink {
            tx,
            counters,
            write_timeout: options.write_timeout,
            keep_failed_write_through: options.keep_failed_write_through,
        })
    }

    /// Events waiting for the writer right now.
    pub fn queued(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    /// Publish [`Self::stats`] and [`Self::queued`] as metrics (`capgate_audit_*`).
    pub fn record_metrics(&self) {
        crate::metrics::record_audit(self.stats(), self.queued());
    }

    /// Whether the writer task is still running (it ends only when every handle is
    /// dropped; a closed queue means it died): what `/readyz` asks of the audit sink.
    pub fn is_writing(&self) -> bool {
        !self.tx.is_closed()
    }

    /// Whether events reach the table: the writer runs and holds no batch that failed to
    /// commit. `false` while the database refuses writes (down, disk full), `true` again
    /// once a retry commits: what `/readyz` asks of the audit sink.
    pub fn is_healthy(&self) -> bool {
        self.is_writing() && self.counters.awaiting_retry.load(Ordering::Relaxed) == 0
    }

    /// The counters so far.
    pub fn stats(&self) -> AuditSinkStats {
        let c = &self.counters;
        AuditSinkStats {
            written: c.written.load(Ordering::Relaxed),
            dropped_queue_full: c.dropped_queue_full.load(Ordering::Relaxed),
            lost_write_failed: c.lost_write_failed.load(Ordering::Relaxed),
            write_through_failed: c.write_through_failed.load(Ordering::Relaxed),
            awaiting_retry: c.awaiting_retry.load(Ordering::Relaxed),
        }
    }

    /// Send a message that expects an answer, all within the write timeout.
    /// Stop the writer while the store is still open: everything queued is written and
    /// the chain's end recorded, then it stops (events sent later are refused as "the
    /// audit writer has stopped"). Call it before [`Store::close`]; a sink that is only
    /// dropped ends the same way, but whenever its last clone goes, which may be after the
    /// store closed. Bounded by the write timeout.
    pub async fn close(&self) {
        let (ack, done) = oneshot::channel();
        let work = async {
            if self.tx.send(Msg::Close(ack)).await.is_ok() {
                let _ = done.await;
            }
        };
        let _ = tokio::time::timeout(self.write_timeout, work).await;
    }

    async fn round_trip(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<(), String>>) -> Msg,
    ) -> Result<(), String> {
        let (ack, done) = oneshot::channel();
        let work = async {
            self.tx
                .send(make(ack))
                .await
                .map_err(|_| "the audit writer has stopped".to_string())?;
            done.await
                .map_err(|_| "the audit writer has stopped".to_string())?
        };
        match tokio::time::timeout(self.write_timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "audit write not confirmed within {} ms",
                self.write_timeout.as_millis()
            )),
        }
    }
}

#[async_trait]
impl AuditSink for SqlAuditSink {
    fn name(&self) -> &str {
        SINK_NAME
    }

    async fn emit(&self, event: &AuditEvent) -> Result<(), AuditSinkError> {
        let row = AuditRow::from_event(event).map_err(sink_err)?;
        if row.ty == "capability.started" {
            return self
                .round_trip(|ack| Msg::WriteThrough(row, ack))
                .await
                .map_err(|e| {
                    // A kept row is retried by the writer (and counted there if finally
                    // lost); a dropped one is lost now.
                    if !self.keep_failed_write_through {
                        self.counters
                            .write_through_failed
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    sink_err(e)
                });
        }
        match self.tx.try_send(Msg::Event(row)) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                let n = self
                    .counters
                    .dropped_queue_full
                    .fetch_add(1, Ordering::Relaxed)
                    + 1;
                self.counters.unreported.fetch_add(1, Ordering::Relaxed);
                tracing::error!(target: "capgate::audit", dropped_total = n, event = event.type_name(), "audit queue full: event dropped");
                Err(sink_err(format!(
                    "audit queue full: event dropped ({n} dropped so far)"
                )))
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.counters.unreported.fetch_add(1, Ordering::Relaxed);
                Err(sink_err("the audit writer has stopped"))
            }
        }
    }

    /// Write everything queued so far; fails if any event was lost since the last flush
    /// (the count is in the message and in [`SqlAuditSink::stats`]).
    async fn flush(&self) -> Result<(), AuditSinkError> {
        let written = self.round_trip(Msg::Flush).await;
        let lost = self.counters.unreported.swap(0, Ordering::Relaxed);
        match (written, lost) {
            (Ok(()), 0) => Ok(()),
            (Ok(()), n) => Err(sink_err(format!(
                "{n} audit events were lost since the last flush"
            ))),
            (Err(e), 0) => Err(sink_err(format!(
                "the audit write failed ({e}); {} events are held for retry",
                self.counters.awaiting_retry.load(Ordering::Relaxed)
            ))),
            (Err(e), n) => Err(sink_err(format!(
                "{n} audit events were lost since the last flush; the last write failed: {e}"
            ))),
        }
    }
}
