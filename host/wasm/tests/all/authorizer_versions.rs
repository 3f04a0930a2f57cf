//! Both authorizer contract versions are served: a component exporting
//! `capgate:plugin/authorizer@0.2.0` (the `namespace-gate` test plugin, built with the Rust
//! SDK) is bound to it, told the surface of the door and asked about the approvals API with
//! no surface; a component exporting only `authorizer@0.1.0` (the `legacy-authorizer`
//! fixture, generated from the frozen 0.1.0 WIT) still loads, is asked about the gateway's
//! five operations and is not asked about the approvals API's three. Policies, redactors and
//! procedures built with the SDK still export the 0.1.0 interfaces.

use crate::common;

use capgate_core::authz::{AuthorizeRequest, Authorizer, Operation, Principal};
use capgate_core::prelude::*;
use capgate_wasm::{Binding, LoadError, WasmAuthorizer};
use common::*;
use serde_json::{Value, json};

const V2: &str = "capgate:plugin/authorizer@0.2.0";
const V1: &str = "capgate:plugin/authorizer@0.1.0";

const GATEWAY_OPERATIONS: [Operation; 5] = [
    Operation::Describe,
    Operation::Invoke,
    Operation::GetInvocation,
    Operation::GetApproval,
    Operation::ResumeApproval,
];

const APPROVALS_API_OPERATIONS: [Operation; 3] = [
    Operation::ListApprovals,
    Operation::ReviewApproval,
    Operation::DecideApproval,
];

const MODEL_DOORS: [Surface; 3] = [Surface::AiSdk, Surface::Mcp, Surface::Workflow];

fn gate(config: Value) -> WasmAuthorizer {
    load("namespace_gate")
        .authorizer(Binding::new("gate").config(config))
        .expect("bind namespace-gate")
}

fn legacy(config: Value) -> WasmAuthorizer {
    load("legacy_authorizer")
        .authorizer(Binding::new("legacy").config(config))
        .expect("bind legacy-authorizer")
}

/// Ask `authorizer` whether dana, in `namespace`, may perform `operation` through `surface`;
/// a denial comes back as its (private) reason.
async fn ask(
    authorizer: &WasmAuthorizer,
    namespace: &str,
    operation: Operation,
    surface: Option<Surface>,
) -> Result<(), String> {
    let principal = Principal {
        actor: dana(),
        namespace: namespace.to_string(),
    };
    let input = json!({ "orderId": "ord_42", "amount": 649 });
    let approvals_api = surface.is_none();
    authorizer
        .authorize(&AuthorizeRequest {
            principal: &principal,
            operation,
            surface,
            capability_id: (!approvals_api).then_some("orders.refund"),
            input: (!approvals_api).then_some(&input),
        })
        .await
        .map_err(|e| e.to_string())
}

/// `authorizer`, configured to deny namespace org_2, is asked about every gateway operation
/// on every model door: org_2 is denied with a reason containing `reason`, org_1 allowed.
async fn denies_org_2_and_allows_org_1_on_the_model_doors(
    authorizer: &WasmAuthorizer,
    reason: &str,
) {
    for surface in MODEL_DOORS {
        for op in GATEWAY_OPERATIONS {
            let denied = ask(authorizer, "org_2", op, Some(surface))
                .await
                .expect_err("asked, and org_2 is denied");
            assert!(denied.contains(reason), "{denied}");
            ask(authorizer, "org_1", op, Some(surface))
                .await
                .unwrap_or_else(|e| panic!("org_1 {op:?} on {surface:?}: {e}"));
        }
    }
}

#[test]
fn namespace_gate_exports_and_binds_the_0_2_authorizer() {
    let plugin = load("namespace_gate");
    assert!(
        plugin.exports().iter().any(|e| e == V2),
        "{:?}",
        plugin.exports()
    );
    assert!(
        !plugin.exports().iter().any(|e| e == V1),
        "{:?}",
        plugin.exports()
    );
    assert_eq!(gate(Value::Null).interface(), V2);
}

#[tokio::test]
async fn namespace_gate_denies_a_denied_namespace_on_every_door_and_allows_other_namespaces() {
    let gate = gate(json!({ "denyNamespaces": ["org_2"] }));
    denies_org_2_and_allows_org_1_on_the_model_doors(&gate, "denyNamespaces: namespace org_2")
        .await;
    for op in APPROVALS_API_OPERATIONS {
        let denied = ask(&gate, "org_2", op, None)
            .await
            .expect_err("org_2 is denied on the approvals API too");
        assert!(denied.contains("denyNamespaces"), "{denied}");
        ask(&gate, "org_1", op, None)
            .await
            .unwrap_or_else(|e| panic!("org_1 {op:?}: {e}"));
    }
}

#[tokio::test]
async fn namespace_gate_denies_a_denied_surface_and_allows_the_same_call_through_other_doors() {
    let gate = gate(json!({ "denySurfaces": ["workflow"] }));
    let denied = ask(&gate, "org_1", Operation::Invoke, Some(Surface::Workflow))
        .await
        .expect_err("the workflow door is denied");
    assert!(
        denied.contains("denySurfaces: namespace org_1, operation invoke, surface workflow"),
        "{denied}"
    );
    for surface in [Surface::AiSdk, Surface::Mcp, Surface::Direct] {
        ask(&gate, "org_1", Operation::Invoke, Some(surface))
            .await
            .unwrap_or_else(|e| panic!("invoke on {surface:?}: {e}"));
    }
}

#[tokio::test]
async fn namespace_gate_denies_a_denied_operation_and_allows_the_others() {
    let gate = gate(json!({ "denyOperations": ["decideApproval", "resumeApproval"] }));
    let denied = ask(&gate, "org_1", Operation::DecideApproval, None)
        .await
        .expect_err("deciding is denied");
    assert!(
        denied.contains("denyOperations: namespace org_1, operation decideApproval"),
        "{denied}"
    );
    let denied = ask(
        &gate,
        "org_1",
        Operation::ResumeApproval,
        Some(Surface::Mcp),
    )
    .await
    .expect_err("resuming is denied");
    assert!(denied.contains("operation resumeApproval"), "{denied}");
    for (op, surface) in [
        (Operation::ListApprovals, None),
        (Operation::ReviewApproval, None),
        (Operation::Invoke, Some(Surface::Mcp)),
        (Operation::GetApproval, Some(Surface::AiSdk)),
    ] {
        ask(&gate, "org_1", op, surface)
            .await
            .unwrap_or_else(|e| panic!("{op:?}: {e}"));
    }
}

#[tokio::test]
async fn approvals_api_operations_reach_a_0_2_authorizer_with_no_surface() {
    // Every surface is denied, yet the approvals API's operations pass the surface rule: the
    // gate is told `none`. The operation rule then denies them, so the gate was asked, and
    // its reason records what it was told.
    let gate = gate(json!({
        "denySurfaces": ["direct", "aiSdk", "mcp", "workflow", "test"],
        "denyOperations": ["listApprovals", "reviewApproval", "decideApproval"],
    }));
    for op in APPROVALS_API_OPERATIONS {
        let denied = ask(&gate, "org_1", op, None)
            .await
            .expect_err("asked, and denied by operation");
        assert!(
            denied.contains(&format!(
                "denyOperations: namespace org_1, operation {}, surface none",
                op.as_str()
            )),
            "{denied}"
        );
    }
    let denied = ask(&gate, "org_1", Operation::Invoke, Some(Surface::Mcp))
        .await
        .expect_err("a model door is denied by surface");
    assert!(denied.contains("denySurfaces"), "{denied}");
    assert!(denied.contains("surface mcp"), "{denied}");
}

#[tokio::test]
async fn namespace_gate_without_rules_allows_every_operation_on_every_door() {
    for config in [Value::Null, json!({})] {
        let gate = gate(config.clone());
        for surface in MODEL_DOORS {
            for op in GATEWAY_OPERATIONS {
                ask(&gate, "org_2", op, Some(surface))
                    .await
                    .unwrap_or_else(|e| panic!("{config}: {op:?} on {surface:?}: {e}"));
            }
        }
        for op in APPROVALS_API_OPERATIONS {
            ask(&gate, "org_2", op, None)
                .await
                .unwrap_or_else(|e| panic!("{config}: {op:?}: {e}"));
        }
    }
}

#[tokio::test]
async fn namespace_gate_with_a_misspelt_config_key_denies_everything() {
    let gate = gate(json!({ "denyNamespace": ["org_2"] }));
    let denied = ask(&gate, "org_1", Operation::Describe, Some(Surface::AiSdk))
        .await
        .expect_err("an unknown key fails closed");
    assert!(denied.contains("invalid plugin config"), "{denied}");
}

#[test]
fn legacy_0_1_authorizer_still_loads_and_binds_to_the_0_1_interface() {
    let plugin = load("legacy_authorizer");
    assert_eq!(plugin.exports(), [V1.to_string()]);
    assert_eq!(legacy(Value::Null).interface(), V1);
}

#[tokio::test]
async fn legacy_0_1_authorizer_is_asked_about_the_gateway_operations() {
    let legacy = legacy(json!({ "denyNamespaces": ["org_2"] }));
    denies_org_2_and_allows_org_1_on_the_model_doors(
        &legacy,
        "denyNamespaces: namespace org_2, operation",
    )
    .await;
}

#[tokio::test]
async fn legacy_0_1_authorizer_is_not_asked_about_approvals_api_operations() {
    // It would deny org_2 if it were asked.
    let legacy = legacy(json!({ "denyNamespaces": ["org_2"] }));
    for op in APPROVALS_API_OPERATIONS {
        ask(&legacy, "org_2", op, None)
            .await
            .unwrap_or_else(|e| panic!("{op:?} must not reach a 0.1.0 authorizer: {e}"));
    }
}

#[test]
fn a_component_exporting_no_authorizer_is_refused_naming_both_versions() {
    let err = load("refund_limit")
        .authorizer(Binding::new("oops"))
        .expect_err("must refuse");
    assert!(matches!(err, LoadError::MissingExport { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("does not export `{V2}` or `{V1}`")),
        "{msg}"
    );
    assert!(msg.contains("capgate:plugin/policy@0.1.0"), "{msg}");
}

#[test]
fn sdk_built_policies_redactors_and_procedures_still_export_the_0_1_interfaces() {
    for (name, expected) in [
        ("refund_limit", &["capgate:plugin/policy@0.1.0"][..]),
        ("pii_redactor", &["capgate:plugin/redactor@0.1.0"][..]),
        (
            "support_desk",
            &[
                "capgate:plugin/procedure@0.1.0",
                "capgate:plugin/health@0.1.0",
            ][..],
        ),
    ] {
        let plugin = load(name);
        let mut exports = plugin.exports().to_vec();
        exports.sort();
        let mut expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
        expected.sort();
        assert_eq!(exports, expected, "{name}");
    }
    load("refund_limit")
        .policy(Binding::new("refundLimit").config(json!({ "maxAmount": 500 })))
        .expect("binds as a policy");
    load("pii_redactor")
        .redactor(Binding::new("pii"))
        .expect("binds as a redactor");
    load("support_desk")
        .procedure(Binding::new("desk"), refund_info())
        .expect("binds as a procedure");
}
