//! The bridge to core's stage 11: [`ProviderProcedure`] is a core `Procedure` that runs a
//! registered provider under the [`ProviderRuntime`], and [`ProcedureProvider`] turns any
//! core `Procedure` — a native Rust handler, or a Wasm procedure component — into a
//! provider.
//!
//! # Wasm procedure components
//!
//! capgate-wasm implements core's `Procedure` for `procedure-plugin` components; its host
//! `progress.report(json)` import calls `ProcedureCall::report_progress`. Wrap that
//! procedure in a [`ProcedureProvider`] (adapter `wasm`, and
//! [`ProcedureProvider::with_prober`] for a component exporting `health`), register it, and
//! expose it through a [`ProviderProcedure`]: the `ProgressFn` the component sees then emits
//! [`RuntimeEvent::progress`] into the attempt's sink, which resets the stall watchdog and is
//! forwarded to the caller's own `ProgressFn` (MCP progress). Nothing here depends on
//! capgate-wasm.

use crate::events::{ProgressDisposition, RuntimeEvent, classify_runtime_event};
use crate::health::{ObservationScope, ProviderProber};
use crate::provider::{ExecutionOutcome, Provider, ProviderIdentity, ProviderRun};
use crate::runtime::{EventObserver, ProviderRuntime, RunOptions};
use async_trait::async_trait;
use capgate_core::procedure::{Procedure, ProcedureCall, ProcedureError, ProgressFn};
use std::future::Future;
use std::sync::Arc;

/// A core `Procedure` that runs one registered provider under the provider runtime: the
/// run id is the execution id, the stall timeout is the provider's effective one, the
/// call's cancellation token is the attempt's cancellation, and delivered progress goes to
/// the call's `ProgressFn`. A stall comes back as a governed TIMEOUT whose allowlisted
/// metadata only audit sees.
pub struct ProviderProcedure {
    runtime: ProviderRuntime,
    provider: ProviderIdentity,
    scope: ObservationScope,
}

impl ProviderProcedure {
    /// A procedure running `provider` on `runtime`.
    pub fn new(runtime: ProviderRuntime, provider: ProviderIdentity) -> Self {
        ProviderProcedure {
            runtime,
            provider,
            scope: ObservationScope::Internal,
        }
    }

    /// Bind observations to a connection (adds `health_observation_seq` to stall terminals).
    pub fn with_scope(mut self, scope: ObservationScope) -> Self {
        self.scope = scope;
        self
    }
}

/// The value a delivered progress event hands to a `ProgressFn`: its structured data, else
/// its message, else its delta; usage-only events are observation data and are not
/// forwarded.
pub fn progress_value(event: &RuntimeEvent) -> Option<serde_json::Value> {
    if classify_runtime_event(event) != ProgressDisposition::Progress {
        return None;
    }
    if let Some(d) = &event.data {
        return Some(d.clone());
    }
    if !event.message.is_empty() {
        return Some(event.message.clone().into());
    }
    if !event.delta.is_empty() {
        return Some(serde_json::json!({ "delta": event.delta }));
    }
    None
}

#[async_trait]
impl Procedure for ProviderProcedure {
    async fn call(&self, call: ProcedureCall) -> Result<serde_json::Value, ProcedureError> {
        let entry = self
            .runtime
            .registry()
            .lookup(&self.provider)
            .map_err(|f| f.into_procedure_error())?;
        let request = crate::provider::RunRequest {
            run_id: call.agent.execution_id.clone(),
            session_id: None,
            input: call.input,
            context: call.context,
            agent: Some(call.agent.clone()),
            attempt: call.attempt,
            response_stall_timeout_ms: entry.conf.response_stall_timeout_ms,
            metadata: serde_json::Map::new(),
        };
        let observer: Option<EventObserver<RuntimeEvent>> = call.progress.map(|p| {
            Arc::new(move |e: &RuntimeEvent| {
                if let Some(v) = progress_value(e) {
                    p(v);
                }
            }) as EventObserver<RuntimeEvent>
        });
        let options = RunOptions {
            scope: self.scope.clone(),
            cancel: Some(call.cancel.clone()),
            observer,
        };
        self.runtime
            .execute(&self.provider, request, options)
            .await
            .map(|o| o.output)
            .map_err(|f| f.into_procedure_error())
    }
}

/// Any core `Procedure` as a provider: a native Rust handler, a Wasm procedure component,
/// an application's existing procedure. Its `ProgressFn` feeds the attempt's watchdog; its
/// cancellation token is the attempt's (a cooperative procedure that stops on it confirms
/// the close fence).
pub struct ProcedureProvider {
    identity: ProviderIdentity,
    procedure: Arc<dyn Procedure>,
    prober: Option<Arc<dyn ProviderProber>>,
}

/// The adapter name of native Rust handlers.
pub const NATIVE_ADAPTER: &str = "native";

impl ProcedureProvider {
    /// Wrap a procedure under an identity.
    pub fn new(identity: ProviderIdentity, procedure: impl Procedure) -> Self {
        Self::from_arc(identity, Arc::new(procedure))
    }

    /// Wrap a shared procedure.
    pub fn from_arc(identity: ProviderIdentity, procedure: Arc<dyn Procedure>) -> Self {
        ProcedureProvider {
            identity,
            procedure,
            prober: None,
        }
    }

    /// Give it an exact-target health prober (without one, probes fail closed).
    pub fn with_prober(mut self, prober: Arc<dyn ProviderProber>) -> Self {
        self.prober = Some(prober);
        self
    }
}

/// A native Rust handler (an async closure over core's `ProcedureCall`) as a provider with
/// adapter [`NATIVE_ADAPTER`].
pub fn native_handler<F, Fut>(target: impl Into<String>, f: F) -> ProcedureProvider
where
    F: Fn(ProcedureCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<serde_json::Value, ProcedureError>> + Send + 'static,
{
    ProcedureProvider::new(
        ProviderIdentity::new(NATIVE_ADAPTER, target),
        capgate_core::procedure::handler(f),
    )
}

#[async_trait]
impl Provider for ProcedureProvider {
    fn identity(&self) -> &ProviderIdentity {
        &self.identity
    }

    async fn execute(&self, run: ProviderRun) -> Result<ExecutionOutcome, ProcedureError> {
        let Some(agent) = run.request.agent.clone() else {
            return Err(ProcedureError::internal(
                "a procedure provider needs the agent invocation info",
            ));
        };
        let sink = run.events.clone();
        let progress: ProgressFn = Arc::new(move |value: serde_json::Value| {
            let _ = sink.progress(value);
        });
        let _ = run.events.emit(RuntimeEvent::start());
        let call = ProcedureCall {
            input: run.request.input,
            context: run.request.context,
            agent,
            cancel: run.cancel,
            progress: Some(progress),
            attempt: run.request.attempt,
        };
        self.procedure.call(call).await.map(ExecutionOutcome::new)
    }

    fn prober(&self) -> Option<Arc<dyn ProviderProber>> {
        self.prober.clone()
    }
}
