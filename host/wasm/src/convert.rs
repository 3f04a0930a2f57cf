//! Core types → WIT types, with JSON crossing as text (the way back is [`crate::decode`]).

use crate::wit::wit;
use capgate_core::actor::{Actor, ActorKind, Surface};
use capgate_core::approval::ApprovalRef;
use capgate_core::meta::{Risk, SideEffect};
use capgate_core::policy::{CapabilityInfo, Phase};

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
