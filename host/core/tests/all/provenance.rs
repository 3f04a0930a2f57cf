//! Provenance in every decision (issue 39, item 2): a policy that names its build and
//! configuration (`Policy::provenance`) is named with its stance, phase included, in
//! `capability.started`, `capability.approval_requested` and `capability.denied`; a policy
//! without provenance is listed as before, and no event carries the input.

use crate::common;

use async_trait::async_trait;
use capgate_core::policy::{PolicyRequest, Provenance};
use capgate_core::prelude::*;
use common::*;
use serde_json::{Value, json};
use std::sync::Arc;

/// A policy with a fixed decision and a provenance, like a Wasm plugin's.
struct Built {
    name: &'static str,
    decision: PolicyDecision,
}

#[async_trait]
impl Policy for Built {
    fn name(&self) -> &str {
        self.name
    }
    fn provenance(&self) -> Option<Arc<Provenance>> {
        Some(Arc::new(Provenance {
            plugin_sha256: "ab".repeat(32),
            config_sha256: "cd".repeat(32),
            revision: Some("rev-7".into()),
        }))
    }
    async fn evaluate(
        &self,
        _: &PolicyRequest<'_>,
        _: tokio::time::Instant,
    ) -> Result<PolicyDecision, PolicyError> {
        Ok(self.decision.clone())
    }
}

async fn run(decision: PolicyDecision, amount: u32) -> Arc<MemorySink> {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let def = refund_def(&c).policy_arc(Arc::new(Built {
        name: "built",
        decision,
    }));
    let rt = runtime_with(vec![def], sink.clone());
    rt.invoke(call(
        "orders.refund",
        json!({"orderId": "ord_CANARY_9", "amount": amount}),
    ))
    .await;
    sink
}

fn stance(data: &Value, policy: &str) -> Value {
    data["policyDecisions"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["policy"] == policy))
        .cloned()
        .unwrap_or_else(|| panic!("no stance of {policy}: {data}"))
}

fn assert_named(data: &Value, kind: &str) {
    let s = stance(data, "built");
    assert_eq!(s["type"], kind, "{data}");
    assert_eq!(s["pluginSha256"], "ab".repeat(32), "{data}");
    assert_eq!(s["configSha256"], "cd".repeat(32), "{data}");
    assert_eq!(s["revision"], "rev-7", "{data}");
    assert!(!data.to_string().contains("CANARY"), "{data}");
}

#[tokio::test]
async fn started_names_the_build_configuration_revision_and_phase_of_every_allowing_policy() {
    let sink = run(PolicyDecision::allow(), 20).await;
    let started = data_of(&sink, "capability.started");
    assert_named(&started, "allow");
    assert_eq!(stance(&started, "built")["phase"], "invocation");
    // The example's own refundLimit is native here: listed, without provenance.
    let native = stance(&started, "refundLimit");
    assert_eq!(native["type"], "allow");
    assert!(native.get("pluginSha256").is_none(), "{started}");
}

#[tokio::test]
async fn approval_requested_names_the_policies_that_asked() {
    let sink = run(PolicyDecision::require_approval("needs a look"), 20).await;
    assert_named(
        &data_of(&sink, "capability.approval_requested"),
        "require-approval",
    );
}

#[tokio::test]
async fn denied_names_the_policy_that_denied() {
    let sink = run(PolicyDecision::deny("no"), 20).await;
    let denied = data_of(&sink, "capability.denied");
    assert_named(&denied, "deny");
    assert!(stance(&denied, "built").get("phase").is_none(), "{denied}");
}
