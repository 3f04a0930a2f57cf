//! What [`AuditLog::verify`] is asked ([`VerifyOptions`]) and what it answers
//! ([`VerifyReport`]: a summary per chain, the findings and how the trail was tampered with).

use super::ExportedCheckpoint;
use chrono::{DateTime, Utc};
use ed25519_dalek::VerifyingKey;

// What the docs link to.
#[cfg(doc)]
use crate::audit::log::AuditLog;

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
