//! Wasm procedure adapters: a component exporting `capgate:plugin/procedure` (and optionally
//! `health`), implementing core's [`Procedure`]. Calls run on tokio's blocking pool so a long
//! procedure never stalls the async runtime; the caller's cancellation token (fired by core's
//! per-attempt timeout too) stops the guest within one epoch tick.

use crate::binding::Binding;
use crate::convert;
use crate::error::{CallError, LoadError};
use crate::plugin::Plugin;
use crate::sandbox::{CallOpts, Sandbox, pool_key};
use crate::wit::{wit_health, wit_procedure};
use async_trait::async_trait;
use capgate_core::policy::CapabilityInfo;
use capgate_core::procedure::{Procedure, ProcedureCall, ProcedureError};
use std::sync::Arc;

struct Inner {
    sandbox: Arc<
        Sandbox<(
            wit_procedure::GuestIndices,
            Option<wit_health::GuestIndices>,
        )>,
    >,
    capability: CapabilityInfo,
    namespace: String,
}

/// A procedure plugin binding for one capability.
#[derive(Clone)]
pub struct WasmProcedure {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for WasmProcedure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmProcedure")
            .field("name", &&*self.inner.sandbox.name)
            .field("capability", &self.inner.capability.id)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// Bind as the procedure of `capability` (core's `ProcedureCall` carries only the id,
    /// so the binding supplies the rest of what the WIT `call` record shows). Refused when
    /// the component does not export `capgate:plugin/procedure@0.1.0`.
    pub fn procedure(
        self: &Arc<Self>,
        binding: Binding,
        capability: CapabilityInfo,
    ) -> Result<WasmProcedure, LoadError> {
        Ok(WasmProcedure {
            inner: Arc::new(Inner {
                sandbox: self.bind(&binding)?,
                capability,
                namespace: binding.namespace,
            }),
        })
    }
}

impl Inner {
    async fn invoke(&self, call: ProcedureCall) -> Result<serde_json::Value, ProcedureError> {
        let sb = &self.sandbox;
        let agent = &call.agent;
        let wit_call = wit_procedure::Call {
            capability: convert::capability(&self.capability),
            input: call.input.to_string(),
            context: call.context.to_string(),
            surface: convert::surface(agent.surface),
            actor: convert::actor(&agent.actor),
            execution_id: agent.execution_id.clone(),
            idempotency_key: agent.idempotency_key.clone(),
            attempt: call.attempt,
            approval: agent.approval.as_ref().map(convert::approval),
            config: sb.config.clone(),
        };
        let result = sb
            .call(
                CallOpts {
                    namespace: pool_key(&self.namespace, &agent.namespace),
                    deadline: None,
                    progress: call.progress.clone(),
                    cancel: Some(call.cancel.clone()),
                    ..CallOpts::default()
                },
                move |store, (guest, _)| {
                    Box::pin(async move { Ok(Ok(guest.call_invoke(store, &wit_call).await?)) })
                },
            )
            .await
            .map(|answer| answer.map(|s| sb.parse_output(&s)));
        match result {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(e))) | Err(e) => Err(match e {
                CallError::Deadline(_) => ProcedureError::TimedOut(e.to_string()),
                other => ProcedureError::Internal(format!("{}: {other}", sb.name)),
            }),
            Ok(Err(e)) => Err(crate::decode::procedure_error(e)),
        }
    }

    async fn health(&self) -> Result<(), String> {
        let sb = &self.sandbox;
        if sb.indices.1.is_none() {
            return Ok(());
        }
        let config = sb.config.clone();
        sb.call(
            CallOpts {
                namespace: &self.namespace,
                ..CallOpts::default()
            },
            move |store, (_, health)| {
                Box::pin(async move {
                    let Some(guest) = health else {
                        return Ok(Ok(()));
                    };
                    Ok(guest
                        .call_check(store, &config)
                        .await?
                        .map_err(CallError::Guest))
                })
            },
        )
        .await
        .map_err(|e| e.to_string())
    }
}

impl WasmProcedure {
    /// The provider health probe: `Ok` when the component exports no `health`.
    pub async fn health(&self) -> Result<(), String> {
        self.inner.health().await
    }
}

#[async_trait]
impl Procedure for WasmProcedure {
    async fn call(&self, call: ProcedureCall) -> Result<serde_json::Value, ProcedureError> {
        self.inner.invoke(call).await
    }
}
