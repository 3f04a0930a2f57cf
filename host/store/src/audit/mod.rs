//! The durable [`AuditSink`] and the read side of the audit table.
//!
//! Events go through a bounded queue to one writer task that inserts them in batches
//! (bounded size, bounded delay). On SQLite each batch is one job of the store's group
//! writer, so it shares its commit with the journal's and approvals' waiting statements. `capability.started` is written through: `emit` returns
//! only once that event (and everything queued before it, so table order is pipeline
//! order) is committed, or with the error that kept it out; strict audit depends on it.
//! A full queue drops the event, counts it and returns an error. A batch that fails to
//! commit (the database went away, the disk is full) is kept and retried with a growing
//! back-off until the database takes it: a database outage delays events, it does not lose
//! them. Only what the writer cannot hold (more than the queue capacity waiting) or cannot
//! write at shutdown is lost, counted, and reported by the next [`AuditSink::flush`].
//! Nothing is lost silently.
//!
//! A write-through event that fails is answered with the error; whether it is then dropped
//! (strict audit: the call was refused, so no `capability.started` may appear later) or kept
//! for retry with the others (best effort: the call runs, and its record must still land) is
//! [`AuditSinkOptions::keep_failed_write_through`].
//!
//! By job: [`sink`] is the write side (the queue, the writer task, batched inserts),
//! [`log`] the read side ([`AuditLog`] and its queries), [`chain`] the hash chains, the
//! signed checkpoints and their verification, [`export`] the outbox export sinks read
//! (a cursor per sink and chain, a lease per sink), [`retention`] the purge that keeps the
//! chains verifiable.

mod chain;
mod export;
mod log;
mod retention;
mod sink;

pub use chain::{
    ChainSummary, CheckpointKeyError, CheckpointSigner, ExportedCheckpoint, Finding, Tamper,
    VerifyOptions, VerifyReport, key_id,
};
pub use export::{AuditExportError, AuditOutbox, ExportedEvent, MAX_EXPORT_BATCH};
pub use log::{
    AuditLog, AuditOrder, AuditQuery, AuditQueryError, MalformedAuditRow, StoredAuditEvent,
};
pub use retention::{PurgeOptions, PurgeReport};
pub use sink::{AuditSinkOptions, AuditSinkStats, SqlAuditSink};
