//! Wasm gateway authorizers: a component exporting `capgate:plugin/authorizer`,
//! implementing core's [`Authorizer`]. Any failure denies. Pooled instances are partitioned
//! by the principal's namespace.
//!
//! Two versions of the interface are served. `authorizer@0.2.0` is told the surface of the
//! door and is asked about every operation, the approvals API's included (with no surface).
//! `authorizer@0.1.0` (components built before 0.2.0) keeps its behaviour: it is not told the
//! surface, and it is not asked about the approvals API's operations, which it cannot
//! express — the API's own role check stands for them. A component exporting both is bound
//! to 0.2.0.

use crate::binding::Binding;
use crate::convert;
use crate::error::{CallError, LoadError};
use crate::plugin::Plugin;
use crate::sandbox::{CallOpts, Sandbox};
use crate::wit::{names, wit_authorizer, wit_authorizer_v1};
use async_trait::async_trait;
use capgate_core::authz::{AuthorizeError, AuthorizeRequest, Authorizer, Operation};
use capgate_core::error::NamedFailure;
use capgate_core::policy::SharedValues;
use std::sync::Arc;

/// An authorizer plugin binding, to whichever authorizer interface version the component
/// exports (0.2.0 preferred).
pub struct WasmAuthorizer {
    inner: Inner,
}

enum Inner {
    /// Bound to `capgate:plugin/authorizer@0.2.0`, which is told the surface.
    Surface(Arc<Sandbox<wit_authorizer::GuestIndices>>),
    /// Bound to `capgate:plugin/authorizer@0.1.0`, for components built before 0.2.0.
    V1(Arc<Sandbox<wit_authorizer_v1::GuestIndices>>),
}

impl std::fmt::Debug for WasmAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmAuthorizer")
            .field("name", &self.name())
            .field("interface", &self.interface())
            .finish_non_exhaustive()
    }
}

impl WasmAuthorizer {
    /// The binding's name.
    pub fn name(&self) -> &str {
        match &self.inner {
            Inner::Surface(sb) => &sb.name,
            Inner::V1(sb) => &sb.name,
        }
    }

    /// The export this binding calls: `capgate:plugin/authorizer@0.2.0` (told the surface,
    /// asked about the approvals API too) or `capgate:plugin/authorizer@0.1.0` (neither).
    pub fn interface(&self) -> &'static str {
        match &self.inner {
            Inner::Surface(_) => names::AUTHORIZER,
            Inner::V1(_) => names::AUTHORIZER_V1,
        }
    }
}

impl Plugin {
    /// Bind as a gateway authorizer: to `capgate:plugin/authorizer@0.2.0` when the component
    /// exports it, else to `capgate:plugin/authorizer@0.1.0`. Refused when it exports
    /// neither.
    pub fn authorizer(self: &Arc<Self>, binding: Binding) -> Result<WasmAuthorizer, LoadError> {
        let inner = match self.bind(&binding) {
            Ok(sandbox) => Inner::Surface(sandbox),
            Err(LoadError::MissingExport { .. }) => match self.bind(&binding) {
                Ok(sandbox) => Inner::V1(sandbox),
                Err(LoadError::MissingExport {
                    file, available, ..
                }) => {
                    return Err(LoadError::MissingExport {
                        file,
                        missing: format!("{}` or `{}", names::AUTHORIZER, names::AUTHORIZER_V1),
                        available,
                    });
                }
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        };
        Ok(WasmAuthorizer { inner })
    }
}

/// Core's operation in the 0.2.0 interface; `None` for one it cannot express.
fn operation(o: Operation) -> Option<wit_authorizer::Operation> {
    use wit_authorizer::Operation as W;
    Some(match o {
        Operation::Describe => W::Describe,
        Operation::Invoke => W::Invoke,
        Operation::GetInvocation => W::GetInvocation,
        Operation::GetApproval => W::GetApproval,
        Operation::ResumeApproval => W::ResumeApproval,
        Operation::ListApprovals => W::ListApprovals,
        Operation::ReviewApproval => W::ReviewApproval,
        Operation::DecideApproval => W::DecideApproval,
        _ => return None,
    })
}

/// What a 0.1.0 authorizer makes of an operation.
enum V1Operation {
    /// Ask the component about this operation.
    Ask(wit_authorizer_v1::Operation),
    /// An approvals-API operation: 0.1.0 has no words for it, so it is not asked.
    NotAsked,
    /// An operation newer than both interfaces: denied.
    Unknown,
}

fn operation_v1(o: Operation) -> V1Operation {
    use wit_authorizer_v1::Operation as W;
    V1Operation::Ask(match o {
        Operation::Describe => W::Describe,
        Operation::Invoke => W::Invoke,
        Operation::GetInvocation => W::GetInvocation,
        Operation::GetApproval => W::GetApproval,
        Operation::ResumeApproval => W::ResumeApproval,
        Operation::ListApprovals | Operation::ReviewApproval | Operation::DecideApproval => {
            return V1Operation::NotAsked;
        }
        _ => return V1Operation::Unknown,
    })
}

fn deny(name: &str, e: CallError) -> AuthorizeError {
    NamedFailure::new(name, e).into()
}

fn unknown_operation(name: &str, interface: &str, o: Operation) -> AuthorizeError {
    AuthorizeError::denied(format!(
        "{name}: `{interface}` cannot express the operation `{}`; denied",
        o.as_str()
    ))
}

#[async_trait]
impl Authorizer for WasmAuthorizer {
    async fn authorize(&self, request: &AuthorizeRequest<'_>) -> Result<(), AuthorizeError> {
        let principal = request.principal;
        let opts = CallOpts {
            namespace: &principal.namespace,
            ..CallOpts::default()
        };
        let capability_id = request.capability_id.map(str::to_string);
        let input = request.input.map(|v| v.to_string());
        match &self.inner {
            Inner::Surface(sb) => {
                let Some(op) = operation(request.operation) else {
                    return Err(unknown_operation(
                        &sb.name,
                        names::AUTHORIZER,
                        request.operation,
                    ));
                };
                let wit_request = wit_authorizer::AuthorizeRequest {
                    principal: wit_authorizer::Principal {
                        actor: convert::actor(&principal.actor),
                        namespace: principal.namespace.clone(),
                    },
                    operation: op,
                    surface: request.surface.map(convert::surface),
                    capability_id,
                    input,
                    config: sb.config.clone(),
                };
                let opts = CallOpts {
                    values: sb.reads_lazily.then(|| {
                        Arc::new(SharedValues {
                            input: request.input.cloned(),
                            context: serde_json::Value::Null,
                            attributes: principal.actor.attributes.clone(),
                        })
                    }),
                    ..opts
                };
                sb.call(opts, move |store, guest| {
                    Box::pin(async move {
                        let answer = guest.call_authorize(store, &wit_request).await?;
                        Ok(answer.map_err(CallError::Guest))
                    })
                })
                .await
                .map_err(|e| deny(&sb.name, e))
            }
            Inner::V1(sb) => {
                let op = match operation_v1(request.operation) {
                    V1Operation::Ask(op) => op,
                    // The approvals API's operations: a 0.1.0 authorizer is not asked; the
                    // API's own role check stands.
                    V1Operation::NotAsked => return Ok(()),
                    V1Operation::Unknown => {
                        return Err(unknown_operation(
                            &sb.name,
                            names::AUTHORIZER_V1,
                            request.operation,
                        ));
                    }
                };
                let wit_principal = wit_authorizer_v1::Principal {
                    actor: convert::actor(&principal.actor),
                    namespace: principal.namespace.clone(),
                };
                let config = sb.config.clone();
                sb.call(opts, move |store, guest| {
                    Box::pin(async move {
                        let answer = guest
                            .call_authorize(
                                store,
                                &wit_principal,
                                op,
                                capability_id.as_deref(),
                                input.as_ref(),
                                &config,
                            )
                            .await?;
                        Ok(answer.map_err(CallError::Guest))
                    })
                })
                .await
                .map_err(|e| deny(&sb.name, e))
            }
        }
    }
}
