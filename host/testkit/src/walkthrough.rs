//! The walkthrough's `orders.refund` as a native capability: its metadata and a procedure
//! that counts its runs.

use capgate_core::actor::Surface;
use capgate_core::meta::{CapabilityMeta, Risk, SideEffect};
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
