//! Exporting the portable contract from a runtime, and its digests (docs/gateway.md,
//! "Other shapes"): what a remote host may know about the capabilities a gateway route
//! offers, as version-1 [`PortableCapabilityDescriptor`]s.
//!
//! A descriptor carries the canonical id, the original path, the description, the full
//! JSON input schema, side effect, risk, tags, the static approval hint, `discovery`,
//! the resolved tool names and a `contractDigest`. Handlers, credentials, executable
//! policies, domain context and output schemas are left out.
//!
//! The digest is per capability: lower-case hex SHA-256 over the RFC 8785 canonical JSON
//! of
//!
//! - the capability's static meta as configured (description, **exposure on every
//!   surface**, side effect, risk, tags, timeout, retry, idempotency, approval, tool-name
//!   overrides), its input and output schemas and its resolved tool names;
//! - the governance manifest: the runtime-level policies ([`Runtime::manifest`]) and the
//!   capability's own policies, each by name and phases, and its redactors by name;
//! - the deployment `revision`.
//!
//! It is deterministic (same deployment → same digest, in any process) and changes when
//! any of those change; bump the revision when a handler's or policy's *meaning* changes
//! with the same names and schemas. A digest detects an incompatible deployment; it grants
//! nothing.
//!
//! Two more digests build on it: the [`descriptor_digest`] of one capability without the
//! revision (what a pending approval is bound to), and the [`deployment_digest`] over every
//! served surface (what a configuration reload reports as changed or not).

use crate::descriptor::{Contract, PortableCapabilityDescriptor, ToolNames};
use capgate_core::actor::Surface;
use capgate_core::canonical::{canonical_json, sha256_hex};
use capgate_core::registry::Capability;
use capgate_core::runtime::Runtime;
use serde_json::{Value, json};

/// The descriptor version the export writes (defined with the descriptor).
pub use crate::descriptor::CONTRACT_VERSION;

/// A capability whose contract could not be canonicalized (e.g. a schema nested deeper
/// than the canonical JSON limit).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("capability `{capability}`: cannot compute its contract digest: {reason}")]
pub struct ContractError {
    /// The capability whose digest failed.
    pub capability: String,
    /// Why canonicalization refused its material.
    pub reason: String,
}

/// The contract of `surface`: one descriptor per capability exposed on it, in registry
/// order. A capability whose digest cannot be computed canonically (see
/// [`try_export_contract`]) gets a digest over its plain JSON serialization instead, so
/// this never fails; the gateway itself uses [`try_export_contract`] and refuses to start.
pub fn export_contract(
    runtime: &Runtime,
    surface: Surface,
    revision: &str,
) -> Vec<PortableCapabilityDescriptor> {
    exposed(runtime, surface)
        .map(|cap| {
            let material = digest_material(runtime, cap, revision);
            let digest = canonical_json(&material)
                .map(sha256_hex)
                .unwrap_or_else(|_| sha256_hex(material.to_string()));
            descriptor(cap, digest)
        })
        .collect()
}

/// [`export_contract`], failing on the first capability whose contract cannot be
/// canonicalized.
pub fn try_export_contract(
    runtime: &Runtime,
    surface: Surface,
    revision: &str,
) -> Result<Vec<PortableCapabilityDescriptor>, ContractError> {
    exposed(runtime, surface)
        .map(|cap| Ok(descriptor(cap, contract_digest(runtime, cap, revision)?)))
        .collect()
}

/// The contract digest of one capability (see the module docs for what it covers).
pub fn contract_digest(
    runtime: &Runtime,
    capability: &Capability,
    revision: &str,
) -> Result<String, ContractError> {
    let material = digest_material(runtime, capability, revision);
    canonical_json(&material)
        .map(sha256_hex)
        .map_err(|e| ContractError {
            capability: capability.id.clone(),
            reason: e.to_string(),
        })
}

/// The digest of one capability's own contract: the material of [`contract_digest`]
/// without the deployment revision. Recorded on an approval when the call asks for one
/// ([`capgate_core::approval::ApprovalRequest::descriptor_digest`]); a door resumes the
/// approval only while it is unchanged, so a revision bump that left this capability (its
/// meta, schemas, tool names, policies, redactors and the runtime-level manifest) as it was
/// does not strand its pending approvals.
pub fn descriptor_digest(
    runtime: &Runtime,
    capability: &Capability,
) -> Result<String, ContractError> {
    let mut material = digest_material(runtime, capability, "");
    if let Value::Object(m) = &mut material {
        m.remove("revision");
        m.insert("format".into(), json!("capgate.descriptor.v1"));
    }
    canonical_json(&material)
        .map(sha256_hex)
        .map_err(|e| ContractError {
            capability: capability.id.clone(),
            reason: e.to_string(),
        })
}

/// The digest of a deployment's whole contract on `surfaces` (duplicates count once):
/// lower-case hex SHA-256 over the canonical JSON list of `[surface, capability id,
/// contract digest]`, surfaces in name order and capabilities in registry order. It changes
/// when any served capability's [`contract_digest`] changes or a capability joins or leaves
/// a surface; a serving process reports it on every reload so an operator sees whether
/// remote hosts will notice.
pub fn deployment_digest(
    runtime: &Runtime,
    surfaces: impl IntoIterator<Item = Surface>,
    revision: &str,
) -> String {
    Contract::export(runtime, surfaces, revision).digest()
}

impl Contract {
    /// The contract `runtime` serves on each of `surfaces` ([`export_contract`] per
    /// surface; duplicates count once).
    pub fn export(
        runtime: &Runtime,
        surfaces: impl IntoIterator<Item = Surface>,
        revision: &str,
    ) -> Contract {
        surfaces
            .into_iter()
            .map(|s| (s, export_contract(runtime, s, revision)))
            .collect()
    }

    /// This contract's digest over all its surfaces (see [`deployment_digest`]).
    pub fn digest(&self) -> String {
        let entries: Vec<Value> = self
            .iter()
            .flat_map(|(s, descriptors)| {
                descriptors
                    .iter()
                    .map(move |d| json!([s, d.id, d.contract_digest]))
            })
            .collect();
        let list = Value::Array(entries);
        sha256_hex(canonical_json(&list).unwrap_or_else(|_| list.to_string()))
    }
}

fn exposed(runtime: &Runtime, surface: Surface) -> impl Iterator<Item = &Capability> {
    runtime
        .registry()
        .iter()
        .filter(move |c| c.meta.expose.allows(surface))
        .map(|c| c.as_ref())
}

fn phases_json(phases: &[capgate_core::policy::Phase]) -> Value {
    Value::from(
        phases
            .iter()
            .map(|p| p.as_str().to_string())
            .collect::<Vec<_>>(),
    )
}

/// One policy in the digest: name and phases, and `"mode": "shadow"` for a shadow policy
/// (absent when it enforces, so enforcing policies hash as they always did).
fn policy_json(p: &dyn capgate_core::policy::Policy) -> Value {
    let mut v = json!({ "name": p.name(), "phases": phases_json(p.phases()) });
    if p.shadow() {
        v["mode"] = json!("shadow");
    }
    v
}

/// Everything the digest covers, as one JSON value.
fn digest_material(runtime: &Runtime, cap: &Capability, revision: &str) -> Value {
    let manifest: Vec<Value> = runtime
        .policies()
        .iter()
        .map(|p| policy_json(p.as_ref()))
        .collect();
    let policies: Vec<Value> = cap
        .policies
        .iter()
        .map(|p| policy_json(p.as_ref()))
        .collect();
    let redactors: Vec<Value> = cap.redactors.iter().map(|r| json!(r.name())).collect();
    // A meta that cannot be serialized (it always can: plain data) hashes as null, which
    // still changes the digest relative to any real meta.
    let meta = serde_json::to_value(&cap.meta).unwrap_or(Value::Null);
    json!({
        "format": "capgate.contract.v1",
        "revision": revision,
        "capability": {
            "id": cap.id,
            "meta": meta,
            "inputSchema": cap.input.source(),
            "outputSchema": cap.output.as_ref().map(|s| s.source().clone()),
            "toolNames": { "aiSdk": cap.ai_sdk_tool, "mcp": cap.mcp_tool },
            "policies": policies,
            "redactors": redactors,
        },
        "manifest": manifest,
    })
}

fn descriptor(cap: &Capability, contract_digest: String) -> PortableCapabilityDescriptor {
    PortableCapabilityDescriptor {
        version: CONTRACT_VERSION,
        id: cap.id.clone(),
        path: cap.id.split('.').map(str::to_string).collect(),
        description: cap.meta.description.clone(),
        input_schema: cap.input.source().clone(),
        side_effect: cap.meta.side_effect,
        risk: cap.meta.risk,
        tags: cap.meta.tags.clone(),
        requires_approval: cap.meta.approval.as_ref().is_some_and(|a| a.required),
        discovery: cap.meta.discovery,
        tool_names: ToolNames {
            ai_sdk: cap.ai_sdk_tool.clone(),
            mcp: cap.mcp_tool.clone(),
        },
        contract_digest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capgate_core::prelude::*;

    fn registry(description: &str) -> Registry {
        let r = Registry::builder()
            .capability(
                CapabilityDef::new(
                    "orders.refund",
                    CapabilityMeta::new(description, SideEffect::Write, Risk::High)
                        .exposed_on([Surface::AiSdk]),
                )
                .input_schema(
                    json!({"type": "object", "properties": {"amount": {"type": "number"}}}),
                )
                .policy(policy_sync("refund-limit", |_| Ok(PolicyDecision::allow())))
                .procedure(handler(|_| async { Ok(json!({})) })),
            )
            .capability(
                CapabilityDef::new(
                    "internal.export",
                    CapabilityMeta::new("Export", SideEffect::Read, Risk::Low)
                        .exposed_on([Surface::Direct]),
                )
                .procedure(handler(|_| async { Ok(json!({})) })),
            )
            .build();
        match r {
            Ok(r) => r,
            Err(e) => panic!("fixture registry: {e:?}"),
        }
    }

    fn runtime(description: &str) -> Runtime {
        Runtime::builder(registry(description))
            .build()
            .expect("a valid runtime")
    }

    #[test]
    fn the_contract_lists_exposed_capabilities_with_their_static_shape() {
        let c = export_contract(&runtime("Refund an order"), Surface::AiSdk, "r1");
        assert_eq!(c.len(), 1, "internal.export is not exposed on aiSdk");
        let d = &c[0];
        assert_eq!(d.version, 1);
        assert_eq!(d.path, vec!["orders", "refund"]);
        assert_eq!(d.tool_names.ai_sdk, "orders_refund");
        assert_eq!(d.discovery, capgate_core::meta::Discovery::Discoverable);
        assert_eq!(d.contract_digest.len(), 64);
        assert!(!d.requires_approval);
    }

    #[test]
    fn the_digest_is_stable_and_changes_with_revision_meta_and_manifest() {
        let a = export_contract(&runtime("Refund an order"), Surface::AiSdk, "r1");
        let again = export_contract(&runtime("Refund an order"), Surface::AiSdk, "r1");
        assert_eq!(a, again, "deterministic across runtimes built alike");
        let ok = try_export_contract(&runtime("Refund an order"), Surface::AiSdk, "r1");
        assert_eq!(ok.ok(), Some(a.clone()));

        let revised = export_contract(&runtime("Refund an order"), Surface::AiSdk, "r2");
        assert_ne!(a[0].contract_digest, revised[0].contract_digest);

        let reworded = export_contract(&runtime("Refund an order."), Surface::AiSdk, "r1");
        assert_ne!(a[0].contract_digest, reworded[0].contract_digest);

        let governed = Runtime::builder(registry("Refund an order"))
            .policy(policy_sync("business-hours", |_| {
                Ok(PolicyDecision::allow())
            }))
            .build()
            .expect("a valid runtime");
        let with_policy = export_contract(&governed, Surface::AiSdk, "r1");
        assert_ne!(a[0].contract_digest, with_policy[0].contract_digest);
    }

    #[test]
    fn the_descriptor_digest_ignores_the_revision_and_nothing_else() {
        let digest = |rt: &Runtime| {
            let cap = rt.registry().get("orders.refund").expect("registered");
            descriptor_digest(rt, cap).expect("a digest")
        };
        let a = runtime("Refund an order");
        assert_eq!(digest(&a), digest(&runtime("Refund an order")));
        assert_eq!(digest(&a).len(), 64);
        // Not the contract digest of any revision: it is its own material.
        let r1 = export_contract(&a, Surface::AiSdk, "r1");
        assert_ne!(digest(&a), r1[0].contract_digest);
        assert_ne!(digest(&a), digest(&runtime("Refund an order.")));
        let governed = Runtime::builder(registry("Refund an order"))
            .policy(policy_sync("business-hours", |_| {
                Ok(PolicyDecision::allow())
            }))
            .build()
            .expect("a valid runtime");
        assert_ne!(digest(&a), digest(&governed));
    }

    #[test]
    fn the_deployment_digest_lists_each_surface_once_in_name_order() {
        let rt = runtime("Refund an order");
        // What a serving process computed before the digest moved here: surfaces sorted by
        // name and deduplicated, then `[surface, id, contractDigest]` per served capability.
        let by_hand = |surfaces: &[Surface]| {
            let entries: Vec<Value> = surfaces
                .iter()
                .flat_map(|s| {
                    export_contract(&rt, *s, "r1")
                        .into_iter()
                        .map(move |d| json!([s.as_str(), d.id, d.contract_digest]))
                })
                .collect();
            let list = Value::Array(entries);
            sha256_hex(canonical_json(&list).unwrap_or_else(|_| list.to_string()))
        };
        let digest = deployment_digest(&rt, [Surface::Mcp, Surface::AiSdk, Surface::Mcp], "r1");
        assert_eq!(digest, by_hand(&[Surface::AiSdk, Surface::Mcp]));
        assert_eq!(digest.len(), 64);
        assert_ne!(digest, deployment_digest(&rt, [Surface::Mcp], "r1"));
        assert_ne!(
            digest,
            deployment_digest(&rt, [Surface::AiSdk, Surface::Mcp], "r2")
        );
    }
}
