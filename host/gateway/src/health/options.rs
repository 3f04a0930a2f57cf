//! What `/readyz` checks: the probe seam, its error, and the probes every deployment has.

use async_trait::async_trait;
use capgate_core::journal::{InvocationJournal, JournalError};
use std::sync::Arc;

/// Why a readiness check failed. Logged (target `capgate::gateway`), never answered:
/// `/readyz` sends only the check's word.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadinessError {
    /// The store could not be asked (or refuses writes): the store's own error, which the
    /// gateway does not know the type of (the binary wires the store in).
    #[error(transparent)]
    Store(capgate_core::error::BoxError),
    /// The invocation journal did not answer.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// The process is shutting down.
    #[error("shutting down: draining calls in flight")]
    Draining,
    /// A check from a closure ([`FnProbe`]) failed, for this reason.
    #[error("{0}")]
    Failed(String),
}

/// What `/readyz` asks: can the gateway reach its store?
#[async_trait]
pub trait ReadinessProbe: Send + Sync + 'static {
    /// `Ok` when ready; the error is logged, never sent.
    async fn ready(&self) -> Result<(), ReadinessError>;

    /// The word `/readyz` answers for this check when it fails (default `failing`): a
    /// fixed word, never the error, so nothing about the failure leaks.
    fn failing_word(&self) -> &'static str {
        "failing"
    }

    /// Whether the gateway is unready while this check fails (default true). A check of
    /// one dependency among several (an MCP upstream, say) is not: while it fails, the
    /// calls that need it fail on their own, every other call is served, and `/readyz`
    /// answers `200` `degraded` so a load balancer keeps the replica.
    fn required(&self) -> bool {
        true
    }
}

/// `probe`, as a check the gateway stays ready without ([`ReadinessProbe::required`] false):
/// its failure answers `degraded`, never `503`.
pub struct Degrades<P>(pub P);

#[async_trait]
impl<P: ReadinessProbe> ReadinessProbe for Degrades<P> {
    async fn ready(&self) -> Result<(), ReadinessError> {
        self.0.ready().await
    }

    fn failing_word(&self) -> &'static str {
        self.0.failing_word()
    }

    fn required(&self) -> bool {
        false
    }
}

/// A readiness probe that reads one (absent) record from an invocation journal.
pub struct JournalProbe(pub Arc<dyn InvocationJournal>);

#[async_trait]
impl ReadinessProbe for JournalProbe {
    async fn ready(&self) -> Result<(), ReadinessError> {
        self.0
            .get("capgate.readyz", "capgate.readyz")
            .await
            .map(|_| ())
            .map_err(ReadinessError::from)
    }
}

/// A readiness check from a closure (for checks that need no I/O, such as "the audit
/// writer is running").
pub struct FnProbe<F>(pub F);

#[async_trait]
impl<F> ReadinessProbe for FnProbe<F>
where
    F: Fn() -> Result<(), String> + Send + Sync + 'static,
{
    async fn ready(&self) -> Result<(), ReadinessError> {
        (self.0)().map_err(ReadinessError::Failed)
    }
}

/// The `shutdown` readiness check of a serving process: `ok` until shutdown begins, then
/// `draining` (so a load balancer stops sending before the listener closes).
#[derive(Debug, Clone, Default)]
pub struct ShutdownProbe(pub Arc<std::sync::atomic::AtomicBool>);

impl ShutdownProbe {
    /// Turn `/readyz` unready for good: the process is shutting down.
    pub fn begin(&self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[async_trait]
impl ReadinessProbe for ShutdownProbe {
    async fn ready(&self) -> Result<(), ReadinessError> {
        if self.0.load(std::sync::atomic::Ordering::SeqCst) {
            Err(ReadinessError::Draining)
        } else {
            Ok(())
        }
    }

    fn failing_word(&self) -> &'static str {
        "draining"
    }
}
