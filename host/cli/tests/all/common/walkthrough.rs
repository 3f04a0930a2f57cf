//! The lifecycle walkthrough's steps over HTTP (docs/walkthrough.md), shared by
//! the tests that run it against differently built deployments.

use super::Caller;
use serde_json::{Value, json};

/// Dana's key: the agent's user, org_1.
pub const DANA: &str = "dana-dev-key";
/// Priya's key: org_1's approver.
pub const PRIYA: &str = "priya-dev-key";

/// Dana's $649 refund of ord_42 (walkthrough Act 1), as a `/invoke` body.
pub fn refund_649(invocation_id: &str) -> Value {
    json!({
        "capabilityId": "orders.refund",
        "input": {"orderId": "ord_42", "amount": 649, "reason": "damaged item"},
        "invocationId": invocation_id,
        "correlationId": "run_1"
    })
}

/// Acts 1–3 over HTTP: Dana's $649 refund is held; Priya, a different user with the
/// approver role, approves it through the approvals API. Returns the approval id.
pub async fn request_and_approve(agent: &str, approvals: &str, invocation_id: &str) -> String {
    let dana = Caller::new(DANA);
    let (status, held) = dana
        .post(&format!("{agent}/invoke"), &refund_649(invocation_id))
        .await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["status"], "approval-required", "{held}");
    assert_eq!(held["invocationId"], invocation_id);
    assert_eq!(
        held["approval"]["reasons"],
        json!(["Refund of $649 exceeds $500"])
    );
    assert!(
        held["approval"].get("input").is_none(),
        "the model never sees the stored input: {held}"
    );
    let approval_id = held["approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_string();

    // A model-facing key cannot decide, or even list.
    let (status, _) = dana.get(&format!("{approvals}/approvals")).await;
    assert_eq!(status, 403, "Dana is no approver");
    let (status, _) = dana
        .post(
            &format!("{approvals}/approvals/{approval_id}/decision"),
            &json!({"decision": "approved"}),
        )
        .await;
    assert_eq!(status, 403, "Dana cannot approve her own refund");

    let priya = Caller::new(PRIYA);
    let (status, list) = priya
        .get(&format!("{approvals}/approvals?status=pending"))
        .await;
    assert_eq!(status, 200, "{list}");
    let shown = list
        .as_array()
        .and_then(|a| a.iter().find(|x| x["id"] == approval_id.as_str()))
        .unwrap_or_else(|| panic!("the approval is listed: {list}"));
    assert_eq!(shown["input"]["amount"], 649, "{shown}");
    let (status, decided) = priya
        .post(
            &format!("{approvals}/approvals/{approval_id}/decision"),
            &json!({"decision": "approved", "comment": "damaged on arrival, photo attached"}),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["status"], "approved", "{decided}");
    approval_id
}

/// The `/resumeApproval` body of Act 4.
pub fn resume_body(approval_id: &str, invocation_id: &str) -> Value {
    json!({"approvalId": approval_id, "invocationId": invocation_id})
}

/// Act 5: the refund ran, and the redactor took the gateway reference out.
pub fn assert_refund_completed(outcome: &Value) {
    assert_eq!(outcome["status"], "completed", "{outcome}");
    let output = &outcome["output"];
    assert_eq!(output["amount"], 649, "{outcome}");
    assert_eq!(output["status"], "issued", "{outcome}");
    assert!(
        output["refundId"]
            .as_str()
            .is_some_and(|r| r.starts_with("ref_")),
        "{outcome}"
    );
    assert!(
        output.get("gatewayRef").is_none(),
        "the gateway reference is redacted: {outcome}"
    );
}
