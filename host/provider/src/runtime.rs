//! The [`ProviderRuntime`]: normalises the stall timeout at the boundary, looks providers up,
//! admits attempts under a [`StallWatchdog`], runs them with an ordered one-terminal
//! emitter, joins the close fence and the exact-target health probe after a stall, and
//! answers allowlisted commands and cancellation by run id.

use crate::events::{Classified, Emitted, EventEmitter, RuntimeEvent, TunnelFrame};
use crate::health::{
    JoinedHealth, ObservationScope, ProbeTarget, probe_health, resolve_probe_func,
};
use crate::provider::{
    ExecutionOutcome, ProviderCommand, ProviderFailure, ProviderIdentity, ProviderRegistry,
    ProviderRun, ProviderTunnelRequest, RegisteredProvider, RunRequest, TokenUsage, TunnelOutcome,
    TunnelRun,
};
use crate::stall::{
    CloseFence, DEFAULT_CLOSE_GRACE_MS, Observed, RESPONSE_STALLED, StallTerminal, StallWatchdog,
    normalize_wire_request, resolve_stall_timeout_ms,
};
use capgate_core::procedure::ProcedureError;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

/// One attempt's identity and stall timeout, fixed before it is driven.
struct Attempt {
    run_id: String,
    attempt_id: String,
    timeout: Duration,
}

/// Decode a JSON wire request after normalising its stall timeout at the boundary (zero
/// becomes the default; negative, overflowing or non-integer timeouts are refused), before
/// the router or any provider is touched.
fn from_wire<R: serde::de::DeserializeOwned>(
    mut raw: serde_json::Value,
) -> Result<R, ProviderFailure> {
    normalize_wire_request(&mut raw)?;
    serde_json::from_value(raw).map_err(|e| ProviderFailure::InvalidRequest(Arc::new(e)))
}

/// Where a provider emits events (or frames) for one attempt. Every emission is classified,
/// fed to the attempt's watchdog and delivered in order; after a claimed stall or the
/// terminal, emissions are dropped and counted.
pub struct Sink<E> {
    emitter: Arc<EventEmitter<E>>,
    watchdog: StallWatchdog,
}

impl<E> Clone for Sink<E> {
    fn clone(&self) -> Self {
        Sink {
            emitter: self.emitter.clone(),
            watchdog: self.watchdog.clone(),
        }
    }
}

impl<E: Classified> Sink<E> {
    /// A sink over an emitter and a watchdog (the runtime builds these; tests and adapters
    /// driving a provider by hand can too).
    pub fn new(emitter: Arc<EventEmitter<E>>, watchdog: StallWatchdog) -> Self {
        Sink { emitter, watchdog }
    }

    /// Emit one event: fenced output after a stall is dropped, a terminal stops the
    /// watchdog, progress resets it.
    pub fn emit(&self, event: E) -> Emitted {
        let dog = &self.watchdog;
        self.emitter
            .emit_gated(event, |d| dog.observe(d) != Observed::Fenced)
    }

    /// The attempt's watchdog.
    pub fn watchdog(&self) -> &StallWatchdog {
        &self.watchdog
    }
}

impl Sink<RuntimeEvent> {
    /// Report structured progress ([`RuntimeEvent::progress`]).
    pub fn progress(&self, value: serde_json::Value) -> Emitted {
        self.emit(RuntimeEvent::progress(value))
    }
}

/// Receives every delivered event of an attempt, in order (called under the emitter's lock:
/// keep it short).
pub type EventObserver<E> = Arc<dyn Fn(&E) + Send + Sync>;

/// Per-call options of [`ProviderRuntime::execute`] and [`ProviderRuntime::tunnel`].
pub struct RunOptions<E> {
    /// The connection the call arrived on (`Internal` omits `health_observation_seq`).
    pub scope: ObservationScope,
    /// The caller's cancellation (the composite deadline + cancel of stage 10).
    pub cancel: Option<CancellationToken>,
    /// Where delivered events go.
    pub observer: Option<EventObserver<E>>,
}

impl<E> Default for RunOptions<E> {
    fn default() -> Self {
        RunOptions {
            scope: ObservationScope::Internal,
            cancel: None,
            observer: None,
        }
    }
}

/// Settings that hold for every run of a [`ProviderRuntime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProviderRuntimeConfig {
    /// The fixed close grace after a stall ([`DEFAULT_CLOSE_GRACE_MS`]).
    pub close_grace: Duration,
}

impl Default for ProviderRuntimeConfig {
    fn default() -> Self {
        ProviderRuntimeConfig {
            close_grace: Duration::from_millis(DEFAULT_CLOSE_GRACE_MS),
        }
    }
}

struct Inner {
    registry: ProviderRegistry,
    config: ProviderRuntimeConfig,
    runs: Mutex<HashMap<String, CancellationToken>>,
    next_run: AtomicU64,
}

/// The provider execution runtime. Cheap to clone; share one per process.
#[derive(Clone)]
pub struct ProviderRuntime {
    inner: Arc<Inner>,
}

/// Removes an in-flight run from the cancellation map when the attempt ends.
struct ActiveRun {
    inner: Arc<Inner>,
    run_id: String,
}

impl Drop for ActiveRun {
    fn drop(&mut self) {
        let mut runs = self.inner.runs.lock().unwrap_or_else(|p| p.into_inner());
        runs.remove(&self.run_id);
    }
}

/// Cancels and aborts the provider task however the attempt ends (including when the
/// caller drops the attempt future at its own deadline).
struct AbortOnDrop {
    task: AbortHandle,
    cancel: CancellationToken,
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.task.abort();
    }
}

enum Race<T> {
    Finished(Result<Result<T, ProcedureError>, tokio::task::JoinError>),
    Stalled(crate::stall::StallClaim),
    Cancelled,
}

impl ProviderRuntime {
    /// A runtime over a registry with the default configuration.
    pub fn new(registry: ProviderRegistry) -> Self {
        Self::with_config(registry, ProviderRuntimeConfig::default())
    }

    /// A runtime with explicit settings.
    pub fn with_config(registry: ProviderRegistry, config: ProviderRuntimeConfig) -> Self {
        ProviderRuntime {
            inner: Arc::new(Inner {
                registry,
                config,
                runs: Mutex::new(HashMap::new()),
                next_run: AtomicU64::new(1),
            }),
        }
    }

    /// The providers this runtime runs, for lookups and health reports.
    pub fn registry(&self) -> &ProviderRegistry {
        &self.inner.registry
    }

    /// Cancel the in-flight attempt of a run. Only a non-empty `run_id` is a target;
    /// `session_id` never is. Returns whether a run was found.
    pub fn cancel(&self, run_id: &str) -> Result<bool, ProviderFailure> {
        if run_id.is_empty() {
            return Err(ProviderFailure::EmptyRunId);
        }
        let runs = self.inner.runs.lock().unwrap_or_else(|p| p.into_inner());
        Ok(match runs.get(run_id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        })
    }

    /// Answer an allowlisted provider command. The allowlist is checked before the
    /// provider is looked up, so an unknown command never reaches the registry.
    pub async fn command(
        &self,
        provider: &ProviderIdentity,
        command: &str,
        args: serde_json::Value,
    ) -> Result<serde_json::Value, ProviderFailure> {
        let command: ProviderCommand = command.parse()?;
        let entry = self.inner.registry.lookup(provider)?;
        let Some(commands) = entry.provider.commands() else {
            return Err(ProviderFailure::CommandUnsupported {
                provider: provider.clone(),
                command,
            });
        };
        commands
            .command(command, args)
            .await
            .map_err(ProviderFailure::Procedure)
    }

    /// The JSON wire boundary of [`ProviderRuntime::execute`]: zero becomes the default,
    /// negative/overflow/non-integer timeouts are rejected, all before the router or any
    /// provider is touched.
    pub async fn execute_wire(
        &self,
        provider: &ProviderIdentity,
        raw: serde_json::Value,
        options: RunOptions<RuntimeEvent>,
    ) -> Result<ExecutionOutcome, ProviderFailure> {
        self.execute(provider, from_wire(raw)?, options).await
    }

    /// The JSON wire boundary of [`ProviderRuntime::tunnel`].
    pub async fn tunnel_wire(
        &self,
        provider: &ProviderIdentity,
        raw: serde_json::Value,
        options: RunOptions<TunnelFrame>,
    ) -> Result<TunnelOutcome, ProviderFailure> {
        self.tunnel(provider, from_wire(raw)?, options).await
    }

    /// Run one attempt on a provider.
    pub async fn execute(
        &self,
        provider: &ProviderIdentity,
        mut request: RunRequest,
        options: RunOptions<RuntimeEvent>,
    ) -> Result<ExecutionOutcome, ProviderFailure> {
        request.attempt = request.attempt.max(1);
        let suffix = format!("attempt-{}", request.attempt);
        let (stall, run_id) = (&mut request.response_stall_timeout_ms, &mut request.run_id);
        let (entry, attempt) = self.admit(provider, stall, run_id, &suffix)?;
        let p = entry.provider.clone();
        let (output, usage) = self
            .drive(
                &entry,
                attempt,
                options,
                move |events, cancel, attempt_id| {
                    let run = ProviderRun::new(request, attempt_id, events, cancel);
                    async move { p.execute(run).await.map(|o| (o.output, o.usage)) }
                },
            )
            .await?;
        Ok(ExecutionOutcome { output, usage })
    }

    /// Run one tunnel exchange on a provider that exposes a tunnel.
    pub async fn tunnel(
        &self,
        provider: &ProviderIdentity,
        mut request: ProviderTunnelRequest,
        options: RunOptions<TunnelFrame>,
    ) -> Result<TunnelOutcome, ProviderFailure> {
        let (stall, run_id) = (&mut request.response_stall_timeout_ms, &mut request.run_id);
        let (entry, attempt) = self.admit(provider, stall, run_id, "tunnel")?;
        if entry.provider.tunnel().is_none() {
            return Err(ProviderFailure::TunnelUnsupported(provider.clone()));
        }
        let p = entry.provider.clone();
        let ((), usage) = self
            .drive(
                &entry,
                attempt,
                options,
                move |frames, cancel, attempt_id| {
                    let run = TunnelRun::new(request, attempt_id, frames, cancel);
                    async move {
                        match p.tunnel() {
                            Some(t) => t.open(run).await.map(|o| ((), o.usage)),
                            None => Err(ProcedureError::internal("provider lost its tunnel")),
                        }
                    }
                },
            )
            .await?;
        Ok(TunnelOutcome { usage })
    }

    /// Admit a request's attempt on `provider`: its stall timeout resolved (refused when
    /// out of range) and written back, the provider looked up, a run id given when the
    /// caller gave none, and the attempt id (`{run_id}/{suffix}`).
    fn admit(
        &self,
        provider: &ProviderIdentity,
        stall_timeout_ms: &mut i64,
        run_id: &mut String,
        suffix: &str,
    ) -> Result<(RegisteredProvider, Attempt), ProviderFailure> {
        let timeout_ms = resolve_stall_timeout_ms(*stall_timeout_ms)?;
        let entry = self.inner.registry.lookup(provider)?;
        *stall_timeout_ms = i64::try_from(timeout_ms).unwrap_or(i64::MAX);
        if run_id.is_empty() {
            *run_id = self.internal_run_id();
        }
        let attempt = Attempt {
            run_id: run_id.clone(),
            attempt_id: format!("{run_id}/{suffix}"),
            timeout: Duration::from_millis(timeout_ms),
        };
        Ok((entry, attempt))
    }

    fn internal_run_id(&self) -> String {
        format!(
            "run_{}",
            self.inner.next_run.fetch_add(1, Ordering::Relaxed)
        )
    }

    fn register_run(
        &self,
        run_id: &str,
        token: CancellationToken,
    ) -> Result<ActiveRun, ProviderFailure> {
        let mut runs = self.inner.runs.lock().unwrap_or_else(|p| p.into_inner());
        if runs.contains_key(run_id) {
            return Err(ProviderFailure::RunInFlight(run_id.to_string()));
        }
        runs.insert(run_id.to_string(), token);
        Ok(ActiveRun {
            inner: self.inner.clone(),
            run_id: run_id.to_string(),
        })
    }

    /// One admitted attempt: watchdog from admission, the provider in its own task, then
    /// exactly one of: the provider's result, the caller's cancellation, or a claimed stall
    /// (fence and probe joined concurrently, each bounded).
    async fn drive<E, T, F, Fut>(
        &self,
        entry: &RegisteredProvider,
        attempt: Attempt,
        options: RunOptions<E>,
        start: F,
    ) -> Result<(T, Option<TokenUsage>), ProviderFailure>
    where
        E: Classified,
        T: Send + 'static,
        F: FnOnce(Sink<E>, CancellationToken, String) -> Fut,
        Fut: Future<Output = Result<(T, Option<TokenUsage>), ProcedureError>> + Send + 'static,
    {
        let Attempt {
            run_id,
            attempt_id,
            timeout,
        } = attempt;
        let RunOptions {
            scope,
            cancel,
            observer,
        } = options;
        let caller = cancel.unwrap_or_default();
        let _active = self.register_run(&run_id, caller.clone())?;

        // Attempt admission: the watchdog's clock starts here.
        let watchdog = StallWatchdog::admit(timeout);
        let seen_usage: Arc<Mutex<Option<TokenUsage>>> = Arc::new(Mutex::new(None));
        let emitter = {
            let seen_usage = seen_usage.clone();
            Arc::new(EventEmitter::new(move |e: E| {
                if let Some(u) = e.usage() {
                    let mut acc = seen_usage.lock().unwrap_or_else(|p| p.into_inner());
                    acc.get_or_insert_with(TokenUsage::default).accumulate(u);
                }
                if let Some(o) = &observer {
                    o(&e);
                }
            }))
        };
        let sink = Sink::new(emitter.clone(), watchdog.clone());
        let provider_cancel = caller.child_token();
        // In the caller's span, so the procedure's work (and an HTTP upstream's
        // `traceparent`) belongs to its attempt's trace.
        let mut task = tokio::spawn(capgate_core::trace::in_current_trace(start(
            sink,
            provider_cancel.clone(),
            attempt_id.clone(),
        )));
        let _abort = AbortOnDrop {
            task: task.abort_handle(),
            cancel: provider_cancel.clone(),
        };

        let race = tokio::select! {
            biased;
            joined = &mut task => Race::Finished(joined),
            Some(claim) = watchdog.stalled() => Race::Stalled(claim),
            _ = caller.cancelled() => Race::Cancelled,
        };

        match race {
            Race::Finished(joined) => {
                if watchdog.stop().is_err() {
                    // Unreachable by construction (only this select claims stalls), but a
                    // result after a claim is late output: fence it.
                    emitter.finish(E::failure(RESPONSE_STALLED));
                    return Err(ProviderFailure::Procedure(ProcedureError::internal(
                        "provider output after a claimed stall",
                    )));
                }
                let seen = *seen_usage.lock().unwrap_or_else(|p| p.into_inner());
                match joined {
                    Ok(Ok((value, usage))) => {
                        let usage = usage.or(seen);
                        emitter.finish(E::success(usage));
                        Ok((value, usage))
                    }
                    Ok(Err(_)) if caller.is_cancelled() => {
                        emitter.finish(E::cancellation());
                        Err(ProviderFailure::Cancelled)
                    }
                    Ok(Err(e)) => {
                        emitter.finish(E::failure("error"));
                        Err(ProviderFailure::Procedure(e))
                    }
                    Err(join) => {
                        emitter.finish(E::failure("error"));
                        Err(ProviderFailure::Procedure(ProcedureError::internal(
                            format!("provider task failed: {join}"),
                        )))
                    }
                }
            }
            Race::Cancelled => {
                provider_cancel.cancel();
                let _ = watchdog.stop();
                emitter.finish(E::cancellation());
                Err(ProviderFailure::Cancelled)
            }
            Race::Stalled(claim) => {
                // Tell the provider to let go, then join the fixed close-grace fence and the
                // exact-target probe concurrently; neither extends the other.
                provider_cancel.cancel();
                let grace = self.inner.config.close_grace;
                let abandon = task.abort_handle();
                let fence = async {
                    let released = tokio::time::timeout(grace, &mut task).await;
                    match released {
                        // Whatever it returned is late output: fenced, never used.
                        Ok(_late_output_fenced) => CloseFence::Confirmed,
                        Err(_) => {
                            abandon.abort();
                            CloseFence::Unconfirmed
                        }
                    }
                };
                let identity = entry.provider.identity().clone();
                let target = ProbeTarget {
                    adapter: identity.adapter.clone(),
                    target: identity.target.clone(),
                    instance_key: entry.conf.instance_key.clone(),
                };
                let probe = probe_health(resolve_probe_func(entry.provider.as_ref()), &target);
                let (close_fence, report) = tokio::join!(fence, probe);
                let terminal = StallTerminal {
                    run_id,
                    attempt_id,
                    adapter: identity.adapter,
                    target: identity.target,
                    idle_ms: u64::try_from(claim.idle.as_millis()).unwrap_or(u64::MAX),
                    health: JoinedHealth::from_health(report.health),
                    close_fence,
                    health_observation_seq: scope.next_seq(),
                };
                emitter.finish(E::failure(RESPONSE_STALLED));
                tracing::warn!(
                    run_id = %terminal.run_id,
                    attempt_id = %terminal.attempt_id,
                    adapter = %terminal.adapter,
                    target = %terminal.target,
                    idle_ms = terminal.idle_ms,
                    provider_health = terminal.health.provider_health().as_str(),
                    retryable = terminal.retryable(),
                    "provider response stalled"
                );
                Err(ProviderFailure::Stalled(Box::new(terminal)))
            }
        }
    }
}
