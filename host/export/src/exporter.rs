//! The export loop: lease, read after the cursors (the chains' signed checkpoints, then
//! the events), deliver, acknowledge; back off on failure; report lag and failures.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `capgate_audit_export_events_total` | counter | `sink`, `kind` (`otlp`, `jsonl`): events delivered |
//! | `capgate_audit_export_failures_total` | counter | `sink`, `kind`: deliveries (or cursor reads and moves) that failed and will be retried |
//! | `capgate_audit_export_rejected_total` | counter | `sink`, `kind`: events a collector took and refused (OTLP partial success) |
//! | `capgate_audit_export_lag_seconds` | gauge | `sink`: the age of the oldest event the sink has not acknowledged (0 when caught up) |

use crate::sink::{ExportSink, SinkError};
use capgate_store::{AuditOutbox, ExportedEvent};
use chrono::Utc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Events delivered.
pub const EXPORT_EVENTS: &str = "capgate_audit_export_events_total";
/// Failed deliveries and cursor operations (each retried).
pub const EXPORT_FAILURES: &str = "capgate_audit_export_failures_total";
/// Events a receiver refused to keep.
pub const EXPORT_REJECTED: &str = "capgate_audit_export_rejected_total";
/// The age of the oldest unacknowledged event.
pub const EXPORT_LAG: &str = "capgate_audit_export_lag_seconds";

/// Tell the installed recorder what this crate's series mean (`# HELP` on `/metrics`).
pub fn describe() {
    metrics::describe_counter!(
        EXPORT_EVENTS,
        "Audit events delivered to an export sink, by sink and kind."
    );
    metrics::describe_counter!(
        EXPORT_FAILURES,
        "Failed audit export deliveries and cursor operations (each retried), by sink and kind."
    );
    metrics::describe_counter!(
        EXPORT_REJECTED,
        "Audit events a receiver refused to keep, by sink and kind."
    );
    metrics::describe_gauge!(
        EXPORT_LAG,
        "Age in seconds of the oldest audit event an export sink has not acknowledged."
    );
}

/// How an [`Exporter`] runs.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// Most events per delivery. Default 512.
    pub batch_events: usize,
    /// How often a caught-up (or standby) exporter looks again. Default 1 s.
    pub poll_interval: Duration,
    /// The bound on one delivery. Default 10 s.
    pub timeout: Duration,
    /// How long the lease lasts without renewal. Default 30 s.
    pub lease_ttl: Duration,
    /// `/readyz` fails while deliveries fail and the lag is above this. Default 600 s.
    pub max_lag: Duration,
    /// The first wait after a failure; doubled (with jitter) up to `backoff_max`.
    pub backoff_min: Duration,
    /// The longest wait between retries. Default 30 s.
    pub backoff_max: Duration,
    /// Who holds the lease: unique per process (default: the pid and a random number).
    pub holder: String,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            batch_events: 512,
            poll_interval: Duration::from_secs(1),
            timeout: Duration::from_secs(10),
            lease_ttl: Duration::from_secs(30),
            max_lag: Duration::from_secs(600),
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(30),
            holder: format!("{}-{:016x}", std::process::id(), fastrand::u64(..)),
        }
    }
}

/// One sink's state, for `/readyz` and the tests: its lag, whether its last attempt
/// failed, and its counts.
#[derive(Debug)]
pub struct ExportStatus {
    sink: String,
    max_lag: Duration,
    lag_ms: AtomicU64,
    failing: AtomicBool,
    holding: AtomicBool,
    delivered: AtomicU64,
    failures: AtomicU64,
}

impl ExportStatus {
    fn new(sink: &str, max_lag: Duration) -> Self {
        ExportStatus {
            sink: sink.to_string(),
            max_lag,
            lag_ms: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            holding: AtomicBool::new(false),
            delivered: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    /// The sink's name.
    pub fn sink(&self) -> &str {
        &self.sink
    }

    /// The age of the oldest event not yet acknowledged, as last seen.
    pub fn lag(&self) -> Duration {
        Duration::from_millis(self.lag_ms.load(Ordering::Relaxed))
    }

    /// Whether the last attempt failed.
    pub fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    /// Whether this process holds the sink's lease (exports it).
    pub fn is_holding(&self) -> bool {
        self.holding.load(Ordering::Relaxed)
    }

    /// Events this process delivered.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Failed attempts of this process.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// `/readyz`'s check: failing while deliveries fail and the oldest undelivered event
    /// is older than the sink's bound. A sink that delivers is ready however far behind it
    /// is (a new sink working through an old trail, a backlog after an outage).
    pub fn check(&self) -> Result<(), String> {
        let lag = self.lag();
        if self.is_failing() && lag > self.max_lag {
            Err(format!(
                "audit export `{}` fails and is {} s behind (bound {} s)",
                self.sink,
                lag.as_secs(),
                self.max_lag.as_secs(),
            ))
        } else {
            Ok(())
        }
    }

    fn set_lag(&self, oldest: Option<chrono::DateTime<Utc>>) {
        let lag = oldest
            .map(|t| (Utc::now() - t).to_std().unwrap_or_default())
            .unwrap_or_default();
        self.lag_ms.store(
            u64::try_from(lag.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        metrics::gauge!(EXPORT_LAG, "sink" => self.sink.clone()).set(lag.as_secs_f64());
    }
}

/// Exports one sink from one store.
pub struct Exporter {
    outbox: AuditOutbox,
    sink: Box<dyn ExportSink>,
    options: ExportOptions,
    status: Arc<ExportStatus>,
}

/// A running [`Exporter`].
pub struct ExportHandle {
    task: tokio::task::JoinHandle<()>,
    stop: CancellationToken,
    status: Arc<ExportStatus>,
}

impl ExportHandle {
    /// The sink's state.
    pub fn status(&self) -> Arc<ExportStatus> {
        self.status.clone()
    }

    /// Stop after the delivery in flight (if any) is acknowledged, and give the lease up.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }

    /// Stop as [`ExportHandle::stop`] does, but abandon a delivery still in flight after
    /// `grace` (it is sent again at the next start; the lease runs out on its own).
    pub async fn abort_after(mut self, grace: Duration) {
        self.stop.cancel();
        if tokio::time::timeout(grace, &mut self.task).await.is_err() {
            self.task.abort();
        }
    }
}

/// Why one round of the loop did not deliver.
#[derive(Debug, thiserror::Error)]
enum RoundError {
    #[error(transparent)]
    Store(#[from] capgate_store::AuditExportError),
    #[error(transparent)]
    Sink(#[from] SinkError),
}

impl Exporter {
    /// An exporter of `outbox`'s sink into `sink`.
    pub fn new(outbox: AuditOutbox, sink: Box<dyn ExportSink>, options: ExportOptions) -> Self {
        let status = Arc::new(ExportStatus::new(outbox.sink(), options.max_lag));
        Exporter {
            outbox,
            sink,
            options,
            status,
        }
    }

    /// Run on the current Tokio runtime until stopped.
    pub fn spawn(self) -> ExportHandle {
        let stop = CancellationToken::new();
        let status = self.status.clone();
        let task = tokio::spawn(self.run(stop.clone()));
        ExportHandle { task, stop, status }
    }

    /// The loop (module docs).
    pub async fn run(mut self, stop: CancellationToken) {
        let mut backoff: Option<Duration> = None;
        while !stop.is_cancelled() {
            let wait = match self.round().await {
                // Delivered a full batch: go on at once.
                Ok(true) => {
                    backoff = None;
                    continue;
                }
                Ok(false) => {
                    backoff = None;
                    self.options.poll_interval
                }
                Err(e) => {
                    let kind = self.sink.kind();
                    let sink = self.outbox.sink().to_string();
                    metrics::counter!(EXPORT_FAILURES, "sink" => sink.clone(), "kind" => kind)
                        .increment(1);
                    self.status.failures.fetch_add(1, Ordering::Relaxed);
                    self.status.failing.store(true, Ordering::Relaxed);
                    let next = backoff.map_or(self.options.backoff_min, |b| {
                        (b * 2).min(self.options.backoff_max)
                    });
                    backoff = Some(next);
                    // Full jitter on the upper half: replicas and sinks do not retry in step.
                    let wait = next / 2 + next.mul_f64(fastrand::f64() / 2.0);
                    tracing::warn!(target: "capgate::audit", sink = %sink, error = %e, retry_in_ms = wait.as_millis() as u64, "audit export failed; the same events go again");
                    wait
                }
            };
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        // A last pass on stop, while the sink answers: what the process wrote last (the
        // final flush's checkpoint, its last events) leaves the box before it exits. The
        // caller bounds it ([`ExportHandle::abort_after`]).
        if !self.status.is_failing() {
            for _ in 0..16 {
                match self.round().await {
                    Ok(true) => continue,
                    _ => break,
                }
            }
        }
        if self.status.is_holding()
            && let Err(e) = self.outbox.release(&self.options.holder).await
        {
            tracing::warn!(target: "capgate::audit", sink = %self.outbox.sink(), error = %e, "cannot give the export lease up; another replica takes over when it runs out");
        }
    }

    /// One round: `Ok(true)` when a full batch was delivered (more may wait).
    async fn round(&mut self) -> Result<bool, RoundError> {
        let holding = self
            .outbox
            .lease(&self.options.holder, self.options.lease_ttl)
            .await?;
        self.status.holding.store(holding, Ordering::Relaxed);
        if !holding {
            // Another replica exports; the lag is the store's, so report it all the same.
            let next = self.outbox.next(1).await?;
            self.status.set_lag(oldest(&next));
            self.status.failing.store(false, Ordering::Relaxed);
            return Ok(false);
        }
        // The chains' signed records first: they are few, and the copy off the box is
        // what keeps a database writer from rewriting history.
        let records = self
            .outbox
            .next_checkpoints(self.options.batch_events)
            .await?;
        if !records.is_empty() {
            match tokio::time::timeout(
                self.options.timeout,
                self.sink.deliver_checkpoints(&records),
            )
            .await
            {
                Ok(d) => d?,
                Err(_) => return Err(SinkError::Timeout(self.options.timeout).into()),
            };
            self.outbox.acknowledge_checkpoints(&records).await?;
        }
        let more_records = records.len() >= self.options.batch_events;
        let events = self.outbox.next(self.options.batch_events).await?;
        self.status.set_lag(oldest(&events));
        if events.is_empty() {
            self.status.failing.store(false, Ordering::Relaxed);
            return Ok(more_records);
        }
        let delivered =
            match tokio::time::timeout(self.options.timeout, self.sink.deliver(&events)).await {
                Ok(d) => d?,
                Err(_) => return Err(SinkError::Timeout(self.options.timeout).into()),
            };
        self.outbox.acknowledge(&events).await?;
        let (sink, kind) = (self.outbox.sink().to_string(), self.sink.kind());
        metrics::counter!(EXPORT_EVENTS, "sink" => sink.clone(), "kind" => kind)
            .increment(events.len() as u64);
        if delivered.rejected > 0 {
            metrics::counter!(EXPORT_REJECTED, "sink" => sink.clone(), "kind" => kind)
                .increment(delivered.rejected);
            tracing::warn!(target: "capgate::audit", sink = %sink, rejected = delivered.rejected, "the collector refused some audit records (partial success)");
        }
        self.status
            .delivered
            .fetch_add(events.len() as u64, Ordering::Relaxed);
        self.status.failing.store(false, Ordering::Relaxed);
        Ok(more_records || events.len() >= self.options.batch_events)
    }
}

fn oldest(events: &[ExportedEvent]) -> Option<chrono::DateTime<Utc>> {
    events.iter().map(|e| e.at).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_fails_only_while_deliveries_fail_and_the_lag_is_past_its_bound() {
        let status = ExportStatus::new("siem", Duration::from_secs(60));
        let old = Some(Utc::now() - chrono::Duration::seconds(3600));
        status.set_lag(old);
        assert!(status.lag() >= Duration::from_secs(3599));
        assert_eq!(status.check(), Ok(()), "behind but delivering: ready");
        status.failing.store(true, Ordering::Relaxed);
        let err = status.check().expect_err("failing and an hour behind");
        assert!(err.contains("`siem` fails and is 3"), "{err}");
        status.set_lag(Some(Utc::now()));
        assert_eq!(
            status.check(),
            Ok(()),
            "failing but within the bound: ready"
        );
        status.set_lag(None);
        assert_eq!(status.lag(), Duration::ZERO);
    }
}
