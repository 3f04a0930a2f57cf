//! The [`Runtime`]: one immutable governance setup (registry, runtime-level policies,
//! approvals, audit, defaults, clock) shared by every request, and the options of its three
//! entry points: [`Runtime::invoke`], [`Runtime::describe`], [`Runtime::resume`].
//!
//! By job: this module holds the runtime and its calls; [`builder`] how one is configured
//! ([`RuntimeBuilder`], [`Defaults`]); [`request`] what each entry point takes and gives
//! ([`InvokeRequest`], [`DescribeOptions`], [`ResumeOptions`], ...); [`approvals`] the human
//! side of approvals ([`Approvals`], [`DecideRequest`]) and the rules of who may decide.

pub mod approvals;
pub mod builder;
pub mod request;

pub use crate::pipeline::{SimulatedOutcome, Simulation};
pub use approvals::{Approvals, ApprovalsError, DecideRequest, Decider, RequesterAccess};
pub use builder::{Defaults, RuntimeBuildError, RuntimeBuilder};
pub use request::{
    AdmissionHook, CapabilityDescriptor, DescribeOptions, InvokeRequest, ResumeOptions, Scope,
    SimulateRequest,
};

use crate::actor::Surface;
use crate::approval::{ApprovalCoordinator, ApprovalHandler};
use crate::audit::Auditor;
use crate::clock::Clock;
use crate::error::CapabilityError;
use crate::policy::Policy;
use crate::registry::Registry;
use crate::result::ExecutionResult;
use std::collections::HashMap;
use std::sync::Arc;

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

impl Runtime {
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
        crate::pipeline::describe(&self.inner, surface, options, true).await
    }

    /// The discovery pipeline's answer without announcing it (no
    /// `capabilities.discovered`): an adapter's own check of what a caller could discover,
    /// such as whether a refused call is answered as the concealed not-found. Not a
    /// discovery the caller made, so the trail does not say it made one.
    pub async fn discoverable(
        &self,
        surface: Surface,
        options: DescribeOptions,
    ) -> Result<Vec<CapabilityDescriptor>, CapabilityError> {
        crate::pipeline::describe(&self.inner, surface, options, false).await
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

    /// What stages 3–9 would decide about a call, without making it: the policies run in
    /// their sandboxes as for [`Runtime::invoke`], but no execution is opened, no event
    /// recorded, no approval stored and no procedure reached (`capgate replay` re-decides
    /// recorded calls under another configuration with it).
    pub async fn simulate(&self, request: SimulateRequest) -> Simulation {
        crate::pipeline::simulate(&self.inner, request).await
    }

    /// The human side of approvals: read and decide. Deciding executes nothing.
    pub fn approvals(&self) -> Approvals<'_> {
        Approvals { rt: &self.inner }
    }

    /// The registry the runtime governs, for adapters that list or look up capabilities.
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

    /// Record an event a door produced outside any execution (an MCP task created, ended
    /// or cancelled) on this runtime's audit sinks, as the pipeline records its own.
    pub async fn record(
        &self,
        event: crate::audit::AuditEvent,
    ) -> Result<(), crate::audit::AuditSinkError> {
        self.inner.audit.emit(event).await
    }

    /// The clock in force.
    pub fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.inner.clock.now()
    }
}
