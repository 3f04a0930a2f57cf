//! Who is calling, and through which door.
//!
//! The adapter (stage 1) builds the [`Actor`] from authenticated credentials and fixes the
//! [`Surface`]; neither ever comes from model output (SI-3).

use serde::{Deserialize, Serialize};

/// The namespace an operator principal carries: no tenant's, so no tenant's key may name it.
pub const OPERATOR_NAMESPACE: &str = "capgate.operators";

/// The role an operator holds by default (kept for embedders that map roles; a tenant's key
/// holding it opens nothing of the operator API).
pub const OPERATOR_ROLE: &str = "operator";

/// The kind of principal an [`Actor`] is. Anonymous access is explicit, never an absent actor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActorKind {
    /// A human user of the application.
    User,
    /// A service or workload identity.
    Service,
    /// An autonomous agent acting under its own identity (not the model).
    Agent,
    /// An explicitly anonymous caller.
    Anonymous,
}

crate::wire_enum! {
    ActorKind: FromStr("actor kind") {
        User => "user",
        Service => "service",
        Agent => "agent",
        Anonymous => "anonymous",
    }
}

/// The authenticated principal on whose behalf a capability runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Actor {
    /// Stable identifier of the principal (e.g. `u_dana`).
    pub id: String,
    /// What kind of principal this is.
    pub kind: ActorKind,
    /// Application attributes (org, permissions, ...) that policies may read. Never audited.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub attributes: serde_json::Value,
}

impl Actor {
    /// An actor with no attributes.
    pub fn new(id: impl Into<String>, kind: ActorKind) -> Self {
        Actor {
            id: id.into(),
            kind,
            attributes: serde_json::Value::Null,
        }
    }

    /// A user actor with the given attributes.
    pub fn user(id: impl Into<String>, attributes: serde_json::Value) -> Self {
        Actor {
            id: id.into(),
            kind: ActorKind::User,
            attributes,
        }
    }

    /// The `{id, kind}` projection that audit events and approvals record.
    pub fn reference(&self) -> ActorRef {
        ActorRef {
            id: self.id.clone(),
            kind: self.kind,
        }
    }

    /// Stage-6 well-formedness: a non-empty id without control characters, at most 256 bytes.
    pub fn is_well_formed(&self) -> bool {
        !self.id.is_empty() && self.id.len() <= 256 && !self.id.chars().any(char::is_control)
    }
}

/// An actor stripped of attributes: what evidence (audit, approvals) keeps.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ActorRef {
    /// The actor's id.
    pub id: String,
    /// The actor's kind.
    pub kind: ActorKind,
}

impl From<&Actor> for ActorRef {
    fn from(a: &Actor) -> Self {
        a.reference()
    }
}

/// The door a call came through. Each adapter hard-codes its own, so callers cannot spoof it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Surface {
    /// Server code calling the runtime directly.
    #[serde(rename = "direct")]
    Direct,
    /// Tools handed to an agent framework (the AI SDK adapter).
    #[serde(rename = "aiSdk")]
    AiSdk,
    /// The MCP server.
    #[serde(rename = "mcp")]
    Mcp,
    /// A workflow step.
    #[serde(rename = "workflow")]
    Workflow,
    /// The test harness, so tests exercise exposure rules like any other door.
    #[serde(rename = "test")]
    Test,
}

impl Surface {
    /// The surfaces a model calls through: the AI SDK's tool list and the MCP server. Tool
    /// names are checked, and discovery is concealed, on exactly these.
    pub const MODEL_FACING: [Surface; 2] = [Surface::AiSdk, Surface::Mcp];

    /// The surfaces a gateway door serves over the network: the two model-facing ones and
    /// workflow steps. A gateway route, an API key's doors and a contract diff range over
    /// these; `direct` and `test` never arrive through a door.
    pub const GATEWAY_DOORS: [Surface; 3] = [Surface::AiSdk, Surface::Mcp, Surface::Workflow];

    /// Whether a model talks through this surface (one of [`Surface::MODEL_FACING`]).
    pub fn is_model_facing(self) -> bool {
        Self::MODEL_FACING.contains(&self)
    }

    /// Whether a gateway door serves this surface (one of [`Surface::GATEWAY_DOORS`]).
    pub fn is_gateway_door(self) -> bool {
        Self::GATEWAY_DOORS.contains(&self)
    }
}

crate::wire_enum! {
    Surface: Display, FromStr("surface") {
        Direct => "direct",
        AiSdk => "aiSdk",
        Mcp => "mcp",
        Workflow => "workflow",
        Test => "test",
    }
}
