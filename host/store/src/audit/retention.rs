//! Retention (issue 39, item 4): events older than the deployment keeps them are deleted
//! without breaking `capgate audit verify`.
//!
//! A chain is only ever purged up to one of its signed checkpoints (so the last purged
//! event's hash is known and signed; that checkpoint and the writer's start record are
//! kept, the chained checkpoints before it go), and the purge leaves a record of its own, signed with
//! the same key in another domain: "chain C's events through SEQ, the last with hash H, were
//! purged". `verify` then starts the chain after SEQ and checks that the first remaining
//! event links to H; a head deleted without such a record is still a deletion. Events an
//! export sink has not acknowledged are kept. The record is written before anything is
//! deleted, so a purge cut short is finished by the next one.

use super::chain::{CheckpointFields, CheckpointSigner};
use super::log::AuditLog;
use crate::db::{Sql, Via};
use crate::time::trunc;
use capgate_core::error::BoxError;
use chrono::{DateTime, Utc};

/// What a purge removes.
#[derive(Debug, Clone)]
pub struct PurgeOptions {
    /// Events that happened before this go (up to each chain's last checkpoint signed
    /// before it).
    pub before: DateTime<Utc>,
    /// The key purge records are signed with: the deployment's checkpoint key.
    pub signer: CheckpointSigner,
    /// Export sinks whose unacknowledged events are kept (`[audit.export.NAME]`).
    pub keep_for: Vec<String>,
}

/// What a purge removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PurgeReport {
    /// Chains purged further than before.
    pub chains: u64,
    /// Chained events deleted.
    pub events: u64,
    /// Events from before chains existed deleted.
    pub unchained: u64,
}

/// Rows deleted per statement, so a large purge never holds the writer for long.
const CHUNK: i64 = 1000;

const ANCHOR: Sql = Sql {
    sqlite: "SELECT seq, hash FROM capgate_audit_checkpoints \
             WHERE chain = $1 AND at < $2 AND seq <= $3 AND seq > 0 ORDER BY seq DESC LIMIT 1",
    postgres: "SELECT seq, hash FROM capgate_audit_checkpoints \
               WHERE chain = $1 AND at < $2::timestamptz AND seq <= $3 AND seq > 0 \
               ORDER BY seq DESC LIMIT 1",
};

const DELETE_EVENTS: &str = "DELETE FROM capgate_audit_events WHERE id IN \
     (SELECT id FROM capgate_audit_events WHERE chain = $1 AND seq <= $2 LIMIT $3)";

const DELETE_UNCHAINED: Sql = Sql {
    sqlite: "DELETE FROM capgate_audit_events WHERE id IN \
             (SELECT id FROM capgate_audit_events WHERE chain IS NULL AND at < $1 LIMIT $2)",
    postgres: "DELETE FROM capgate_audit_events WHERE id IN \
               (SELECT id FROM capgate_audit_events WHERE chain IS NULL \
               AND at < $1::timestamptz LIMIT $2)",
};

impl AuditLog {
    /// Delete what `options` says is past retention, leaving every chain verifiable
    /// (module docs).
    pub async fn purge(&self, options: &PurgeOptions) -> Result<PurgeReport, BoxError> {
        let store = &self.store;
        let mut report = PurgeReport::default();
        let chains = store
            .fetch_all(
                "SELECT DISTINCT chain FROM capgate_audit_checkpoints ORDER BY chain",
                &[],
                |r| r.text("chain"),
            )
            .await?
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        for chain in chains {
            let mut bound = i64::MAX;
            for sink in &options.keep_for {
                let cursor = store
                    .fetch_all(
                        "SELECT seq FROM capgate_audit_export_cursors WHERE sink = $1 AND chain = $2",
                        &[sink, &chain],
                        |r| r.int("seq"),
                    )
                    .await?
                    .into_iter()
                    .next()
                    .transpose()?
                    .unwrap_or(0);
                bound = bound.min(cursor);
            }
            let anchor = store
                .fetch_all(ANCHOR, &[&chain, &options.before, &bound], |r| {
                    Ok::<_, crate::columns::ColumnError>((r.int("seq")?, r.text("hash")?))
                })
                .await?
                .into_iter()
                .next()
                .transpose()?;
            let prior = store
                .fetch_all(
                    "SELECT max(seq) AS seq FROM capgate_audit_purges WHERE chain = $1",
                    &[&chain],
                    |r| r.opt_int("seq"),
                )
                .await?
                .into_iter()
                .next()
                .transpose()?
                .flatten()
                .unwrap_or(0);
            let through = match anchor {
                Some((seq, hash)) if seq > prior => {
                    let at = trunc(Utc::now());
                    let fields = CheckpointFields {
                        chain: &chain,
                        seq,
                        hash: &hash,
                        at,
                    };
                    let signature = options.signer.sign_purge(&fields);
                    store
                        .execute(
                            Via::Group,
                            "INSERT INTO capgate_audit_purges (chain, seq, hash, at, key_id, signature) \
                             VALUES ($1, $2, $3, $4, $5, $6)",
                            &[&chain, &seq, &hash, &at, &options.signer.key_id(), &signature],
                        )
                        .await?;
                    report.chains += 1;
                    seq
                }
                // Nothing new to purge; finish what an interrupted purge left.
                _ => prior,
            };
            if through == 0 {
                continue;
            }
            loop {
                let n = store
                    .execute(Via::Group, DELETE_EVENTS, &[&chain, &through, &CHUNK])
                    .await?;
                report.events += n;
                if n < CHUNK as u64 {
                    break;
                }
            }
            // The purge record now vouches for where the chain starts. The checkpoint it
            // ends at stays (the next one is chained to it), and so does the writer's start
            // record (its checkpoint interval and chain-less bound still apply).
            store
                .execute(
                    Via::Group,
                    "DELETE FROM capgate_audit_checkpoints WHERE chain = $1 AND seq < $2 \
                     AND (kind IS NULL OR kind <> 'start')",
                    &[&chain, &through],
                )
                .await?;
            store
                .execute(
                    Via::Group,
                    "DELETE FROM capgate_audit_purges WHERE chain = $1 AND seq < $2",
                    &[&chain, &through],
                )
                .await?;
        }
        loop {
            let n = store
                .execute(Via::Group, DELETE_UNCHAINED, &[&options.before, &CHUNK])
                .await?;
            report.unchained += n;
            if n < CHUNK as u64 {
                break;
            }
        }
        Ok(report)
    }
}
