//! A reload in process ([`capgate_server::serve::Served::reload`]), seen from outside over
//! HTTP: a live change (a description, an exposure, a policy's limit) is what the next
//! request sees; a file that also changes keys only a restart applies is refused whole, each
//! such key named and located, and nothing of it is served — not even its live changes.

use crate::support::{self, DANA, get, post, refund};
use capgate_server::serve::ReloadAnswer;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

const REVISION: &str = "revision = \"customer-support-2026-11\"";
const REFUND_DESCRIPTION: &str = "description = \"Refund an order.\"";
const DRAFT_EXPOSURE: &str = "description = \"Draft a message to a customer (nothing is sent).\"\nexpose = { aiSdk = true, mcp = true }";
const LIMIT: &str = "maxAmount = 500";
const LISTEN: &str = "listen = \"127.0.0.1:8080\"";

/// The example as revision `revision` after `edits` (each `(from, to)` must be in it).
fn write(dir: &Path, revision: &str, edits: &[(&str, String)]) {
    support::example_in(dir, |text| {
        let mut text = text.replace(REVISION, &format!("revision = \"{revision}\""));
        for (from, to) in edits {
            assert!(text.contains(from), "`{from}` is not in the example");
            text = text.replace(from, to);
        }
        text
    });
}

/// `/agent/contract` as Dana sees it: each capability's description and contract digest.
async fn contract(http: &reqwest::Client, base: &str) -> BTreeMap<String, (String, String)> {
    let (status, contract) = get(http, &format!("{base}/agent/contract"), DANA).await;
    assert_eq!(status, 200, "{contract}");
    contract
        .as_array()
        .or_else(|| contract["capabilities"].as_array())
        .unwrap_or_else(|| panic!("a list of capabilities: {contract}"))
        .iter()
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (text("id"), (text("description"), text("contractDigest")))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_serves_live_changes_and_refuses_a_restart_key_by_name_keeping_the_old_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "r1", &[]);
    let config = dir.path().join("capgate.toml");
    let s = support::serve(&config, dir.path()).await;
    let http = reqwest::Client::new();
    let invoke = format!("{}/agent/invoke", s.base);

    let before = contract(&http, &s.base).await;
    assert_eq!(before["orders.refund"].0, "Refund an order.", "{before:?}");
    assert!(before.contains_key("messages.draft"), "{before:?}");
    let (_, answer) = post(&http, &invoke, DANA, &refund(300, "reload_before")).await;
    assert_eq!(answer["status"], "completed", "300 is under 500: {answer}");

    // Live keys: a description, an exposure and a policy's limit, under a new revision.
    let live = [
        (
            REFUND_DESCRIPTION,
            "description = \"Refund an order, within the limit.\"".to_owned(),
        ),
        (DRAFT_EXPOSURE, DRAFT_EXPOSURE.replace("aiSdk = true, ", "")),
        (LIMIT, "maxAmount = 100".to_owned()),
    ];
    write(dir.path(), "r2", &live);
    let ReloadAnswer::Reloaded(body) = s.served.reload().await else {
        panic!("the live changes were not taken");
    };
    assert_eq!(body["previous"]["revision"], "r1", "{body}");
    assert_eq!(body["current"]["revision"], "r2", "{body}");
    assert_ne!(
        body["previous"]["contractDigest"], body["current"]["contractDigest"],
        "{body}"
    );
    // On /agent, messages.draft is gone; orders.refund is described anew.
    assert_eq!(
        body["current"]["capabilities"], body["previous"]["capabilities"],
        "exposure, not the registry, changed: {body}"
    );
    let after = contract(&http, &s.base).await;
    assert_eq!(
        after["orders.refund"].0, "Refund an order, within the limit.",
        "{after:?}"
    );
    assert_ne!(after["orders.refund"].1, before["orders.refund"].1);
    assert!(!after.contains_key("messages.draft"), "{after:?}");
    let (_, hidden) = post(
        &http,
        &invoke,
        DANA,
        &json!({
            "capabilityId": "messages.draft",
            "input": {"customerId": "cus_1", "body": "Your refund is on its way."},
            "invocationId": "reload_draft",
        }),
    )
    .await;
    assert_eq!(hidden["error"]["code"], "CAPABILITY_NOT_FOUND", "{hidden}");
    let (_, held) = post(&http, &invoke, DANA, &refund(300, "reload_after")).await;
    assert_eq!(held["status"], "approval-required", "{held}");
    assert_eq!(
        held["approval"]["reasons"],
        json!(["Refund of $300 exceeds $100"])
    );

    // More live changes (alone, they would be taken), plus two restart keys: a new
    // listener and a new export sink. Refused whole, the two keys named and located.
    let restart = [
        (
            REFUND_DESCRIPTION,
            "description = \"Refund anything, no questions asked.\"".to_owned(),
        ),
        (LIMIT, "maxAmount = 100000".to_owned()),
        (LISTEN, "listen = \"127.0.0.1:8081\"".to_owned()),
        (
            "[telemetry.metrics]\n",
            format!(
                "[audit.export.late]\nto = \"jsonl\"\ndirectory = \"{}\"\n\n[telemetry.metrics]\n",
                dir.path().join("late-export").display()
            ),
        ),
    ];
    write(dir.path(), "r3", &restart);
    let ReloadAnswer::Refused(body) = s.served.reload().await else {
        panic!("a file changing restart keys was not refused");
    };
    assert_eq!(body["status"], "refused", "{body}");
    assert_eq!(body["current"]["revision"], "r2", "{body}");
    let problems = body["problems"]
        .as_array()
        .unwrap_or_else(|| panic!("problems: {body}"));
    let keys: std::collections::BTreeSet<&str> =
        problems.iter().filter_map(|p| p["key"].as_str()).collect();
    assert_eq!(
        keys,
        ["audit.export", "gateway.listen"].into(),
        "only the restart keys, each by name: {body}"
    );
    let file = format!("{}:", config.display());
    for p in problems {
        assert!(p["line"].as_u64().is_some_and(|l| l > 0), "located: {p}");
        assert!(
            p["located"].as_str().is_some_and(|l| l.starts_with(&file)),
            "{p}"
        );
        assert!(
            p["message"].as_str().is_some_and(|m| m.contains("restart")),
            "{p}"
        );
    }
    // Nothing of r3 is served: r2's description, r2's limit, no exporter started.
    let still = contract(&http, &s.base).await;
    assert_eq!(still, after, "the refused file changed the contract");
    let (_, held) = post(&http, &invoke, DANA, &refund(300, "reload_refused")).await;
    assert_eq!(held["status"], "approval-required", "still 100: {held}");
    assert!(
        !dir.path().join("late-export").exists(),
        "the refused sink was started"
    );

    s.served.stop().await.expect("a clean stop");
    let reloads: Vec<Value> = support::audit_events(&s.store)
        .await
        .into_iter()
        .filter(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("capgate.config."))
        })
        .collect();
    assert_eq!(reloads.len(), 2, "{reloads:#?}");
    assert_eq!(reloads[0]["type"], "capgate.config.reloaded");
    assert_eq!(reloads[0]["data"]["trigger"], "embedder");
    assert_eq!(reloads[0]["data"]["revision"], "r2");
    assert_eq!(reloads[1]["type"], "capgate.config.reload_refused");
    assert_eq!(reloads[1]["data"]["revision"], "r2", "the one still served");
    assert_eq!(reloads[1]["data"]["problems"], 2);
    let locations = reloads[1]["data"]["locations"].to_string();
    assert!(
        locations.contains("gateway.listen") && locations.contains("audit.export"),
        "{locations}"
    );
    assert!(
        !reloads[1].to_string().contains("no questions asked"),
        "the audit carries places, not the file's values: {}",
        reloads[1]
    );
}
