//! The store as the outbox of audit export (issue 39, item 3): every export sink keeps, in
//! the database, how far it got in each chain, so an export survives restarts, sink
//! outages and replicas, and never holds up a call (the events are already committed).
//!
//! - **Where a sink is.** A cursor per `(sink, chain)`: the last `seq` the sink
//!   acknowledged. A chain is written by one writer in `seq` order, and its rows' ids grow
//!   with `seq`, so "everything after the cursor" is exact per chain, whatever other
//!   replicas commit meanwhile (ids across chains may commit out of order on Postgres; a
//!   cursor by id alone could skip a row).
//! - **Which chains.** Writers register their chain in `capgate_audit_chains` before
//!   their first event and record its last `seq` when they stop cleanly; a sink that
//!   delivered all of a closed chain stops reading it.
//! - **A batch.** The next events of every open chain, merged in insertion (id) order and
//!   cut at the batch size: each chain's part is a prefix, so the cursors stay exact.
//! - **At least once.** A sink delivers a batch, then [`AuditOutbox::acknowledge`] moves
//!   the cursors. A process killed in between delivers that batch again after its restart:
//!   at most the unacknowledged batch is duplicated, nothing is lost.
//! - **Checkpoints too.** The chains' signed records (start records and checkpoints,
//!   [`ExportedCheckpoint`]) are read after a cursor of their own per `(sink, chain)`
//!   ([`AuditOutbox::next_checkpoints`]), so a sink keeps a copy of them off the box that
//!   `capgate audit verify --checkpoints` checks the store against.
//! - **One exporter per sink.** [`AuditOutbox::lease`]: the replica holding a sink's lease
//!   exports it; another takes over when the lease runs out.

use super::chain::{ExportedCheckpoint, read_record};
use super::log::{AuditLog, RawAudit};
use crate::columns::row;
use crate::db::{Sql, Store, Via};
use crate::time::trunc;
use capgate_core::error::BoxError;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// Why reading or moving an export cursor failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditExportError {
    /// The database failed, or returned a row that does not read back.
    #[error("audit store unavailable: {0}")]
    Backend(#[source] BoxError),
    /// A sink name outside `[A-Za-z0-9_-]{1,64}`.
    #[error("`{0}` is not an export sink name (letters, digits, `-` and `_`, at most 64)")]
    SinkName(String),
}

fn backend(e: impl Into<BoxError>) -> AuditExportError {
    AuditExportError::Backend(e.into())
}

/// One audit event as an export carries it: the spec's JSON envelope as stored, and its
/// place in its chain (absent for rows written before chains existed, which only a
/// backfill reads).
#[derive(Debug, Clone, PartialEq)]
pub struct ExportedEvent {
    /// The row id (insertion order).
    pub id: i64,
    /// When it happened.
    pub at: DateTime<Utc>,
    /// Its chain.
    pub chain: Option<String>,
    /// Its place in the chain, from 1.
    pub seq: Option<i64>,
    /// Its chain hash (`capgate audit verify` recomputes it).
    pub hash: Option<String>,
    /// The event: `timestamp`, `type`, `surface`, `actor`, ids and `data`.
    pub event: Value,
}

row! {
    /// A row as an export reads it.
    struct ExportRow {
        id: i64,
        event: RawAudit = "event",
        chain: Option<String>,
        seq: Option<i64>,
        hash: Option<String>,
    }
}

impl ExportRow {
    fn into_exported(self) -> ExportedEvent {
        ExportedEvent {
            id: self.id,
            at: self.event.at,
            chain: self.chain,
            seq: self.seq,
            hash: self.hash,
            event: self.event.into_json(),
        }
    }
}

row! {
    /// A chain as a sink sees it: where its writer ended (if it did) and the sink's cursor.
    struct ChainCursor {
        chain: String,
        closed_seq: Option<i64>,
        seq: Option<i64>,
    }
}

/// One sink's view of the outbox: its lease, its next batch, its cursors.
#[derive(Clone)]
pub struct AuditOutbox {
    store: Store,
    sink: String,
}

/// Whether `name` may name a sink (it is a key of the cursor and lease tables).
fn valid_sink(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl Store {
    /// The export outbox of the sink named `sink` (`[audit.export.NAME]`).
    pub fn audit_outbox(&self, sink: &str) -> Result<AuditOutbox, AuditExportError> {
        if !valid_sink(sink) {
            return Err(AuditExportError::SinkName(sink.to_string()));
        }
        Ok(AuditOutbox {
            store: self.clone(),
            sink: sink.to_string(),
        })
    }
}

const LEASE: Sql = Sql {
    sqlite: "INSERT INTO capgate_audit_export_leases (sink, holder, until) VALUES ($1, $2, $3) \
             ON CONFLICT (sink) DO UPDATE SET holder = excluded.holder, until = excluded.until \
             WHERE capgate_audit_export_leases.holder = excluded.holder \
             OR capgate_audit_export_leases.until < $4",
    postgres: "INSERT INTO capgate_audit_export_leases (sink, holder, until) \
               VALUES ($1, $2, $3::timestamptz) \
               ON CONFLICT (sink) DO UPDATE SET holder = excluded.holder, until = excluded.until \
               WHERE capgate_audit_export_leases.holder = excluded.holder \
               OR capgate_audit_export_leases.until < $4::timestamptz",
};

const CHAINS: &str = "SELECT ch.chain AS chain, ch.closed_seq AS closed_seq, c.seq AS seq \
     FROM capgate_audit_chains ch LEFT JOIN capgate_audit_export_cursors c \
     ON c.sink = $1 AND c.chain = ch.chain ORDER BY ch.chain";

const NEXT_IN_CHAIN: &str = "SELECT id, type, at, surface, actor_id, actor_kind, execution_id, \
     capability_id, correlation_id, input_hash, data, chain, seq, hash \
     FROM capgate_audit_events WHERE chain = $1 AND seq > $2 ORDER BY seq LIMIT $3";

const ADVANCE: &str = "INSERT INTO capgate_audit_export_cursors (sink, chain, seq) \
     VALUES ($1, $2, $3) ON CONFLICT (sink, chain) DO UPDATE SET seq = excluded.seq \
     WHERE capgate_audit_export_cursors.seq < excluded.seq";

/// Most events in one batch.
pub const MAX_EXPORT_BATCH: usize = 10_000;

/// The chains whose signed records a sink may not have: every open one, and a closed one
/// only while it holds a record after the sink's cursor (a chain written without a key has
/// none, and is not read again once closed).
const CHECKPOINT_CHAINS: &str = "SELECT ch.chain AS chain, ch.closed_seq AS closed_seq, \
     c.seq AS seq FROM capgate_audit_chains ch LEFT JOIN capgate_audit_export_checkpoint_cursors c \
     ON c.sink = $1 AND c.chain = ch.chain WHERE ch.closed_seq IS NULL OR EXISTS \
     (SELECT 1 FROM capgate_audit_checkpoints k WHERE k.chain = ch.chain \
     AND k.seq > coalesce(c.seq, -1)) ORDER BY ch.chain";

const NEXT_CHECKPOINTS: &str = "SELECT id, chain, seq, hash, at, key_id, signature, kind, prev, \
     every_events, unchained_through FROM capgate_audit_checkpoints \
     WHERE chain = $1 AND seq > $2 ORDER BY seq, id LIMIT $3";

const ADVANCE_CHECKPOINTS: &str = "INSERT INTO capgate_audit_export_checkpoint_cursors \
     (sink, chain, seq) VALUES ($1, $2, $3) ON CONFLICT (sink, chain) DO UPDATE \
     SET seq = excluded.seq WHERE capgate_audit_export_checkpoint_cursors.seq < excluded.seq";

impl AuditOutbox {
    /// The sink's name.
    pub fn sink(&self) -> &str {
        &self.sink
    }

    /// Take or renew this sink's lease for `ttl` as `holder`: `true` when `holder` now
    /// holds it (it held it already, or the previous holder's ran out).
    pub async fn lease(&self, holder: &str, ttl: Duration) -> Result<bool, AuditExportError> {
        let now = trunc(Utc::now());
        let until = now + chrono::Duration::from_std(ttl).map_err(backend)?;
        let changed = self
            .store
            .execute(Via::Group, LEASE, &[&self.sink, &holder, &until, &now])
            .await
            .map_err(AuditExportError::Backend)?;
        Ok(changed > 0)
    }

    /// Give the lease up (at shutdown), so another replica takes over at once.
    pub async fn release(&self, holder: &str) -> Result<(), AuditExportError> {
        self.store
            .execute(
                Via::Group,
                "DELETE FROM capgate_audit_export_leases WHERE sink = $1 AND holder = $2",
                &[&self.sink, &holder],
            )
            .await
            .map_err(AuditExportError::Backend)?;
        Ok(())
    }

    /// The sink's cursor in every chain it has acknowledged events of.
    pub async fn cursors(&self) -> Result<BTreeMap<String, i64>, AuditExportError> {
        let rows = self
            .store
            .fetch_all(
                "SELECT chain, seq FROM capgate_audit_export_cursors WHERE sink = $1",
                &[&self.sink],
                |r| Ok::<_, crate::columns::ColumnError>((r.text("chain")?, r.int("seq")?)),
            )
            .await
            .map_err(AuditExportError::Backend)?;
        rows.into_iter()
            .map(|r| r.map_err(backend))
            .collect::<Result<_, _>>()
    }

    /// The next events this sink has not acknowledged, at most `limit` (1 to
    /// [`MAX_EXPORT_BATCH`]), oldest first (by insertion id); each chain's part follows
    /// its cursor without a gap the database does not have.
    pub async fn next(&self, limit: usize) -> Result<Vec<ExportedEvent>, AuditExportError> {
        let limit = limit.clamp(1, MAX_EXPORT_BATCH);
        let chains = self
            .store
            .fetch_all(CHAINS, &[&self.sink], ChainCursor::read)
            .await
            .map_err(AuditExportError::Backend)?
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(backend)?;
        let per_chain = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut events = Vec::new();
        for c in chains {
            let after = c.seq.unwrap_or(0);
            if c.closed_seq.is_some_and(|end| after >= end) {
                continue;
            }
            let rows = self
                .store
                .fetch_all(
                    NEXT_IN_CHAIN,
                    &[&c.chain, &after, &per_chain],
                    ExportRow::read,
                )
                .await
                .map_err(AuditExportError::Backend)?;
            for r in rows {
                events.push(r.map_err(backend)?.into_exported());
            }
        }
        // Ids grow with `seq` inside a chain, so each chain's part stays a prefix.
        events.sort_by_key(|e| e.id);
        events.truncate(limit);
        Ok(events)
    }

    /// The next signed records (start records and checkpoints) this sink has not
    /// acknowledged, at most `limit` (1 to [`MAX_EXPORT_BATCH`]), by chain and `seq`; a
    /// chain whose writer stopped is left once its last checkpoint was acknowledged.
    pub async fn next_checkpoints(
        &self,
        limit: usize,
    ) -> Result<Vec<ExportedCheckpoint>, AuditExportError> {
        let limit = limit.clamp(1, MAX_EXPORT_BATCH);
        let chains = self
            .store
            .fetch_all(CHECKPOINT_CHAINS, &[&self.sink], ChainCursor::read)
            .await
            .map_err(AuditExportError::Backend)?
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(backend)?;
        let mut records = Vec::new();
        for c in chains {
            let left = limit.saturating_sub(records.len());
            if left == 0 {
                break;
            }
            let after = c.seq.unwrap_or(-1);
            if c.closed_seq.is_some_and(|end| after >= end) {
                continue;
            }
            let rows = self
                .store
                .fetch_all(
                    NEXT_CHECKPOINTS,
                    &[&c.chain, &after, &i64::try_from(left).unwrap_or(i64::MAX)],
                    read_record,
                )
                .await
                .map_err(AuditExportError::Backend)?;
            for r in rows {
                records.push(r.map_err(backend)?);
            }
        }
        Ok(records)
    }

    /// The sink delivered `records`: move its checkpoint cursor in each of their chains
    /// past them (never backwards).
    pub async fn acknowledge_checkpoints(
        &self,
        records: &[ExportedCheckpoint],
    ) -> Result<(), AuditExportError> {
        let mut last: BTreeMap<&str, i64> = BTreeMap::new();
        for r in records {
            let at = last.entry(&r.chain).or_insert(r.seq);
            *at = (*at).max(r.seq);
        }
        for (chain, seq) in last {
            self.store
                .execute(Via::Group, ADVANCE_CHECKPOINTS, &[&self.sink, &chain, &seq])
                .await
                .map_err(AuditExportError::Backend)?;
        }
        Ok(())
    }

    /// The sink delivered `events`: move its cursor in each of their chains past them
    /// (never backwards). Events outside every chain are ignored.
    pub async fn acknowledge(&self, events: &[ExportedEvent]) -> Result<(), AuditExportError> {
        let mut last: BTreeMap<&str, i64> = BTreeMap::new();
        for e in events {
            if let (Some(chain), Some(seq)) = (&e.chain, e.seq) {
                let at = last.entry(chain).or_insert(seq);
                *at = (*at).max(seq);
            }
        }
        for (chain, seq) in last {
            self.store
                .execute(Via::Group, ADVANCE, &[&self.sink, &chain, &seq])
                .await
                .map_err(AuditExportError::Backend)?;
        }
        Ok(())
    }
}

const BACKFILL: Sql = Sql {
    sqlite: "SELECT id, type, at, surface, actor_id, actor_kind, execution_id, capability_id, \
             correlation_id, input_hash, data, chain, seq, hash FROM capgate_audit_events \
             WHERE ($1 IS NULL OR at >= $1) AND ($2 IS NULL OR at < $2) AND id > $3 \
             ORDER BY id LIMIT $4",
    postgres: "SELECT id, type, at, surface, actor_id, actor_kind, execution_id, capability_id, \
               correlation_id, input_hash, data, chain, seq, hash FROM capgate_audit_events \
               WHERE ($1::timestamptz IS NULL OR at >= $1::timestamptz) \
               AND ($2::timestamptz IS NULL OR at < $2::timestamptz) AND id > $3 \
               ORDER BY id LIMIT $4",
};

/// Every signed record of the store after a row id, in row order (a backfill's second
/// part).
const BACKFILL_CHECKPOINTS: &str = "SELECT id, chain, seq, hash, at, key_id, signature, kind, \
     prev, every_events, unchained_through FROM capgate_audit_checkpoints \
     WHERE id > $1 ORDER BY id LIMIT $2";

impl AuditLog {
    /// A page of the signed records (start records and checkpoints) a backfill ships after
    /// the events, so the copy can be checked with `capgate audit verify --checkpoints`:
    /// those stored after row `after_id`, in row order, at most `limit` (1 to
    /// [`MAX_EXPORT_BATCH`]), each with its row id (pass the last to get the next page).
    pub async fn export_checkpoint_page(
        &self,
        after_id: i64,
        limit: usize,
    ) -> Result<Vec<(i64, ExportedCheckpoint)>, AuditExportError> {
        let limit = i64::try_from(limit.clamp(1, MAX_EXPORT_BATCH)).unwrap_or(1);
        self.store
            .fetch_all(BACKFILL_CHECKPOINTS, &[&after_id, &limit], |row| {
                Ok::<_, crate::columns::ColumnError>((row.int("id")?, read_record(row)?))
            })
            .await
            .map_err(AuditExportError::Backend)?
            .into_iter()
            .map(|r| r.map_err(backend))
            .collect()
    }

    /// A page of a backfill (`capgate audit export`): the events stored after row
    /// `after_id` that happened at or after `since` and before `until`, oldest first, at
    /// most `limit` (1 to [`MAX_EXPORT_BATCH`]). Pass the last id of a page to get the next.
    pub async fn export_page(
        &self,
        since: Option<DateTime<Utc>>,
        until: Option<DateTime<Utc>>,
        after_id: i64,
        limit: usize,
    ) -> Result<Vec<ExportedEvent>, AuditExportError> {
        let limit = i64::try_from(limit.clamp(1, MAX_EXPORT_BATCH)).unwrap_or(1);
        self.store
            .fetch_all(
                BACKFILL,
                &[&since, &until, &after_id, &limit],
                ExportRow::read,
            )
            .await
            .map_err(AuditExportError::Backend)?
            .into_iter()
            .map(|r| r.map(ExportRow::into_exported).map_err(backend))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::valid_sink;

    #[test]
    fn sink_names_are_short_plain_words() {
        assert!(valid_sink("siem"));
        assert!(valid_sink("archive_2-b"));
        assert!(!valid_sink(""));
        assert!(!valid_sink("a b"));
        assert!(!valid_sink(&"x".repeat(65)));
    }
}
