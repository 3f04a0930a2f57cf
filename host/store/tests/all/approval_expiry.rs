//! Approvals that expire undecided are marked once, and approvals pending too long are
//! escalated once (issue 39, item 6): two replicas sweep
//! the same store at once and each expired approval is returned to exactly one of them; an
//! unexpired or decided one is left alone; a decision after the sweep is refused as
//! expired. On SQLite, Postgres and the in-memory coordinator.

use crate::common::TestDb;
use capgate_core::actor::{Actor, ActorKind, ActorRef, Surface};
use capgate_core::approval::{
    ApprovalCoordinator, ApprovalRequest, ApprovalStatus, ApprovalStoreError, Decision,
    DecisionStatus, InMemoryApprovalCoordinator,
};
use capgate_core::canonical::input_hash;
use capgate_core::meta::{Risk, SideEffect};
use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;

on_both_backends!(
    two_replicas_sweeping_at_once_mark_each_expired_approval_once,
    two_replicas_escalating_at_once_escalate_each_pending_approval_once,
);

fn approved_by_priya(at: DateTime<Utc>) -> Decision {
    Decision {
        status: DecisionStatus::Approved,
        approver: ActorRef {
            id: "u_priya".into(),
            kind: ActorKind::User,
        },
        comment: None,
        decided_at: at,
        approver_namespace: Some("org_1".into()),
        via: Default::default(),
    }
}

fn request(id: &str, now: DateTime<Utc>, ttl_seconds: i64) -> ApprovalRequest {
    let input = json!({"orderId": id, "amount": 649});
    ApprovalRequest {
        id: id.into(),
        capability_id: "orders.refund".into(),
        surface: Surface::AiSdk,
        actor: Actor::user("u_dana", json!({"orgId": "org_1"})),
        input_hash: input_hash(&input).expect("hashable input"),
        input,
        reasons: vec!["refund over $500".into()],
        types: vec!["manager".into()],
        policies: Vec::new(),
        risk: Risk::High,
        side_effect: SideEffect::Write,
        requested_at: now - Duration::seconds(120),
        expires_at: now + Duration::seconds(ttl_seconds),
        execution_id: format!("exe_{id}"),
        correlation_id: None,
        namespace: "org_1".into(),
        untyped: false,
        descriptor_digest: None,
    }
}

async fn sweep_twice_at_once(a: Arc<dyn ApprovalCoordinator>, b: Arc<dyn ApprovalCoordinator>) {
    let now = Utc::now();
    // 30 expired, 5 not yet, 5 decided before they expired.
    for i in 0..30 {
        a.create(request(&format!("apr_old_{i}"), now, -60 + i))
            .await
            .expect("create");
    }
    for i in 0..5 {
        a.create(request(&format!("apr_new_{i}"), now, 600))
            .await
            .expect("create");
        let id = format!("apr_done_{i}");
        a.create(request(&id, now - Duration::seconds(30), 10))
            .await
            .expect("create");
        a.decide(
            &id,
            approved_by_priya(now - Duration::seconds(25)),
            now - Duration::seconds(25),
        )
        .await
        .expect("decide");
    }
    let mut got = Vec::new();
    loop {
        let (x, y) = tokio::join!(a.expire_due(now, 7), b.expire_due(now, 7));
        let (x, y) = (x.expect("sweep a"), y.expect("sweep b"));
        if x.is_empty() && y.is_empty() {
            break;
        }
        got.extend(x.into_iter().chain(y).map(|r| {
            assert_eq!(r.status, ApprovalStatus::Expired);
            r.request.id
        }));
    }
    let unique: BTreeSet<_> = got.iter().cloned().collect();
    // The 30 nobody decided, and the 5 approved and never run (issue 55: an approval that
    // lapses unused is announced too), each once.
    assert_eq!(got.len(), 35, "each expired approval once: {got:?}");
    assert_eq!(unique.len(), 35);
    assert!(
        unique
            .iter()
            .all(|id| id.starts_with("apr_old_") || id.starts_with("apr_done_"))
    );
    let lapsed = a.get("apr_done_0").await.expect("get").expect("exists");
    assert_eq!(lapsed.status, ApprovalStatus::Expired);
    assert!(lapsed.decision.is_some(), "the approval's decision is kept");
    let stored = a.get("apr_old_3").await.expect("get").expect("exists");
    assert_eq!(stored.status, ApprovalStatus::Expired);
    assert_eq!(
        a.get("apr_new_0")
            .await
            .expect("get")
            .expect("exists")
            .status,
        ApprovalStatus::Pending
    );
    match b.decide("apr_old_3", approved_by_priya(now), now).await {
        Err(ApprovalStoreError::WrongStatus { status, .. }) => assert_eq!(status, "expired"),
        other => panic!("a decision after expiry must be refused: {other:?}"),
    }
}

async fn two_replicas_sweeping_at_once_mark_each_expired_approval_once(db: &TestDb) {
    let (a, b) = (db.open().await, db.open().await);
    sweep_twice_at_once(Arc::new(a.approvals()), Arc::new(b.approvals())).await;
}

#[tokio::test]
async fn the_in_memory_coordinator_marks_each_expired_approval_once() {
    let c: Arc<dyn ApprovalCoordinator> = Arc::new(InMemoryApprovalCoordinator::new());
    sweep_twice_at_once(c.clone(), c).await;
}

async fn escalate_twice_at_once(a: Arc<dyn ApprovalCoordinator>, b: Arc<dyn ApprovalCoordinator>) {
    let now = Utc::now();
    // Requested 120 s ago: 10 pending (due), 3 decided, 2 already expired; and 4 requested
    // just now (not due yet).
    for i in 0..10 {
        a.create(request(&format!("esc_due_{i}"), now, 600))
            .await
            .expect("create");
    }
    for i in 0..3 {
        let id = format!("esc_done_{i}");
        a.create(request(&id, now, 600)).await.expect("create");
        a.decide(&id, approved_by_priya(now), now)
            .await
            .expect("decide");
    }
    for i in 0..2 {
        a.create(request(&format!("esc_gone_{i}"), now, -1))
            .await
            .expect("create");
    }
    for i in 0..4 {
        let mut r = request(&format!("esc_new_{i}"), now, 600);
        r.requested_at = now;
        a.create(r).await.expect("create");
    }
    let cutoff = now - Duration::seconds(60);
    let mut got = Vec::new();
    loop {
        let (x, y) = tokio::join!(
            a.escalate_due(cutoff, now, 3),
            b.escalate_due(cutoff, now, 3)
        );
        let (x, y) = (x.expect("escalate a"), y.expect("escalate b"));
        if x.is_empty() && y.is_empty() {
            break;
        }
        got.extend(x.into_iter().chain(y).map(|r| r.request.id));
    }
    let unique: BTreeSet<_> = got.iter().cloned().collect();
    assert_eq!(got.len(), 10, "each due approval escalated once: {got:?}");
    assert!(
        unique.iter().all(|id| id.starts_with("esc_due_")),
        "{unique:?}"
    );
    // Escalation fires once: later sweeps find nothing, and the approval is still pending.
    assert!(
        a.escalate_due(now, now, 100)
            .await
            .expect("again")
            .iter()
            .all(|r| r.request.id.starts_with("esc_new_"))
    );
    assert_eq!(
        a.get("esc_due_0")
            .await
            .expect("get")
            .expect("exists")
            .status,
        ApprovalStatus::Pending
    );
}

async fn two_replicas_escalating_at_once_escalate_each_pending_approval_once(db: &TestDb) {
    let (a, b) = (db.open().await, db.open().await);
    escalate_twice_at_once(Arc::new(a.approvals()), Arc::new(b.approvals())).await;
}

#[tokio::test]
async fn the_in_memory_coordinator_escalates_each_pending_approval_once() {
    let c: Arc<dyn ApprovalCoordinator> = Arc::new(InMemoryApprovalCoordinator::new());
    escalate_twice_at_once(c.clone(), c).await;
}
