//! Shared fixtures: scripted providers and probers, agent info, event recorders.
#![allow(dead_code)]

use async_trait::async_trait;
use capgate_core::actor::{Actor, Surface};
use capgate_core::procedure::{AgentInvocationInfo, ProcedureError};
use capgate_provider::events::RuntimeEvent;
use capgate_provider::health::{ProbeOutcome, ProbeTarget, ProviderProber};
use capgate_provider::provider::{
    ExecutionOutcome, Provider, ProviderCommand, ProviderCommands, ProviderConf, ProviderIdentity,
    ProviderLifecycle, ProviderRegistry, ProviderRun, ProviderTunnel, RunRequest, TunnelOutcome,
    TunnelRun,
};
use capgate_provider::runtime::{EventObserver, ProviderRuntime, ProviderRuntimeConfig};
use futures::future::BoxFuture;
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub type RunFn = Arc<
    dyn Fn(ProviderRun) -> BoxFuture<'static, Result<ExecutionOutcome, ProcedureError>>
        + Send
        + Sync,
>;
pub type TunnelFn = Arc<
    dyn Fn(TunnelRun) -> BoxFuture<'static, Result<TunnelOutcome, ProcedureError>> + Send + Sync,
>;

/// A provider whose behaviour is a closure; counts its executions.
pub struct Scripted {
    pub id: ProviderIdentity,
    pub run: RunFn,
    pub calls: Arc<AtomicUsize>,
    pub prober: Option<Arc<dyn ProviderProber>>,
    pub lifecycle: Option<Arc<Lifecycle>>,
    pub commands: Option<Arc<Commands>>,
    pub tunnel: Option<Arc<Tunnel>>,
}

impl Scripted {
    pub fn new<F, Fut>(target: &str, f: F) -> Self
    where
        F: Fn(ProviderRun) -> Fut + Send + Sync + 'static,
        Fut:
            std::future::Future<Output = Result<ExecutionOutcome, ProcedureError>> + Send + 'static,
    {
        Scripted {
            id: ProviderIdentity::new("test", target),
            run: Arc::new(move |r| Box::pin(f(r))),
            calls: Arc::new(AtomicUsize::new(0)),
            prober: None,
            lifecycle: None,
            commands: None,
            tunnel: None,
        }
    }
    pub fn with_prober(mut self, p: Arc<dyn ProviderProber>) -> Self {
        self.prober = Some(p);
        self
    }
    pub fn calls(&self) -> Arc<AtomicUsize> {
        self.calls.clone()
    }
}

#[async_trait]
impl Provider for Scripted {
    fn identity(&self) -> &ProviderIdentity {
        &self.id
    }
    async fn execute(&self, run: ProviderRun) -> Result<ExecutionOutcome, ProcedureError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        (self.run)(run).await
    }
    fn lifecycle(&self) -> Option<&dyn ProviderLifecycle> {
        self.lifecycle
            .as_deref()
            .map(|l| l as &dyn ProviderLifecycle)
    }
    fn commands(&self) -> Option<&dyn capgate_provider::provider::ProviderCommands> {
        self.commands.as_deref().map(|c| c as &dyn ProviderCommands)
    }
    fn tunnel(&self) -> Option<&dyn ProviderTunnel> {
        self.tunnel.as_deref().map(|t| t as &dyn ProviderTunnel)
    }
    fn prober(&self) -> Option<Arc<dyn ProviderProber>> {
        self.prober.clone()
    }
}

/// A lifecycle with a switchable availability.
#[derive(Default)]
pub struct Lifecycle {
    pub available: AtomicBool,
}

#[async_trait]
impl ProviderLifecycle for Lifecycle {
    async fn start(&self) -> Result<(), ProcedureError> {
        self.available.store(true, Ordering::SeqCst);
        Ok(())
    }
    async fn stop(&self) {
        self.available.store(false, Ordering::SeqCst);
    }
    fn is_available(&self) -> bool {
        self.available.load(Ordering::SeqCst)
    }
}

/// Commands that record what reached them.
#[derive(Default)]
pub struct Commands {
    pub seen: Mutex<Vec<ProviderCommand>>,
}

#[async_trait]
impl ProviderCommands for Commands {
    async fn command(
        &self,
        command: ProviderCommand,
        _args: serde_json::Value,
    ) -> Result<serde_json::Value, ProcedureError> {
        self.seen.lock().unwrap().push(command);
        Ok(json!({ "command": command.as_str() }))
    }
}

/// A tunnel whose behaviour is a closure.
pub struct Tunnel(pub TunnelFn);

#[async_trait]
impl ProviderTunnel for Tunnel {
    async fn open(&self, run: TunnelRun) -> Result<TunnelOutcome, ProcedureError> {
        (self.0)(run).await
    }
}

/// A prober whose answer is a closure; counts its calls.
pub struct FnProber {
    pub calls: Arc<AtomicUsize>,
    #[allow(clippy::type_complexity)]
    pub f: Arc<
        dyn Fn(ProbeTarget, CancellationToken) -> BoxFuture<'static, ProbeOutcome> + Send + Sync,
    >,
}

impl FnProber {
    pub fn new<F, Fut>(f: F) -> Arc<Self>
    where
        F: Fn(ProbeTarget, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ProbeOutcome> + Send + 'static,
    {
        Arc::new(FnProber {
            calls: Arc::new(AtomicUsize::new(0)),
            f: Arc::new(move |t, c| Box::pin(f(t, c))),
        })
    }
}

#[async_trait]
impl ProviderProber for FnProber {
    async fn probe(&self, target: &ProbeTarget, cancel: CancellationToken) -> ProbeOutcome {
        self.calls.fetch_add(1, Ordering::SeqCst);
        (self.f)(target.clone(), cancel).await
    }
}

pub fn runtime_of(providers: Vec<(Arc<dyn Provider>, ProviderConf)>) -> ProviderRuntime {
    runtime_with_grace(providers, Duration::from_millis(2_000))
}

pub fn runtime_with_grace(
    providers: Vec<(Arc<dyn Provider>, ProviderConf)>,
    close_grace: Duration,
) -> ProviderRuntime {
    let mut reg = ProviderRegistry::new();
    for (p, c) in providers {
        reg.register(p, c).expect("unique identity");
    }
    ProviderRuntime::with_config(reg, ProviderRuntimeConfig { close_grace })
}

pub fn conf(ms: i64) -> ProviderConf {
    ProviderConf {
        response_stall_timeout_ms: ms,
        ..Default::default()
    }
}

pub fn request(run_id: &str, stall_ms: i64) -> RunRequest {
    RunRequest {
        run_id: run_id.into(),
        response_stall_timeout_ms: stall_ms,
        agent: Some(Arc::new(agent(run_id))),
        ..Default::default()
    }
}

pub fn agent(execution_id: &str) -> AgentInvocationInfo {
    AgentInvocationInfo {
        execution_id: execution_id.into(),
        capability_id: "orders.refund".into(),
        surface: Surface::Direct,
        namespace: String::new(),
        actor: Actor::user("u_dana", json!({})),
        approval: None,
        correlation_id: None,
        idempotency_key: format!("idk_{execution_id}"),
    }
}

/// Records every delivered event.
#[derive(Clone)]
pub struct Recorder<E>(pub Arc<Mutex<Vec<E>>>);

impl<E> Default for Recorder<E> {
    fn default() -> Self {
        Recorder(Arc::new(Mutex::new(Vec::new())))
    }
}

impl<E: Clone + Send + Sync + 'static> Recorder<E> {
    pub fn observer(&self) -> EventObserver<E> {
        let inner = self.0.clone();
        Arc::new(move |e: &E| inner.lock().unwrap().push(e.clone()))
    }
    pub fn events(&self) -> Vec<E> {
        self.0.lock().unwrap().clone()
    }
}

pub fn recorder() -> Recorder<RuntimeEvent> {
    Recorder::default()
}

/// A provider body that waits for its cancellation (a cooperative, silent provider).
pub async fn wait_for_cancel(
    cancel: CancellationToken,
) -> Result<ExecutionOutcome, ProcedureError> {
    cancel.cancelled().await;
    Err(ProcedureError::internal("cancelled"))
}
