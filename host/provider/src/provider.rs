//! Provider primitives: the narrow [`Provider`] interface, its optional lifecycle, command and
//! tunnel capabilities, the [`ProviderRegistry`] keyed by [`ProviderIdentity`], the closed
//! provider-command allowlist, run/tunnel requests and their results with token usage as
//! observation data, and the typed [`ProviderFailure`]s.
//!
//! `session_id` is an opaque correlation value: it never selects, creates, resumes or
//! terminates anything, and two requests carrying the same one are independent executions.

use crate::events::{FrameSink, RuntimeEvent};
use crate::health::ProviderProber;
use crate::runtime::Sink;
use crate::stall::{StallTerminal, StallTimeoutError, resolve_stall_timeout_ms};
use async_trait::async_trait;
use capgate_core::procedure::{AgentInvocationInfo, ProcedureError};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Who a provider is: the adapter kind that runs it (`http`, `native`, `wasm`) and the exact
/// target it reaches. Registry lookups, health probes and stall terminals all use it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ProviderIdentity {
    /// The adapter kind.
    pub adapter: String,
    /// The exact target (a backend name, a component name).
    pub target: String,
}

impl ProviderIdentity {
    /// An identity from its two parts.
    pub fn new(adapter: impl Into<String>, target: impl Into<String>) -> Self {
        ProviderIdentity {
            adapter: adapter.into(),
            target: target.into(),
        }
    }
}

impl fmt::Display for ProviderIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.adapter, self.target)
    }
}

/// Tokens a provider reports consuming. Observation data only: it rides on execution and
/// tunnel results and on usage events, and never decides anything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TokenUsage {
    /// Prompt / input tokens.
    pub input_tokens: u64,
    /// Completion / output tokens.
    pub output_tokens: u64,
    /// Total tokens as the provider reports it.
    pub total_tokens: u64,
}

impl TokenUsage {
    /// Add another report to this one (saturating), for providers that report in pieces.
    pub fn accumulate(&mut self, other: &TokenUsage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
    }
}

/// One execution request, as it crosses the wire boundary (`RunRequest`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RunRequest {
    /// The run this attempt belongs to; cancellation targets it when non-empty.
    pub run_id: String,
    /// Opaque correlation value: selects, creates, resumes and terminates nothing.
    pub session_id: Option<String>,
    /// The validated input.
    pub input: serde_json::Value,
    /// The application context.
    pub context: serde_json::Value,
    /// Governance facts about the call, when it comes from the capability pipeline.
    pub agent: Option<Arc<AgentInvocationInfo>>,
    /// The attempt number (1-based; 0 is read as 1).
    pub attempt: u32,
    /// The selected provider's effective stall timeout; zero means the documented default.
    /// After the wire boundary it always holds the resolved, positive value.
    pub response_stall_timeout_ms: i64,
    /// Caller metadata. Carried for the provider; never copied into a stall terminal.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// One tunnel request (`ProviderTunnelRequest`): a raw exchange with the provider whose
/// response comes back as [`TunnelFrame`](crate::events::TunnelFrame)s.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderTunnelRequest {
    /// The run this tunnel belongs to; cancellation targets it when non-empty.
    pub run_id: String,
    /// Opaque correlation value.
    pub session_id: Option<String>,
    /// What to send through the tunnel (provider-specific).
    pub payload: serde_json::Value,
    /// The selected provider's effective stall timeout; zero means the documented default.
    pub response_stall_timeout_ms: i64,
    /// Caller metadata; never copied into a stall terminal.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// What a provider receives for one admitted attempt.
pub struct ProviderRun {
    /// The normalized request (its stall timeout is resolved).
    pub request: RunRequest,
    /// The runtime-owned attempt identity.
    pub attempt_id: String,
    /// Where the provider reports start, progress and usage; feeds the stall watchdog.
    pub events: Sink<RuntimeEvent>,
    /// Fires on caller cancellation, deadline, or when the watchdog fences a stall.
    pub cancel: CancellationToken,
}

/// What a provider receives for one admitted tunnel.
pub struct TunnelRun {
    /// The normalized request.
    pub request: ProviderTunnelRequest,
    /// The runtime-owned attempt identity.
    pub attempt_id: String,
    /// Where response frames go; feeds the stall watchdog.
    pub frames: FrameSink,
    /// Fires on cancellation or when the watchdog fences a stall.
    pub cancel: CancellationToken,
}

/// `new` for each kind of run: the request, the runtime-owned attempt id, where the
/// provider's output goes, and the attempt's cancellation. The runtime builds both kinds
/// the same way, so the constructor is written once.
macro_rules! run_constructors {
    ($($run:ident($request:ty, $sink:ident: $sink_ty:ty);)*) => {$(
        impl $run {
            /// The run the runtime hands a provider for one admitted attempt.
            pub(crate) fn new(
                request: $request,
                attempt_id: String,
                $sink: $sink_ty,
                cancel: CancellationToken,
            ) -> Self {
                $run {
                    request,
                    attempt_id,
                    $sink,
                    cancel,
                }
            }
        }
    )*};
}

run_constructors! {
    ProviderRun(RunRequest, events: Sink<RuntimeEvent>);
    TunnelRun(ProviderTunnelRequest, frames: FrameSink);
}

/// A successful execution: the output plus usage observed on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionOutcome {
    /// The procedure's output.
    pub output: serde_json::Value,
    /// Token usage, observation data only.
    pub usage: Option<TokenUsage>,
}

impl ExecutionOutcome {
    /// An outcome without usage.
    pub fn new(output: serde_json::Value) -> Self {
        ExecutionOutcome {
            output,
            usage: None,
        }
    }
}

/// A finished tunnel exchange.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TunnelOutcome {
    /// Token usage, observation data only.
    pub usage: Option<TokenUsage>,
}

/// The narrow provider interface every procedure adapter implements. Everything beyond
/// [`Provider::execute`] is an optional capability a provider may expose.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// The identity the registry, probes and stall terminals use.
    fn identity(&self) -> &ProviderIdentity;

    /// Run one admitted attempt. Report progress through `run.events`; stop when
    /// `run.cancel` fires.
    async fn execute(&self, run: ProviderRun) -> Result<ExecutionOutcome, ProcedureError>;

    /// Optional lifecycle (start, stop, availability).
    fn lifecycle(&self) -> Option<&dyn ProviderLifecycle> {
        None
    }

    /// Optional allowlisted commands.
    fn commands(&self) -> Option<&dyn ProviderCommands> {
        None
    }

    /// Optional raw tunnel.
    fn tunnel(&self) -> Option<&dyn ProviderTunnel> {
        None
    }

    /// Optional exact-target health prober; `None` makes every probe fail closed to
    /// `health_unknown` without calling anything.
    fn prober(&self) -> Option<Arc<dyn ProviderProber>> {
        None
    }
}

/// Optional lifecycle: a provider that must be started, can be stopped, and may be
/// unavailable while registered.
#[async_trait]
pub trait ProviderLifecycle: Send + Sync {
    /// Start the provider.
    async fn start(&self) -> Result<(), ProcedureError>;
    /// Stop the provider.
    async fn stop(&self);
    /// Whether it can serve now; registry lookups fail with `Unavailable` when not.
    fn is_available(&self) -> bool;
}

/// Optional command capability: answers the allowlisted [`ProviderCommand`]s.
#[async_trait]
pub trait ProviderCommands: Send + Sync {
    /// Answer one allowlisted command.
    async fn command(
        &self,
        command: ProviderCommand,
        args: serde_json::Value,
    ) -> Result<serde_json::Value, ProcedureError>;
}

/// Optional tunnel capability: a raw exchange streamed back as frames.
#[async_trait]
pub trait ProviderTunnel: Send + Sync {
    /// Run one admitted tunnel exchange.
    async fn open(&self, run: TunnelRun) -> Result<TunnelOutcome, ProcedureError>;
}

/// The closed provider-command allowlist. Nothing else reaches a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderCommand {
    /// What the provider can do.
    Capabilities,
    /// The state of the provider's transport.
    TransportStatus,
    /// A pass-through to an Ollama-compatible API.
    OllamaApi,
}

capgate_core::wire_enum! {
    ProviderCommand {
        Capabilities => "capabilities",
        TransportStatus => "transport_status",
        OllamaApi => "ollama_api",
    }
}

impl FromStr for ProviderCommand {
    type Err = ProviderFailure;

    /// Exact match against the allowlist; anything else is `CommandNotAllowed`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ProviderCommand::parse(s).ok_or_else(|| ProviderFailure::CommandNotAllowed(s.to_string()))
    }
}

/// Per-provider configuration (`NodeProviderConf`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderConf {
    /// Stall timeout for this provider; zero means the documented default.
    pub response_stall_timeout_ms: i64,
    /// A pinned instance key the health probe must match, when set.
    pub instance_key: Option<String>,
}

impl ProviderConf {
    /// The timeout a run on this provider candidate gets: zero → default, invalid → error.
    pub fn effective_response_stall_timeout_ms(&self) -> Result<u64, StallTimeoutError> {
        resolve_stall_timeout_ms(self.response_stall_timeout_ms)
    }
}

/// A registry hit: the provider and its configuration.
#[derive(Clone)]
pub struct RegisteredProvider {
    /// The provider that answers for the identity.
    pub provider: Arc<dyn Provider>,
    /// Its configuration (health probing, instance key).
    pub conf: ProviderConf,
}

/// Providers keyed by identity.
#[derive(Default, Clone)]
pub struct ProviderRegistry {
    entries: HashMap<ProviderIdentity, RegisteredProvider>,
}

impl ProviderRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a provider under its own identity. A second registration of the same
    /// identity is refused so lookups stay unambiguous.
    pub fn register(
        &mut self,
        provider: Arc<dyn Provider>,
        conf: ProviderConf,
    ) -> Result<(), ProviderFailure> {
        let id = provider.identity().clone();
        if self.entries.contains_key(&id) {
            return Err(ProviderFailure::Duplicate(id));
        }
        self.entries
            .insert(id, RegisteredProvider { provider, conf });
        Ok(())
    }

    /// Look a provider up by identity: `NotFound` when missing, `Unavailable` when its
    /// lifecycle says it cannot serve.
    pub fn lookup(&self, id: &ProviderIdentity) -> Result<RegisteredProvider, ProviderFailure> {
        let entry = self
            .entries
            .get(id)
            .ok_or_else(|| ProviderFailure::NotFound(id.clone()))?;
        if entry
            .provider
            .lifecycle()
            .is_some_and(|l| !l.is_available())
        {
            return Err(ProviderFailure::Unavailable(id.clone()));
        }
        Ok(entry.clone())
    }

    /// The registered identities.
    pub fn identities(&self) -> impl Iterator<Item = &ProviderIdentity> {
        self.entries.keys()
    }
}

/// The provider runtime's typed failures.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderFailure {
    /// No provider has this identity.
    #[error("provider {0} is not registered")]
    NotFound(ProviderIdentity),
    /// The provider is registered but cannot serve.
    #[error("provider {0} is unavailable")]
    Unavailable(ProviderIdentity),
    /// A second registration of one identity.
    #[error("provider {0} is already registered")]
    Duplicate(ProviderIdentity),
    /// The command is outside the closed allowlist (checked before lookup).
    #[error("command `{0}` is outside the provider-command allowlist")]
    CommandNotAllowed(String),
    /// The provider exposes no command capability.
    #[error("provider {provider} does not answer command `{}`", .command.as_str())]
    CommandUnsupported {
        /// The provider that was asked.
        provider: ProviderIdentity,
        /// The command it does not answer.
        command: ProviderCommand,
    },
    /// The provider exposes no tunnel capability.
    #[error("provider {0} has no tunnel")]
    TunnelUnsupported(ProviderIdentity),
    /// The request's stall timeout was rejected at the wire boundary.
    #[error(transparent)]
    InvalidStallTimeout(#[from] StallTimeoutError),
    /// A wire request that does not decode (the decoder's error).
    #[error("invalid request: {0}")]
    InvalidRequest(#[source] Arc<serde_json::Error>),
    /// Cancellation needs a non-empty run id.
    #[error("cancellation needs a non-empty run_id")]
    EmptyRunId,
    /// Another attempt with this run id is in flight.
    #[error("run `{0}` is already in flight")]
    RunInFlight(String),
    /// The stall watchdog cut the attempt (`response_stalled`).
    #[error("response_stalled")]
    Stalled(Box<StallTerminal>),
    /// The attempt was cancelled by its caller.
    #[error("cancelled")]
    Cancelled,
    /// The provider itself failed.
    #[error(transparent)]
    Procedure(ProcedureError),
}

impl ProviderFailure {
    /// The stage-11 view: a stall becomes a governed TIMEOUT carrying only the allowlisted
    /// metadata (audit-only), a cancellation CANCELLED, a provider error passes through, and
    /// every runtime fault is an internal error hidden from the model.
    pub fn into_procedure_error(self) -> ProcedureError {
        use capgate_core::error::{CapabilityError, ErrorCode};
        match self {
            ProviderFailure::Stalled(t) => ProcedureError::Governed(t.to_capability_error()),
            ProviderFailure::Cancelled => {
                ProcedureError::Governed(CapabilityError::new(ErrorCode::Cancelled))
            }
            ProviderFailure::Procedure(e) => e,
            other => ProcedureError::Internal(other.to_string()),
        }
    }
}
