//! The walkthrough's `orders.refund` as a native capability: its metadata, the refund-limit
//! policy, and a procedure that counts its runs.

use capgate_core::actor::Surface;
use capgate_core::meta::{CapabilityMeta, Risk, SideEffect};
use capgate_core::policy::{CapabilityInfo, FnPolicy, PolicyDecision, policy_sync};
use capgate_core::procedure::{Procedure, handler};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `orders.refund`'s metadata: a high-risk write exposed on the AI SDK, MCP and direct
/// surfaces.
pub fn refund_meta() -> CapabilityMeta {
    CapabilityMeta::new("Refund an order", SideEffect::Write, Risk::High).exposed_on([
        Surface::AiSdk,
        Surface::Mcp,
        Surface::Direct,
    ])
}

/// `orders.refund` as a policy is told about it (what a policy request carries).
pub fn refund_info() -> CapabilityInfo {
    CapabilityInfo {
        id: "orders.refund".into(),
        side_effect: SideEffect::Write,
        risk: Risk::High,
        tags: vec![],
    }
}

/// The walkthrough's refund limit written natively (what the `refund-limit` plugin decides),
/// as a policy named `name`: a refund of more than $500 needs an approval, of
/// `approval_type` when given, for the reason "Refund of $649 exceeds $500"; any other
/// amount (or none) is allowed. Runs in the default phases; `.with_phases` changes them.
pub fn refund_limit(name: &str, approval_type: Option<&str>) -> FnPolicy {
    let approval_type = approval_type.map(str::to_owned);
    policy_sync(name, move |req| {
        let amount = req.input.and_then(|i| i["amount"].as_f64()).unwrap_or(0.0);
        Ok(if amount > 500.0 {
            PolicyDecision::RequireApproval {
                reason: format!("Refund of ${amount} exceeds $500"),
                approval_type: approval_type.clone(),
                expires_in_ms: None,
            }
        } else {
            PolicyDecision::allow()
        })
    })
}

/// Counts the runs of the refund procedures it makes (clones share the count), so a test
/// can assert what ran and how often.
#[derive(Clone, Default)]
pub struct Counter(pub Arc<AtomicUsize>);

impl Counter {
    /// How many times a procedure of this counter ran.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    /// The walkthrough's refund: `ref_77` of the input's amount, issued, with the payment
    /// gateway's reference (which redactors strip).
    pub fn procedure(&self) -> impl Procedure + use<> {
        self.refund(false)
    }

    /// The same refund, also naming who approved it and who asked (what the pipeline
    /// passed the procedure).
    pub fn procedure_naming_parties(&self) -> impl Procedure + use<> {
        self.refund(true)
    }

    fn refund(&self, naming_parties: bool) -> impl Procedure + use<> {
        let c = self.0.clone();
        handler(move |call| {
            let c = c.clone();
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                let mut out = json!({
                    "refundId": "ref_77",
                    "amount": call.input["amount"],
                    "status": "issued",
                    "gatewayRef": "gw_secret_123",
                });
                if naming_parties {
                    out["approver"] =
                        json!(call.agent.approval.as_ref().map(|a| a.approver.id.clone()));
                    out["actor"] = json!(call.agent.actor.id);
                }
                Ok(out)
            }
        })
    }
}
