//! Provenance in every decision (issue 39, item 2): on the served example, the audit events
//! that carry policy decisions (`capability.started`, `capability.approval_requested`) name,
//! per Wasm policy, the SHA-256 of its plugin build, of its configuration and the
//! deployment revision; never an input value. (`capability.denied` carries the same
//! stances: `capgate-core` `provenance::*`.)

use crate::common::{Caller, Server, capgate, deployment};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const DANA: &str = "dana-dev-key";

/// The pinned digest of `[plugins.NAME]` and the revision, read from the deployment file.
fn pinned(config: &std::path::Path, plugin: &str) -> (String, String) {
    let text = std::fs::read_to_string(config).expect("config");
    let doc: toml::Value = toml::from_str(&text).expect("toml");
    let sha = doc["plugins"][plugin]["sha256"]
        .as_str()
        .expect("pinned")
        .to_string();
    let revision = doc["revision"].as_str().expect("revision").to_string();
    (sha, revision)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_event_names_the_plugin_build_its_configuration_and_the_revision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(dir.path(), |t| t, "");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&config, &store);
    let dana = Caller::new(DANA);
    let invoke = format!("{}/agent/invoke", server.base);
    let call = |amount: u32, id: &str| {
        json!({
            "capabilityId": "orders.refund",
            "input": {"orderId": "ord_42", "amount": amount, "reason": "damaged item"},
            "invocationId": id,
        })
    };
    let (status, body) = dana.post(&invoke, &call(20, "prov_ok")).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("completed")),
        "{body}"
    );
    let (status, body) = dana.post(&invoke, &call(649, "prov_held")).await;
    assert_eq!(body["status"], "approval-required", "{status} {body}");

    let (refund_sha, revision) = pinned(&config, "refund-limit");
    let (org_sha, _) = pinned(&config, "org-isolation");
    let refund_config =
        capgate_core::canonical::input_hash(&json!({"maxAmount": 500, "approvalType": "manager"}))
            .expect("hash");

    // Each of the three decision events, once the batch writer has it.
    let find = |ty: &str| -> Value {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let out = capgate(&["audit", "query", "--store", &store, "--type", ty]);
            if let Some(line) = out.lines().last() {
                return serde_json::from_str(line).expect("an event");
            }
            assert!(Instant::now() < until, "no {ty} event");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let stance = |event: &Value, policy: &str| -> Value {
        event["data"]["policyDecisions"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["policy"] == policy))
            .cloned()
            .unwrap_or_else(|| panic!("no stance of {policy}: {event}"))
    };
    let started = find("capability.started");
    let limit = stance(&started, "refundLimit");
    assert_eq!(limit["type"], "allow", "{started}");
    assert_eq!(limit["phase"], "invocation", "{started}");
    assert_eq!(limit["pluginSha256"], refund_sha.as_str(), "{started}");
    assert_eq!(limit["configSha256"], refund_config.as_str(), "{started}");
    assert_eq!(limit["revision"], revision.as_str(), "{started}");
    assert_eq!(
        stance(&started, "orgIsolation")["pluginSha256"],
        org_sha.as_str()
    );

    let held = find("capability.approval_requested");
    let limit = stance(&held, "refundLimit");
    assert_eq!(limit["type"], "require-approval", "{held}");
    assert_eq!(limit["pluginSha256"], refund_sha.as_str(), "{held}");
    assert_eq!(limit["revision"], revision.as_str(), "{held}");
    // Digests, never values (SI-10): no amount, order or reason in the stances (the
    // approval's own `reasons` are the policy's message, as the spec has them).
    for event in [&started, &held] {
        let text = event["data"]["policyDecisions"].to_string();
        for value in ["ord_42", "649", "damaged"] {
            assert!(!text.contains(value), "{value} in {text}");
        }
    }
}
