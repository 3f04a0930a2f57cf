//! Whether a chain's signed records vouch for all of its events: the exported copy's
//! records still in the store, and with keys an unbroken run of chained checkpoints from
//! the signed start record to the chain's end.

use super::checkpoint::signature_digest;
use super::{ExportedCheckpoint, Tamper};
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;

/// The first record of the exported copy the store no longer has (a checkpoint retention
/// purged excepted): its `seq` and a sentence.
pub(super) fn missing_from_store(
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
pub(super) struct Coverage<'a> {
    pub(super) cps: &'a [ExportedCheckpoint],
    pub(super) purge: Option<&'a ExportedCheckpoint>,
    pub(super) purged_through: i64,
    pub(super) last_seq: i64,
    pub(super) legacy: bool,
    pub(super) uncovered_since: Option<DateTime<Utc>>,
    pub(super) grace: std::time::Duration,
}

impl Coverage<'_> {
    /// The first event no signed record vouches for: its kind, `seq` and a sentence.
    pub(super) fn check(&self) -> Option<(Tamper, i64, String)> {
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
