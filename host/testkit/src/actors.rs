//! The walkthrough's people as core actors.

use capgate_core::actor::{Actor, ActorKind, ActorRef};
use serde_json::json;

/// Dana, the support agent's requester: a user of `org_1` allowed to refund orders.
pub fn dana() -> Actor {
    Actor::user(
        "u_dana",
        json!({ "orgId": "org_1", "permissions": ["orders:refund"] }),
    )
}

/// Priya, who approves Dana's large refunds.
pub fn priya() -> ActorRef {
    ActorRef {
        id: "u_priya".into(),
        kind: ActorKind::User,
    }
}

/// Priya's decision on an approval (`status`, with `comment`), as the in-process
/// walkthrough's approver: no namespace, no roles.
pub fn priya_decides(
    status: capgate_core::approval::DecisionStatus,
    comment: Option<&str>,
) -> capgate_core::runtime::DecideRequest {
    capgate_core::runtime::DecideRequest {
        status,
        approver: priya(),
        comment: comment.map(str::to_owned),
        decider: capgate_core::runtime::Decider::Approver {
            namespace: String::new(),
            roles: Vec::new(),
        },
    }
}
