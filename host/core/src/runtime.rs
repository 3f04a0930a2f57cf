//! The [`Runtime`]: one immutable governance setup (registry, runtime-level policies,
//! approvals, audit, defaults, clock) shared by every request, and the options of its three
//! entry points: [`Runtime::invoke`], [`Runtime::describe`], [`Runtime::resume`].

use crate::actor::{Actor, ActorKind, ActorRef, Surface};
use crate::approval::{
    ApprovalCoordinator, ApprovalFilter, ApprovalHandler, ApprovalRecord, ApprovalRequest,
    ApprovalStatus, ApprovalStoreError, DecidedVia, Decision, DecisionStatus,
    InMemoryApprovalCoordinator,
};
use crate::audit::{AuditConfig, AuditEvent, AuditSink, Auditor, EventPayload};
use crate::clock::{Clock, SystemClock};
use crate::error::CapabilityError;
use crate::meta::{Risk, SideEffect};
use crate::policy::Policy;
use crate::procedure::ProgressFn;
use crate::registry::Registry;
use crate::result::ExecutionResult;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Runtime defaults (the table in docs/pipeline.md, "Defaults").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Defaults {
    /// Per-attempt timeout when the capability sets none. 30 000.
    pub timeout_ms: u64,
    /// One shared deadline for a batch of policies. 5 000.
    pub policy_timeout_ms: u64,
    /// Approval expiry when neither meta nor policy sets one. 900 000.
    pub approval_expires_in_ms: u64,
    /// Capabilities evaluated concurrently during discovery. 16.
    pub policy_concurrency: usize,
    /// Total discovery budget. 30 000.
    pub discovery_budget_ms: u64,
    /// Retry base backoff. 250.
    pub retry_backoff_ms: u64,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            timeout_ms: 30_000,
            policy_timeout_ms: 5_000,
            approval_expires_in_ms: 900_000,
            policy_concurrency: 16,
            discovery_budget_ms: 30_000,
            retry_backoff_ms: 250,
        }
    }
}

/// One governed call, as an adapter builds it at stage 1.
pub struct InvokeRequest {
    /// The fixed surface of the adapter.
    pub surface: Surface,
    /// The capability id.
    pub capability_id: String,
    /// The raw input (validated at stage 5).
    pub input: serde_json::Value,
    /// The authenticated actor; `None` fails stage 6.
    pub actor: Option<Actor>,
    /// The caller's tenant partition (empty when the embedder has none): recorded on any
    /// approval the call asks for, and the key of pooled plugin instances.
    pub namespace: String,
    /// The application context.
    pub context: serde_json::Value,
    /// Correlation id to carry through events.
    pub correlation_id: Option<String>,
    /// An adapter-supplied idempotency key (the gateway's journal key); else `idk_…`.
    pub idempotency_key: Option<String>,
    /// The caller's cancellation.
    pub cancel: Option<CancellationToken>,
    /// Where procedure progress goes.
    pub progress: Option<ProgressFn>,
    /// The adapter's admission step (the gateway's journal claim), run once the call passed
    /// stages 3–7 without being concealed: see [`AdmissionHook`].
    pub admission: Option<Arc<dyn AdmissionHook>>,
    /// The adapter's digest of the capability's own contract (see
    /// [`ApprovalRequest::descriptor_digest`]), recorded on any approval the call asks for.
    pub descriptor_digest: Option<String>,
}

/// An adapter's last word before a call is stored or executed: the pipeline calls it once
/// the capability resolved and is exposed (stages 3–4), the input passed its schema (stage
/// 5), the actor is well formed (stage 6) and the invocation-phase policies did not hide it
/// (stage 7), i.e. for every call whose answer the caller may learn, just before a stage-7
/// refusal or stage 8. Nothing concealed (SI-8) and nothing invalid ever reaches it, so an
/// adapter that records calls here records exactly what the caller can discover.
#[async_trait::async_trait]
pub trait AdmissionHook: Send + Sync {
    /// Admit the call: `Ok(Some(key))` replaces the request's idempotency key (the key the
    /// adapter's record binds), `Ok(None)` keeps it. `Err(e)` stops the call before
    /// anything else happens, recorded as `capability.failed` with `e`; the adapter
    /// answers its caller itself.
    async fn admit(&self) -> Result<Option<String>, CapabilityError>;
}

impl InvokeRequest {
    /// A request with an empty context.
    pub fn new(
        surface: Surface,
        capability_id: impl Into<String>,
        input: serde_json::Value,
        actor: Actor,
    ) -> Self {
        InvokeRequest {
            surface,
            capability_id: capability_id.into(),
            input,
            actor: Some(actor),
            namespace: String::new(),
            context: serde_json::Value::Null,
            correlation_id: None,
            idempotency_key: None,
            cancel: None,
            progress: None,
            admission: None,
            descriptor_digest: None,
        }
    }
    /// Set the capability's descriptor digest (recorded on any approval the call asks for).
    pub fn descriptor_digest(mut self, digest: impl Into<String>) -> Self {
        self.descriptor_digest = Some(digest.into());
        self
    }
    /// Set the admission step (see [`AdmissionHook`]).
    pub fn admission(mut self, hook: Arc<dyn AdmissionHook>) -> Self {
        self.admission = Some(hook);
        self
    }
    /// Set the tenant partition.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }
    /// Set the context.
    pub fn context(mut self, context: serde_json::Value) -> Self {
        self.context = context;
        self
    }
    /// Set the cancellation token.
    pub fn cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }
    /// Set the correlation id.
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.correlation_id = Some(id.into());
        self
    }
    /// Set the idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
    /// Set the progress callback.
    pub fn progress(mut self, f: ProgressFn) -> Self {
        self.progress = Some(f);
        self
    }
}

/// Narrows discovery to a subset (a convenience, never an authorization check).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    /// Match capabilities carrying any of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Match these exact ids.
    #[serde(default)]
    pub ids: Vec<String>,
}

impl Scope {
    /// Union of tag and id matches; an empty scope matches everything.
    pub fn matches(&self, id: &str, tags: &[String]) -> bool {
        if self.tags.is_empty() && self.ids.is_empty() {
            return true;
        }
        self.ids.iter().any(|i| i == id) || self.tags.iter().any(|t| tags.contains(t))
    }
}

/// Options of [`Runtime::describe`].
pub struct DescribeOptions {
    /// The caller's tenant partition (empty when the embedder has none).
    pub namespace: String,
    /// Who asks.
    pub actor: Actor,
    /// Application context.
    pub context: serde_json::Value,
    /// Optional narrowing.
    pub scope: Option<Scope>,
}

/// What a model learns about a capability: enough to call it, nothing else.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityDescriptor {
    /// Canonical id.
    pub id: String,
    /// Description.
    pub description: String,
    /// JSON Schema of the input.
    pub input_schema: serde_json::Value,
    /// Side effect.
    pub side_effect: SideEffect,
    /// Risk.
    pub risk: Risk,
    /// Tags.
    pub tags: Vec<String>,
    /// Set when a call will need approval.
    pub requires_approval: Option<bool>,
    /// Whether model tool lists offer it or a UI presents it in context.
    #[serde(
        default,
        skip_serializing_if = "crate::meta::Discovery::is_discoverable"
    )]
    pub discovery: crate::meta::Discovery,
}

/// Options of [`Runtime::resume`].
#[derive(Default)]
pub struct ResumeOptions {
    /// Fresh application context.
    pub context: serde_json::Value,
    /// Caller cancellation.
    pub cancel: Option<CancellationToken>,
    /// Guard: the approval must have been requested by this actor id.
    pub expected_actor: Option<ActorRef>,
    /// Guard: the approval must have been requested on this surface.
    pub expected_surface: Option<Surface>,
    /// Guard: the approval must have been requested in this tenant partition.
    pub expected_namespace: Option<String>,
    /// The resuming actor as authenticated now (same id and kind as the requester, current
    /// attributes). Invocation- and execution-phase policies are re-checked with it; without
    /// it they see the actor stored with the approval.
    pub actor: Option<Actor>,
    /// Adapter-supplied idempotency key.
    pub idempotency_key: Option<String>,
    /// Progress callback.
    pub progress: Option<ProgressFn>,
    /// Correlation id of the resuming request (as `invoke` takes one). The execution keeps
    /// the original call's correlation id (stored with the approval) in every event's
    /// envelope; this one is recorded beside it, as `resumeCorrelationId` in the resume's
    /// `capability.started`, `.denied`, `.failed` and `.cancelled` events.
    pub correlation_id: Option<String>,
}

/// Why [`RuntimeBuilder::build`] refused a configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeBuildError {
    /// `strict_audit(true)` with no audit sink: strict means no record, no execution, and
    /// there would be no record.
    #[error(
        "strict audit needs at least one audit sink (no record, no execution): add an audit sink or turn strict audit off"
    )]
    StrictAuditWithoutSink,
}

/// Why an approvals operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalsError {
    /// The request was malformed.
    #[error("invalid decision: {0}")]
    Invalid(String),
    /// The coordinator refused or failed.
    #[error(transparent)]
    Store(#[from] ApprovalStoreError),
    /// The decider may not decide this approval: it is their own request (SI-4), or its
    /// type needs a role they do not hold. The message says which, for the decider.
    #[error("{0}")]
    Forbidden(String),
}

/// Why a requester may not approve their own request.
const SELF_APPROVAL: &str =
    "The requester cannot approve their own request (SI-4); another approver must decide it.";

/// Why the requester door refuses the requester's own approval.
const NEEDS_APPROVER: &str = "Only an approver can decide this approval: its requester may confirm it only when every type it carries is self-confirmable (SI-4).";

impl Inner {
    /// Whether a request may be decided by its own requester: every requirement was typed,
    /// and every type is self-confirmable.
    pub(crate) fn is_self_confirmable(&self, request: &ApprovalRequest) -> bool {
        !request.untyped
            && !request.types.is_empty()
            && request
                .types
                .iter()
                .all(|t| self.self_confirmable.contains(t))
    }

    /// SI-4: is `approver` deciding their own request, and is that refused? Only a
    /// request whose every requirement was typed, with every type self-confirmable, may be
    /// decided by its requester.
    pub(crate) fn is_forbidden_self_approval(
        &self,
        approver_id: &str,
        request: &ApprovalRequest,
    ) -> bool {
        if !self.reject_self_approval || approver_id != request.actor.id {
            return false;
        }
        !self.is_self_confirmable(request)
    }

    /// The requester door: may the requester decide this request without the approver
    /// role? Only a human (`user`) requester — a service or agent confirming its own call
    /// would be no human confirmation — and only a self-confirmable request.
    pub(crate) fn requester_may_decide(&self, request: &ApprovalRequest) -> bool {
        request.actor.kind == ActorKind::User && self.is_self_confirmable(request)
    }

    /// The roles that may decide an approval of these types: for each configured type, one
    /// of its roles is needed. `Err` names the first type whose roles the decider lacks.
    pub(crate) fn check_type_roles(
        &self,
        types: &[String],
        roles: &[String],
    ) -> Result<(), String> {
        for t in types {
            if let Some(needed) = self.type_roles.get(t)
                && !needed.iter().any(|r| roles.contains(r))
            {
                return Err(format!(
                    "Approvals of type `{t}` can only be decided by a holder of one of the roles: {}.",
                    needed.join(", ")
                ));
            }
        }
        Ok(())
    }
}

pub(crate) struct Inner {
    pub(crate) registry: Registry,
    pub(crate) policies: Vec<Arc<dyn Policy>>,
    pub(crate) coordinator: Arc<dyn ApprovalCoordinator>,
    pub(crate) handler: Option<Arc<dyn ApprovalHandler>>,
    pub(crate) reject_self_approval: bool,
    pub(crate) self_confirmable: Vec<String>,
    pub(crate) type_roles: HashMap<String, Vec<String>>,
    pub(crate) audit: Auditor,
    pub(crate) defaults: Defaults,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) warnings: Vec<String>,
}

/// The governed capability runtime. Cheap to clone; share one per process.
///
/// See the crate docs for a runnable example.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

/// Builds a [`Runtime`].
pub struct RuntimeBuilder {
    registry: Registry,
    policies: Vec<Arc<dyn Policy>>,
    coordinator: Option<Arc<dyn ApprovalCoordinator>>,
    handler: Option<Arc<dyn ApprovalHandler>>,
    reject_self_approval: bool,
    self_confirmable: Vec<String>,
    type_roles: HashMap<String, Vec<String>>,
    audit: AuditConfig,
    defaults: Defaults,
    clock: Arc<dyn Clock>,
}

impl RuntimeBuilder {
    /// Add a runtime-level policy (runs before every capability's own, in order).
    pub fn policy(mut self, p: impl Policy) -> Self {
        self.policies.push(Arc::new(p));
        self
    }
    /// Add a shared runtime-level policy.
    pub fn policy_arc(mut self, p: Arc<dyn Policy>) -> Self {
        self.policies.push(p);
        self
    }
    /// Where approvals live (default: in-memory, with a warning).
    pub fn approvals(mut self, c: Arc<dyn ApprovalCoordinator>) -> Self {
        self.coordinator = Some(c);
        self
    }
    /// Decide approvals inline, in the call itself (stage 8), instead of suspending it.
    pub fn approval_handler(mut self, h: Arc<dyn ApprovalHandler>) -> Self {
        self.handler = Some(h);
        self
    }
    /// SI-4 switch (default true).
    pub fn reject_self_approval(mut self, yes: bool) -> Self {
        self.reject_self_approval = yes;
        self
    }
    /// Approval types the requester may decide themselves (e.g. `human-confirmation`, where
    /// confirming one's own action is the point). An approval is self-decidable only when
    /// every one of its types is listed; SI-4 holds for everything else. Default: none.
    pub fn self_confirmable_types(
        mut self,
        types: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.self_confirmable = types.into_iter().map(Into::into).collect();
        self
    }
    /// Who may decide approvals of a type: an approver must hold one of `roles` to decide
    /// an approval carrying `approval_type` (e.g. `manager` → `["manager"]`). Types with no
    /// entry may be decided by any approver the approvals API admits.
    pub fn approval_type_roles(
        mut self,
        approval_type: impl Into<String>,
        roles: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.type_roles.insert(
            approval_type.into(),
            roles.into_iter().map(Into::into).collect(),
        );
        self
    }
    /// Add an audit sink.
    pub fn audit_sink(mut self, s: Arc<dyn AuditSink>) -> Self {
        self.audit.sinks.push(s);
        self
    }
    /// Replace the audit configuration.
    pub fn audit(mut self, config: AuditConfig) -> Self {
        self.audit = config;
        self
    }
    /// Strict audit: no `capability.started` record, no execution.
    pub fn strict_audit(mut self, yes: bool) -> Self {
        self.audit.strict = yes;
        self
    }
    /// Replace the defaults.
    pub fn defaults(mut self, d: Defaults) -> Self {
        self.defaults = d;
        self
    }
    /// Replace the clock.
    pub fn clock(mut self, c: Arc<dyn Clock>) -> Self {
        self.clock = c;
        self
    }

    /// Finish. Emits startup warnings through `tracing` (and keeps them for
    /// [`Runtime::warnings`]); refuses a configuration that could not keep its promises
    /// ([`RuntimeBuildError`]).
    pub fn build(self) -> Result<Runtime, RuntimeBuildError> {
        // Strict audit means "no record, no execution": with nowhere to write the record,
        // every call would execute unrecorded.
        if self.audit.strict && self.audit.sinks.is_empty() {
            return Err(RuntimeBuildError::StrictAuditWithoutSink);
        }
        let coordinator = self
            .coordinator
            .unwrap_or_else(|| Arc::new(InMemoryApprovalCoordinator::new()));
        let mut warnings = Vec::new();
        if !coordinator.is_durable() {
            let gated: Vec<&str> = self
                .registry
                .iter()
                .filter(|c| c.meta.approval.as_ref().is_some_and(|a| a.required))
                .map(|c| c.id.as_str())
                .collect();
            if !gated.is_empty() {
                warnings.push(format!(
                    "approval-gated capabilities ({}) use the in-memory approval coordinator: approvals vanish on restart; configure a durable store",
                    gated.join(", ")
                ));
            }
        }
        if self.audit.sinks.is_empty() {
            let writes: Vec<&str> = self
                .registry
                .iter()
                .filter(|c| {
                    !c.meta.side_effect.is_read_only()
                        && Surface::ALL
                            .iter()
                            .any(|s| s.is_model_facing() && c.meta.expose.allows(*s))
                })
                .map(|c| c.id.as_str())
                .collect();
            if !writes.is_empty() {
                warnings.push(format!(
                    "write-capable capabilities ({}) are exposed to models with no audit sink configured",
                    writes.join(", ")
                ));
            }
        }
        for w in &warnings {
            tracing::warn!(target: "capgate::runtime", "{w}");
        }
        Ok(Runtime {
            inner: Arc::new(Inner {
                registry: self.registry,
                policies: self.policies,
                coordinator,
                handler: self.handler,
                reject_self_approval: self.reject_self_approval,
                self_confirmable: self.self_confirmable,
                type_roles: self.type_roles,
                audit: Auditor::new(self.audit),
                defaults: self.defaults,
                clock: self.clock,
                warnings,
            }),
        })
    }
}

impl Runtime {
    /// Start building a runtime around a registry.
    pub fn builder(registry: Registry) -> RuntimeBuilder {
        RuntimeBuilder {
            registry,
            policies: Vec::new(),
            coordinator: None,
            handler: None,
            reject_self_approval: true,
            self_confirmable: Vec::new(),
            type_roles: HashMap::new(),
            audit: AuditConfig::default(),
            defaults: Defaults::default(),
            clock: Arc::new(SystemClock),
        }
    }

    /// Run one governed call through stages 2–15. Never panics, never returns `Err`.
    pub async fn invoke(&self, request: InvokeRequest) -> ExecutionResult {
        crate::pipeline::invoke(&self.inner, request).await
    }

    /// Refuse a call as not found without running anything, for an adapter that found out
    /// before the runtime did that the caller must not learn the capability exists (a
    /// stale contract digest for a capability discovery hides from them). Emits
    /// `capability.requested` and `capability.denied` (reason `hidden`) and answers exactly
    /// like an unknown id (SI-8).
    pub async fn conceal(&self, request: InvokeRequest) -> ExecutionResult {
        crate::pipeline::conceal(&self.inner, request, crate::audit::DenyReason::Hidden).await
    }

    /// Refuse a call for a name the adapter could not map to any capability (an MCP tool
    /// name nobody registered): stage 2 still opens an execution, so the request is
    /// audited (`capability.requested`, then `capability.denied` with reason `unknown`)
    /// and answered exactly like any other not-found (SI-8). `request.capability_id` is
    /// the name as the caller sent it.
    pub async fn refuse_unknown(&self, request: InvokeRequest) -> ExecutionResult {
        crate::pipeline::conceal(&self.inner, request, crate::audit::DenyReason::Unknown).await
    }

    /// The discovery pipeline: what this actor may see on this surface.
    pub async fn describe(
        &self,
        surface: Surface,
        options: DescribeOptions,
    ) -> Result<Vec<CapabilityDescriptor>, CapabilityError> {
        crate::pipeline::describe(&self.inner, surface, options).await
    }

    /// Continue an approved call at stage 8 (check order: docs/pipeline.md, "Resume").
    pub async fn resume(&self, approval_id: &str, options: ResumeOptions) -> ExecutionResult {
        crate::pipeline::resume(&self.inner, approval_id, options).await
    }

    /// Record a resume an adapter refused before running it (the approval still pending, an
    /// unknown approval id, a contract that changed since the approval was asked for), so
    /// every refused resume is audited wherever it was refused: opens an execution and
    /// emits `capability.failed` with `error` and the approval id, exactly as
    /// [`Runtime::resume`] records its own refusals. Returns that failure.
    pub async fn refuse_resume(
        &self,
        approval_id: &str,
        options: ResumeOptions,
        error: CapabilityError,
    ) -> ExecutionResult {
        crate::pipeline::refuse_resume(&self.inner, approval_id, options, error).await
    }

    /// The human side of approvals: read and decide. Deciding executes nothing.
    pub fn approvals(&self) -> Approvals<'_> {
        Approvals { rt: &self.inner }
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Names and phases of the runtime-level policies (the governance manifest, part of
    /// every contract digest).
    pub fn manifest(&self) -> Vec<(String, Vec<crate::policy::Phase>)> {
        self.inner
            .policies
            .iter()
            .map(|p| (p.name().to_string(), p.phases().to_vec()))
            .collect()
    }

    /// The runtime-level policies, in evaluation order (each knows its name, phases and
    /// whether it runs in shadow mode).
    pub fn policies(&self) -> &[Arc<dyn crate::policy::Policy>] {
        &self.inner.policies
    }

    /// The defaults in force.
    pub fn defaults(&self) -> &Defaults {
        &self.inner.defaults
    }

    /// Startup warnings (in-memory approvals for gated capabilities, no audit sink...).
    pub fn warnings(&self) -> &[String] {
        &self.inner.warnings
    }

    /// Audit events that at least one sink failed to record.
    pub fn lost_audit_events(&self) -> u64 {
        self.inner.audit.lost()
    }

    /// Flush every audit sink (the gateway drains before it answers).
    pub async fn drain_audit(&self) -> Result<(), crate::audit::AuditSinkError> {
        self.inner.audit.flush().await
    }

    /// The clock in force.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.inner.clock.now()
    }
}

/// A human's decision on an approval.
#[derive(Debug, Clone)]
pub struct DecideRequest {
    /// Approve or reject.
    pub status: DecisionStatus,
    /// The approver (authenticated by the approvals UI, never by a model surface).
    pub approver: ActorRef,
    /// Optional comment.
    pub comment: Option<String>,
    /// Who is deciding, and from where.
    pub decider: Decider,
}

/// Who stands behind a decision, which bounds what they may decide.
#[derive(Debug, Clone, PartialEq)]
pub enum Decider {
    /// An approver authenticated by the approvals API: decides only approvals requested in
    /// `namespace`, and only types whose configured roles they hold.
    Approver {
        /// The approver's tenant partition.
        namespace: String,
        /// The approver's roles.
        roles: Vec<String>,
    },
    /// The human who requested the call, confirming or declining it themselves without
    /// the approver role (the requester door): decides only their own approval (same
    /// namespace, same actor id and kind; anything else reads as not found), only when it
    /// is self-confirmable and they are a `user`. Recorded as `via: requester`. The
    /// approval types' configured roles apply as for an approver: a type mapped to roles
    /// is confirmed only by a requester holding one of them.
    Requester {
        /// The requester's tenant partition.
        namespace: String,
        /// The requester's roles (checked against the types' configured roles).
        roles: Vec<String>,
    },
    /// An operator at the shell, deciding on the approver's behalf across namespaces
    /// (recorded as such in the decision and its event). Self-decisions are still refused.
    Operator,
}

/// What the requester door finds when a requester asks for one of their own approvals.
#[derive(Debug, Clone, PartialEq)]
pub enum RequesterAccess {
    /// They may confirm or decline it themselves. The record's input is redacted for
    /// review, exactly as an approver would see it.
    Confirmable(Box<ApprovalRecord>),
    /// It is theirs, but only an approver can decide it (a type that is not
    /// self-confirmable, an untyped policy requirement, or a requester who is no `user`).
    NeedsApprover,
}

/// The approvals API of a runtime (reading redacts the stored input for reviewers).
pub struct Approvals<'a> {
    rt: &'a Inner,
}

impl Approvals<'_> {
    /// One record, with lazy expiry applied and the input redacted for review.
    pub async fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, ApprovalsError> {
        self.get_in(id, None).await
    }

    /// One record of a tenant partition (`None`: any): another namespace's record reads
    /// as missing.
    pub async fn get_in(
        &self,
        id: &str,
        namespace: Option<&str>,
    ) -> Result<Option<ApprovalRecord>, ApprovalsError> {
        let now = self.rt.clock.now();
        match self.rt.coordinator.get(id).await? {
            Some(r) if namespace.is_none_or(|n| n == r.request.namespace) => {
                Ok(Some(self.for_review(r, now).await))
            }
            _ => Ok(None),
        }
    }

    /// One record of a tenant partition as stored (input unredacted, status as stored):
    /// what a door hands its authorizer before it shows anything. Another namespace's
    /// record reads as missing. Show it only through [`Approvals::for_reviewer`].
    pub async fn get_stored_in(
        &self,
        id: &str,
        namespace: &str,
    ) -> Result<Option<ApprovalRecord>, ApprovalsError> {
        Ok(self
            .rt
            .coordinator
            .get(id)
            .await?
            .filter(|r| r.request.namespace == namespace))
    }

    /// A stored record as a reviewer may see it: lazy expiry applied, the input redacted
    /// by the capability's redactors (withheld when one fails or the capability is gone).
    pub async fn for_reviewer(&self, record: ApprovalRecord) -> ApprovalRecord {
        let now = self.rt.clock.now();
        self.for_review(record, now).await
    }

    /// Whether the requester of `request` may confirm or decline it themselves (a `user`,
    /// every type self-confirmable): what the requester door asks.
    pub fn requester_may_confirm(&self, request: &crate::approval::ApprovalRequest) -> bool {
        self.rt.requester_may_decide(request)
    }

    /// The record as its requester stored it (input unredacted: they supplied it), when
    /// `namespace` and `requester` are the ones it was requested by; `None` otherwise. For
    /// doors that must authorize a resume against the stored capability and input.
    pub async fn get_for_requester(
        &self,
        id: &str,
        namespace: &str,
        requester: &ActorRef,
    ) -> Result<Option<ApprovalRecord>, ApprovalsError> {
        Ok(self.rt.coordinator.get(id).await?.filter(|r| {
            r.request.namespace == namespace
                && r.request.actor.id == requester.id
                && r.request.actor.kind == requester.kind
        }))
    }

    /// One approval through the requester door: `None` unless `requester` requested it in
    /// `namespace` (another's approval reads exactly like a missing one); otherwise whether
    /// they may decide it themselves.
    pub async fn get_as_requester(
        &self,
        id: &str,
        namespace: &str,
        requester: &ActorRef,
    ) -> Result<Option<RequesterAccess>, ApprovalsError> {
        let Some(record) = self.get_for_requester(id, namespace, requester).await? else {
            return Ok(None);
        };
        if !self.rt.requester_may_decide(&record.request) {
            return Ok(Some(RequesterAccess::NeedsApprover));
        }
        let now = self.rt.clock.now();
        Ok(Some(RequesterAccess::Confirmable(Box::new(
            self.for_review(record, now).await,
        ))))
    }

    /// Records matching a filter, newest first, inputs redacted for review.
    pub async fn list(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<Vec<ApprovalRecord>, ApprovalsError> {
        let now = self.rt.clock.now();
        let records = self.rt.coordinator.list(filter, now).await?;
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            out.push(self.for_review(r, now).await);
        }
        Ok(out)
    }

    /// Whether `viewer`, standing as `decider`, may make decision `status` on `record` now:
    /// the checks [`Approvals::decide`] runs before it writes anything, without writing,
    /// so a console offers only the decisions that would be accepted. `Err` says why not,
    /// in words for the viewer. (A race with another decider is still possible; `decide`
    /// settles it.)
    pub fn may_decide(
        &self,
        record: &ApprovalRecord,
        viewer: &ActorRef,
        decider: &Decider,
        status: DecisionStatus,
    ) -> Result<(), String> {
        let now = self.rt.clock.now();
        let current = record.effective_status(now);
        if current != ApprovalStatus::Pending {
            return Err(format!(
                "The approval is {}; only a pending, unexpired approval can be decided.",
                current.as_str()
            ));
        }
        let own = viewer.id == record.request.actor.id && viewer.kind == record.request.actor.kind;
        match decider {
            Decider::Approver { namespace, roles } => {
                if *namespace != record.request.namespace {
                    return Err("The approval belongs to another namespace.".into());
                }
                if status == DecisionStatus::Approved {
                    self.rt.check_type_roles(&record.request.types, roles)?;
                }
            }
            Decider::Requester { namespace, roles } => {
                if *namespace != record.request.namespace || !own {
                    return Err("Only the requester may confirm this approval.".into());
                }
                if !self.rt.requester_may_decide(&record.request) {
                    return Err(NEEDS_APPROVER.into());
                }
                if status == DecisionStatus::Approved {
                    self.rt.check_type_roles(&record.request.types, roles)?;
                }
            }
            Decider::Operator => {}
        }
        if own
            && status == DecisionStatus::Approved
            && self
                .rt
                .is_forbidden_self_approval(&viewer.id, &record.request)
        {
            return Err(SELF_APPROVAL.into());
        }
        Ok(())
    }

    /// Approve or reject a pending, unexpired request. Emits `capability.approved` or
    /// `capability.rejected` with the approver as the envelope actor. Executes nothing.
    ///
    /// Refused before anything is written: another namespace's approval (as not found), a
    /// self-decision (SI-4, unless every type is self-confirmable), a type whose
    /// configured roles the approver lacks, and, for [`Decider::Requester`], anything but
    /// the requester's own self-confirmable approval (someone else's reads as not found).
    pub async fn decide(
        &self,
        id: &str,
        request: DecideRequest,
    ) -> Result<ApprovalRecord, ApprovalsError> {
        if request.approver.id.trim().is_empty() || request.approver.id.len() > 256 {
            return Err(ApprovalsError::Invalid(
                "the approver needs a non-empty id of at most 256 characters".into(),
            ));
        }
        if request.comment.as_ref().is_some_and(|c| c.len() > 4096) {
            return Err(ApprovalsError::Invalid(
                "the comment is longer than 4096 bytes".into(),
            ));
        }
        let now = self.rt.clock.now();
        let not_found = || ApprovalsError::Store(ApprovalStoreError::NotFound(id.to_string()));
        let current = self.rt.coordinator.get(id).await?.ok_or_else(not_found)?;
        let own = request.approver.id == current.request.actor.id
            && request.approver.kind == current.request.actor.kind;
        let (namespace, via) = match &request.decider {
            Decider::Approver { namespace, roles } => {
                if *namespace != current.request.namespace {
                    return Err(not_found());
                }
                if request.status == DecisionStatus::Approved {
                    self.rt
                        .check_type_roles(&current.request.types, roles)
                        .map_err(ApprovalsError::Forbidden)?;
                }
                (Some(namespace.clone()), DecidedVia::Approver)
            }
            Decider::Requester { namespace, roles } => {
                if *namespace != current.request.namespace || !own {
                    return Err(not_found());
                }
                if !self.rt.requester_may_decide(&current.request) {
                    return Err(ApprovalsError::Forbidden(NEEDS_APPROVER.into()));
                }
                if request.status == DecisionStatus::Approved {
                    self.rt
                        .check_type_roles(&current.request.types, roles)
                        .map_err(ApprovalsError::Forbidden)?;
                }
                (Some(namespace.clone()), DecidedVia::Requester)
            }
            Decider::Operator => (None, DecidedVia::Operator),
        };
        if own
            && request.status == DecisionStatus::Approved
            && self
                .rt
                .is_forbidden_self_approval(&request.approver.id, &current.request)
        {
            return Err(ApprovalsError::Forbidden(SELF_APPROVAL.into()));
        }
        let decision = Decision {
            status: request.status,
            approver: request.approver.clone(),
            comment: request.comment.clone(),
            decided_at: now,
            approver_namespace: namespace.clone(),
            via,
        };
        let record = self.rt.coordinator.decide(id, decision, now).await?;
        crate::metrics::approval(match request.status {
            DecisionStatus::Approved => crate::metrics::ApprovalEvent::Approved,
            DecisionStatus::Rejected => crate::metrics::ApprovalEvent::Rejected,
        });
        let via = (via != DecidedVia::Approver).then(|| via.as_str().to_string());
        let payload = match request.status {
            DecisionStatus::Approved => EventPayload::Approved {
                approval_id: id.to_string(),
                approver: request.approver.clone(),
                comment: request.comment,
                namespace,
                via,
            },
            DecisionStatus::Rejected => EventPayload::Rejected {
                approval_id: id.to_string(),
                approver: request.approver.clone(),
                comment: request.comment,
                namespace,
                via,
            },
        };
        let _ = self
            .rt
            .audit
            .emit(AuditEvent {
                timestamp: now,
                surface: record.request.surface,
                actor: request.approver,
                execution_id: None,
                capability_id: Some(record.request.capability_id.clone()),
                correlation_id: record.request.correlation_id.clone(),
                input_hash: Some(record.request.input_hash.clone()),
                payload,
            })
            .await;
        Ok(self.for_review(record, now).await)
    }

    async fn for_review(
        &self,
        mut r: ApprovalRecord,
        now: chrono::DateTime<chrono::Utc>,
    ) -> ApprovalRecord {
        r.status = r.effective_status(now);
        if let Some(cap) = self.rt.registry.get(&r.request.capability_id) {
            let mut input = std::mem::take(&mut r.request.input);
            for red in &cap.redactors {
                match red
                    .redact_approval_input(&cap.info, &r.request.namespace, input)
                    .await
                {
                    Ok(v) => input = v,
                    Err(e) => {
                        tracing::warn!(target: "capgate::approvals", approval = %r.request.id, error = %e, "approval input redaction failed; input withheld");
                        input = serde_json::Value::Null;
                        break;
                    }
                }
            }
            r.request.input = input;
        } else {
            // The capability is gone from this deployment: no redactor can vouch for the
            // stored input, so it is withheld.
            r.request.input = serde_json::Value::Null;
        }
        r
    }
}
