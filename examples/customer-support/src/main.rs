//! The lifecycle walkthrough, in-process: Dana asks for a $649 refund, the runtime holds it
//! for approval, Priya approves, the runtime resumes, redacts and completes; then a draft and
//! a confirmed send. Prints each envelope and the audit trail.
//!
//! `cargo run -p customer-support`

#[path = "../../../host/core/tests/all/common/walkthrough.rs"]
mod walkthrough;

use capgate_core::prelude::*;
use serde_json::json;
use std::sync::Arc;
use walkthrough::{ctx, dana, support_runtime};

fn show(step: &str, r: &ExecutionResult) -> anyhow::Result<()> {
    println!("── {step}\n{}\n", serde_json::to_string_pretty(r)?);
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let sink = Arc::new(MemorySink::new());
    let rt = support_runtime(sink.clone());
    let tool = |id: &str, input: serde_json::Value| {
        InvokeRequest::new(Surface::AiSdk, id, input, dana()).context(ctx())
    };

    let r1 = rt
        .invoke(tool(
            "orders.refund",
            json!({"orderId": "ord_42", "amount": 649, "reason": "damaged item"}),
        ))
        .await;
    show("Act 2: the model asks for orders_refund 649", &r1)?;
    let approval = r1
        .approval()
        .ok_or_else(|| anyhow::anyhow!("expected approval-required"))?
        .id
        .clone();

    let decided = rt
        .approvals()
        .decide(
            &approval,
            DecideRequest {
                status: DecisionStatus::Approved,
                approver: ActorRef {
                    id: "u_priya".into(),
                    kind: ActorKind::User,
                },
                comment: Some("Damaged on arrival, approved.".into()),
                decider: capgate_core::runtime::Decider::Approver {
                    namespace: String::new(),
                    roles: Vec::new(),
                },
            },
        )
        .await?;
    println!(
        "── Act 3: u_priya approves {} (status {})\n",
        decided.request.id,
        decided.status.as_str()
    );

    let r2 = rt
        .resume(
            &approval,
            ResumeOptions {
                context: ctx(),
                ..Default::default()
            },
        )
        .await;
    show("Act 4–5: resumed, validated, redacted", &r2)?;

    let r3 = rt
        .invoke(tool(
            "messages.draft",
            json!({"customerId": "cus_7", "body": "Your refund is on its way."}),
        ))
        .await;
    show("messages.draft", &r3)?;
    let r4 = rt
        .invoke(tool("messages.send", json!({"draftId": "drf_5"})))
        .await;
    show("messages.send (needs Dana's confirmation)", &r4)?;
    if let Some(a) = r4.approval() {
        rt.approvals()
            .decide(
                &a.id,
                DecideRequest {
                    status: DecisionStatus::Approved,
                    approver: dana().reference(),
                    comment: None,
                    decider: capgate_core::runtime::Decider::Approver {
                        namespace: String::new(),
                        roles: Vec::new(),
                    },
                },
            )
            .await?;
        let r5 = rt
            .resume(
                &a.id,
                ResumeOptions {
                    context: ctx(),
                    ..Default::default()
                },
            )
            .await;
        show("messages.send confirmed and resumed", &r5)?;
    }

    println!("── The audit trail");
    for e in sink.events() {
        println!(
            "{:<30} {:<44} {:<24} actor {}",
            e.type_name(),
            e.execution_id.as_deref().unwrap_or("-"),
            e.capability_id.as_deref().unwrap_or("-"),
            e.actor.id
        );
    }
    Ok(())
}
