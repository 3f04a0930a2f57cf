//! How a served deployment stops (docs/operations/shutdown-and-crash-recovery.md): what tells it to
//! (signals, or an embedder's stop), the drain, and the bounds on what shutdown waits for.

use anyhow::Context;
use capgate_gateway::health::ShutdownProbe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// What stops a served deployment: SIGTERM (what an orchestrator sends) and SIGINT
/// (Ctrl-C) for `capgate serve`, or the embedder's [`Served::stop`] (once).
pub(super) enum Stops {
    Signals {
        term: tokio::signal::unix::Signal,
        int: tokio::signal::unix::Signal,
    },
    Embedder(Option<tokio::sync::oneshot::Receiver<()>>),
}

impl Stops {
    pub(super) fn signals() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Stops::Signals {
            term: signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?,
        })
    }

    /// The next stop's name; an embedder stops once (its second stop never comes).
    pub(super) async fn next(&mut self) -> &'static str {
        match self {
            Stops::Signals { term, int } => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            },
            Stops::Embedder(stop) => match stop.take() {
                // A dropped handle stops too.
                Some(stop) => {
                    let _ = stop.await;
                    "stop"
                }
                None => std::future::pending().await,
            },
        }
    }
}

/// `serve`'s shutdown sequence (docs/operations/shutdown-and-crash-recovery.md): at the first stop
/// signal `/readyz` turns unready; after the unready delay the listener closes; calls in flight get
/// the drain time to finish. A second stop signal exits at once.
pub(super) struct Shutdown {
    pub(super) unready_delay: Duration,
    pub(super) drain: Duration,
    pub(super) probe: ShutdownProbe,
    pub(super) in_flight: Arc<AtomicUsize>,
}

/// How long the process waits, once `serve` returned, for the tasks it abandons (calls
/// still running past the drain time) before it exits anyway.
pub const ABANDON_TIMEOUT: Duration = Duration::from_millis(500);

/// The exit status of a shutdown forced by a second stop signal.
const FORCED_EXIT_STATUS: i32 = 1;

impl Shutdown {
    /// Serve until a stop signal, then drain. `served` is the server with graceful shutdown
    /// on `stop_accepting`. Returns the server's own failure, if any; a drain that runs out
    /// of time is not one (its calls keep pending receipts).
    pub(super) async fn run(
        &self,
        served: impl std::future::Future<Output = std::io::Result<()>>,
        stop_accepting: tokio::sync::oneshot::Sender<()>,
        stops: &mut Stops,
    ) -> std::io::Result<()> {
        tokio::pin!(served);
        let signal = tokio::select! {
            result = &mut served => return result,
            signal = stops.next() => signal,
        };
        self.probe.begin();
        eprintln!(
            "capgate: {signal}: shutting down — /readyz answers 503; no new connections in {} ms; calls in flight get {} ms more (a second SIGTERM or Ctrl-C exits at once)",
            self.unready_delay.as_millis(),
            self.drain.as_millis()
        );
        tokio::select! {
            result = &mut served => return result,
            signal = stops.next() => self.force(signal),
            _ = tokio::time::sleep(self.unready_delay) => {}
        }
        let _ = stop_accepting.send(());
        tokio::select! {
            result = &mut served => result,
            signal = stops.next() => self.force(signal),
            _ = tokio::time::sleep(self.drain) => {
                let left = self.in_flight.load(Ordering::SeqCst);
                eprintln!(
                    "capgate: the drain time ({} ms) ran out with {left} request(s) in flight: they get no answer; a call whose procedure had started keeps a pending receipt (see `capgate invocations show`/`reconcile`)",
                    self.drain.as_millis()
                );
                Ok(())
            }
        }
    }

    /// A second stop signal: exit now, leaving calls in flight to the crash-recovery path.
    fn force(&self, signal: &str) -> ! {
        eprintln!(
            "capgate: {signal} again: exiting at once with {} request(s) in flight (their receipts stay pending; audit events still queued are lost)",
            self.in_flight.load(Ordering::SeqCst)
        );
        std::process::exit(FORCED_EXIT_STATUS)
    }
}

/// How long `serve` waits at shutdown for the last spans to reach the collector.
pub const TRACES_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// How long shutdown waits for each exporter's delivery in flight.
pub(super) const EXPORT_STOP_TIMEOUT: Duration = Duration::from_secs(2);
