//! Wasm redactors: a component exporting `capgate:plugin/redactor`, implementing core's
//! [`Redactor`]. Any failure (trap, limits, `err`, output not JSON or over the cap) is a
//! [`RedactError`]: core withholds the output.

use crate::binding::Binding;
use crate::convert;
use crate::error::{CallError, LoadError};
use crate::plugin::Plugin;
use crate::sandbox::{CallOpts, Sandbox, pool_key};
use crate::wit::wit_redactor;
use async_trait::async_trait;
use capgate_core::error::NamedFailure;
use capgate_core::policy::CapabilityInfo;
use capgate_core::redact::{RedactError, Redactor};
use std::sync::Arc;

/// A redactor plugin binding.
pub struct WasmRedactor {
    sandbox: Arc<Sandbox<wit_redactor::GuestIndices>>,
    namespace: String,
}

impl std::fmt::Debug for WasmRedactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmRedactor")
            .field("name", &&*self.sandbox.name)
            .field("plugin", &self.sandbox.plugin.file)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Copy)]
enum Which {
    Output,
    ApprovalInput,
}

impl Plugin {
    /// Bind as a redactor. Refused when the component does not export
    /// `capgate:plugin/redactor@0.1.0`.
    pub fn redactor(self: &Arc<Self>, binding: Binding) -> Result<WasmRedactor, LoadError> {
        Ok(WasmRedactor {
            sandbox: self.bind(&binding)?,
            namespace: binding.namespace,
        })
    }
}

impl WasmRedactor {
    /// The reserve's hits, misses and ready instances (fresh isolation).
    pub fn reserve_stats(&self) -> crate::ReserveStats {
        self.sandbox.reserve_stats()
    }

    async fn run(
        &self,
        which: Which,
        capability: &CapabilityInfo,
        namespace: &str,
        value: &serde_json::Value,
    ) -> Result<serde_json::Value, CallError> {
        let sb = &self.sandbox;
        let cap = convert::capability(capability);
        let text = value.to_string();
        let config = sb.config.clone();
        let answer = sb
            .call(
                CallOpts {
                    namespace: pool_key(&self.namespace, namespace),
                    ..CallOpts::default()
                },
                move |store, guest| {
                    Box::pin(async move {
                        let answer = match which {
                            Which::Output => {
                                guest
                                    .call_redact_output(store, &cap, &text, &config)
                                    .await?
                            }
                            Which::ApprovalInput => {
                                guest
                                    .call_redact_approval_input(store, &cap, &text, &config)
                                    .await?
                            }
                        };
                        Ok(answer.map_err(CallError::Guest))
                    })
                },
            )
            .await?;
        sb.parse_output(&answer)
    }

    /// Redact as core's [`Redactor`] does: a failure is this binding's named failure.
    async fn redact(
        &self,
        which: Which,
        capability: &CapabilityInfo,
        namespace: &str,
        value: serde_json::Value,
    ) -> Result<serde_json::Value, RedactError> {
        self.run(which, capability, namespace, &value)
            .await
            .map_err(|e| RedactError::from(NamedFailure::new(&*self.sandbox.name, e)))
    }

    /// Redact an output, with the sandbox's own reason on failure (tests, `plugin test`).
    pub async fn redact_output_raw(
        &self,
        capability: &CapabilityInfo,
        output: &serde_json::Value,
    ) -> Result<serde_json::Value, CallError> {
        self.run(Which::Output, capability, "", output).await
    }

    /// Redact an approval input, with the sandbox's own reason on failure.
    pub async fn redact_approval_input_raw(
        &self,
        capability: &CapabilityInfo,
        input: &serde_json::Value,
    ) -> Result<serde_json::Value, CallError> {
        self.run(Which::ApprovalInput, capability, "", input).await
    }
}

#[async_trait]
impl Redactor for WasmRedactor {
    fn name(&self) -> &str {
        &self.sandbox.name
    }
    async fn redact_output(
        &self,
        cap: &CapabilityInfo,
        ns: &str,
        output: serde_json::Value,
    ) -> Result<serde_json::Value, RedactError> {
        self.redact(Which::Output, cap, ns, output).await
    }
    async fn redact_approval_input(
        &self,
        cap: &CapabilityInfo,
        ns: &str,
        input: serde_json::Value,
    ) -> Result<serde_json::Value, RedactError> {
        self.redact(Which::ApprovalInput, cap, ns, input).await
    }
}
