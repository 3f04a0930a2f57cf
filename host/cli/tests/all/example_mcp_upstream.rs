//! The shipped MCP-upstream example (`examples/mcp-upstream/capgate.toml`) as its README
//! shows it: a real MCP server (`@modelcontextprotocol/server-everything`, installed by npm)
//! started by `capgate serve` over stdio. A read tool completes with the server's own answer;
//! the write tool is held, approved by an approver through the approvals API, resumed, and
//! runs exactly once; the example's pins match the server it installs (`--diff` exits 0).

use crate::common;

use common::lifecycle::audit_events;
use common::*;
use serde_json::{Value, json};
use std::process::Command;

const EXAMPLE: &str = "examples/mcp-upstream/capgate.toml";
const DANA: &str = "dana-dev-key";
const PRIYA: &str = "priya-dev-key";

/// `npm ci` in the example (what its README says to run first); quick when installed.
fn install() {
    let status = Command::new("bash")
        .arg(root().join("tests/mcp/setup.sh"))
        .arg("example")
        .status()
        .expect("run tests/mcp/setup.sh");
    assert!(
        status.success(),
        "installing the example's MCP server failed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_mcp_upstream_example_governs_a_real_mcp_server_with_a_held_write() {
    install();
    let config = root().join(EXAMPLE);
    // The pins in the example are those of the server it installs.
    let diff = capgate_output(&[
        "import",
        "mcp",
        "--config",
        &config.display().to_string(),
        "--upstream",
        "everything",
        "--diff",
    ]);
    let report = String::from_utf8_lossy(&diff.stdout);
    assert!(
        diff.status.success(),
        "{report}\n{}",
        String::from_utf8_lossy(&diff.stderr)
    );
    assert_eq!(report.matches(": unchanged").count(), 3, "{report}");

    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&config, &store);
    let agent = format!("{}/agent", server.base);
    let dana = Caller::new(DANA);

    let (status, sum) = dana
        .post(
            &format!("{agent}/invoke"),
            &json!({"capabilityId": "everything.get-sum", "input": {"a": 2, "b": 40}, "invocationId": "sum_1"}),
        )
        .await;
    assert_eq!(status, 200, "{sum}");
    assert_eq!(sum["status"], "completed", "{sum}");
    assert_eq!(sum["output"], json!({"text": "The sum of 2 and 40 is 42."}));

    // Input the capability's schema refuses never reaches the server.
    let (_, bad) = dana
        .post(
            &format!("{agent}/invoke"),
            &json!({"capabilityId": "everything.get-sum", "input": {"a": "two", "b": 40}, "invocationId": "sum_2"}),
        )
        .await;
    assert_eq!(bad["error"]["code"], "INPUT_INVALID", "{bad}");

    let (status, held) = dana
        .post(
            &format!("{agent}/invoke"),
            &json!({"capabilityId": "everything.toggle-simulated-logging", "input": {}, "invocationId": "toggle_1"}),
        )
        .await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["status"], "approval-required", "{held}");
    let approval_id = held["approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_string();
    let events = audit_events(&store).await;
    let started = |events: &[Value]| {
        events
            .iter()
            .filter(|e| {
                e["type"] == "capability.started"
                    && e["capabilityId"] == "everything.toggle-simulated-logging"
            })
            .count()
    };
    assert_eq!(started(&events), 0, "nothing ran while held");

    let priya = Caller::new(PRIYA);
    let (status, decided) = priya
        .post(
            &format!("{}/approvals/{approval_id}/decision", server.base),
            &json!({"decision": "approved"}),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    let resume = json!({"approvalId": approval_id, "invocationId": "toggle_1"});
    let (status, done) = dana.post(&format!("{agent}/resumeApproval"), &resume).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    let text = done["output"]["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("Started simulated"),
        "the server's own answer: {done}"
    );
    // Resuming again replays the receipt; the server is not called a second time.
    let (_, again) = dana.post(&format!("{agent}/resumeApproval"), &resume).await;
    assert_eq!(again["output"], done["output"], "{again}");
    assert_eq!(
        started(&audit_events(&store).await),
        1,
        "executed exactly once"
    );
}
