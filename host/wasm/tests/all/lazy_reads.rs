//! Contract 0.3.0's `request` import (issue 38): guests built with the SDKs read the fields
//! they need from the host's parsed values instead of parsing the whole request, in all three
//! languages, and decide exactly as before; components built for 0.2.0 and 0.1.0, which do not
//! import it, still load and decide.

use crate::common;

use capgate_core::prelude::*;
use capgate_wasm::{Binding, Isolation, Plugin};
use common::*;
use serde_json::{Value, json};
use std::sync::Arc;

const REQUEST: &str = "capgate:plugin/request@0.3.0";

fn imports_request(plugin: &Plugin) -> bool {
    plugin.imports().iter().any(|i| i == REQUEST)
}

fn refund_of(amount: Value) -> InvokeRequest {
    InvokeRequest::new(
        Surface::AiSdk,
        "orders.refund",
        json!({"orderId": "ord_42", "amount": amount, "reason": "damaged item"}),
        dana(),
    )
}

/// `plugin` bound as refundLimit (limit 500) in both isolation modes: at and under the limit
/// the call completes, over it (by a cent too) it is held, with the amount in the reason.
async fn decides_like_refund_limit(what: &str, plugin: Arc<Plugin>) {
    for isolation in [Isolation::Fresh, Isolation::pooled()] {
        let policy = plugin
            .policy(
                Binding::new("refundLimit")
                    .config(json!({"maxAmount": 500, "approvalType": "manager"}))
                    .isolation(isolation),
            )
            .expect("bind");
        let c = Counter::default();
        let sink = Arc::new(MemorySink::new());
        let rt = runtime_with_policy(policy, &c, sink.clone());
        for (amount, held) in [
            (json!(20), false),
            (json!(500), false),
            (json!(500.01), true),
            (json!(649), true),
            (json!(20), false),
        ] {
            let r = rt.invoke(refund_of(amount.clone())).await;
            let want = if held {
                "approval-required"
            } else {
                "completed"
            };
            assert_eq!(
                r.status(),
                want,
                "{what} {isolation:?} amount {amount}: {r:?}"
            );
        }
        // The audit event carries the reason code (SI-10); the message, with the amount the
        // plugin read from the host's values, goes to the requester's approval summary.
        let codes = &data_of(&sink, "capability.approval_requested")["reasons"];
        assert_eq!(codes, &json!(["refundLimit"]), "{what}");
        let held = rt.invoke(refund_of(json!(500.01))).await;
        let summary = held
            .approval()
            .expect("an approval summary")
            .reasons
            .join(" ");
        assert!(summary.contains("500.01"), "{what}: {summary}");
    }
}

#[test]
fn sdk_built_guests_import_the_request_interface_and_older_builds_do_not() {
    for name in ["refund_limit", "org_isolation"] {
        assert!(
            imports_request(&load(name)),
            "rust {name}: {:?}",
            load(name).imports()
        );
    }
    for lang in ["js", "python"] {
        let plugin = load_polyglot(lang, "refund-limit");
        assert!(imports_request(&plugin), "{lang}: {:?}", plugin.imports());
    }
    for name in ["legacy_policy", "legacy_authorizer"] {
        let plugin = load(name);
        assert!(!imports_request(&plugin), "{name}: {:?}", plugin.imports());
    }
}

#[tokio::test]
async fn lazy_readers_decide_from_the_host_values_in_every_language() {
    decides_like_refund_limit("rust", load("refund_limit")).await;
    decides_like_refund_limit("js", load_polyglot("js", "refund-limit")).await;
    decides_like_refund_limit("python", load_polyglot("python", "refund-limit")).await;
}

#[tokio::test]
async fn a_0_2_policy_that_parses_the_whole_request_still_loads_and_decides() {
    let plugin = load("legacy_policy");
    assert_eq!(plugin.exports(), ["capgate:plugin/policy@0.1.0"]);
    decides_like_refund_limit("legacy 0.2.0", plugin).await;
}
