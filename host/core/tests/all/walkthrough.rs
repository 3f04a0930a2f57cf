//! The walkthrough (docs/walkthrough.md), replayed in-process: Dana's $649 refund of ord_42,
//! approved by Priya, resumed, redacted; then messages.draft and a confirmed messages.send.
//! The audit trail of Act 5 is asserted event by event.

use crate::common;

use capgate_core::prelude::*;
use common::walkthrough::{ctx, dana, support_runtime};
use serde_json::{Value, json};
use std::sync::Arc;

fn decide(status: DecisionStatus, who: &str) -> DecideRequest {
    DecideRequest {
        status,
        approver: ActorRef {
            id: who.into(),
            kind: ActorKind::User,
        },
        comment: None,
        decider: capgate_core::runtime::Decider::Approver {
            namespace: String::new(),
            roles: Vec::new(),
        },
    }
}

/// `who` decides approval `id` with `status`; the decision is accepted.
async fn decided(rt: &Runtime, id: &str, status: DecisionStatus, who: &str) {
    rt.approvals()
        .decide(id, decide(status, who))
        .await
        .unwrap();
}

/// Resume approval `id` with a fresh context (the walkthrough's session).
async fn resume_in_context(rt: &Runtime, id: &str) -> ExecutionResult {
    rt.resume(
        id,
        ResumeOptions {
            context: ctx(),
            ..Default::default()
        },
    )
    .await
}

/// (type, executionId, capabilityId, actor id, data) of one event.
type TrailRow = (String, Option<String>, Option<String>, String, Value);

fn trail(sink: &MemorySink) -> Vec<TrailRow> {
    sink.events()
        .iter()
        .map(|e| {
            let v = serde_json::to_value(e).unwrap();
            (
                e.type_name().to_string(),
                e.execution_id.clone(),
                e.capability_id.clone(),
                e.actor.id.clone(),
                v["data"].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_lifecycle_walkthrough_replays_with_the_act_5_audit_trail() {
    let sink = Arc::new(MemorySink::new());
    let rt = support_runtime(sink.clone());
    let tool = |id: &str, input: Value| {
        InvokeRequest::new(Surface::AiSdk, id, input, dana()).context(ctx())
    };

    // Before the walkthrough's trail starts, the model searched and checked eligibility.
    assert_eq!(
        rt.invoke(tool("customers.search", json!({"query": "Ada"})))
            .await
            .status(),
        "completed"
    );
    assert_eq!(
        rt.invoke(tool(
            "orders.checkEligibility",
            json!({"orderId": "ord_42"})
        ))
        .await
        .status(),
        "completed"
    );
    sink.clear();

    // Act 1–2: the model asks; refundLimit requires approval; nothing executes.
    let refund = json!({"orderId": "ord_42", "amount": 649, "reason": "damaged item"});
    let r1 = rt.invoke(tool("orders.refund", refund.clone())).await;
    assert_eq!(r1.status(), "approval-required");
    let exe_01 = r1.execution_id().to_string();
    let apr_9 = r1.approval().unwrap().clone();
    assert_eq!(apr_9.reasons, vec!["Refund of $649 exceeds $500"]);
    let envelope = serde_json::to_value(&r1).unwrap();
    assert_eq!(envelope["status"], "approval-required");
    assert_eq!(envelope["approval"]["id"], json!(apr_9.id));

    // Act 3: Priya reviews (redacted approval input) and approves; deciding executes nothing.
    let listed = rt
        .approvals()
        .list(&ApprovalFilter {
            status: Some(ApprovalStatus::Pending),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].request.input, refund);
    decided(&rt, &apr_9.id, DecisionStatus::Approved, "u_priya").await;

    // Act 4: resume with a fresh context: new execution, as Dana, approver visible.
    let r2 = resume_in_context(&rt, &apr_9.id).await;
    // Act 5: validated, redacted, completed.
    assert_eq!(r2.status(), "completed", "{r2:?}");
    let exe_02 = r2.execution_id().to_string();
    assert_ne!(exe_01, exe_02);
    assert_eq!(
        r2.output().unwrap(),
        &json!({"refundId": "ref_77", "amount": 649, "status": "issued"})
    );

    // messages.draft (no approval), then messages.send with Dana's own confirmation.
    let r3 = rt
        .invoke(tool(
            "messages.draft",
            json!({"customerId": "cus_7", "body": "Your refund is on its way."}),
        ))
        .await;
    assert_eq!(r3.status(), "completed");
    let exe_03 = r3.execution_id().to_string();
    let r4 = rt
        .invoke(tool("messages.send", json!({"draftId": "drf_5"})))
        .await;
    assert_eq!(r4.status(), "approval-required");
    let exe_04 = r4.execution_id().to_string();
    let send_apr = r4.approval().unwrap().id.clone();
    assert_eq!(r4.approval().unwrap().types, vec!["human-confirmation"]);
    decided(&rt, &send_apr, DecisionStatus::Approved, "u_dana").await;
    let r5 = resume_in_context(&rt, &send_apr).await;
    assert_eq!(r5.status(), "completed", "{r5:?}");
    let exe_05 = r5.execution_id().to_string();

    let t = trail(&sink);
    let expected: Vec<(&str, Option<&str>, &str, &str)> = vec![
        (
            "capability.requested",
            Some(&exe_01),
            "orders.refund",
            "u_dana",
        ),
        (
            "capability.approval_requested",
            Some(&exe_01),
            "orders.refund",
            "u_dana",
        ),
        ("capability.approved", None, "orders.refund", "u_priya"),
        (
            "capability.started",
            Some(&exe_02),
            "orders.refund",
            "u_dana",
        ),
        (
            "capability.completed",
            Some(&exe_02),
            "orders.refund",
            "u_dana",
        ),
        (
            "capability.requested",
            Some(&exe_03),
            "messages.draft",
            "u_dana",
        ),
        (
            "capability.started",
            Some(&exe_03),
            "messages.draft",
            "u_dana",
        ),
        (
            "capability.completed",
            Some(&exe_03),
            "messages.draft",
            "u_dana",
        ),
        (
            "capability.requested",
            Some(&exe_04),
            "messages.send",
            "u_dana",
        ),
        (
            "capability.approval_requested",
            Some(&exe_04),
            "messages.send",
            "u_dana",
        ),
        ("capability.approved", None, "messages.send", "u_dana"),
        (
            "capability.started",
            Some(&exe_05),
            "messages.send",
            "u_dana",
        ),
        (
            "capability.completed",
            Some(&exe_05),
            "messages.send",
            "u_dana",
        ),
    ];
    assert_eq!(t.len(), expected.len(), "{:#?}", t);
    for (i, (got, want)) in t.iter().zip(&expected).enumerate() {
        assert_eq!(got.0, want.0, "event {i} type");
        assert_eq!(got.1.as_deref(), want.1, "event {i} executionId");
        assert_eq!(got.2.as_deref(), Some(want.2), "event {i} capabilityId");
        assert_eq!(got.3, want.3, "event {i} actor");
    }
    // The payloads of the refund's story.
    assert_eq!(t[0].4, json!({"sideEffect": "write", "risk": "high"}));
    assert_eq!(t[1].4["approvalId"], json!(apr_9.id));
    // The reason as a code, the asking policy (the trail of seed 002 records `">$500"`
    // there); its text, which quotes the amount, stays with the approval (SI-10).
    assert_eq!(t[1].4["reasons"], json!(["refundLimit"]));
    assert_eq!(t[2].4["approvalId"], json!(apr_9.id));
    assert_eq!(t[2].4["approver"], json!({"id": "u_priya", "kind": "user"}));
    // The spec's fields exactly, plus capgate's extension (issue 39: why it was allowed),
    // the resume's re-check of the invocation-phase policies.
    let mut started = t[3].4.clone();
    let decisions = started
        .as_object_mut()
        .and_then(|m| m.remove("policyDecisions"));
    assert_eq!(started, json!({"attempt": 1, "approvalId": apr_9.id}));
    assert_eq!(
        decisions,
        Some(json!([
            {"policy": "orgIsolation", "type": "allow", "phase": "invocation"},
            {"policy": "refundLimit", "type": "require-approval", "phase": "invocation"}
        ]))
    );
    assert_eq!(t[4].4["attempts"], 1);
    assert!(t[4].4["durationMs"].is_u64());
    // Every event is on the aiSdk surface and carries no payload (SI-10).
    let all = serde_json::to_string(&sink.events()).unwrap();
    assert!(!all.contains("damaged item") && !all.contains("pg_ch_3NfX9"));
    assert!(
        !all.contains("Refund of"),
        "no reason text reaches an event: {all}"
    );
    assert!(sink.events().iter().all(|e| e.surface == Surface::AiSdk));
}

#[tokio::test]
async fn the_walkthrough_failure_branches_are_typed_envelopes() {
    let sink = Arc::new(MemorySink::new());
    let rt = support_runtime(sink.clone());
    let tool = |id: &str, input: Value| {
        InvokeRequest::new(Surface::AiSdk, id, input, dana()).context(ctx())
    };
    // A bad amount: INPUT_INVALID with issue paths.
    let bad = rt
        .invoke(tool(
            "orders.refund",
            json!({"orderId": "ord_42", "amount": -5, "reason": "x"}),
        ))
        .await;
    assert_eq!(bad.error().unwrap().code(), ErrorCode::InputInvalid);
    // Priya rejects: APPROVAL_REJECTED on resume.
    let r = rt
        .invoke(tool(
            "orders.refund",
            json!({"orderId": "ord_42", "amount": 649, "reason": "x"}),
        ))
        .await;
    let id = r.approval().unwrap().id.clone();
    decided(&rt, &id, DecisionStatus::Rejected, "u_priya").await;
    let again = resume_in_context(&rt, &id).await;
    assert_eq!(again.error().unwrap().code(), ErrorCode::ApprovalRejected);
    // Dana may not approve her own refund (SI-4), even with self-confirmation enabled for
    // human-confirmation approvals.
    let r = rt
        .invoke(tool(
            "orders.refund",
            json!({"orderId": "ord_43", "amount": 700, "reason": "x"}),
        ))
        .await;
    let id = r.approval().unwrap().id.clone();
    let selfish = rt
        .approvals()
        .decide(&id, decide(DecisionStatus::Approved, "u_dana"))
        .await;
    assert!(
        matches!(
            selfish,
            Err(capgate_core::runtime::ApprovalsError::Forbidden(_))
        ),
        "refused when decided: {selfish:?}"
    );
    let still = resume_in_context(&rt, &id).await;
    assert_eq!(still.error().unwrap().code(), ErrorCode::ApprovalPending);
    // Another org's context: orgIsolation denies.
    let other = rt
        .invoke(
            InvokeRequest::new(
                Surface::AiSdk,
                "customers.search",
                json!({"query": "x"}),
                dana(),
            )
            .context(json!({"orgId": "org_2"})),
        )
        .await;
    assert_eq!(other.error().unwrap().code(), ErrorCode::PolicyDenied);
}
