//! Gateway authorization seam: who may perform which gateway operation. Lives in core so
//! that Wasm `authorizer` plugins and native closures implement one trait.

use crate::actor::Actor;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// An authenticated caller of a gateway: the actor plus its tenant partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Principal {
    /// The actor.
    pub actor: Actor,
    /// Tenant/application partition (never empty).
    pub namespace: String,
}

/// The five gateway operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Operation {
    /// Tool listing.
    Describe,
    /// A governed call.
    Invoke,
    /// A receipt lookup.
    GetInvocation,
    /// An approval lookup.
    GetApproval,
    /// Continuing after approval.
    ResumeApproval,
}

impl Operation {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Describe => "describe",
            Operation::Invoke => "invoke",
            Operation::GetInvocation => "getInvocation",
            Operation::GetApproval => "getApproval",
            Operation::ResumeApproval => "resumeApproval",
        }
    }
}

/// A refusal, with a private reason for logs.
#[derive(Debug, Clone, thiserror::Error)]
#[error("not authorized: {0}")]
pub struct AuthorizeError(pub String);

/// Decides whether a principal may perform an operation. Must return `Err` to deny; runs
/// for every operation, with the original private input for lookups.
#[async_trait]
pub trait Authorizer: Send + Sync + 'static {
    /// Allow with `Ok(())`, deny with `Err`.
    async fn authorize(
        &self,
        principal: &Principal,
        operation: Operation,
        capability_id: Option<&str>,
        input: Option<&serde_json::Value>,
    ) -> Result<(), AuthorizeError>;
}
