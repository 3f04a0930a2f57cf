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
//! **Checkpoints, chained from a signed start.** With a key configured, a writer signs a
//! start record before its first event ("chain C starts; a checkpoint at least every N
//! events; chain-less rows end at id U") and then checkpoints "chain C reached event SEQ
//! whose hash is H, after the record whose signature digests to P" (Ed25519), into
//! `capgate_audit_checkpoints`: once `checkpointEvents` events went without one, about a second
//! after a commit leaves events uncovered, at every flush and at a clean stop. Each
//! record signs the SHA-256 of the previous one's signature, so deleting a checkpoint
//! breaks the next. With the public key, verification requires every chain to have its
//! signed start, an unbroken run of checkpoints no further apart than N, and to end on a
//! checkpoint; it checks each signature, that the event at SEQ still has hash H (a chain
//! rewritten from some point on with recomputed hashes), and that the chain still reaches
//! SEQ (a truncated tail). What the database alone cannot show (a chain truncated back to
//! one of its checkpoints together with the later ones, a whole chain deleted) the
//! exported copy of the checkpoints shows: [`VerifyOptions::copy`]. SECURITY.md states the
//! threat model.

use super::log::{AuditLog, RawAudit};
use crate::columns::row;
use crate::db::Sql;
use capgate_core::canonical::input_hash;
use capgate_core::error::BoxError;
use chrono::{DateTime, SecondsFormat, Utc};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};

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

    /// The start record of `chain`: its checkpoint interval and the highest id of a
    /// chain-less row when it started (`unchained_through`).
    pub(crate) fn sign_start(
        &self,
        chain: &str,
        at: DateTime<Utc>,
        unchained_through: i64,
    ) -> ExportedCheckpoint {
        self.signed(ExportedCheckpoint {
            chain: chain.to_string(),
            seq: 0,
            hash: String::new(),
            at,
            key_id: self.key_id(),
            signature: String::new(),
            kind: Some(KIND_START.to_string()),
            prev: None,
            every_events: Some(i64::try_from(self.every_events).unwrap_or(i64::MAX)),
            unchained_through: Some(unchained_through),
        })
    }

    /// A checkpoint of `chain` at `seq` (hash `hash`), after the record signed `prev`.
    pub(crate) fn sign_checkpoint(
        &self,
        chain: &str,
        seq: i64,
        hash: &str,
        at: DateTime<Utc>,
        prev_signature: &str,
    ) -> ExportedCheckpoint {
        self.signed(ExportedCheckpoint {
            chain: chain.to_string(),
            seq,
            hash: hash.to_string(),
            at,
            key_id: self.key_id(),
            signature: String::new(),
            kind: Some(KIND_CHECKPOINT.to_string()),
            prev: Some(signature_digest(prev_signature)),
            every_events: None,
            unchained_through: None,
        })
    }

    fn signed(&self, mut record: ExportedCheckpoint) -> ExportedCheckpoint {
        // Every kind built above has a message.
        if let Some(message) = record.message() {
            record.signature = hex(&self.key.sign(&message).to_bytes());
        }
        record
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

/// `kind` of a writer's start record.
pub(crate) const KIND_START: &str = "start";
/// `kind` of a chained checkpoint.
pub(crate) const KIND_CHECKPOINT: &str = "checkpoint";

/// The SHA-256 (hex) of a record's signature (its hex text), what the next record signs as
/// `prev`.
fn signature_digest(signature: &str) -> String {
    capgate_core::digest::sha256_hex(signature.as_bytes())
}

/// One signed record of a chain, as stored in `capgate_audit_checkpoints`, exported to a
/// sink and read back from that copy (`capgate audit verify --checkpoints`): a writer's
/// start record (`kind` `start`, `seq` 0), a chained checkpoint (`kind` `checkpoint`), or a
/// checkpoint written before checkpoints were chained (`kind` absent).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportedCheckpoint {
    /// The chain.
    pub chain: String,
    /// The event it vouches for (0 for a start record).
    pub seq: i64,
    /// That event's hash (empty for a start record).
    pub hash: String,
    /// When it was signed.
    pub at: DateTime<Utc>,
    /// The id of the key that signed it ([`key_id`]).
    pub key_id: String,
    /// The Ed25519 signature (hex) of its message.
    pub signature: String,
    /// `start`, `checkpoint`, or absent for an unchained checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The SHA-256 (hex) of the previous record's signature (checkpoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev: Option<String>,
    /// The writer's checkpoint interval in events (start records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_events: Option<i64>,
    /// The highest id of a chain-less event when the writer started (start records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchained_through: Option<i64>,
}

impl ExportedCheckpoint {
    /// The bytes its signature covers; `None` for a record no writer signs (an unknown
    /// kind, or a field its kind needs missing).
    fn message(&self) -> Option<Vec<u8>> {
        let at = self.at.to_rfc3339_opts(SecondsFormat::Micros, true);
        let (chain, seq, hash) = (&self.chain, self.seq, &self.hash);
        match self.kind.as_deref() {
            None => Some(
                CheckpointFields {
                    chain,
                    seq,
                    hash,
                    at: self.at,
                }
                .message(),
            ),
            Some(KIND_START) => {
                let (every, through) = (self.every_events?, self.unchained_through?);
                Some(
                    format!(
                        "capgate-audit-start/v2\n{chain}\n{seq}\n{hash}\n{at}\n{every}\n{through}"
                    )
                    .into_bytes(),
                )
            }
            Some(KIND_CHECKPOINT) => {
                let prev = self.prev.as_deref()?;
                Some(
                    format!("capgate-audit-checkpoint/v2\n{chain}\n{seq}\n{hash}\n{at}\n{prev}")
                        .into_bytes(),
                )
            }
            Some(_) => None,
        }
    }

    /// Whether its signature verifies with the key it names, one of `keys`.
    fn verifies(&self, keys: &BTreeMap<String, VerifyingKey>) -> bool {
        let Some(message) = self.message() else {
            return false;
        };
        keys.get(&self.key_id).is_some_and(|k| {
            unhex(&self.signature)
                .and_then(|b| Signature::from_slice(&b).ok())
                .is_some_and(|sig| k.verify(&message, &sig).is_ok())
        })
    }

    fn is_start(&self) -> bool {
        self.kind.as_deref() == Some(KIND_START)
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
    /// report says so), the checkpoints' positions still are. Given: every chain must also
    /// open on its signed start record, be covered by an unbroken run of chained
    /// checkpoints and end on one (module docs).
    pub keys: Vec<VerifyingKey>,
    /// The checkpoints as exported off the box (a JSON-lines sink's `checkpoint` lines):
    /// every record in it must still be in the store (unless purged), the events it names
    /// must still have its hashes, and every chain it names must still reach it.
    pub copy: Vec<ExportedCheckpoint>,
    /// Events at the end of a chain not yet covered by a checkpoint are not a finding while
    /// they are younger than this (a running writer signs about a second after a commit).
    /// Zero (the default): every uncovered event is a finding.
    pub grace: std::time::Duration,
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
    /// Events no signed record vouches for: a chain without its signed start record or
    /// without any checkpoint, a run longer than the writer's checkpoint interval, or a
    /// chain that does not end on a checkpoint (forged, rewritten, appended to, or a writer
    /// killed before it signed its last events).
    Unsigned,
    /// A signed checkpoint is gone: the next one does not link to the record before it, or
    /// the exported copy holds one the store no longer has.
    MissingCheckpoint,
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
            Tamper::Unsigned => "unsigned",
            Tamper::MissingCheckpoint => "missing-checkpoint",
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
    /// Its checkpoints were written before checkpoints were chained (no start record): a
    /// tail truncated together with its checkpoints is not detectable from the store.
    pub legacy: bool,
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
    /// Rows written before the chain existed (older than every chained row, or at most
    /// the id the writers' signed start records name): not verifiable.
    pub unchained_before: u64,
    /// Records of the exported checkpoint copy checked against the store.
    pub copy_checkpoints: u64,
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

    /// Rows without a chain, and rows with an id no insert gives (`id <= 0`). Chain-less
    /// rows at most `bound` (the id the writers' signed start records name) or, without
    /// one, older than every chained row predate the chain; others were inserted.
    async fn unchained(
        &self,
        bound: Option<i64>,
        report: &mut VerifyReport,
    ) -> Result<(), BoxError> {
        let not_positive = self
            .store
            .fetch_all(
                "SELECT id, chain, seq FROM capgate_audit_events WHERE id <= 0 ORDER BY id LIMIT 1",
                &[],
                |r| {
                    Ok::<_, crate::columns::ColumnError>((
                        r.int("id")?,
                        r.opt_text("chain")?,
                        r.opt_int("seq")?,
                    ))
                },
            )
            .await?;
        if let Some((id, chain, seq)) = not_positive.into_iter().next().transpose()? {
            report.findings.push(Finding {
                kind: Tamper::Inserted,
                chain,
                seq,
                event_id: Some(id),
                detail: format!(
                    "event {id} has an id no insert gives (at most 0): it was put there by hand"
                ),
            });
        }
        let first_chained = self
            .store
            .fetch_all(
                "SELECT min(id) AS id FROM capgate_audit_events WHERE chain IS NOT NULL AND id > 0",
                &[],
                |r| r.opt_int("id"),
            )
            .await?
            .into_iter()
            .next()
            .transpose()?
            .flatten();
        // Chain-less rows up to `legit` predate the chain.
        let legit = match (bound, first_chained) {
            (Some(b), _) => b,
            (None, Some(first)) => first - 1,
            (None, None) => return Ok(()),
        };
        let before = self
            .store
            .fetch_all(
                "SELECT count(*) AS n FROM capgate_audit_events WHERE chain IS NULL \
                 AND id > 0 AND id <= $1",
                &[&legit],
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
                &[&legit],
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
                    "event {id} belongs to no chain but was stored after the chains began"
                ),
            });
        }
        Ok(())
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
                            "event {} (seq {}) does not link to the last purged event (purge record at seq {})",
                            r.id, r.seq, p.seq
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
                if let Some(cp) = checkpoint_at
                    .get(&r.seq)
                    .and_then(|at| at.iter().find(|c| c.hash != r.hash))
                {
                    problem = Some(found(
                        Tamper::Edited,
                        Some(r.seq),
                        Some(r.id),
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

/// Whether a purge record's signature verifies with the key it names.
fn purge_verifies(p: &ExportedCheckpoint, keys: &BTreeMap<String, VerifyingKey>) -> bool {
    let message = CheckpointFields {
        chain: &p.chain,
        seq: p.seq,
        hash: &p.hash,
        at: p.at,
    }
    .purge_message();
    keys.get(&p.key_id).is_some_and(|k| {
        unhex(&p.signature)
            .and_then(|b| Signature::from_slice(&b).ok())
            .is_some_and(|sig| k.verify(&message, &sig).is_ok())
    })
}

/// The first record of the exported copy the store no longer has (a checkpoint retention
/// purged excepted): its `seq` and a sentence.
fn missing_from_store(
    stored: &[ExportedCheckpoint],
    copy: &[ExportedCheckpoint],
    purged_through: i64,
) -> Option<(i64, String)> {
    let kept: BTreeSet<(i64, &str)> = stored
        .iter()
        .map(|s| (s.seq, s.signature.as_str()))
        .collect();
    let mut copy: Vec<&ExportedCheckpoint> = copy.iter().collect();
    copy.sort_by_key(|c| c.seq);
    copy.into_iter()
        .find(|c| {
            let kept = kept.contains(&(c.seq, c.signature.as_str()));
            let purged = !c.is_start() && c.seq <= purged_through;
            !kept && !purged
        })
        .map(|c| {
            let what = if c.is_start() {
                "start record"
            } else {
                "checkpoint"
            };
            (
                c.seq,
                format!(
                    "the exported copy holds the {what} at seq {} signed {} that the store no longer has: it was deleted or replaced",
                    c.seq, c.at
                ),
            )
        })
}

/// With keys: whether a chain's events are all vouched for by its signed records.
struct Coverage<'a> {
    cps: &'a [ExportedCheckpoint],
    purge: Option<&'a ExportedCheckpoint>,
    purged_through: i64,
    last_seq: i64,
    legacy: bool,
    uncovered_since: Option<DateTime<Utc>>,
    grace: std::time::Duration,
}

impl Coverage<'_> {
    /// The first event no signed record vouches for: its kind, `seq` and a sentence.
    fn check(&self) -> Option<(Tamper, i64, String)> {
        let first = self.purged_through + 1;
        if self.cps.is_empty() {
            return (self.last_seq >= first).then(|| {
                (
                    Tamper::Unsigned,
                    first,
                    format!(
                        "no signed checkpoint vouches for the chain's events {first}..={}: no writer holding the key signed this chain",
                        self.last_seq
                    ),
                )
            });
        }
        let mut every = i64::MAX;
        if !self.legacy {
            let Some(start) = self.cps.iter().find(|c| c.is_start()) else {
                return Some((
                    Tamper::Unsigned,
                    first,
                    "the chain has no signed start record: its writer did not sign it".into(),
                ));
            };
            every = start.every_events.unwrap_or(i64::MAX).max(1);
            let mut order: Vec<&ExportedCheckpoint> = self.cps.iter().collect();
            order.sort_by_key(|c| (c.seq, !c.is_start()));
            for pair in order.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                if b.is_start() || b.kind.is_none() {
                    return Some((
                        Tamper::BadCheckpoint,
                        b.seq,
                        format!(
                            "the record at seq {} is not a chained checkpoint of a chain that opens with a start record",
                            b.seq
                        ),
                    ));
                }
                // Retention deleted the checkpoints before the one it purged through; its
                // signed purge record vouches for that one.
                let vouched = self
                    .purge
                    .is_some_and(|p| p.seq == b.seq && p.hash == b.hash);
                if vouched {
                    continue;
                }
                if b.prev.as_deref() != Some(signature_digest(&a.signature).as_str()) {
                    return Some((
                        Tamper::MissingCheckpoint,
                        b.seq,
                        format!(
                            "the checkpoint at seq {} does not follow the record before it (seq {}): a checkpoint between them was deleted",
                            b.seq, a.seq
                        ),
                    ));
                }
                if b.seq - a.seq > every {
                    return Some((
                        Tamper::Unsigned,
                        a.seq + 1,
                        format!(
                            "events {}..={} are covered by no checkpoint, more than the {every} the writer signs at least every",
                            a.seq + 1,
                            b.seq
                        ),
                    ));
                }
            }
        }
        let covered = self
            .cps
            .iter()
            .map(|c| c.seq)
            .max()
            .unwrap_or(0)
            .max(self.purged_through);
        if self.last_seq <= covered {
            return None;
        }
        let young = !self.grace.is_zero()
            && self.last_seq - covered <= every
            && self.uncovered_since.is_some_and(|t| {
                chrono::Duration::from_std(self.grace)
                    .is_ok_and(|g| t >= Utc::now() - g && t <= Utc::now() + g)
            });
        (!young).then(|| {
            (
                Tamper::Unsigned,
                covered + 1,
                format!(
                    "events {}..={} are covered by no signed checkpoint: the chain does not end on one (appended or rewritten without the key, or its writer was killed before it signed them)",
                    covered + 1,
                    self.last_seq
                ),
            )
        })
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
    fn a_checkpoint_signature_covers_every_field_and_the_record_before_it() {
        let signer = CheckpointSigner::new(SigningKey::from_bytes(&[1u8; 32]), 10);
        let keys: BTreeMap<String, VerifyingKey> =
            [(signer.key_id(), signer.verifying_key())].into();
        let at = Utc::now();
        let start = signer.sign_start("c1", at, 0);
        assert!(start.verifies(&keys));
        let cp = signer.sign_checkpoint("c1", 5, "aa", at, &start.signature);
        assert!(cp.verifies(&keys));
        assert_eq!(
            cp.prev.as_deref(),
            Some(signature_digest(&start.signature).as_str())
        );
        for other in [
            ExportedCheckpoint {
                seq: 6,
                ..cp.clone()
            },
            ExportedCheckpoint {
                chain: "c2".into(),
                ..cp.clone()
            },
            ExportedCheckpoint {
                hash: "ab".into(),
                ..cp.clone()
            },
            ExportedCheckpoint {
                prev: Some(signature_digest("other")),
                ..cp.clone()
            },
            ExportedCheckpoint {
                kind: None,
                ..cp.clone()
            },
            ExportedCheckpoint {
                unchained_through: Some(7),
                ..start.clone()
            },
            ExportedCheckpoint {
                every_events: Some(1_000_000),
                ..start.clone()
            },
        ] {
            assert!(!other.verifies(&keys), "{other:?}");
        }
        assert_eq!(unhex("0g"), None);
        assert_eq!(unhex("abc"), None);
    }
}
