//! The requester door: the human who requested a call may confirm (or decline) it
//! themselves when every type of its approval is self-confirmable (walkthrough Act 5,
//! `messages.send` with `human-confirmation`), without the approver role. The rule lives
//! in core: `Approvals::get_as_requester` and `Decider::Requester`, recorded as
//! `via: requester`. Anyone else's approval reads as missing; any other approval needs an
//! approver.

use crate::common;

use capgate_core::approval::DecidedVia;
use capgate_core::prelude::*;
use capgate_core::runtime::{ApprovalsError, RequesterAccess};
use common::*;
use serde_json::{Value, json};
use std::sync::Arc;

const ORG: &str = "org_1";

fn send_def(counter: &Counter, extra_policy_type: Option<Option<&str>>) -> CapabilityDef {
    let def = CapabilityDef::new(
        "messages.send",
        CapabilityMeta::new("Send a message", SideEffect::External, Risk::Medium)
            .exposed_on([Surface::AiSdk])
            .with_approval(ApprovalConfig {
                required: true,
                approval_type: Some("human-confirmation".into()),
                expires_in_ms: None,
            }),
    )
    .procedure(counter.procedure());
    match extra_policy_type {
        None => def,
        Some(t) => {
            let t = t.map(str::to_string);
            def.policy(policy_sync("alsoAsk", move |_| {
                Ok(PolicyDecision::RequireApproval {
                    reason: "a policy asks too".into(),
                    approval_type: t.clone(),
                    expires_in_ms: None,
                })
            }))
        }
    }
}

struct Fixture {
    rt: Runtime,
    sink: Arc<MemorySink>,
    sent: Counter,
    refunded: Counter,
}

fn fixture(self_confirmable: &[&str], extra_policy_type: Option<Option<&str>>) -> Fixture {
    let sent = Counter::default();
    let refunded = Counter::default();
    let sink = Arc::new(MemorySink::new());
    let rt = Runtime::builder(
        Registry::builder()
            .capability(send_def(&sent, extra_policy_type))
            .capability(refund_def(&refunded))
            .build()
            .unwrap(),
    )
    .self_confirmable_types(self_confirmable.iter().copied())
    .approval_type_roles("manager", ["manager"])
    .audit_sink(sink.clone())
    .build()
    .expect("a valid runtime");
    Fixture {
        rt,
        sink,
        sent,
        refunded,
    }
}

fn standard() -> Fixture {
    fixture(&["human-confirmation"], None)
}

async fn held_as(rt: &Runtime, actor: Actor, capability: &str, input: Value) -> String {
    let r = rt
        .invoke(InvokeRequest::new(Surface::AiSdk, capability, input, actor).namespace(ORG))
        .await;
    r.approval()
        .unwrap_or_else(|| panic!("approval-required, got {}", r.status()))
        .id
        .clone()
}

async fn send_held(rt: &Runtime) -> String {
    held_as(
        rt,
        dana(),
        "messages.send",
        json!({"customerId": "cus_1", "body": "Your refund is on its way."}),
    )
    .await
}

fn as_requester(who: ActorRef, namespace: &str, status: DecisionStatus) -> DecideRequest {
    DecideRequest {
        status,
        approver: who,
        comment: Some("yes, send it".into()),
        decider: Decider::Requester {
            namespace: namespace.into(),
            roles: vec![],
        },
    }
}

fn eve_of(namespace_org: &str) -> Actor {
    Actor::user("u_eve", json!({ "orgId": namespace_org }))
}

#[tokio::test]
async fn the_requester_confirms_their_own_human_confirmation_and_it_is_recorded_via_requester() {
    let f = standard();
    let id = send_held(&f.rt).await;
    let a = f.rt.approvals();
    match a
        .get_as_requester(&id, ORG, &dana().reference())
        .await
        .unwrap()
    {
        Some(RequesterAccess::Confirmable(r)) => {
            assert_eq!(r.request.id, id);
            assert_eq!(r.status, ApprovalStatus::Pending);
        }
        other => panic!("Dana may confirm her own send: {other:?}"),
    }
    let decided = a
        .decide(
            &id,
            as_requester(dana().reference(), ORG, DecisionStatus::Approved),
        )
        .await
        .unwrap();
    let decision = decided.decision.expect("decided");
    assert_eq!(decision.via, DecidedVia::Requester);
    assert_eq!(decision.approver.id, "u_dana");
    assert_eq!(decision.approver_namespace.as_deref(), Some(ORG));
    let approved = data_of(&f.sink, "capability.approved");
    assert_eq!(approved["via"], "requester", "{approved}");
    assert_eq!(approved["approver"]["id"], "u_dana", "{approved}");
    assert_eq!(f.sent.get(), 0, "deciding executes nothing");

    let resumed =
        f.rt.resume(
            &id,
            ResumeOptions {
                expected_actor: Some(dana().reference()),
                expected_namespace: Some(ORG.into()),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(resumed.status(), "completed", "{:?}", resumed.error());
    assert_eq!(f.sent.get(), 1);
}

#[tokio::test]
async fn the_requester_may_decline_their_own_confirmation_and_nothing_runs() {
    let f = standard();
    let id = send_held(&f.rt).await;
    let decided =
        f.rt.approvals()
            .decide(
                &id,
                as_requester(dana().reference(), ORG, DecisionStatus::Rejected),
            )
            .await
            .unwrap();
    assert_eq!(decided.status, ApprovalStatus::Rejected);
    assert_eq!(data_of(&f.sink, "capability.rejected")["via"], "requester");
    let resumed = f.rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(code(&resumed), Some(ErrorCode::ApprovalRejected));
    assert_eq!(f.sent.get(), 0);
}

#[tokio::test]
async fn another_principal_or_namespace_reads_the_approval_as_missing_and_cannot_decide_it() {
    let f = standard();
    let id = send_held(&f.rt).await;
    let a = f.rt.approvals();
    let eve = eve_of(ORG).reference();
    let dana_as_service = ActorRef {
        id: "u_dana".into(),
        kind: ActorKind::Service,
    };
    for (who, namespace) in [
        (eve.clone(), ORG),
        (dana().reference(), "org_2"),
        (dana_as_service.clone(), ORG),
    ] {
        assert_eq!(
            a.get_as_requester(&id, namespace, &who).await.unwrap(),
            None,
            "{who:?} in {namespace}"
        );
        let refused = a
            .decide(
                &id,
                as_requester(who.clone(), namespace, DecisionStatus::Approved),
            )
            .await;
        let missing = a
            .decide(
                "apr_missing",
                as_requester(who.clone(), namespace, DecisionStatus::Approved),
            )
            .await;
        assert!(
            matches!(refused, Err(ApprovalsError::Store(_))),
            "{refused:?}"
        );
        assert_eq!(
            refused.err().map(|e| e.to_string()),
            missing
                .err()
                .map(|e| e.to_string().replace("apr_missing", &id)),
            "{who:?} in {namespace}: exactly like a missing id"
        );
    }
    assert_eq!(
        a.get(&id).await.unwrap().map(|r| r.status),
        Some(ApprovalStatus::Pending)
    );
    assert!(!f.sink.types().contains(&"capability.approved"));
}

#[tokio::test]
async fn a_requester_cannot_decide_an_approval_that_needs_a_real_approver() {
    let f = standard();
    let id = held_as(
        &f.rt,
        dana(),
        "orders.refund",
        json!({"orderId": "ord_42", "amount": 649, "reason": "damaged item"}),
    )
    .await;
    let a = f.rt.approvals();
    assert_eq!(
        a.get_as_requester(&id, ORG, &dana().reference())
            .await
            .unwrap(),
        Some(RequesterAccess::NeedsApprover)
    );
    for status in [DecisionStatus::Approved, DecisionStatus::Rejected] {
        let refused = a
            .decide(&id, as_requester(dana().reference(), ORG, status))
            .await;
        assert!(
            matches!(&refused, Err(ApprovalsError::Forbidden(m)) if m.contains("approver")),
            "{refused:?}"
        );
    }
    assert_eq!(
        a.get(&id).await.unwrap().map(|r| r.status),
        Some(ApprovalStatus::Pending)
    );
    assert_eq!(f.refunded.get(), 0);
}

#[tokio::test]
async fn an_untyped_or_other_typed_requirement_merged_in_keeps_the_door_shut() {
    for extra in [None, Some("manager")] {
        let f = fixture(&["human-confirmation"], Some(extra));
        let id = send_held(&f.rt).await;
        let a = f.rt.approvals();
        assert_eq!(
            a.get_as_requester(&id, ORG, &dana().reference())
                .await
                .unwrap(),
            Some(RequesterAccess::NeedsApprover),
            "policy type {extra:?}"
        );
        let refused = a
            .decide(
                &id,
                as_requester(dana().reference(), ORG, DecisionStatus::Approved),
            )
            .await;
        assert!(
            matches!(refused, Err(ApprovalsError::Forbidden(_))),
            "{refused:?}"
        );
    }
    // The policy naming the same self-confirmable type leaves it confirmable.
    let f = fixture(&["human-confirmation"], Some(Some("human-confirmation")));
    let id = send_held(&f.rt).await;
    assert!(matches!(
        f.rt.approvals()
            .get_as_requester(&id, ORG, &dana().reference())
            .await
            .unwrap(),
        Some(RequesterAccess::Confirmable(_))
    ));
}

#[tokio::test]
async fn without_self_confirmable_types_the_door_is_shut() {
    let f = fixture(&[], None);
    let id = send_held(&f.rt).await;
    let a = f.rt.approvals();
    assert_eq!(
        a.get_as_requester(&id, ORG, &dana().reference())
            .await
            .unwrap(),
        Some(RequesterAccess::NeedsApprover)
    );
    let refused = a
        .decide(
            &id,
            as_requester(dana().reference(), ORG, DecisionStatus::Approved),
        )
        .await;
    assert!(matches!(refused, Err(ApprovalsError::Forbidden(_))));
}

#[tokio::test]
async fn a_requester_who_is_no_human_user_cannot_confirm_their_own_call() {
    let f = standard();
    for kind in [ActorKind::Agent, ActorKind::Service] {
        let bot = Actor {
            id: "bot_1".into(),
            kind,
            attributes: json!({ "orgId": ORG }),
        };
        let id = held_as(
            &f.rt,
            bot.clone(),
            "messages.send",
            json!({"customerId": "cus_1", "body": "hi"}),
        )
        .await;
        let a = f.rt.approvals();
        assert_eq!(
            a.get_as_requester(&id, ORG, &bot.reference())
                .await
                .unwrap(),
            Some(RequesterAccess::NeedsApprover),
            "{kind:?}"
        );
        let refused = a
            .decide(
                &id,
                as_requester(bot.reference(), ORG, DecisionStatus::Approved),
            )
            .await;
        assert!(
            matches!(refused, Err(ApprovalsError::Forbidden(_))),
            "{kind:?}: {refused:?}"
        );
    }
    assert_eq!(f.sent.get(), 0);
}

#[tokio::test]
async fn an_approvers_decision_still_records_no_via() {
    let f = standard();
    let id = send_held(&f.rt).await;
    let decided =
        f.rt.approvals()
            .decide(&id, decide_as(priya(), ORG, &["approver"]))
            .await
            .unwrap();
    assert_eq!(decided.decision.map(|d| d.via), Some(DecidedVia::Approver));
    let approved = data_of(&f.sink, "capability.approved");
    assert!(approved.get("via").is_none(), "{approved}");
}

/// A self-confirmable type that is also mapped to roles: the requester door runs the
/// type's role check too, so a requester without the role cannot confirm it (and one with
/// it can).
#[tokio::test]
async fn the_requester_door_runs_the_approval_types_role_check() {
    let sent = Counter::default();
    let rt = Runtime::builder(
        Registry::builder()
            .capability(send_def(&sent, None))
            .build()
            .unwrap(),
    )
    .self_confirmable_types(["human-confirmation"])
    .approval_type_roles("human-confirmation", ["sender"])
    .build()
    .expect("a valid runtime");
    let id = send_held(&rt).await;
    let a = rt.approvals();
    let refused = a
        .decide(
            &id,
            as_requester(dana().reference(), ORG, DecisionStatus::Approved),
        )
        .await;
    assert!(
        matches!(&refused, Err(ApprovalsError::Forbidden(m)) if m.contains("sender")),
        "{refused:?}"
    );
    let record = a.get(&id).await.unwrap().expect("the approval");
    let offered = a.may_decide(
        &record,
        &dana().reference(),
        &Decider::Requester {
            namespace: ORG.into(),
            roles: vec![],
        },
        DecisionStatus::Approved,
    );
    assert!(offered.is_err(), "{offered:?}");
    let mut with_role = as_requester(dana().reference(), ORG, DecisionStatus::Approved);
    with_role.decider = Decider::Requester {
        namespace: ORG.into(),
        roles: vec!["sender".into()],
    };
    let decided = a.decide(&id, with_role).await.unwrap();
    assert_eq!(decided.status, ApprovalStatus::Approved);
    assert_eq!(sent.get(), 0, "deciding executes nothing");
}

/// Issue 55 (stage 9 type-matched): Dana self-confirms a `human-confirmation` send, and an
/// execution-phase policy requires a `manager` approval. Resuming with her confirmation
/// must not run the send: stage 9 accepts the carried approval only for the types it was
/// granted for, as the invocation-phase re-check on resume does. A policy asking for the
/// same type the approval carries still lets it run.
#[tokio::test]
async fn a_self_confirmation_does_not_satisfy_an_execution_phase_manager_requirement() {
    for (asked, runs) in [("manager", false), ("human-confirmation", true)] {
        let sent = Counter::default();
        let sink = Arc::new(MemorySink::new());
        let def = send_def(&sent, None).policy(
            policy_sync("managerAtExecution", move |_| {
                Ok(PolicyDecision::RequireApproval {
                    reason: "sending needs a manager now".into(),
                    approval_type: Some(asked.into()),
                    expires_in_ms: None,
                })
            })
            .with_phases([Phase::Execution]),
        );
        let rt = Runtime::builder(Registry::builder().capability(def).build().unwrap())
            .self_confirmable_types(["human-confirmation"])
            .approval_type_roles("manager", ["manager"])
            .audit_sink(sink.clone())
            .build()
            .expect("a valid runtime");
        let id = send_held(&rt).await;
        rt.approvals()
            .decide(
                &id,
                as_requester(dana().reference(), ORG, DecisionStatus::Approved),
            )
            .await
            .expect("Dana may confirm her own send");
        let resumed = rt
            .resume(
                &id,
                ResumeOptions {
                    expected_actor: Some(dana().reference()),
                    expected_namespace: Some(ORG.into()),
                    ..Default::default()
                },
            )
            .await;
        if runs {
            assert_eq!(resumed.status(), "completed", "{:?}", resumed.error());
            assert_eq!(sent.get(), 1);
        } else {
            assert_eq!(code(&resumed), Some(ErrorCode::PolicyDenied), "{resumed:?}");
            assert_eq!(
                sent.get(),
                0,
                "the send must not run on a self-confirmation"
            );
            let failed = data_of(&sink, "capability.failed");
            assert!(
                failed["policyDecisions"]
                    .to_string()
                    .contains("managerAtExecution"),
                "{failed}"
            );
        }
    }
}
