//! namespace-gate: a gateway authorizer (`capgate:plugin/authorizer@0.2.0`) that denies a
//! request when any configured rule matches and allows everything else.
//!
//! Config (every key optional; unknown keys are an error, so a typo denies everything):
//!
//! ```json
//! { "denyNamespaces": ["org_2"], "denySurfaces": ["workflow"], "denyOperations": ["decideApproval"] }
//! ```
//!
//! - `denyNamespaces`: the principal's namespace is one of these.
//! - `denySurfaces`: the door's surface is one of these (`direct`, `aiSdk`, `mcp`, `workflow`,
//!   `test`). The human approvals API has no surface, so it never matches this rule.
//! - `denyOperations`: the operation is one of these (`describe`, `invoke`, `getInvocation`,
//!   `getApproval`, `resumeApproval`, `listApprovals`, `reviewApproval`, `decideApproval`).
//!
//! A denial's reason (logged by the host, never shown to the caller) names the rule and what
//! the gate was told, e.g. `denySurfaces: namespace org_1, operation invoke, surface
//! workflow`; `surface none` means the approvals API.

use capgate_plugin::{AuthorizeRequest, Authorizer, Operation, Surface, Value, export_authorizer};
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
struct Config {
    deny_namespaces: Vec<String>,
    deny_surfaces: Vec<Surface>,
    deny_operations: Vec<Operation>,
}

struct NamespaceGate;

impl Authorizer for NamespaceGate {
    fn authorize(request: AuthorizeRequest) -> Result<(), String> {
        let config: Config = match request.config::<Value>()? {
            Value::Null => Config::default(),
            _ => request.config()?,
        };
        let rule = if config
            .deny_namespaces
            .contains(&request.principal.namespace)
        {
            "denyNamespaces"
        } else if request
            .surface
            .is_some_and(|s| config.deny_surfaces.contains(&s))
        {
            "denySurfaces"
        } else if config.deny_operations.contains(&request.operation) {
            "denyOperations"
        } else {
            return Ok(());
        };
        Err(format!(
            "{rule}: namespace {}, operation {}, surface {}",
            request.principal.namespace,
            request.operation.as_str(),
            request.surface.map_or("none", Surface::as_str),
        ))
    }
}

export_authorizer!(NamespaceGate);
