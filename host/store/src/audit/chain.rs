//! The audit trail's hash chains and signed checkpoints: what makes an edited, deleted,
//! inserted or reordered event, and a truncated tail, detectable ([`AuditLog::verify`]).
//!
//! **One chain per writer.** Every [`SqlAuditSink`](super::SqlAuditSink) (one per process:
//! a replica, a CLI command) appends to a chain of its own, named by a UUIDv7 when it
//! starts. Its events carry `seq` (1, 2, … without gaps), the hash of the chain's previous
//! event and their own hash: the SHA-256 of the event's canonical JSON (RFC 8785), chain
//! fields included. A writer is the only appender of its chain, so it knows the chain's
//! head without reading it, appends never wait on another replica's lock, and any number
//! of replicas and CLI processes on one database stay correct; the order within a chain is
//! that writer's commit order. (A chain per namespace would need a lock shared by every
//! replica on each batch, and the audit table has no namespace column.)
//!
//! **Checkpoints.** With a key configured, a writer signs "chain C reached event SEQ whose
//! hash is H" (Ed25519) every so many events and when it is flushed or stops, into
//! `capgate_audit_checkpoints`. Verification checks each signature, that the event at SEQ
//! still has hash H (a chain rewritten from some point on with recomputed hashes), and that
//! the chain still reaches SEQ (a truncated tail). Deleting a whole chain together with
//! its checkpoints is not detectable from the database alone: ship checkpoints off the box
//! (issue 39's export) for that.

use super::log::{AuditLog, RawAudit};
use crate::columns::row;
use crate::db::Sql;
use capgate_core::canonical::input_hash;
use capgate_core::error::BoxError;
use chrono::{DateTime, SecondsFormat, Utc};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The fields an event's hash covers, as stored.
pub(crate) struct Linked<'a> {
    pub chain: &'a str,
    pub seq: i64,
    pub prev: Option<&'a str>,
    pub ty: &'a str,
    pub at: DateTime<Utc>,
    pub surface: &'a str,
    pub actor_id: &'a str,
    pub actor_kind: &'a str,
    pub execution_id: Option<&'a str>,
    pub capability_id: Option<&'a str>,
    pub correlation_id: Option<&'a str>,
    pub input_hash: Option<&'a str>,
    pub data: &'a Value,
}

impl Linked<'_> {
    /// Lower-case hex SHA-256 of the canonical JSON of every field (nulls included).
    pub(crate) fn hash(&self) -> Result<String, BoxError> {
        let text = |s: Option<&str>| s.map_or(Value::Null, |s| Value::String(s.to_string()));
        let mut m = Map::new();
        m.insert("chain".into(), Value::String(self.chain.to_string()));
        m.insert("seq".into(), Value::from(self.seq));
        m.insert("prev".into(), text(self.prev));
        m.insert("type".into(), Value::String(self.ty.to_string()));
        m.insert(
            "at".into(),
            Value::String(self.at.to_rfc3339_opts(SecondsFormat::Micros, true)),
        );
        m.insert("surface".into(), Value::String(self.surface.to_string()));
        m.insert("actorId".into(), Value::String(self.actor_id.to_string()));
        m.insert(
            "actorKind".into(),
            Value::String(self.actor_kind.to_string()),
        );
        m.insert("executionId".into(), text(self.execution_id));
        m.insert("capabilityId".into(), text(self.capability_id));
        m.insert("correlationId".into(), text(self.correlation_id));
        m.insert("inputHash".into(), text(self.input_hash));
        m.insert("data".into(), self.data.clone());
        Ok(input_hash(&Value::Object(m))?)
    }
}

/// Where a writer's chain stands: the last committed event's `seq` and hash.
#[derive(Debug, Clone)]
pub(crate) struct ChainHead {
    pub id: String,
    pub seq: i64,
    pub hash: Option<String>,
}

impl ChainHead {
    /// A new chain, named by a UUIDv7 (time-ordered, unique per writer).
    pub(crate) fn start() -> Self {
        ChainHead {
            id: uuid::Uuid::now_v7().to_string(),
            seq: 0,
            hash: None,
        }
    }
}

/// Signs a writer's checkpoints: the deployment's Ed25519 key and how often.
#[derive(Clone)]
pub struct CheckpointSigner {
    key: SigningKey,
    /// A checkpoint after this many committed events (and at every flush and stop).
    pub every_events: u64,
}

impl std::fmt::Debug for CheckpointSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointSigner")
            .field("key_id", &self.key_id())
            .field("every_events", &self.every_events)
            .finish()
    }
}

/// A checkpoint key that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("the audit checkpoint key is not an Ed25519 PKCS#8 PEM private key: {0}")]
pub struct CheckpointKeyError(String);

impl CheckpointSigner {
    /// Sign with `key`, a checkpoint every `every_events` events (at least 1).
    pub fn new(key: SigningKey, every_events: u64) -> Self {
        CheckpointSigner {
            key,
            every_events: every_events.max(1),
        }
    }

    /// Read the key from a PKCS#8 PEM (`capgate keys generate` writes one).
    pub fn from_pkcs8_pem(pem: &str, every_events: u64) -> Result<Self, CheckpointKeyError> {
        use ed25519_dalek::pkcs8::DecodePrivateKey;
        let key = SigningKey::from_pkcs8_pem(pem).map_err(|e| CheckpointKeyError(e.to_string()))?;
        Ok(Self::new(key, every_events))
    }

    /// The public half, what `audit verify` checks signatures with.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// The key's id as checkpoints record it.
    pub fn key_id(&self) -> String {
        key_id(&self.key.verifying_key())
    }

    pub(crate) fn sign(&self, cp: &CheckpointFields<'_>) -> String {
        hex(&self.key.sign(&cp.message()).to_bytes())
    }

    /// Sign a purge record: "the chain's events through `seq` (hash `hash`) were purged".
    pub(crate) fn sign_purge(&self, cp: &CheckpointFields<'_>) -> String {
        hex(&self.key.sign(&cp.purge_message()).to_bytes())
    }
}

/// A verifying key's id: the first 16 hex digits of the SHA-256 of its 32 bytes.
pub fn key_id(key: &VerifyingKey) -> String {
    let full = capgate_core::digest::sha256_hex(key.as_bytes());
    full[..16].to_string()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What a checkpoint's signature covers.
#[derive(Clone, Copy)]
pub(crate) struct CheckpointFields<'a> {
    pub chain: &'a str,
    pub seq: i64,
    pub hash: &'a str,
    pub at: DateTime<Utc>,
}

impl CheckpointFields<'_> {
    fn message(&self) -> Vec<u8> {
        self.signed("capgate-audit-checkpoint/v1")
    }

    /// A purge record's message: another domain, so a checkpoint's signature never
    /// passes for a purge's (or the other way round).
    fn purge_message(&self) -> Vec<u8> {
        self.signed("capgate-audit-purge/v1")
    }

    fn signed(&self, domain: &str) -> Vec<u8> {
        format!(
            "{domain}\n{}\n{}\n{}\n{}",
            self.chain,
            self.seq,
            self.hash,
            self.at.to_rfc3339_opts(SecondsFormat::Micros, true)
        )
        .into_bytes()
    }
}

/// What [`AuditLog::verify`] checks.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// One chain only.
    pub chain: Option<String>,
    /// Start each chain at its first event at or after this time (that event's link to
    /// its predecessor is taken as given).
    pub since: Option<DateTime<Utc>>,
    /// Public keys checkpoints may be signed with. Empty: signatures are not checked (the
    /// report says so), the checkpoints' positions still are.
    pub keys: Vec<VerifyingKey>,
}

/// How the trail was tampered with, as the first break in a chain shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tamper {
    /// The event's content no longer matches its hash (or its hash was recomputed and the
    /// next event no longer links to it).
    Edited,
    /// Events are missing before the named one.
    Deleted,
    /// The named event was not written by the chain's writer.
    Inserted,
    /// The named event is not where its writer put it.
    Reordered,
    /// The chain ends before a signed checkpoint says it reached.
    Truncated,
    /// A checkpoint's signature does not verify (or its key is unknown).
    BadCheckpoint,
}

impl Tamper {
    /// The kebab-case name the report prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Tamper::Edited => "edited",
            Tamper::Deleted => "deleted",
            Tamper::Inserted => "inserted",
            Tamper::Reordered => "reordered",
            Tamper::Truncated => "truncated",
            Tamper::BadCheckpoint => "bad-checkpoint",
        }
    }
}

/// One problem found, naming the event (row id and `seq`) it is about.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// What happened.
    pub kind: Tamper,
    /// The chain (`None` for a row outside every chain).
    pub chain: Option<String>,
    /// The event's position in its chain.
    pub seq: Option<i64>,
    /// The event's row id.
    pub event_id: Option<i64>,
    /// A sentence for the operator.
    pub detail: String,
}

/// One chain's summary.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainSummary {
    /// The chain's name.
    pub chain: String,
    /// Events checked.
    pub events: u64,
    /// Its last `seq` present.
    pub last_seq: i64,
    /// Checkpoints checked.
    pub checkpoints: u64,
    /// The chain's events through this `seq` were purged by retention (a signed purge
    /// record says so); 0 when none were.
    pub purged_through: i64,
}

/// What [`AuditLog::verify`] found: one summary per chain and at most one finding per
/// chain (its first break), plus rows outside every chain.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    /// The chains checked.
    pub chains: Vec<ChainSummary>,
    /// Problems, in chain order.
    pub findings: Vec<Finding>,
    /// Whether checkpoint signatures were checked (a key was given).
    pub signatures_checked: bool,
    /// Rows written before the chain existed (older than every chained row): not verifiable.
    pub unchained_before: u64,
}

impl VerifyReport {
    /// Nothing was found.
    pub fn is_intact(&self) -> bool {
        self.findings.is_empty()
    }
}

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
        id: i64,
        chain: String,
        seq: i64,
        hash: String,
        at: DateTime<Utc>,
        key_id: String,
        signature: String,
    }
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

const CHECKPOINTS: &str = "SELECT id, chain, seq, hash, at, key_id, signature \
     FROM capgate_audit_checkpoints ORDER BY chain, seq, id";
const PURGES: &str = "SELECT id, chain, seq, hash, at, key_id, signature \
     FROM capgate_audit_purges ORDER BY chain, seq, id";

const FIRST_SINCE: Sql = Sql {
    sqlite: "SELECT min(seq) AS seq FROM capgate_audit_events WHERE chain = $1 AND at >= $2",
    postgres: "SELECT min(seq) AS seq FROM capgate_audit_events WHERE chain = $1 \
               AND at >= $2::timestamptz",
};

impl AuditLog {
    /// Check every chain (or `options.chain`): links, hashes, `seq` without gaps, and the
    /// checkpoints. Reads in pages; the report names the first break of each chain.
    pub async fn verify(&self, options: &VerifyOptions) -> Result<VerifyReport, BoxError> {
        let store = &self.store;
        let chains = store
            .fetch_all(CHAINS, &[&options.chain], |r| r.text("chain"))
            .await?
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        let mut by_chain = self.signed_by_chain(CHECKPOINTS).await?;
        let mut purged = self.signed_by_chain(PURGES).await?;
        let keys: BTreeMap<String, VerifyingKey> =
            options.keys.iter().map(|k| (key_id(k), *k)).collect();
        let mut report = VerifyReport {
            signatures_checked: !keys.is_empty(),
            ..VerifyReport::default()
        };
        for chain in chains {
            let cps = by_chain.remove(&chain).unwrap_or_default();
            let purges = purged.remove(&chain).unwrap_or_default();
            self.verify_chain(&chain, &cps, &purges, &keys, options, &mut report)
                .await?;
        }
        if options.chain.is_none() {
            self.unchained(&mut report).await?;
        }
        Ok(report)
    }

    /// Every signed row of a table (checkpoints or purge records), by chain, in `seq` order.
    async fn signed_by_chain(
        &self,
        sql: &'static str,
    ) -> Result<BTreeMap<String, Vec<CheckpointRow>>, BoxError> {
        let mut by_chain: BTreeMap<String, Vec<CheckpointRow>> = BTreeMap::new();
        for row in self.store.fetch_all(sql, &[], CheckpointRow::read).await? {
            let row = row?;
            by_chain.entry(row.chain.clone()).or_default().push(row);
        }
        Ok(by_chain)
    }

    /// Rows without a chain: older than every chained row they predate the chain; newer
    /// ones were inserted.
    async fn unchained(&self, report: &mut VerifyReport) -> Result<(), BoxError> {
        let first_chained = self
            .store
            .fetch_all(
                "SELECT min(id) AS id FROM capgate_audit_events WHERE chain IS NOT NULL",
                &[],
                |r| r.opt_int("id"),
            )
            .await?
            .into_iter()
            .next()
            .transpose()?
            .flatten();
        let Some(first) = first_chained else {
            return Ok(());
        };
        let before = self
            .store
            .fetch_all(
                "SELECT count(*) AS n FROM capgate_audit_events WHERE chain IS NULL AND id < $1",
                &[&first],
                |r| r.int("n"),
            )
            .await?;
        report.unchained_before = before
            .into_iter()
            .next()
            .transpose()?
            .map_or(0, |n| u64::try_from(n).unwrap_or(0));
        let inserted = self
            .store
            .fetch_all(
                "SELECT id FROM capgate_audit_events WHERE chain IS NULL AND id > $1 \
                 ORDER BY id LIMIT 1",
                &[&first],
                |r| r.int("id"),
            )
            .await?;
        if let Some(id) = inserted.into_iter().next().transpose()? {
            report.findings.push(Finding {
                kind: Tamper::Inserted,
                chain: None,
                seq: None,
                event_id: Some(id),
                detail: format!(
                    "event {id} belongs to no chain but was stored after chained events"
                ),
            });
        }
        Ok(())
    }

    async fn verify_chain(
        &self,
        chain: &str,
        cps: &[CheckpointRow],
        purges: &[CheckpointRow],
        keys: &BTreeMap<String, VerifyingKey>,
        options: &VerifyOptions,
        report: &mut VerifyReport,
    ) -> Result<(), BoxError> {
        let store = &self.store;
        // Where retention purged the chain up to (its latest purge record).
        let purge = purges.iter().max_by_key(|p| p.seq);
        let purged_through = purge.map_or(0, |p| p.seq);
        let mut summary = ChainSummary {
            chain: chain.to_string(),
            events: 0,
            last_seq: purged_through,
            checkpoints: cps.len() as u64,
            purged_through,
        };
        let found = |kind, seq, event_id, detail: String| Finding {
            kind,
            chain: Some(chain.to_string()),
            seq,
            event_id,
            detail,
        };
        // Signatures first: a forged checkpoint or purge record must not vouch for
        // anything.
        let signed = cps
            .iter()
            .map(|c| (c, "checkpoint"))
            .chain(purges.iter().map(|p| (p, "purge record")));
        for (cp, what) in signed {
            if keys.is_empty() {
                break;
            }
            let fields = CheckpointFields {
                chain: &cp.chain,
                seq: cp.seq,
                hash: &cp.hash,
                at: cp.at,
            };
            let message = if what == "checkpoint" {
                fields.message()
            } else {
                fields.purge_message()
            };
            let valid = keys.get(&cp.key_id).is_some_and(|k| {
                unhex(&cp.signature)
                    .and_then(|b| Signature::from_slice(&b).ok())
                    .is_some_and(|sig| k.verify(&message, &sig).is_ok())
            });
            if !valid {
                report.findings.push(found(
                    Tamper::BadCheckpoint,
                    Some(cp.seq),
                    None,
                    format!(
                        "{what} {} (seq {}, key {}) does not verify with the given keys",
                        cp.id, cp.seq, cp.key_id
                    ),
                ));
                report.chains.push(summary);
                return Ok(());
            }
        }
        let checkpoint_at: BTreeMap<i64, &CheckpointRow> = cps.iter().map(|c| (c.seq, c)).collect();

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
                if let Some(p) = &prev {
                    if r.seq > p.seq + 1 {
                        problem = Some(found(
                            Tamper::Deleted,
                            Some(r.seq),
                            Some(r.id),
                            format!(
                                "events {}..={} are missing before event {} (seq {})",
                                p.seq + 1,
                                r.seq - 1,
                                r.id,
                                r.seq
                            ),
                        ));
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
                    problem = Some(found(
                        Tamper::Edited,
                        Some(1),
                        Some(r.id),
                        format!("event {} opens the chain but links to a predecessor", r.id),
                    ));
                    break 'pages;
                } else if options.since.is_none() && r.seq > purged_through + 1 {
                    problem = Some(found(
                        Tamper::Deleted,
                        Some(r.seq),
                        Some(r.id),
                        format!(
                            "events {}..={} are missing before event {} (seq {})",
                            purged_through + 1,
                            r.seq - 1,
                            r.id,
                            r.seq
                        ),
                    ));
                    break 'pages;
                } else if let Some(p) = purge
                    && r.seq == p.seq + 1
                    && r.prev_hash.as_deref() != Some(p.hash.as_str())
                {
                    problem = Some(found(
                        Tamper::Edited,
                        Some(r.seq),
                        Some(r.id),
                        format!(
                            "event {} (seq {}) does not link to the last purged event (purge record {})",
                            r.id, r.seq, p.id
                        ),
                    ));
                    break 'pages;
                }
                if r.recomputed().ok().as_deref() != Some(r.hash.as_str()) {
                    problem = Some(found(
                        Tamper::Edited,
                        Some(r.seq),
                        Some(r.id),
                        format!("event {} (seq {}) does not match its hash", r.id, r.seq),
                    ));
                    break 'pages;
                }
                if let Some(cp) = checkpoint_at.get(&r.seq)
                    && cp.hash != r.hash
                {
                    problem = Some(found(
                        Tamper::Edited,
                        Some(r.seq),
                        Some(r.id),
                        format!(
                            "event {} (seq {}) is not the one checkpoint {} signed: the chain was rewritten up to here",
                            r.id, r.seq, cp.id
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
            && let Some(cp) = cps.iter().max_by_key(|c| c.seq)
            && cp.seq > summary.last_seq
        {
            problem = Some(found(
                Tamper::Truncated,
                Some(summary.last_seq + 1),
                None,
                format!(
                    "the chain ends at seq {} but checkpoint {} says it reached seq {}",
                    summary.last_seq, cp.id, cp.seq
                ),
            ));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash is the documented recipe (docs/events.md), recomputed here independently:
    /// Python's `json.dumps(o, sort_keys=True, separators=(",", ":"))` of the same object,
    /// SHA-256, hex.
    #[test]
    fn an_events_hash_is_the_documented_recipe() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-04T10:00:00.123456Z")
            .expect("a time")
            .with_timezone(&Utc);
        let data = serde_json::json!({"sideEffect": "write", "risk": "high"});
        let linked = Linked {
            chain: "c1",
            seq: 2,
            prev: Some("ab"),
            ty: "capability.requested",
            at,
            surface: "aiSdk",
            actor_id: "u_dana",
            actor_kind: "user",
            execution_id: Some("exe_1"),
            capability_id: Some("orders.refund"),
            correlation_id: None,
            input_hash: None,
            data: &data,
        };
        assert_eq!(
            linked.hash().expect("hashes"),
            "f67df2516245ef2a6440ea131cf9bec9cecbbbfdf3e57f913a368ecb3814f45f"
        );
    }

    #[test]
    fn a_checkpoint_signature_covers_every_field() {
        let signer = CheckpointSigner::new(SigningKey::from_bytes(&[1u8; 32]), 10);
        let at = Utc::now();
        let cp = CheckpointFields {
            chain: "c1",
            seq: 5,
            hash: "aa",
            at,
        };
        let sig = Signature::from_slice(&unhex(&signer.sign(&cp)).expect("hex")).expect("sig");
        let key = signer.verifying_key();
        assert!(key.verify(&cp.message(), &sig).is_ok());
        for other in [
            CheckpointFields { seq: 6, ..cp },
            CheckpointFields { chain: "c2", ..cp },
            CheckpointFields { hash: "ab", ..cp },
        ] {
            assert!(key.verify(&other.message(), &sig).is_err());
        }
        assert_eq!(unhex("0g"), None);
        assert_eq!(unhex("abc"), None);
    }
}
