//! Where capgate follows its contract exactly (docs/gateway.md, docs/pipeline.md), against the real `capgate serve`: MCP concealment and
//! its audit, `resumeApproval` taking the spec's `InvocationOptions`, contextual
//! capabilities and the opt-in resume tool.

use crate::common;

use common::*;
use serde_json::{Value, json};
use sha2::Digest;

const DANA: &str = "dana-dev-key";
const PRIYA: &str = "priya-dev-key";

/// Audit events of one execution, read from the store the moment this is called.
fn audit_of(store: &str, execution_id: &str) -> Vec<Value> {
    capgate(&[
        "audit",
        "query",
        "--store",
        store,
        "--execution",
        execution_id,
    ])
    .lines()
    .map(|l| serde_json::from_str(l).expect("one JSON event per line"))
    .collect()
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

/// The example plus a capability MCP does not expose and one a policy hides on MCP.
fn with_unexposed_and_hidden(dir: &std::path::Path) -> std::path::PathBuf {
    let plugins = root().join("plugins/target/wasm32-wasip2/release");
    let gate = plugins.join("side_effect_gate.wasm");
    let digest = hex::encode(sha2::Sha256::digest(
        std::fs::read(&gate).expect("side_effect_gate.wasm: run `cargo xtask build-plugins`"),
    ));
    let extra = format!(
        r#"
[plugins.side-effect-gate]
path = "side_effect_gate.wasm"
sha256 = "{digest}"

[policies.hideDestructive]
plugin = "side-effect-gate"
config = {{ sideEffects = ["destructive"], surfaces = ["mcp"], action = "hide" }}
phases = ["discovery", "invocation"]

[[capabilities]]
id = "internal.export"
description = "Export everything (back office only)."
expose = {{ workflow = true }}
sideEffect = "read"
risk = "high"
inputSchema = {{ type = "object" }}
procedure = {{ plugin = "support-desk" }}

[[capabilities]]
id = "vault.read"
description = "Read the vault."
expose = {{ aiSdk = true, mcp = true }}
sideEffect = "destructive"
risk = "critical"
inputSchema = {{ type = "object" }}
policies = ["hideDestructive"]
procedure = {{ plugin = "support-desk" }}
"#
    );
    deployment(dir, |t| t, &extra)
}

/// A tool result with its own execution id blanked, serialized as received: what would
/// tell one refusal from another, if anything did.
fn blanked(result: &Value) -> (String, String) {
    let id = result["structuredContent"]["executionId"]
        .as_str()
        .unwrap_or_else(|| panic!("no executionId: {result}"))
        .to_string();
    assert!(id.starts_with("exe_"), "{result}");
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text block: {result}"))
        .replace(&id, "exe_");
    let structured = serde_json::to_string(&result["structuredContent"])
        .expect("serialize")
        .replace(&id, "exe_");
    (text, structured)
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_unknown_unexposed_and_hidden_tools_are_one_answer_each_audited_before_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let config = with_unexposed_and_hidden(dir.path());
    let s = Server::start(&config, &store);
    let mut dana = Mcp::connect(&s.base, DANA).await;

    let listed = dana.request("tools/list", json!({})).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list: {listed}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for absent in ["internal_export", "vault_read"] {
        assert!(!names.contains(&absent), "{absent} listed: {names:?}");
    }

    let mut answers = Vec::new();
    for (reason, tool) in [
        ("unknown", "no_such_tool"),
        ("not-exposed", "internal_export"),
        ("hidden", "vault_read"),
    ] {
        let answer = dana.call(tool, json!({})).await;
        let result = answer["result"].clone();
        assert_eq!(result["isError"], true, "{answer}");
        assert_eq!(
            result["structuredContent"]["error"]["code"], "CAPABILITY_NOT_FOUND",
            "{answer}"
        );
        // Read at once: the answer waits for the call's audit to be written.
        let execution = result["structuredContent"]["executionId"]
            .as_str()
            .unwrap_or_else(|| panic!("{tool}: no executionId: {answer}"));
        let events = audit_of(&store, execution);
        assert_eq!(
            types(&events),
            ["capability.requested", "capability.denied"],
            "{tool}: {events:?}"
        );
        assert_eq!(events[1]["data"]["reason"], reason, "{tool}");
        assert_eq!(events[1]["surface"], "mcp");
        answers.push((tool, blanked(&result)));
    }
    let (_, unknown) = &answers[0];
    for (tool, answer) in &answers[1..] {
        assert_eq!(
            answer, unknown,
            "{tool} is told apart from an unknown tool (SI-8)"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_approval_takes_a_contract_digest_and_a_correlation_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let config = deployment(dir.path(), |t| t, "");
    let s = Server::start(&config, &store);
    let dana = Caller::new(DANA);
    let (status, held) = dana
        .post(
            &format!("{}/agent/invoke", s.base),
            &json!({
                "capabilityId": "orders.refund",
                "input": {"orderId": "ord_42", "amount": 649, "reason": "damaged item"},
                "invocationId": "inv_resume_1",
                "correlationId": "run-original"
            }),
        )
        .await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["status"], "approval-required", "{held}");
    let approval = held["approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_string();
    let (status, _) = Caller::new(PRIYA)
        .post(
            &format!("{}/approvals/{approval}/decision", s.base),
            &json!({"decision": "approved"}),
        )
        .await;
    assert_eq!(status, 200);

    let resume = |digest: &str| {
        json!({
            "approvalId": approval,
            "invocationId": "inv_resume_1",
            "correlationId": "run-resume",
            "contractDigest": digest
        })
    };
    let url = format!("{}/agent/resumeApproval", s.base);
    // A stale digest is CONTRACT_MISMATCH and consumes nothing.
    let (status, stale) = dana.post(&url, &resume("sha256:stale")).await;
    assert_eq!(status, 200, "a spec-shaped body is accepted: {stale}");
    assert_eq!(stale["status"], "failed", "{stale}");
    assert_eq!(stale["error"]["code"], "CONTRACT_MISMATCH", "{stale}");
    // Fields the spec does not have are still refused.
    let mut unknown_field = resume("sha256:stale");
    unknown_field["bogus"] = json!(1);
    let (status, _) = dana.post(&url, &unknown_field).await;
    assert_eq!(status, 400);

    let (status, contract) = dana.get(&format!("{}/agent/contract", s.base)).await;
    assert_eq!(status, 200, "{contract}");
    let digest = contract
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["id"] == "orders.refund")
        .and_then(|d| d["contractDigest"].as_str())
        .unwrap_or_else(|| panic!("no orders.refund in {contract}"))
        .to_string();
    let (status, done) = dana.post(&url, &resume(&digest)).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    let execution = done["executionId"].as_str().expect("executionId");
    let events = audit_of(&store, execution);
    assert!(
        types(&events).ends_with(&["capability.started", "capability.completed"]),
        "{events:?}"
    );
    // The original call's correlation id is kept (the distributed spec: correlation is
    // preserved across a resume); the resume's own is recorded beside it.
    for e in &events {
        assert_eq!(e["correlationId"], "run-original", "{e}");
    }
    let started = events
        .iter()
        .find(|e| e["type"] == "capability.started")
        .expect("capability.started");
    assert_eq!(
        started["data"]["resumeCorrelationId"], "run-resume",
        "{started}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_contextual_capability_is_in_the_contract_but_in_no_model_tool_list_and_stays_callable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "id = \"messages.draft\"\n",
                "id = \"messages.draft\"\ndiscovery = \"contextual\"\n",
            )
        },
        "",
    );
    let s = Server::start(&config, &store);
    let dana = Caller::new(DANA);

    let (status, contract) = dana.get(&format!("{}/agent/contract", s.base)).await;
    assert_eq!(status, 200, "{contract}");
    let discovery_of = |id: &str| {
        contract
            .as_array()
            .into_iter()
            .flatten()
            .find(|d| d["id"] == id)
            .map(|d| d["discovery"].clone())
    };
    assert_eq!(discovery_of("messages.draft"), Some(json!("contextual")));
    assert_eq!(discovery_of("messages.send"), Some(json!("discoverable")));

    let (status, tools) = dana
        .get(&format!("{}/agent/tools?format=ai-sdk", s.base))
        .await;
    assert_eq!(status, 200, "{tools}");
    assert!(tools.get("messages_draft").is_none(), "{tools}");
    assert!(tools.get("messages_send").is_some(), "{tools}");

    let mut mcp = Mcp::connect(&s.base, DANA).await;
    let listed = mcp.request("tools/list", json!({})).await;
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list: {listed}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(!names.contains(&"messages_draft"), "{names:?}");
    assert!(names.contains(&"messages_send"), "{names:?}");

    let (status, drafted) = dana
        .post(
            &format!("{}/agent/invoke", s.base),
            &json!({
                "capabilityId": "messages.draft",
                "input": {"customerId": "cus_1", "body": "Your refund is on its way."},
                "invocationId": "inv_draft_1"
            }),
        )
        .await;
    assert_eq!(status, 200, "{drafted}");
    assert_eq!(
        drafted["status"], "completed",
        "contextual stays callable: {drafted}"
    );
}
