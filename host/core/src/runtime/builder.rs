//! Configuring a [`Runtime`]: the [`RuntimeBuilder`], the [`Defaults`] it starts from,
//! and the startup checks and warnings of [`RuntimeBuilder::build`].

use super::{Inner, Runtime};
use crate::actor::Surface;
use crate::approval::{ApprovalCoordinator, ApprovalHandler, InMemoryApprovalCoordinator};
use crate::audit::{AuditConfig, AuditSink, Auditor};
use crate::clock::{Clock, SystemClock};
use crate::policy::Policy;
use crate::registry::Registry;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

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
                        && Surface::MODEL_FACING
                            .iter()
                            .any(|s| c.meta.expose.allows(*s))
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
}
