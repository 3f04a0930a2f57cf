//! Gateway authorization seam: who may perform which gateway operation. Lives in core so
//! that Wasm `authorizer` plugins and native closures implement one trait.

use crate::actor::{Actor, Surface};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// An authenticated caller of a gateway: the actor plus its tenant partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Principal {
    /// Who is calling, as authenticated by the door.
    pub actor: Actor,
    /// Tenant/application partition (never empty).
    pub namespace: String,
}

/// What a door asks its authorizer about: the gateway's five operations, the approvals
/// API's three and the operator API's one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum Operation {
    /// Tool listing (and the contract).
    Describe,
    /// A governed call.
    Invoke,
    /// A receipt lookup.
    GetInvocation,
    /// An approval lookup by its requester.
    GetApproval,
    /// Continuing after approval.
    ResumeApproval,
    /// The approvals API: listing approvals for review.
    ListApprovals,
    /// The approvals API: reading one approval for review.
    ReviewApproval,
    /// The approvals API: approving or rejecting.
    DecideApproval,
    /// The operator API: reloading the deployment's configuration (`POST /admin/reload`).
    /// Asked of an operator principal, whose namespace is no tenant's.
    ReloadConfiguration,
}

crate::wire_enum! {
    Operation {
        Describe => "describe",
        Invoke => "invoke",
        GetInvocation => "getInvocation",
        GetApproval => "getApproval",
        ResumeApproval => "resumeApproval",
        ListApprovals => "listApprovals",
        ReviewApproval => "reviewApproval",
        DecideApproval => "decideApproval",
        ReloadConfiguration => "reloadConfiguration",
    }
}

crate::error::seam_error! {
    /// A refusal, with a private reason for logs. Every variant denies (fail closed); they
    /// differ only in what the logs keep.
    pub enum AuthorizeError ("not authorized") {
        /// The authorizer said no, for this reason.
        Denied, built by denied;
    }
}

/// One question to an authorizer: may this principal perform this operation, through this
/// door, on this capability and input?
#[derive(Debug, Clone, Copy)]
pub struct AuthorizeRequest<'a> {
    /// Who asks (authenticated).
    pub principal: &'a Principal,
    /// What they want to do.
    pub operation: Operation,
    /// The surface of the door they came through (`aiSdk` for `/agent`, `workflow` for
    /// `/workflow`, `mcp` for `/mcp`); `None` for the human approvals API, which is no
    /// model surface.
    pub surface: Option<Surface>,
    /// The capability concerned (for lookups: the stored one), if any.
    pub capability_id: Option<&'a str>,
    /// The input concerned (for lookups: the stored, private one), if any.
    pub input: Option<&'a serde_json::Value>,
}

/// Decides whether a principal may perform an operation. Must return `Err` to deny; runs
/// for every operation on every door, with the original private input for lookups.
#[async_trait]
pub trait Authorizer: Send + Sync + 'static {
    /// Allow with `Ok(())`, deny with `Err`.
    async fn authorize(&self, request: &AuthorizeRequest<'_>) -> Result<(), AuthorizeError>;
}
