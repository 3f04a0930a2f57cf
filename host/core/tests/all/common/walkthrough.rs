//! The walkthrough's support deployment (docs/walkthrough.md), all native.
//! Shared by the walkthrough test and the `customer-support` example binary.
#![allow(dead_code)]

use capgate_core::prelude::*;
use serde_json::{Value, json};
use std::sync::Arc;

pub fn dana() -> Actor {
    Actor::user(
        "u_dana",
        json!({ "orgId": "org_1", "permissions": ["orders:refund"] }),
    )
}

fn obj(props: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": props, "required": required, "additionalProperties": false })
}

/// The walkthrough's support deployment, all native.
pub fn support_runtime(sink: Arc<MemorySink>) -> Runtime {
    let on = [Surface::AiSdk, Surface::Mcp];
    let org_isolation = policy_sync("orgIsolation", |req| {
        let actor_org = &req.actor.attributes["orgId"];
        Ok(
            if !actor_org.is_null() && *actor_org == req.context["orgId"] {
                PolicyDecision::allow()
            } else {
                PolicyDecision::deny("This record belongs to another organization.")
            },
        )
    });
    let refund_limit = policy_sync("refundLimit", |req| {
        let amount = req.input.and_then(|i| i["amount"].as_f64()).unwrap_or(0.0);
        Ok(if amount > 500.0 {
            PolicyDecision::RequireApproval {
                reason: format!("Refund of ${amount} exceeds $500"),
                approval_type: Some("manager".into()),
                expires_in_ms: None,
            }
        } else {
            PolicyDecision::allow()
        })
    });
    let registry = Registry::builder()
        .capability(
            CapabilityDef::new(
                "customers.search",
                CapabilityMeta::new(
                    "Search customers by name or email",
                    SideEffect::Read,
                    Risk::Low,
                )
                .exposed_on(on)
                .tagged(["support"]),
            )
            .input_schema(obj(
                json!({"query": {"type": "string", "minLength": 1}}),
                &["query"],
            ))
            .procedure(handler(|_| async {
                Ok(json!({"customers": [{"id": "cus_7", "name": "Ada"}]}))
            })),
        )
        .capability(
            CapabilityDef::new(
                "orders.checkEligibility",
                CapabilityMeta::new(
                    "Check whether an order can be refunded",
                    SideEffect::Read,
                    Risk::Low,
                )
                .exposed_on(on)
                .tagged(["support"]),
            )
            .input_schema(obj(json!({"orderId": {"type": "string"}}), &["orderId"]))
            .procedure(handler(|_| async {
                Ok(json!({"eligible": true, "maxAmount": 649}))
            })),
        )
        .capability(
            CapabilityDef::new(
                "orders.refund",
                CapabilityMeta::new("Refund an order", SideEffect::Write, Risk::High)
                    .exposed_on(on)
                    .tagged(["support"]),
            )
            .input_schema(obj(
                json!({
                    "orderId": {"type": "string"},
                    "amount": {"type": "number", "exclusiveMinimum": 0},
                    "reason": {"type": "string"}
                }),
                &["orderId", "amount", "reason"],
            ))
            .output_schema(obj(
                json!({
                    "refundId": {"type": "string"},
                    "amount": {"type": "number"},
                    "status": {"type": "string"},
                    "gatewayRef": {"type": "string"}
                }),
                &["refundId", "amount", "status"],
            ))
            .policy(refund_limit)
            .redactor(redactor_fn("stripGatewayRef", |mut out| {
                if let Some(o) = out.as_object_mut() {
                    o.remove("gatewayRef");
                }
                Ok(out)
            }))
            .middleware(middleware(|call, next| {
                Box::pin(async move {
                    // The application's own gate (the permission, as for a button click).
                    let perms = &call.agent.actor.attributes["permissions"];
                    if !perms
                        .as_array()
                        .is_some_and(|p| p.iter().any(|x| x == "orders:refund"))
                    {
                        return Err(ProcedureError::Forbidden("missing orders:refund".into()));
                    }
                    next.run(call).await
                })
            }))
            .procedure(handler(|call| async move {
                Ok(json!({
                    "refundId": "ref_77",
                    "amount": call.input["amount"],
                    "status": "issued",
                    "gatewayRef": "pg_ch_3NfX9",
                }))
            })),
        )
        .capability(
            CapabilityDef::new(
                "messages.draft",
                CapabilityMeta::new("Draft a customer message", SideEffect::Write, Risk::Low)
                    .exposed_on(on),
            )
            .input_schema(obj(
                json!({"customerId": {"type": "string"}, "body": {"type": "string"}}),
                &["customerId", "body"],
            ))
            .procedure(handler(|_| async { Ok(json!({"draftId": "drf_5"})) })),
        )
        .capability(
            CapabilityDef::new(
                "messages.send",
                CapabilityMeta::new("Send a drafted message", SideEffect::External, Risk::Medium)
                    .exposed_on(on)
                    .with_approval(ApprovalConfig {
                        required: true,
                        approval_type: Some("human-confirmation".into()),
                        expires_in_ms: None,
                    }),
            )
            .input_schema(obj(json!({"draftId": {"type": "string"}}), &["draftId"]))
            .procedure(handler(|_| async {
                Ok(json!({"messageId": "msg_9", "status": "sent"}))
            })),
        )
        .build()
        .expect("the walkthrough registry is valid");
    Runtime::builder(registry)
        .policy(org_isolation)
        .self_confirmable_types(["human-confirmation"])
        .audit_sink(sink)
        .build()
        .expect("a valid runtime")
}

pub fn ctx() -> Value {
    json!({"orgId": "org_1"})
}
