//! The walk of each chain ([`AuditLog::verify`]): the stored rows and checkpoints read
//! back, the signatures checked first, then every event's link, hash and place, page by
//! page, up to the first break.

use super::checkpoint::purge_verifies;
use super::coverage::{Coverage, missing_from_store};
use super::link::Linked;
use super::{
    ChainSummary, ExportedCheckpoint, Finding, Tamper, VerifyOptions, VerifyReport, key_id,
};
use crate::audit::log::{AuditLog, RawAudit};
use crate::columns::row;
use crate::db::Sql;
use capgate_core::error::BoxError;
use chrono::{DateTime, Utc};
use ed25519_dalek::VerifyingKey;
use std::collections::{BTreeMap, BTreeSet};

row! {
    /// A chained row: the event's columns and its chain fields, everything its hash covers.
    struct ChainRow {
        id: i64,
        event: RawAudit = "event",
        chain: String,
        seq: i64,
        prev_hash: Option<String>,
        hash: String,
    }
}

impl ChainRow {
    fn recomputed(&self) -> Result<String, BoxError> {
        let e = &self.event;
        Linked {
            chain: &self.chain,
            seq: self.seq,
            prev: self.prev_hash.as_deref(),
            ty: &e.ty,
            at: e.at,
            surface: &e.surface,
            actor_id: &e.actor_id,
            actor_kind: &e.actor_kind,
            execution_id: e.execution_id.as_deref(),
            capability_id: e.capability_id.as_deref(),
            correlation_id: e.correlation_id.as_deref(),
            input_hash: e.input_hash.as_deref(),
            data: &e.data,
        }
        .hash()
    }
}

row! {
    /// A stored checkpoint.
    struct CheckpointRow {
        chain: String,
        seq: i64,
        hash: String,
        at: DateTime<Utc>,
        key_id: String,
        signature: String,
        kind: Option<String>,
        prev: Option<String>,
        every_events: Option<i64>,
        unchained_through: Option<i64>,
    }
}

impl CheckpointRow {
    /// The record, as an export carries it.
    fn into_exported(self) -> ExportedCheckpoint {
        ExportedCheckpoint {
            chain: self.chain,
            seq: self.seq,
            hash: self.hash,
            at: self.at,
            key_id: self.key_id,
            signature: self.signature,
            kind: self.kind,
            prev: self.prev,
            every_events: self.every_events,
            unchained_through: self.unchained_through,
        }
    }
}

/// Read a stored checkpoint (every column of `capgate_audit_checkpoints`) as a record.
pub(crate) fn read_record(
    row: &dyn crate::columns::Columns,
) -> Result<ExportedCheckpoint, crate::columns::ColumnError> {
    CheckpointRow::read(row).map(CheckpointRow::into_exported)
}

/// Rows per page of a chain walk (the LIMIT of [`PAGE_SQL`]).
const PAGE: usize = 1000;
const PAGE_SQL: &str = "SELECT id, type, at, surface, actor_id, actor_kind, execution_id, \
     capability_id, correlation_id, input_hash, data, chain, seq, prev_hash, hash \
     FROM capgate_audit_events WHERE chain = $1 AND seq > $2 ORDER BY seq LIMIT 1000";

const CHAINS: Sql = Sql {
    sqlite: "SELECT DISTINCT chain FROM capgate_audit_events WHERE chain IS NOT NULL \
             AND ($1 IS NULL OR chain = $1) \
             UNION SELECT DISTINCT chain FROM capgate_audit_checkpoints \
             WHERE ($1 IS NULL OR chain = $1) \
             UNION SELECT DISTINCT chain FROM capgate_audit_purges \
             WHERE ($1 IS NULL OR chain = $1) ORDER BY chain",
    postgres: "SELECT DISTINCT chain FROM capgate_audit_events WHERE chain IS NOT NULL \
               AND ($1::text IS NULL OR chain = $1) \
               UNION SELECT DISTINCT chain FROM capgate_audit_checkpoints \
               WHERE ($1::text IS NULL OR chain = $1) \
               UNION SELECT DISTINCT chain FROM capgate_audit_purges \
               WHERE ($1::text IS NULL OR chain = $1) ORDER BY chain",
};

const CHECKPOINTS: &str = "SELECT id, chain, seq, hash, at, key_id, signature, kind, prev, \
     every_events, unchained_through FROM capgate_audit_checkpoints ORDER BY chain, seq, id";
const PURGES: Sql = Sql {
    sqlite: "SELECT id, chain, seq, hash, at, key_id, signature, NULL AS kind, NULL AS prev, \
             NULL AS every_events, NULL AS unchained_through \
             FROM capgate_audit_purges ORDER BY chain, seq, id",
    postgres: "SELECT id, chain, seq, hash, at, key_id, signature, NULL::text AS kind, \
               NULL::text AS prev, NULL::bigint AS every_events, \
               NULL::bigint AS unchained_through \
               FROM capgate_audit_purges ORDER BY chain, seq, id",
};

const FIRST_SINCE: Sql = Sql {
    sqlite: "SELECT min(seq) AS seq FROM capgate_audit_events WHERE chain = $1 AND at >= $2",
    postgres: "SELECT min(seq) AS seq FROM capgate_audit_events WHERE chain = $1 \
               AND at >= $2::timestamptz",
};

impl AuditLog {
    /// Check every chain (or `options.chain`): links, hashes, `seq` without gaps, the
    /// checkpoints, and with keys the chained run of signed records every chain must be
    /// covered by (module docs); against `options.copy` when given. Reads in pages; the
    /// report names the first break of each chain.
    pub async fn verify(&self, options: &VerifyOptions) -> Result<VerifyReport, BoxError> {
        let store = &self.store;
        let mut chains = store
            .fetch_all(CHAINS, &[&options.chain], |r| r.text("chain"))
            .await?
            .into_iter()
            .collect::<Result<BTreeSet<_>, _>>()?;
        let mut copied: BTreeMap<String, Vec<ExportedCheckpoint>> = BTreeMap::new();
        for c in &options.copy {
            if options.chain.as_ref().is_none_or(|only| *only == c.chain) {
                chains.insert(c.chain.clone());
                copied.entry(c.chain.clone()).or_default().push(c.clone());
            }
        }
        let mut by_chain = self.signed_by_chain(CHECKPOINTS).await?;
        let mut purged = self.signed_by_chain(PURGES).await?;
        let keys: BTreeMap<String, VerifyingKey> =
            options.keys.iter().map(|k| (key_id(k), *k)).collect();
        let mut report = VerifyReport {
            signatures_checked: !keys.is_empty(),
            ..VerifyReport::default()
        };
        // The lowest `unchained_through` a valid start record signed: chain-less rows
        // above it were inserted after chains existed.
        let mut unchained_bound: Option<i64> = None;
        for chain in chains {
            let records = ChainRecords {
                stored: by_chain.remove(&chain).unwrap_or_default(),
                purges: purged.remove(&chain).unwrap_or_default(),
                copy: copied.remove(&chain).unwrap_or_default(),
            };
            report.copy_checkpoints += records.copy.len() as u64;
            if !keys.is_empty() {
                for start in records.stored.iter().filter(|r| r.is_start()) {
                    if start.verifies(&keys)
                        && let Some(through) = start.unchained_through
                    {
                        unchained_bound =
                            Some(unchained_bound.map_or(through, |b: i64| b.min(through)));
                    }
                }
            }
            self.verify_chain(&chain, &records, &keys, options, &mut report)
                .await?;
        }
        if options.chain.is_none() {
            self.unchained(unchained_bound, &mut report).await?;
        }
        Ok(report)
    }

    /// Every signed row of a table (checkpoints or purge records), by chain, in `seq` order;
    /// a record stored twice (a retried insert whose first answer was lost) once.
    async fn signed_by_chain(
        &self,
        sql: impl Into<Sql>,
    ) -> Result<BTreeMap<String, Vec<ExportedCheckpoint>>, BoxError> {
        let mut by_chain: BTreeMap<String, Vec<ExportedCheckpoint>> = BTreeMap::new();
        let mut seen: BTreeSet<(String, i64, String)> = BTreeSet::new();
        for row in self.store.fetch_all(sql, &[], CheckpointRow::read).await? {
            let row = row?.into_exported();
            if seen.insert((row.chain.clone(), row.seq, row.signature.clone())) {
                by_chain.entry(row.chain.clone()).or_default().push(row);
            }
        }
        Ok(by_chain)
    }

    async fn verify_chain(
        &self,
        chain: &str,
        records: &ChainRecords,
        keys: &BTreeMap<String, VerifyingKey>,
        options: &VerifyOptions,
        report: &mut VerifyReport,
    ) -> Result<(), BoxError> {
        let store = &self.store;
        let (cps, purges, copy) = (&records.stored, &records.purges, &records.copy);
        let signed = !keys.is_empty();
        // Where retention purged the chain up to (its latest purge record).
        let purge = purges.iter().max_by_key(|p| p.seq);
        let purged_through = purge.map_or(0, |p| p.seq);
        let legacy = !cps.is_empty() && cps.iter().all(|c| c.kind.is_none());
        let mut summary = ChainSummary {
            chain: chain.to_string(),
            events: 0,
            last_seq: purged_through,
            checkpoints: cps.iter().filter(|c| !c.is_start()).count() as u64,
            purged_through,
            legacy,
        };
        let found = |kind, seq, event_id, detail: String| Finding {
            kind,
            chain: Some(chain.to_string()),
            seq,
            event_id,
            detail,
        };
        // The event `r` no longer is what the chain says it was (`detail` says how).
        let edited =
            |r: &ChainRow, detail: String| found(Tamper::Edited, Some(r.seq), Some(r.id), detail);
        // The events from `from` up to the one before `r` are gone.
        let missing = |from: i64, r: &ChainRow| {
            found(
                Tamper::Deleted,
                Some(r.seq),
                Some(r.id),
                format!(
                    "events {from}..={} are missing before event {} (seq {})",
                    r.seq - 1,
                    r.id,
                    r.seq
                ),
            )
        };
        // Signatures first: a forged checkpoint, purge record or copied record must not
        // vouch for anything.
        let all = cps
            .iter()
            .map(|c| (c, "checkpoint"))
            .chain(purges.iter().map(|p| (p, "purge record")))
            .chain(copy.iter().map(|c| (c, "the copy's checkpoint")));
        for (cp, what) in all {
            if !signed {
                break;
            }
            let valid = if what == "purge record" {
                purge_verifies(cp, keys)
            } else {
                cp.verifies(keys)
            };
            if !valid {
                let what = if cp.is_start() {
                    format!("{what} (the start record)")
                } else {
                    what.to_string()
                };
                report.findings.push(found(
                    Tamper::BadCheckpoint,
                    Some(cp.seq),
                    None,
                    format!(
                        "{what} at seq {} (key {}, signed {}) does not verify with the given keys",
                        cp.seq, cp.key_id, cp.at
                    ),
                ));
                report.chains.push(summary);
                return Ok(());
            }
        }
        // The hash each signed position must still have: the store's and the copy's.
        let mut checkpoint_at: BTreeMap<i64, Vec<&ExportedCheckpoint>> = BTreeMap::new();
        for c in cps.iter().chain(copy.iter()).filter(|c| !c.is_start()) {
            checkpoint_at.entry(c.seq).or_default().push(c);
        }
        let covered_through = cps
            .iter()
            .map(|c| c.seq)
            .max()
            .unwrap_or(0)
            .max(purged_through);
        // When the first event past the last checkpoint happened (the uncovered tail).
        let mut uncovered_since: Option<DateTime<Utc>> = None;

        let start = match options.since {
            Some(since) => store
                .fetch_all(FIRST_SINCE, &[&chain, &since], |r| r.opt_int("seq"))
                .await?
                .into_iter()
                .next()
                .transpose()?
                .flatten()
                .map(|s| s.max(purged_through + 1)),
            None => Some(purged_through + 1),
        };
        let mut prev: Option<ChainRow> = None;
        let mut before_prev: Option<String> = None;
        let mut after = start.map_or(i64::MAX, |s| s - 1);
        let mut problem: Option<Finding> = None;
        'pages: loop {
            let rows = store
                .fetch_all(PAGE_SQL, &[&chain, &after], |r| {
                    (r.int("id"), ChainRow::read(r))
                })
                .await?;
            let n = rows.len();
            for (id, row) in rows {
                let id = id?;
                let r = match row {
                    Ok(r) => r,
                    Err(e) => {
                        problem = Some(found(
                            Tamper::Edited,
                            None,
                            Some(id),
                            format!("event {id} no longer reads back: {e}"),
                        ));
                        break 'pages;
                    }
                };
                after = r.seq;
                summary.events += 1;
                summary.last_seq = r.seq;
                if r.seq == covered_through + 1 {
                    uncovered_since = Some(r.event.at);
                }
                if let Some(p) = &prev {
                    if r.seq > p.seq + 1 {
                        problem = Some(missing(p.seq + 1, &r));
                        break 'pages;
                    }
                    if r.prev_hash.as_deref() != Some(p.hash.as_str()) {
                        problem = Some(
                            self.broken_link(chain, &r, p, before_prev.as_deref())
                                .await?,
                        );
                        break 'pages;
                    }
                } else if r.seq == 1 && r.prev_hash.is_some() {
                    problem = Some(edited(
                        &r,
                        format!("event {} opens the chain but links to a predecessor", r.id),
                    ));
                    break 'pages;
                } else if options.since.is_none() && r.seq > purged_through + 1 {
                    problem = Some(missing(purged_through + 1, &r));
                    break 'pages;
                } else if let Some(p) = purge
                    && r.seq == p.seq + 1
                    && r.prev_hash.as_deref() != Some(p.hash.as_str())
                {
                    problem = Some(edited(
                        &r,
                        format!(
                            "event {} (seq {}) does not link to the last purged event (purge record at seq {})",
                            r.id, r.seq, p.seq
                        ),
                    ));
                    break 'pages;
                }
                if r.recomputed().ok().as_deref() != Some(r.hash.as_str()) {
                    problem = Some(edited(
                        &r,
                        format!("event {} (seq {}) does not match its hash", r.id, r.seq),
                    ));
                    break 'pages;
                }
                if let Some(cp) = checkpoint_at
                    .get(&r.seq)
                    .and_then(|at| at.iter().find(|c| c.hash != r.hash))
                {
                    problem = Some(edited(
                        &r,
                        format!(
                            "event {} (seq {}) is not the one the checkpoint signed {} vouches for: the chain was rewritten up to here",
                            r.id, r.seq, cp.at
                        ),
                    ));
                    break 'pages;
                }
                before_prev = prev.take().map(|p| p.hash);
                prev = Some(r);
            }
            if n < PAGE {
                break;
            }
        }
        if problem.is_none()
            && let Some(cp) = cps
                .iter()
                .chain(copy.iter())
                .filter(|c| !c.is_start())
                .max_by_key(|c| c.seq)
            && cp.seq > summary.last_seq
        {
            let whose = if cps
                .iter()
                .any(|c| c.seq == cp.seq && c.signature == cp.signature)
            {
                "a checkpoint"
            } else {
                "the exported copy's checkpoint"
            };
            problem = Some(found(
                Tamper::Truncated,
                Some(summary.last_seq + 1),
                None,
                format!(
                    "the chain ends at seq {} but {whose} signed {} says it reached seq {}",
                    summary.last_seq, cp.at, cp.seq
                ),
            ));
        }
        if problem.is_none() {
            problem = missing_from_store(cps, copy, purged_through)
                .map(|(seq, detail)| found(Tamper::MissingCheckpoint, Some(seq), None, detail));
        }
        if problem.is_none() && signed {
            problem = Coverage {
                cps,
                purge,
                purged_through,
                last_seq: summary.last_seq,
                legacy,
                uncovered_since,
                grace: options.grace,
            }
            .check()
            .map(|(kind, seq, detail)| found(kind, Some(seq), None, detail));
        }
        report.findings.extend(problem);
        report.chains.push(summary);
        Ok(())
    }

    /// `r` does not link to `p`, the event before it: say which event is out of place.
    async fn broken_link(
        &self,
        chain: &str,
        r: &ChainRow,
        p: &ChainRow,
        before_p: Option<&str>,
    ) -> Result<Finding, BoxError> {
        let finding = |kind, row: &ChainRow, detail: String| Finding {
            kind,
            chain: Some(chain.to_string()),
            seq: Some(row.seq),
            event_id: Some(row.id),
            detail,
        };
        // `r` links to the event before `p`: `p` was slipped in between.
        if before_p.is_some() && r.prev_hash.as_deref() == before_p {
            return Ok(finding(
                Tamper::Inserted,
                p,
                format!(
                    "event {} (seq {}) was inserted: the event after it links past it",
                    p.id, p.seq
                ),
            ));
        }
        // `r` links to an event that is elsewhere in the chain: it was moved.
        if let Some(prev_hash) = &r.prev_hash {
            let elsewhere = self
                .store
                .fetch_all(
                    "SELECT seq FROM capgate_audit_events WHERE chain = $1 AND hash = $2 LIMIT 1",
                    &[&chain, prev_hash],
                    |row| row.int("seq"),
                )
                .await?
                .into_iter()
                .next()
                .transpose()?;
            if let Some(at) = elsewhere {
                return Ok(finding(
                    Tamper::Reordered,
                    r,
                    format!(
                        "event {} (seq {}) is out of order: it follows the event now at seq {at}",
                        r.id, r.seq
                    ),
                ));
            }
        }
        Ok(finding(
            Tamper::Edited,
            p,
            format!(
                "event {} (seq {}) was rewritten with a new hash: event {} after it links to another",
                p.id, p.seq, r.id
            ),
        ))
    }
}

/// One chain's signed records: the store's checkpoints (its start record included), its
/// purge records, and the exported copy's records of it.
struct ChainRecords {
    stored: Vec<ExportedCheckpoint>,
    purges: Vec<ExportedCheckpoint>,
    copy: Vec<ExportedCheckpoint>,
}
