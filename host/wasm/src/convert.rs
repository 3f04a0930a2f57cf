//! Core types → WIT types (and back), with JSON crossing as text.

use crate::bindings::{wit, wit_policy};
use crate::error::CallError;
use capgate_core::actor::{Actor, ActorKind, Surface};
use capgate_core::approval::ApprovalRef;
use capgate_core::meta::{Risk, SideEffect};
use capgate_core::policy::{CapabilityInfo, Phase, PolicyDecision};

/// Longest reason, code or approval type a decision may carry.
const MAX_DECISION_FIELD: usize = 4_096;

pub(crate) fn surface(s: Surface) -> wit::Surface {
    match s {
        Surface::Direct => wit::Surface::Direct,
        Surface::AiSdk => wit::Surface::AiSdk,
        Surface::Mcp => wit::Surface::Mcp,
        Surface::Workflow => wit::Surface::Workflow,
        Surface::Test => wit::Surface::Test,
    }
}

pub(crate) fn actor_kind(k: ActorKind) -> wit::ActorKind {
    match k {
        ActorKind::User => wit::ActorKind::User,
        ActorKind::Service => wit::ActorKind::Service,
        ActorKind::Agent => wit::ActorKind::Agent,
        ActorKind::Anonymous => wit::ActorKind::Anonymous,
    }
}

pub(crate) fn actor(a: &Actor) -> wit::Actor {
    wit::Actor {
        id: a.id.clone(),
        kind: actor_kind(a.kind),
        attributes: a.attributes.to_string(),
    }
}

pub(crate) fn capability(c: &CapabilityInfo) -> wit::CapabilityInfo {
    wit::CapabilityInfo {
        id: c.id.clone(),
        side_effect: match c.side_effect {
            SideEffect::None => wit::SideEffect::None,
            SideEffect::Read => wit::SideEffect::Read,
            SideEffect::Write => wit::SideEffect::Write,
            SideEffect::Destructive => wit::SideEffect::Destructive,
            SideEffect::External => wit::SideEffect::External,
        },
        risk: match c.risk {
            Risk::Low => wit::Risk::Low,
            Risk::Medium => wit::Risk::Medium,
            Risk::High => wit::Risk::High,
            Risk::Critical => wit::Risk::Critical,
        },
        tags: c.tags.clone(),
    }
}

pub(crate) fn phase(p: Phase) -> wit::Phase {
    match p {
        Phase::Discovery => wit::Phase::Discovery,
        Phase::Invocation => wit::Phase::Invocation,
        Phase::Execution => wit::Phase::Execution,
    }
}

pub(crate) fn approval(a: &ApprovalRef) -> wit::ApprovalRef {
    wit::ApprovalRef {
        id: a.id.clone(),
        approver_id: a.approver.id.clone(),
        approver_kind: actor_kind(a.approver.kind),
    }
}

fn bounded(what: &str, s: &str) -> Result<(), CallError> {
    if s.len() > MAX_DECISION_FIELD {
        return Err(CallError::Malformed(format!(
            "{what} is {} bytes (at most {MAX_DECISION_FIELD})",
            s.len()
        )));
    }
    Ok(())
}

/// A WIT decision → core's, refusing oversized fields (core validates the rest).
pub(crate) fn decision(d: wit_policy::Decision) -> Result<PolicyDecision, CallError> {
    Ok(match d {
        wit_policy::Decision::Allow => PolicyDecision::Allow,
        wit_policy::Decision::Hide => PolicyDecision::Hide,
        wit_policy::Decision::Deny(wit_policy::Denial { code, message }) => {
            if let Some(c) = &code {
                bounded("deny code", c)?;
            }
            if let Some(m) = &message {
                bounded("deny message", m)?;
            }
            PolicyDecision::Deny { code, message }
        }
        wit_policy::Decision::RequireApproval(r) => {
            bounded("approval reason", &r.reason)?;
            if let Some(t) = &r.approval_type {
                bounded("approval type", t)?;
            }
            PolicyDecision::RequireApproval {
                reason: r.reason,
                approval_type: r.approval_type,
                expires_in_ms: r.expires_in_ms,
            }
        }
    })
}
