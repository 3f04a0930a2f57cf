//! Wasm gateway authorizers: a component exporting `capgate:plugin/authorizer`,
//! implementing core's [`Authorizer`]. Any failure denies. Pooled instances are partitioned
//! by the principal's namespace.

use crate::binding::Binding;
use crate::bindings::{names, wit_authorizer};
use crate::convert;
use crate::error::{CallError, LoadError};
use crate::plugin::Plugin;
use crate::sandbox::{CallOpts, Sandbox};
use async_trait::async_trait;
use capgate_core::authz::{AuthorizeError, Authorizer, Operation, Principal};
use std::sync::Arc;

/// An authorizer plugin binding.
pub struct WasmAuthorizer {
    sandbox: Sandbox<wit_authorizer::GuestIndices>,
}

impl std::fmt::Debug for WasmAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmAuthorizer")
            .field("name", &&*self.sandbox.name)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// Bind as a gateway authorizer. Refused when the component does not export
    /// `capgate:plugin/authorizer@0.1.0`.
    pub fn authorizer(self: &Arc<Self>, binding: Binding) -> Result<WasmAuthorizer, LoadError> {
        self.require(names::AUTHORIZER)?;
        let indices =
            wit_authorizer::GuestIndices::new(&self.pre).map_err(|e| LoadError::Invalid {
                file: self.file.clone(),
                reason: format!("{e:#}"),
            })?;
        Ok(WasmAuthorizer {
            sandbox: Sandbox::new(
                self.clone(),
                &binding.name,
                &binding.config,
                binding.limits,
                binding.isolation,
                indices,
            ),
        })
    }
}

fn operation(o: Operation) -> wit_authorizer::Operation {
    match o {
        Operation::Describe => wit_authorizer::Operation::Describe,
        Operation::Invoke => wit_authorizer::Operation::Invoke,
        Operation::GetInvocation => wit_authorizer::Operation::GetInvocation,
        Operation::GetApproval => wit_authorizer::Operation::GetApproval,
        Operation::ResumeApproval => wit_authorizer::Operation::ResumeApproval,
    }
}

#[async_trait]
impl Authorizer for WasmAuthorizer {
    async fn authorize(
        &self,
        principal: &Principal,
        op: Operation,
        capability_id: Option<&str>,
        input: Option<&serde_json::Value>,
    ) -> Result<(), AuthorizeError> {
        let sb = &self.sandbox;
        let wit_principal = wit_authorizer::Principal {
            actor: convert::actor(&principal.actor),
            namespace: principal.namespace.clone(),
        };
        let capability_id = capability_id.map(str::to_string);
        let input = input.map(|v| v.to_string());
        sb.call(
            CallOpts {
                namespace: &principal.namespace,
                ..CallOpts::default()
            },
            |store, guest| {
                let answer = guest.call_authorize(
                    &mut *store,
                    &wit_principal,
                    operation(op),
                    capability_id.as_deref(),
                    input.as_ref(),
                    &sb.config,
                )?;
                Ok(answer.map_err(CallError::Guest))
            },
        )
        .map_err(|e| AuthorizeError(format!("{}: {e}", sb.name)))
    }
}
