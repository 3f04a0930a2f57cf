//! The one writer task of a sink: it batches queued events (bounded size, bounded delay),
//! links them into the writer's chain, inserts them, retries a batch that failed to commit
//! with a growing back-off, and signs and stores the chain's checkpoints.

use super::insert::insert;
use super::{AuditRow, AuditSinkOptions, Counters, Msg};
use crate::audit::chain::{ChainHead, CheckpointSigner, ExportedCheckpoint};
use crate::db::{Store, Via};
use crate::params::Json;
use crate::time::trunc;
use capgate_core::error::BoxError;
use chrono::Utc;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long after a commit that leaves events uncovered a running writer signs its chain's
/// head: the longest a live chain's newest events stay unsigned (and what a writer killed
/// without a clean stop can leave unsigned), at most one checkpoint a second besides the
/// every-`every_events` ones.
const CHECKPOINT_DELAY: Duration = Duration::from_secs(1);

/// First wait before retrying a batch that failed to commit; doubled per failure.
const RETRY_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest wait between two retries of a failing batch.
const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(2);

pub(super) struct Writer {
    /// This writer's chain: the last committed event's `seq` and hash.
    chain: ChainHead,
    checkpoints: Option<CheckpointSigner>,
    /// Events committed since the last signed record.
    since_checkpoint: u64,
    /// The signature of this chain's last signed record (its start record first), which
    /// the next checkpoint signs the digest of.
    last_signature: Option<String>,
    /// Records signed (in order) but not stored yet: stored before anything else, retried
    /// at the next occasion when the database refuses them.
    unstored: Vec<ExportedCheckpoint>,
    /// Sign the chain's head by then: set after a commit leaves events uncovered, so a
    /// running writer's chain ends on a checkpoint `CHECKPOINT_DELAY` later.
    checkpoint_due: Option<tokio::time::Instant>,
    store: Store,
    rx: mpsc::Receiver<Msg>,
    counters: Arc<Counters>,
    batch_size: usize,
    flush_interval: Duration,
    /// Most rows held (queued rows plus rows awaiting retry).
    capacity: usize,
    keep_failed_write_through: bool,
    /// This writer's chain is in `capgate_audit_chains`, where exporters find it.
    registered: bool,
}

/// What the writer holds between two writes.
#[derive(Default)]
struct Pending {
    rows: Vec<AuditRow>,
    acks: Vec<oneshot::Sender<Result<(), String>>>,
    /// The wait before the next retry while the last write failed; `None` when healthy.
    backoff: Option<Duration>,
    /// A flush waits among `acks`: sign a checkpoint before answering it.
    flushing: bool,
    /// The owner asked the writer to stop ([`Msg::Close`]), waiting for this answer.
    closing: Option<oneshot::Sender<()>>,
}

impl Pending {
    /// Hold a write-through row, tied to the answer its emitter waits for.
    fn through(&mut self, mut row: AuditRow, ack: oneshot::Sender<Result<(), String>>) {
        row.through = Some(self.acks.len());
        self.rows.push(row);
        self.acks.push(ack);
    }
}

impl Writer {
    /// The writer of a new chain on `store`, taking what the sink queues on `rx`.
    pub(super) fn new(
        store: Store,
        rx: mpsc::Receiver<Msg>,
        counters: Arc<Counters>,
        options: &AuditSinkOptions,
    ) -> Self {
        Writer {
            chain: ChainHead::start(),
            checkpoints: options.checkpoints.clone(),
            since_checkpoint: 0,
            last_signature: None,
            unstored: Vec::new(),
            checkpoint_due: None,
            store,
            rx,
            counters,
            batch_size: options.batch_size.max(1),
            flush_interval: options.flush_interval,
            capacity: options.queue_capacity.max(1),
            keep_failed_write_through: options.keep_failed_write_through,
            registered: false,
        }
    }

    pub(super) async fn run(mut self) {
        let mut pending = Pending::default();
        let mut deadline = tokio::time::Instant::now();
        loop {
            // The batch's deadline while rows wait, and the head's checkpoint when due.
            let wake = match (pending.rows.is_empty(), self.checkpoint_due) {
                (true, due) => due,
                (false, due) => Some(due.map_or(deadline, |d| d.min(deadline))),
            };
            let msg = match wake {
                None => self.rx.recv().await,
                Some(at) => match tokio::time::timeout_at(at, self.rx.recv()).await {
                    Ok(m) => m,
                    Err(_) => {
                        if self
                            .checkpoint_due
                            .is_some_and(|d| d <= tokio::time::Instant::now())
                        {
                            // Sign the head after this write (it may write nothing).
                            self.checkpoint_due = None;
                            pending.flushing = true;
                        }
                        deadline = self.write(&mut pending).await.unwrap_or(deadline);
                        continue;
                    }
                },
            };
            let Some(msg) = msg else {
                // Every sender is gone: write what is left (once), sign where the chain
                // ends, then stop.
                self.finish(&mut pending).await;
                return;
            };
            match msg {
                Msg::Close(ack) => pending.closing = Some(ack),
                Msg::Event(row) => {
                    if pending.rows.is_empty() {
                        deadline = tokio::time::Instant::now() + self.flush_interval;
                    }
                    self.hold(&mut pending, row);
                    // While the database fails, retries keep their back-off.
                    if pending.rows.len() >= self.batch_size
                        && pending.backoff.is_none()
                        && let Some(next) = self.write(&mut pending).await
                    {
                        deadline = next;
                    }
                }
                Msg::WriteThrough(row, ack) => {
                    pending.through(row, ack);
                    self.absorb_waiting(&mut pending);
                    if let Some(next) = self.write(&mut pending).await {
                        deadline = next;
                    }
                }
                Msg::Flush(ack) => {
                    pending.acks.push(ack);
                    pending.flushing = true;
                    self.absorb_waiting(&mut pending);
                    if let Some(next) = self.write(&mut pending).await {
                        deadline = next;
                    }
                }
            }
            if let Some(ack) = pending.closing.take() {
                // The owner closes the sink before the store: the same ending as when every
                // sender is gone, while the store is still open. What was queued before is
                // still written; what comes later finds the writer stopped.
                self.rx.close();
                while let Ok(m) = self.rx.try_recv() {
                    self.absorb_late(&mut pending, m);
                }
                self.finish(&mut pending).await;
                let _ = ack.send(());
                return;
            }
        }
    }

    /// Write what is left (once), record where the chain ends, and account for what could
    /// not be committed: the writer's last work.
    async fn finish(&mut self, pending: &mut Pending) {
        pending.flushing = true;
        self.write(pending).await;
        let left = pending.rows.len() as u64;
        if left > 0 {
            self.lose(left);
            tracing::error!(target: "capgate::audit", lost = left, "audit writer stopped with events it could not commit");
        } else {
            self.close().await;
        }
        if !self.unstored.is_empty() {
            tracing::error!(target: "capgate::audit", unstored = self.unstored.len(), chain = %self.chain.id, "audit writer stopped before it could store its last checkpoint: verification will name the chain's unsigned tail");
        }
        self.counters.awaiting_retry.store(0, Ordering::Relaxed);
    }

    /// A message that was queued before [`Msg::Close`]: its events are still written.
    fn absorb_late(&mut self, pending: &mut Pending, msg: Msg) {
        match msg {
            Msg::Event(row) => self.hold(pending, row),
            Msg::WriteThrough(row, ack) => pending.through(row, ack),
            Msg::Flush(ack) => {
                pending.acks.push(ack);
                pending.flushing = true;
            }
            // A second close: answered when this one is done (the writer stops once).
            Msg::Close(ack) => {
                let _ = ack.send(());
            }
        }
    }

    /// Give the pending rows, in order, their place after the chain's head: `seq`, the
    /// previous hash and their own hash. Run before each attempt, since rows may have left
    /// `pending` since the last one (strict write-through rows whose write failed).
    fn link(&self, rows: &mut [AuditRow]) {
        let mut seq = self.chain.seq;
        let mut prev = self.chain.hash.clone();
        for row in rows {
            seq += 1;
            row.seq = seq;
            row.prev_hash = prev.take();
            row.hash = match row.linked(&self.chain.id).hash() {
                Ok(h) => h,
                Err(e) => {
                    // Nothing in an audit payload should fail canonicalization (it is
                    // built from the runtime's own values); if it does, the row says so
                    // instead of carrying a hash verification would reject.
                    tracing::error!(target: "capgate::audit", error = %e, event = row.ty, "audit event cannot be hashed; its data is replaced by the error");
                    let mut m = Map::new();
                    m.insert("capgateAuditError".into(), Value::String(e.to_string()));
                    row.data = Json("data", Value::Object(m));
                    row.linked(&self.chain.id).hash().unwrap_or_default()
                }
            };
            prev = Some(row.hash.clone());
        }
    }

    /// The first `n` pending rows were committed: advance the chain's head past them, and
    /// sign a checkpoint at every `every_events`-th event among them (exactly there, so no
    /// run of events longer than that goes unsigned).
    fn committed(&mut self, pending: &mut Pending, n: usize) {
        let Some(last) = n.checked_sub(1).and_then(|i| pending.rows.get(i)) else {
            return;
        };
        self.chain.seq = last.seq;
        self.chain.hash = Some(last.hash.clone());
        let every = self.checkpoints.as_ref().map(|s| s.every_events);
        for row in pending.rows.drain(..n) {
            self.since_checkpoint += 1;
            if every.is_some_and(|every| self.since_checkpoint >= every) {
                self.sign_at(row.seq, &row.hash);
            }
        }
        self.counters.written.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Sign a checkpoint at `seq` (hash `hash`), chained to the last signed record, and
    /// keep it for storing.
    fn sign_at(&mut self, seq: i64, hash: &str) {
        let (Some(signer), Some(prev)) = (&self.checkpoints, &self.last_signature) else {
            return;
        };
        let record = signer.sign_checkpoint(&self.chain.id, seq, hash, trunc(Utc::now()), prev);
        self.last_signature = Some(record.signature.clone());
        self.unstored.push(record);
        self.since_checkpoint = 0;
    }

    /// Store the signed records not stored yet, in order; the first failure stops (the
    /// rest are tried again at the next occasion). A record whose insert committed but
    /// answered an error is stored twice: verification reads it once.
    async fn store_unstored(&mut self) -> Result<(), BoxError> {
        while let Some(r) = self.unstored.first() {
            self.store
                .execute(
                    Via::Group,
                    "INSERT INTO capgate_audit_checkpoints (chain, seq, hash, at, key_id, \
                     signature, kind, prev, every_events, unchained_through) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                    &[
                        &r.chain,
                        &r.seq,
                        &r.hash,
                        &r.at,
                        &r.key_id,
                        &r.signature,
                        &r.kind,
                        &r.prev,
                        &r.every_events,
                        &r.unchained_through,
                    ],
                )
                .await?;
            self.unstored.remove(0);
        }
        Ok(())
    }

    /// After a failed write: how many of `rows` (linked by the failed attempt) the
    /// database holds anyway. 0 when it cannot be read or holds none of them.
    async fn landed(&self, rows: &[AuditRow]) -> usize {
        let head = self
            .store
            .fetch_optional(
                Via::Writer,
                "SELECT seq, hash FROM capgate_audit_events WHERE chain = $1 \
                 ORDER BY seq DESC LIMIT 1",
                &[&self.chain.id],
                |r| Ok::<_, String>((r.int("seq")?, r.text("hash")?)),
            )
            .await;
        let Ok(Some(Ok((seq, hash)))) = head else {
            return 0;
        };
        let Ok(ahead) = usize::try_from(seq - self.chain.seq) else {
            return 0;
        };
        match ahead.checked_sub(1).and_then(|i| rows.get(i)) {
            Some(row) if row.seq == seq && row.hash == hash => ahead,
            _ => 0,
        }
    }

    /// Before this writer's first event: sign and store its start record (with a key),
    /// then put its chain in `capgate_audit_chains`, where exporters find it. Tried again
    /// before every write until it lands. With a key a failure fails the write (no event
    /// of a chain is stored before its start record); without one it is logged (the
    /// events' own write says whether the database is there).
    async fn register(&mut self) -> Result<(), String> {
        if self.registered {
            return Ok(());
        }
        if let Some(signer) = &self.checkpoints
            && self.last_signature.is_none()
        {
            // The highest id of a chain-less row now: rows above it are not older than
            // this chain, so they were inserted (verification takes the lowest any start
            // record signed).
            let through = self
                .store
                .fetch_optional(
                    Via::Writer,
                    "SELECT coalesce(max(id), 0) AS id FROM capgate_audit_events \
                     WHERE chain IS NULL",
                    &[],
                    |r| r.int("id"),
                )
                .await
                .map_err(|e| e.to_string())?
                .transpose()?
                .unwrap_or(0)
                .max(0);
            let start = signer.sign_start(&self.chain.id, trunc(Utc::now()), through);
            self.last_signature = Some(start.signature.clone());
            self.unstored.push(start);
        }
        if let Err(e) = self.store_unstored().await {
            tracing::warn!(target: "capgate::audit", error = %e, chain = %self.chain.id, "cannot store the audit chain's start record yet");
            return Err(format!("cannot store the audit chain's start record: {e}"));
        }
        match self
            .store
            .execute(
                Via::Group,
                "INSERT INTO capgate_audit_chains (chain, started_at) VALUES ($1, $2) \
                 ON CONFLICT (chain) DO NOTHING",
                &[&self.chain.id, &trunc(Utc::now())],
            )
            .await
        {
            Ok(_) => {
                self.registered = true;
                Ok(())
            }
            Err(e) => {
                tracing::warn!(target: "capgate::audit", error = %e, chain = %self.chain.id, "cannot register the audit chain for export yet");
                if self.checkpoints.is_some() {
                    Err(format!("cannot register the audit chain: {e}"))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Record where this writer's chain ends (it stopped with everything committed), so
    /// exporters that delivered all of it stop looking at it.
    async fn close(&self) {
        if !self.registered {
            return;
        }
        if let Err(e) = self
            .store
            .execute(
                Via::Group,
                "UPDATE capgate_audit_chains SET closed_seq = $2 WHERE chain = $1",
                &[&self.chain.id, &self.chain.seq],
            )
            .await
        {
            tracing::warn!(target: "capgate::audit", error = %e, chain = %self.chain.id, "cannot record where the audit chain ends");
        }
    }

    /// Sign a checkpoint at the chain's head (nothing without a key or new events).
    fn sign_head(&mut self) {
        if self.since_checkpoint == 0 {
            return;
        }
        if let Some(hash) = self.chain.hash.clone() {
            self.sign_at(self.chain.seq, &hash);
        }
    }

    /// Keep an accepted row unless the writer already holds its capacity (only possible
    /// while the database fails): then it is lost, counted and reported.
    fn hold(&self, pending: &mut Pending, row: AuditRow) {
        if pending.rows.len() >= self.capacity {
            self.lose(1);
            tracing::error!(target: "capgate::audit", held = pending.rows.len(), event = row.ty, "audit writer full while the store fails: event dropped");
        } else {
            pending.rows.push(row);
        }
    }

    fn lose(&self, n: u64) {
        self.counters
            .lost_write_failed
            .fetch_add(n, Ordering::Relaxed);
        self.counters.unreported.fetch_add(n, Ordering::Relaxed);
    }

    /// Group commit: before a write someone waits for, take every message already queued
    /// (up to the batch size), so concurrent write-through events share one insert instead
    /// of queueing for one each. Their order in the log is the order they were emitted.
    fn absorb_waiting(&mut self, pending: &mut Pending) {
        let mut taken = 0;
        while taken < self.batch_size {
            match self.rx.try_recv() {
                Ok(Msg::Event(row)) => self.hold(pending, row),
                Ok(Msg::WriteThrough(row, ack)) => pending.through(row, ack),
                Ok(Msg::Flush(ack)) => {
                    pending.acks.push(ack);
                    pending.flushing = true;
                }
                Ok(Msg::Close(ack)) => {
                    pending.closing = Some(ack);
                    break;
                }
                Err(_) => break,
            }
            taken += 1;
        }
    }

    /// Insert the pending rows (in order, in chunks) and answer every waiter with the
    /// result. Committed rows leave `pending`; on a failure the rest stay for a retry
    /// (failed write-through rows too when they are kept) and the time of that retry is
    /// returned.
    async fn write(&mut self, pending: &mut Pending) -> Option<tokio::time::Instant> {
        if !self.keep_failed_write_through {
            // An emitter that stopped waiting was told the write failed (strict audit
            // refused its call): its `capability.started` must not appear after all.
            let acks = &pending.acks;
            pending.rows.retain(|r| {
                r.through
                    .is_none_or(|i| acks.get(i).is_some_and(|a| !a.is_closed()))
            });
        }
        self.link(&mut pending.rows);
        let registered = if pending.rows.is_empty() {
            Ok(())
        } else {
            self.register().await
        };
        let (committed, mut result) = match registered {
            Ok(()) => insert(&self.store, &self.chain.id, &pending.rows).await,
            Err(e) => (0, Err(e)),
        };
        self.committed(pending, committed);
        if result.is_err() && !pending.rows.is_empty() {
            // A commit whose answer was lost (the connection dropped after COMMIT) must not
            // be written twice: the chain's head in the database says what landed.
            let landed = self.landed(&pending.rows).await;
            self.committed(pending, landed);
            if pending.rows.is_empty() {
                result = Ok(());
            }
        }
        if result.is_ok() && self.checkpoints.is_some() {
            if pending.flushing {
                self.sign_head();
            }
            if let Err(e) = self.store_unstored().await {
                tracing::error!(target: "capgate::audit", error = %e, unstored = self.unstored.len(), "audit checkpoint not stored; retried at the next one");
            }
            // Events still uncovered (or a checkpoint still unstored): sign (store) about
            // `CHECKPOINT_DELAY` from now.
            if self.since_checkpoint == 0 && self.unstored.is_empty() {
                self.checkpoint_due = None;
            } else if self.checkpoint_due.is_none() {
                self.checkpoint_due = Some(tokio::time::Instant::now() + CHECKPOINT_DELAY);
            }
        }
        if result.is_ok() {
            // A flush whose write failed keeps asking: the retry that commits signs.
            pending.flushing = false;
        } else {
            // The retry's deadline drives the writer while the database fails.
            self.checkpoint_due = None;
        }
        let retry_at = match &result {
            Ok(()) => {
                if pending.backoff.take().is_some() {
                    tracing::warn!(target: "capgate::audit", "audit store writable again; held events committed");
                }
                None
            }
            Err(e) => {
                if self.keep_failed_write_through {
                    for row in &mut pending.rows {
                        row.through = None;
                    }
                } else {
                    // Their emitters are told and count them; strict audit refused the calls.
                    pending.rows.retain(|r| r.through.is_none());
                }
                let wait = pending
                    .backoff
                    .map_or(RETRY_BACKOFF_MIN, |b| (b * 2).min(RETRY_BACKOFF_MAX));
                pending.backoff = Some(wait);
                tracing::error!(target: "capgate::audit", error = %e, held = pending.rows.len(), retry_in_ms = wait.as_millis() as u64, "audit batch failed to commit; kept for retry");
                Some(tokio::time::Instant::now() + wait)
            }
        };
        self.counters.awaiting_retry.store(
            if result.is_ok() {
                0
            } else {
                pending.rows.len() as u64
            },
            Ordering::Relaxed,
        );
        for ack in pending.acks.drain(..) {
            let _ = ack.send(result.clone());
        }
        retry_at
    }
}
