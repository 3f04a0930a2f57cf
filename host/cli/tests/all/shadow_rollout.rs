//! Shadow rollout on the customer-support example: a deny policy bound with
//! `mode = "shadow"` changes no call's outcome; each call it would have changed gets one
//! `capgate.policy.shadow_divergence` audit event (policy, phase, stances; no input value)
//! and a count in `capgate_policy_shadow_divergences_total`; `inspect` marks it.

use crate::common;

use common::*;
use serde_json::{Value, json};
use sha2::Digest;
use std::path::{Path, PathBuf};

const DANA: &str = "dana-dev-key";
/// A value only the inputs carry: no audit event may contain it (SI-10).
const CANARY: &str = "canary-4f1e-reason";

/// The example with side-effect-gate bound as `noWritesYet` (deny every `write` on the
/// model surfaces), in shadow mode, on orders.refund after its own policies.
fn example_with_shadow_deny(dir: &Path) -> PathBuf {
    let wasm = root().join("plugins/target/wasm32-wasip2/release/side_effect_gate.wasm");
    let bytes = std::fs::read(&wasm)
        .unwrap_or_else(|e| panic!("{}: {e} (run `cargo xtask build-plugins`)", wasm.display()));
    let pin = hex::encode(sha2::Sha256::digest(&bytes));
    deployment(
        dir,
        |t| {
            t.replace(
                "policies = [\"orgIsolation\", \"refundLimit\"]",
                "policies = [\"orgIsolation\", \"refundLimit\", \"noWritesYet\"]",
            )
        },
        &format!(
            "[plugins.side-effect-gate]\npath = \"side_effect_gate.wasm\"\nsha256 = \"{pin}\"\n\n\
             [policies.noWritesYet]\nplugin = \"side-effect-gate\"\nmode = \"shadow\"\n\
             config = {{ sideEffects = [\"write\"] }}\n"
        ),
    )
}

fn invoke(capability: &str, input: Value, invocation_id: &str) -> Value {
    json!({"capabilityId": capability, "input": input, "invocationId": invocation_id})
}

fn refund(order: &str, amount: u32) -> Value {
    json!({"orderId": order, "amount": amount, "reason": CANARY})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_deny_changes_no_outcome_and_records_one_divergence_per_diverging_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = example_with_shadow_deny(dir.path());
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&config, &store);
    let agent = format!("{}/agent/invoke", server.base);
    let dana = Caller::new(DANA);

    // Two refunds under the limit complete, one over it is held for approval: exactly what
    // the example does without the shadow policy. A read is not a write: no divergence.
    let mut diverging = Vec::new();
    for (i, order) in ["ord_43", "ord_43"].into_iter().enumerate() {
        let (status, body) = dana
            .post(
                &agent,
                &invoke("orders.refund", refund(order, 20), &format!("s{i}")),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "completed", "{body}");
        diverging.push(
            body["executionId"]
                .as_str()
                .expect("executionId")
                .to_string(),
        );
    }
    let (_, held) = dana
        .post(
            &agent,
            &invoke("orders.refund", refund("ord_42", 600), "s-held"),
        )
        .await;
    assert_eq!(held["status"], "approval-required", "{held}");
    diverging.push(
        held["executionId"]
            .as_str()
            .expect("executionId")
            .to_string(),
    );
    let (_, read) = dana
        .post(
            &agent,
            &invoke("customers.search", json!({"query": "Ada"}), "s-read"),
        )
        .await;
    assert_eq!(read["status"], "completed", "{read}");

    // One divergence per diverging call, none for the read; the would-be stance, no input.
    let out = capgate(&[
        "audit",
        "query",
        "--store",
        &store,
        "--type",
        "capgate.policy.shadow_divergence",
    ]);
    assert!(
        !out.contains(CANARY),
        "an input value in the audit trail: {out}"
    );
    let events: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let mut ids: Vec<&str> = events
        .iter()
        .map(|e| e["executionId"].as_str().expect("executionId"))
        .collect();
    ids.sort_unstable();
    diverging.sort_unstable();
    assert_eq!(ids, diverging, "{events:#?}");
    for e in &events {
        assert_eq!(e["capabilityId"], "orders.refund");
        assert_eq!(e["data"]["policy"], "noWritesYet");
        assert_eq!(e["data"]["stance"], "deny");
        assert_eq!(e["data"]["wouldBe"], "deny");
    }
    let outcomes: Vec<&str> = events
        .iter()
        .map(|e| e["data"]["outcome"].as_str().expect("outcome"))
        .collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == "allow").count(),
        2,
        "{outcomes:?}"
    );
    assert!(outcomes.contains(&"require-approval"), "{outcomes:?}");
    let all = capgate(&["audit", "tail", "--store", &store, "-n", "200"]);
    assert!(!all.contains(CANARY), "an input value in the audit trail");

    // The metric counts them, by configured names only.
    let metrics_url = server.metrics.clone().expect("the example serves metrics");
    let text = reqwest::get(&metrics_url)
        .await
        .expect("scrape")
        .text()
        .await
        .expect("body");
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("capgate_policy_shadow_divergences_total{")
                && l.contains("policy=\"noWritesYet\"")
                && l.contains("would_be=\"deny\"")
        })
        .unwrap_or_else(|| panic!("no divergence series in:\n{text}"));
    let count: f64 = line
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("a value");
    assert_eq!(count, 3.0, "{line}");

    // A reviewer sees the binding does not enforce.
    let table = capgate(&["inspect", "--config", config.to_str().expect("utf-8 path")]);
    assert!(table.contains("noWritesYet (shadow)"), "{table}");
}

#[test]
fn mode_on_a_redactor_or_an_unknown_mode_is_refused_with_its_location() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "[redactors.stripGatewayRef]\nplugin = \"pii-redactor\"",
                "[redactors.stripGatewayRef]\nplugin = \"pii-redactor\"\nmode = \"shadow\"",
            )
            .replace(
                "[policies.refundLimit]\nplugin = \"refund-limit\"",
                "[policies.refundLimit]\nplugin = \"refund-limit\"\nmode = \"dry-run\"",
            )
        },
        "",
    );
    let out = capgate_output(&["check", "--config", config.to_str().expect("utf-8 path")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let located: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("capgate.toml:") && l.contains("mode"))
        .collect();
    assert!(
        located
            .iter()
            .any(|l| l.contains("stripGatewayRef") && l.contains("policies only")),
        "{err}"
    );
    assert!(
        located
            .iter()
            .any(|l| l.contains("refundLimit") && l.contains("dry-run")),
        "{err}"
    );
}
