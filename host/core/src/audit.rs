//! Evidence: the eleven audit event types with exactly the payloads of docs/events.md (ids,
//! hashes, classifications and durations, never inputs or outputs: SI-10), the
//! [`AuditSink`] seam, and the sinks that need no database (tracing, JSON lines, memory).
//! Two capgate extensions record `capgate serve`'s configuration reloads
//! (`capgate.config.reloaded`, `capgate.config.reload_refused`).

use crate::actor::{ActorRef, Surface};
use crate::error::{ErrorCode, Stage};
use crate::meta::{Risk, SideEffect};
use crate::policy::PolicyStance;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tracing::Instrument;

/// Why a call was denied, as audit records it (the public code hides it: SI-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum DenyReason {
    /// No such capability.
    Unknown,
    /// Not exposed on this surface.
    NotExposed,
    /// A policy hid it.
    Hidden,
    /// A policy denied it.
    PolicyDenied,
    /// A policy failed (fail closed).
    PolicyFailed,
}

/// The event-specific part of an audit event; serialized as `{"type": …, "data": {…}}`.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
#[non_exhaustive]
pub enum EventPayload {
    /// Discovery ran (`describe`): what a model was shown, as a count and a digest.
    #[serde(rename = "capabilities.discovered", rename_all = "camelCase")]
    CapabilitiesDiscovered {
        /// How many descriptors were returned.
        count: usize,
        /// The surface the list was built for.
        surface: Surface,
        /// SHA-256 of the canonical list of returned ids.
        digest: String,
        /// The ids, only when `audit.verbose` is set.
        capability_ids: Option<Vec<String>>,
    },
    /// Stage 2: every call is on record before anything is resolved, probes included.
    #[serde(rename = "capability.requested", rename_all = "camelCase")]
    Requested {
        /// The capability's side effect, once resolved.
        side_effect: Option<SideEffect>,
        /// The capability's risk, once resolved.
        risk: Option<Risk>,
    },
    /// Stages 3, 4, 7.
    #[serde(rename = "capability.denied", rename_all = "camelCase")]
    Denied {
        /// The true reason.
        reason: DenyReason,
        /// What the caller was told.
        public_code: ErrorCode,
        /// Every policy's stance, when policies ran.
        policy_decisions: Option<Vec<PolicyStance>>,
        /// The approval a resume was asked to consume (capgate extension, on resume only),
        /// so a refused resume links to its approval as an executed one does.
        approval_id: Option<String>,
        /// The resume's own correlation id, when it sent one (capgate extension, on resume
        /// only): the envelope keeps the original call's correlation id.
        resume_correlation_id: Option<String>,
    },
    /// Stage 8 suspended the call.
    #[serde(rename = "capability.approval_requested", rename_all = "camelCase")]
    ApprovalRequested {
        /// The approval the call now waits for.
        approval_id: String,
        /// Why approval is needed, as codes that carry no input value (SI-10): the name of
        /// each policy that asked, `approval.required` for the capability's own. The
        /// reasons' text (which may quote the input) stays with the approval record.
        reasons: Vec<String>,
        /// The approval types asked for, which decide who may approve.
        types: Vec<String>,
        /// When the approval expires if nobody decides.
        expires_at: DateTime<Utc>,
        /// Every policy's stance in the phase that asked, with its provenance (capgate
        /// extension).
        policy_decisions: Option<Vec<PolicyStance>>,
        /// The requester's tenant (capgate extension), so a notification sink can be
        /// limited to namespaces.
        namespace: Option<String>,
    },
    /// A human approved.
    #[serde(rename = "capability.approved", rename_all = "camelCase")]
    Approved {
        /// The approval decided.
        approval_id: String,
        /// Who approved (also the event's envelope actor).
        approver: ActorRef,
        /// The approver's comment, if any.
        comment: Option<String>,
        /// The approver's tenant partition (capgate extension; absent for an operator's
        /// shell decision).
        namespace: Option<String>,
        /// `operator` when an operator decided from the shell on the approver's behalf,
        /// `requester` when the requester confirmed their own call (capgate extension;
        /// absent for an approver's own decision).
        via: Option<String>,
        /// The requester's tenant, the approval's own (capgate extension), so a
        /// notification sink can be limited to namespaces whoever decided.
        requester_namespace: Option<String>,
    },
    /// A human rejected.
    #[serde(rename = "capability.rejected", rename_all = "camelCase")]
    Rejected {
        /// The approval decided.
        approval_id: String,
        /// Who rejected (also the event's envelope actor).
        approver: ActorRef,
        /// The approver's comment, if any.
        comment: Option<String>,
        /// The approver's tenant partition (capgate extension; absent for an operator's
        /// shell decision).
        namespace: Option<String>,
        /// `operator` when an operator decided from the shell on the approver's behalf,
        /// `requester` when the requester confirmed their own call (capgate extension;
        /// absent for an approver's own decision).
        via: Option<String>,
        /// The requester's tenant, the approval's own (capgate extension), so a
        /// notification sink can be limited to namespaces whoever decided.
        requester_namespace: Option<String>,
    },
    /// Stage 10: the procedure is about to run (strict audit: no record, no execution).
    #[serde(rename = "capability.started", rename_all = "camelCase")]
    Started {
        /// Attempt number (1-based).
        attempt: u32,
        /// The approval this execution consumed.
        approval_id: Option<String>,
        /// The resume's own correlation id, when it sent one (capgate extension, on resume
        /// only): the envelope keeps the original call's correlation id.
        resume_correlation_id: Option<String>,
        /// Every policy's stance that let the call through, with the phase it ran in and
        /// its provenance (capgate extension; absent when no policy ran).
        policy_decisions: Option<Vec<PolicyStance>>,
    },
    /// Stage 11 re-attempt.
    #[serde(rename = "capability.retried", rename_all = "camelCase")]
    Retried {
        /// The attempt about to run.
        attempt: u32,
        /// Why the previous one failed.
        previous_error_code: ErrorCode,
    },
    /// Stage 14: the call succeeded and its redacted output was returned.
    #[serde(rename = "capability.completed", rename_all = "camelCase")]
    Completed {
        /// Wall time of the execution.
        duration_ms: u64,
        /// Attempts made, the successful one included.
        attempts: u32,
    },
    /// A terminal failure.
    #[serde(rename = "capability.failed", rename_all = "camelCase")]
    Failed {
        /// The error code the caller received.
        code: ErrorCode,
        /// The pipeline stage that failed, when one did.
        stage: Option<Stage>,
        /// Whether retrying may help.
        retryable: bool,
        /// Attempts made, the failed one included (0: the procedure never ran).
        attempts: u32,
        /// The procedure ran before the failure (stages 12/13).
        executed_before_failure: Option<bool>,
        /// Policy stances, when a policy batch led to it.
        policy_decisions: Option<Vec<PolicyStance>>,
        /// The approval a resume was asked to consume (capgate extension, on resume only),
        /// so a refused resume links to its approval as an executed one does.
        approval_id: Option<String>,
        /// The resume's own correlation id, when it sent one (capgate extension, on resume
        /// only): the envelope keeps the original call's correlation id.
        resume_correlation_id: Option<String>,
    },
    /// Timeout or cancellation.
    #[serde(rename = "capability.cancelled", rename_all = "camelCase")]
    Cancelled {
        /// TIMEOUT or CANCELLED.
        code: ErrorCode,
        /// Wall time of the execution.
        duration_ms: u64,
        /// Allow-listed adapter metadata (e.g. a provider's stall terminal).
        metadata: Option<serde_json::Value>,
        /// The approval a resume was asked to consume (capgate extension, on resume only),
        /// so a refused resume links to its approval as an executed one does.
        approval_id: Option<String>,
        /// The resume's own correlation id, when it sent one (capgate extension, on resume
        /// only): the envelope keeps the original call's correlation id.
        resume_correlation_id: Option<String>,
    },
    /// A shadow policy would have changed this call's outcome (capgate extension, not one
    /// of the eleven: see `policy::Shadow`). Policy, phase and stances only, never the input
    /// (SI-10); the envelope's `inputHash` links it to the call.
    #[serde(rename = "capgate.policy.shadow_divergence", rename_all = "camelCase")]
    ShadowDivergence {
        /// The shadow policy's name.
        policy: String,
        /// The batch it ran in.
        phase: crate::policy::Phase,
        /// Its own stance: `deny`, `hide`, `require-approval`, `allow` or `error`.
        stance: String,
        /// The batch's verdict (what the call went on with).
        outcome: String,
        /// The verdict had the policy enforced.
        would_be: String,
    },
    /// An approval nobody decided expired (capgate extension, announced once per approval
    /// by the sweeper: [`crate::runtime::Approvals::expire_due`]).
    #[serde(rename = "capgate.approval.expired", rename_all = "camelCase")]
    ApprovalExpired {
        /// The approval.
        approval_id: String,
        /// When it expired.
        expires_at: DateTime<Utc>,
        /// The requester's tenant, when the approval has one.
        namespace: Option<String>,
        /// `true` when it had been approved and was never run: it lapsed unused (absent for
        /// an approval nobody decided).
        lapsed: Option<bool>,
    },
    /// An approval still pending after the configured time was escalated to a second role
    /// (capgate extension, once per approval: [`crate::runtime::Approvals::escalate_due`]).
    #[serde(rename = "capgate.approval.escalated", rename_all = "camelCase")]
    ApprovalEscalated {
        /// The approval.
        approval_id: String,
        /// The role it is escalated to (`[approvals] escalateTo`), when one is named.
        escalate_to: Option<String>,
        /// How long it had been pending.
        pending_ms: u64,
        /// The requester's tenant, when the approval has one.
        namespace: Option<String>,
    },
    /// `capgate serve` swapped in a new configuration (capgate extension; not a
    /// capability event: no execution, no capability). Carries revisions and digests,
    /// never configuration values.
    #[serde(rename = "capgate.config.reloaded", rename_all = "camelCase")]
    ConfigReloaded {
        /// What asked: `signal` (SIGHUP) or `admin` (`POST /admin/reload`).
        trigger: String,
        /// The operator's namespace (an `admin` reload only).
        namespace: Option<String>,
        /// The revision served before.
        previous_revision: String,
        /// The revision served now.
        revision: String,
        /// The deployment's contract digest before (SHA-256 over every served
        /// capability's contract digest).
        previous_contract_digest: String,
        /// The deployment's contract digest now.
        contract_digest: String,
    },
    /// `capgate serve` refused a new configuration and kept serving the previous one
    /// (capgate extension). Carries where the problems are, never their text.
    #[serde(rename = "capgate.config.reload_refused", rename_all = "camelCase")]
    ConfigReloadRefused {
        /// What asked: `signal` or `admin`.
        trigger: String,
        /// The operator's namespace (an `admin` reload only).
        namespace: Option<String>,
        /// The revision still served.
        revision: String,
        /// The contract digest still served.
        contract_digest: String,
        /// How many problems the configuration has.
        problems: usize,
        /// Where they are (`line:column key`, at most 20), without their messages.
        locations: Vec<String>,
    },
    /// An MCP tool's definition upstream no longer matches the digest it was pinned to
    /// (capgate extension): its capability is concealed (answers as unknown, leaves tool
    /// lists) until the operator re-pins it. Digests only, never the definition.
    #[serde(rename = "capgate.mcp.tool_concealed", rename_all = "camelCase")]
    McpToolConcealed {
        /// The `[upstreams.mcp.NAME]` entry.
        upstream: String,
        /// The tool's name upstream.
        tool: String,
        /// The digest the capability is pinned to.
        pinned_sha256: String,
        /// The digest of the definition the upstream lists now; absent when it no longer
        /// lists the tool.
        observed_sha256: Option<String>,
    },
    /// A receipt left pending past the pending horizon (`[gateway] pendingHorizonHours`) was
    /// settled as `outcome-unknown` by the serving process (capgate extension): nobody
    /// reconciled the effect in time; the receipt stops counting against its namespace's
    /// budget once the replay horizon purges it. Envelope: the receipt's capability.
    #[serde(rename = "capgate.invocation.abandoned", rename_all = "camelCase")]
    InvocationAbandoned {
        /// The invocation id of the receipt.
        invocation_id: String,
        /// When the invocation was first claimed.
        pending_since: DateTime<Utc>,
        /// The namespace it counts against, when it has one.
        namespace: Option<String>,
    },
    /// A held `tools/call` on `/mcp` was answered with an MCP task (capgate extension): the
    /// client polls `tasks/get` until the approval is decided and the call has run.
    /// Envelope: the requester, the `mcp` surface, the held execution and its capability.
    #[serde(rename = "capgate.mcp.task_created", rename_all = "camelCase")]
    McpTaskCreated {
        /// The task's id (`tsk_…`).
        task_id: String,
        /// The approval it waits for.
        approval_id: Option<String>,
    },
    /// An MCP task reached its end (capgate extension): `completed` with the tool's
    /// (redacted) result, or `failed` with the public error (rejected, expired, refused at
    /// the re-check, timed out). Envelope: the execution that ended it, when one ran.
    #[serde(rename = "capgate.mcp.task_finished", rename_all = "camelCase")]
    McpTaskFinished {
        /// The task's id.
        task_id: String,
        /// `completed` or `failed`.
        status: String,
        /// The public error code, when it failed.
        code: Option<String>,
        /// The approval it waited for.
        approval_id: Option<String>,
    },
    /// The requester cancelled an MCP task (`tasks/cancel`, capgate extension); the
    /// approval it waited for was withdrawn when nobody had run it yet, so the call never
    /// runs. Envelope: the requester.
    #[serde(rename = "capgate.mcp.task_cancelled", rename_all = "camelCase")]
    McpTaskCancelled {
        /// The task's id.
        task_id: String,
        /// The approval it waited for.
        approval_id: Option<String>,
        /// Whether the approval was withdrawn (false: it had already been run, rejected or
        /// had expired).
        approval_withdrawn: bool,
    },
    /// A concealed MCP tool matches its pin again (re-pinned, or the upstream reverted):
    /// its capability is served again (capgate extension).
    #[serde(rename = "capgate.mcp.tool_restored", rename_all = "camelCase")]
    McpToolRestored {
        /// The `[upstreams.mcp.NAME]` entry.
        upstream: String,
        /// The tool's name upstream.
        tool: String,
        /// The digest it is pinned to and matches.
        pinned_sha256: String,
    },
}

impl EventPayload {
    /// The event type string (`capability.requested`, ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            EventPayload::CapabilitiesDiscovered { .. } => "capabilities.discovered",
            EventPayload::Requested { .. } => "capability.requested",
            EventPayload::Denied { .. } => "capability.denied",
            EventPayload::ApprovalRequested { .. } => "capability.approval_requested",
            EventPayload::Approved { .. } => "capability.approved",
            EventPayload::Rejected { .. } => "capability.rejected",
            EventPayload::Started { .. } => "capability.started",
            EventPayload::Retried { .. } => "capability.retried",
            EventPayload::Completed { .. } => "capability.completed",
            EventPayload::Failed { .. } => "capability.failed",
            EventPayload::Cancelled { .. } => "capability.cancelled",
            EventPayload::ShadowDivergence { .. } => "capgate.policy.shadow_divergence",
            EventPayload::ApprovalExpired { .. } => "capgate.approval.expired",
            EventPayload::ApprovalEscalated { .. } => "capgate.approval.escalated",
            EventPayload::ConfigReloaded { .. } => "capgate.config.reloaded",
            EventPayload::ConfigReloadRefused { .. } => "capgate.config.reload_refused",
            EventPayload::McpToolConcealed { .. } => "capgate.mcp.tool_concealed",
            EventPayload::McpToolRestored { .. } => "capgate.mcp.tool_restored",
            EventPayload::InvocationAbandoned { .. } => "capgate.invocation.abandoned",
            EventPayload::McpTaskCreated { .. } => "capgate.mcp.task_created",
            EventPayload::McpTaskFinished { .. } => "capgate.mcp.task_finished",
            EventPayload::McpTaskCancelled { .. } => "capgate.mcp.task_cancelled",
        }
    }
}

/// One audit event: the envelope plus the typed payload.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// When the event happened, by the runtime's clock.
    pub timestamp: DateTime<Utc>,
    /// Through which door.
    pub surface: Surface,
    /// Who (attributes stripped).
    pub actor: ActorRef,
    /// The execution the event belongs to (none for approval decisions).
    pub execution_id: Option<String>,
    /// The capability involved, once known.
    pub capability_id: Option<String>,
    /// The caller's correlation id, to join the event with the caller's own logs.
    pub correlation_id: Option<String>,
    /// SHA-256 of the canonical validated input.
    pub input_hash: Option<String>,
    /// Type and data.
    #[serde(flatten)]
    pub payload: EventPayload,
}

impl AuditEvent {
    /// The event type string.
    pub fn type_name(&self) -> &'static str {
        self.payload.type_name()
    }

    /// An event about the deployment itself (a reload, an MCP tool's pin changing), outside
    /// any call: on the direct surface, by `actor`, with no execution or input.
    pub fn operational(
        timestamp: DateTime<Utc>,
        actor: ActorRef,
        capability_id: Option<String>,
        payload: EventPayload,
    ) -> AuditEvent {
        AuditEvent {
            timestamp,
            surface: Surface::Direct,
            actor,
            execution_id: None,
            capability_id,
            correlation_id: None,
            input_hash: None,
            payload,
        }
    }
}

/// Record an operational event ([`AuditEvent::operational`]) on every sink and write it out
/// at once. It has no caller to answer, so a sink that refuses it is logged (with the
/// event's type) and the others still get it.
pub async fn record_operational(sinks: &[Arc<dyn AuditSink>], event: &AuditEvent) {
    for sink in sinks {
        if let Err(e) = sink.emit(event).await {
            tracing::warn!(target: "capgate::audit", sink = %e.sink, event = event.type_name(), error = %e.message, "an operational event could not be audited");
            continue;
        }
        if let Err(e) = sink.flush().await {
            tracing::warn!(target: "capgate::audit", sink = %e.sink, event = event.type_name(), error = %e.message, "an operational event could not be written out");
        }
    }
}

/// A sink could not record an event.
#[derive(Debug, Clone, thiserror::Error)]
#[error("audit sink `{sink}` failed: {message}")]
pub struct AuditSinkError {
    /// The name of the sink that failed.
    pub sink: String,
    /// Why it failed.
    pub message: String,
}

/// Where audit events go. `emit` of `capability.started` must not return before the event is
/// durable when the sink is durable: strict mode relies on it.
#[async_trait]
pub trait AuditSink: Send + Sync + 'static {
    /// A stable name for errors.
    fn name(&self) -> &str;
    /// Record one event.
    async fn emit(&self, event: &AuditEvent) -> Result<(), AuditSinkError>;
    /// Write out anything buffered (the gateway drains before answering).
    async fn flush(&self) -> Result<(), AuditSinkError> {
        Ok(())
    }
}

/// Called when a sink fails in best-effort mode.
pub type SinkErrorHook = Arc<dyn Fn(&AuditSinkError, &AuditEvent) + Send + Sync>;

/// The runtime's view of its sinks: ordered, best effort by default, strict on request.
#[derive(Clone, Default)]
pub struct AuditConfig {
    /// The sinks, each receiving every event in pipeline order.
    pub sinks: Vec<Arc<dyn AuditSink>>,
    /// Strict: a failure to record `capability.started` aborts with AUDIT_UNAVAILABLE.
    pub strict: bool,
    /// Include capability ids in `capabilities.discovered`.
    pub verbose: bool,
    /// Best-effort failure hook.
    pub on_sink_error: Option<SinkErrorHook>,
}

pub(crate) struct Auditor {
    pub(crate) config: AuditConfig,
    lost: AtomicU64,
}

impl Auditor {
    pub(crate) fn new(config: AuditConfig) -> Self {
        Auditor {
            config,
            lost: AtomicU64::new(0),
        }
    }

    /// Deliver to every sink in order. Returns the first failure (the caller decides whether
    /// it matters); failures are also reported to the hook and counted.
    pub(crate) async fn emit(&self, event: AuditEvent) -> Result<(), AuditSinkError> {
        let span = tracing::info_span!("agent.audit_write", capgate.event = event.type_name());
        self.emit_to_sinks(event).instrument(span).await
    }

    async fn emit_to_sinks(&self, event: AuditEvent) -> Result<(), AuditSinkError> {
        let mut first_err = None;
        for sink in &self.config.sinks {
            if let Err(e) = sink.emit(&event).await {
                self.lost.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(target: "capgate::audit", sink = %e.sink, error = %e.message, event = event.type_name(), "audit sink failed");
                if let Some(hook) = &self.config.on_sink_error {
                    hook(&e, &event);
                }
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Whether any sink listens (events are not even built otherwise).
    pub(crate) fn is_active(&self) -> bool {
        !self.config.sinks.is_empty()
    }

    pub(crate) fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    pub(crate) async fn flush(&self) -> Result<(), AuditSinkError> {
        for s in &self.config.sinks {
            s.flush().await?;
        }
        Ok(())
    }
}

/// Keeps events in memory: for tests and the in-process demo.
#[derive(Default)]
pub struct MemorySink {
    events: Mutex<Vec<AuditEvent>>,
}

impl MemorySink {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }
    /// A copy of every event so far.
    pub fn events(&self) -> Vec<AuditEvent> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
    /// The type names, in order.
    pub fn types(&self) -> Vec<&'static str> {
        self.events().iter().map(AuditEvent::type_name).collect()
    }
    /// Events of one execution, in order.
    pub fn for_execution(&self, execution_id: &str) -> Vec<AuditEvent> {
        self.events()
            .into_iter()
            .filter(|e| e.execution_id.as_deref() == Some(execution_id))
            .collect()
    }
    /// Drop every recorded event, so a test can start from an empty log.
    pub fn clear(&self) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

#[async_trait]
impl AuditSink for MemorySink {
    fn name(&self) -> &str {
        "memory"
    }
    async fn emit(&self, event: &AuditEvent) -> Result<(), AuditSinkError> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event.clone());
        Ok(())
    }
}

/// Emits each event as a structured `tracing` record (target `capgate::audit`).
#[derive(Default, Debug, Clone, Copy)]
pub struct TracingSink;

#[async_trait]
impl AuditSink for TracingSink {
    fn name(&self) -> &str {
        "tracing"
    }
    async fn emit(&self, event: &AuditEvent) -> Result<(), AuditSinkError> {
        let json = serde_json::to_string(event).map_err(|e| AuditSinkError {
            sink: "tracing".into(),
            message: e.to_string(),
        })?;
        tracing::info!(target: "capgate::audit", event = event.type_name(), json = %json);
        Ok(())
    }
}

/// Appends one JSON object per line to a writer the embedder opened (a file, stdout). The
/// write runs on Tokio's blocking pool, so a slow disk never holds the async caller's
/// worker; outside a Tokio runtime it runs inline. Core itself opens nothing: the embedder
/// passes the writer (the `capgate` binary opens `[audit] jsonl`'s file).
pub struct JsonLinesSink {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl JsonLinesSink {
    /// Write to any writer.
    pub fn new(out: impl Write + Send + 'static) -> Self {
        JsonLinesSink {
            out: Arc::new(Mutex::new(Box::new(out))),
        }
    }
    /// Write to standard output.
    pub fn stdout() -> Self {
        JsonLinesSink::new(std::io::stdout())
    }
}

#[async_trait]
impl AuditSink for JsonLinesSink {
    fn name(&self) -> &str {
        "jsonl"
    }
    async fn emit(&self, event: &AuditEvent) -> Result<(), AuditSinkError> {
        fn err(e: &dyn std::fmt::Display) -> AuditSinkError {
            AuditSinkError {
                sink: "jsonl".into(),
                message: e.to_string(),
            }
        }
        let mut line = serde_json::to_vec(event).map_err(|e| err(&e))?;
        line.push(b'\n');
        let out = self.out.clone();
        let write = move || {
            let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
            out.write_all(&line).and_then(|()| out.flush())
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => rt.spawn_blocking(write).await.map_err(|e| err(&e))?,
            Err(_) => write(),
        }
        .map_err(|e| err(&e))
    }
}
