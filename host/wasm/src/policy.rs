//! Wasm policies: a component exporting `capgate:plugin/policy`, implementing core's
//! [`Policy`]. Every failure becomes a [`PolicyError`], so core fails the batch closed
//! (POLICY_FAILED, audit reason `policy-failed`).

use crate::binding::Binding;
use crate::convert;
use crate::error::{CallError, LoadError};
use crate::plugin::Plugin;
use crate::sandbox::{CallOpts, Sandbox, pool_key};
use crate::wit::{wit, wit_policy};
use async_trait::async_trait;
use capgate_core::policy::{
    DEFAULT_PHASES, Phase, Policy, PolicyDecision, PolicyError, PolicyRequest, Provenance,
};
use std::sync::Arc;

/// A policy plugin binding. A call runs on the calling task for at most the host's inline
/// slice and then off it (the slow lane), bounded by the binding's deadline (never past
/// core's batch deadline) and fuel.
pub struct WasmPolicy {
    sandbox: Arc<Sandbox<wit_policy::GuestIndices>>,
    phases: Vec<Phase>,
    namespace: String,
    /// The plugin's and the configuration's digests (and the revision, once given).
    provenance: Arc<Provenance>,
}

impl std::fmt::Debug for WasmPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmPolicy")
            .field("name", &&*self.sandbox.name)
            .field("plugin", &self.sandbox.plugin.file)
            .field("phases", &self.phases)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// Bind as a policy. Refused when the component does not export
    /// `capgate:plugin/policy@0.1.0`.
    pub fn policy(self: &Arc<Self>, binding: Binding) -> Result<WasmPolicy, LoadError> {
        let sandbox = self.bind(&binding)?;
        let provenance = Arc::new(Provenance {
            plugin_sha256: self.digest().to_string(),
            // Canonical JSON; a configuration nested beyond what canonicalization takes
            // is digested as serde_json writes it instead (still a digest of the value).
            config_sha256: capgate_core::canonical::input_hash(&binding.config)
                .unwrap_or_else(|_| crate::plugin::sha256_hex(binding.config.to_string())),
            revision: None,
        });
        Ok(WasmPolicy {
            sandbox,
            phases: DEFAULT_PHASES.to_vec(),
            namespace: binding.namespace,
            provenance,
        })
    }
}

impl WasmPolicy {
    /// Record the deployment revision it is bound under in its provenance.
    pub fn with_revision(mut self, revision: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.provenance).revision = Some(revision.into());
        self
    }

    /// Set the phases it runs in (default: invocation).
    pub fn with_phases(mut self, phases: impl IntoIterator<Item = Phase>) -> Self {
        self.phases = phases.into_iter().collect();
        self
    }

    /// Idle pooled instances of its namespace (always 0 in fresh mode).
    pub fn idle_instances(&self) -> usize {
        self.sandbox.idle(&self.namespace)
    }

    /// Idle pooled instances kept for calls made in `namespace`.
    pub fn idle_instances_in(&self, namespace: &str) -> usize {
        self.sandbox.idle(pool_key(&self.namespace, namespace))
    }

    /// The reserve's hits, misses and ready instances (fresh isolation).
    pub fn reserve_stats(&self) -> crate::ReserveStats {
        self.sandbox.reserve_stats()
    }

    /// Evaluate without the trait's error mapping: the sandbox's own reason on failure.
    /// Used by `capgate plugin test` and the tests.
    pub async fn evaluate_raw(
        &self,
        request: &PolicyRequest<'_>,
        deadline: Option<std::time::Instant>,
    ) -> Result<PolicyDecision, CallError> {
        let sb = &self.sandbox;
        let wit_request = wit_policy::PolicyRequest {
            phase: convert::phase(request.phase),
            surface: convert::surface(request.surface),
            capability: convert::capability(request.capability),
            actor: wit::Actor {
                id: request.actor.id.clone(),
                kind: convert::actor_kind(request.actor.kind),
                attributes: request.attributes_json().to_owned(),
            },
            input: request.input_json().map(str::to_owned),
            context: request.context_json().to_owned(),
            execution_id: request.execution_id.to_string(),
            approval: request.approval.map(convert::approval),
            config: sb.config.clone(),
        };
        sb.call(
            CallOpts {
                namespace: pool_key(&self.namespace, request.namespace),
                deadline,
                values: sb.reads_lazily.then(|| request.shared_values()),
                ..CallOpts::default()
            },
            move |store, guest| {
                Box::pin(async move {
                    let answer = guest.call_evaluate(store, &wit_request).await?;
                    Ok(match answer {
                        Ok(d) => crate::decode::policy_decision(d),
                        Err(e) => Err(CallError::Guest(e)),
                    })
                })
            },
        )
        .await
    }
}

/// The fail-closed mapping: the reason stays private (audit and logs only).
pub(crate) fn policy_error(e: CallError) -> PolicyError {
    match e {
        CallError::Deadline(d) => {
            PolicyError::Timeout(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        }
        CallError::Guest(m) => PolicyError::Failed(m),
        CallError::Malformed(m) => PolicyError::InvalidDecision(m),
        e @ CallError::OutputTooLarge { .. } => PolicyError::InvalidDecision(e.to_string()),
        other => PolicyError::Aborted(other.to_string()),
    }
}

#[async_trait]
impl Policy for WasmPolicy {
    fn name(&self) -> &str {
        &self.sandbox.name
    }
    fn phases(&self) -> &[Phase] {
        &self.phases
    }
    fn provenance(&self) -> Option<Arc<Provenance>> {
        Some(self.provenance.clone())
    }
    async fn evaluate(
        &self,
        request: &PolicyRequest<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<PolicyDecision, PolicyError> {
        self.evaluate_raw(request, Some(deadline.into_std()))
            .await
            .map_err(policy_error)
    }
}
