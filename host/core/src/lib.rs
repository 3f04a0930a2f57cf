//! capgate-core: the governed capability pipeline, with no I/O of its own.
//!
//! An AI agent calls tools; capgate sits between the model and the application and takes
//! every call through one fixed, audited pipeline (the 15 stages of docs/pipeline.md). This
//! crate is that pipeline plus the seams everything else plugs into: Wasm plugins, durable
//! stores and the HTTP/MCP adapters implement its traits; nothing here touches a network or
//! a disk.
//!
//! ```
//! use capgate_core::prelude::*;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let registry = Registry::builder()
//!     .capability(
//!         CapabilityDef::new(
//!             "orders.refund",
//!             CapabilityMeta::new("Refund an order", SideEffect::Write, Risk::High)
//!                 .exposed_on([Surface::AiSdk]),
//!         )
//!         .input_schema(json!({
//!             "type": "object",
//!             "properties": { "orderId": {"type": "string"}, "amount": {"type": "number"} },
//!             "required": ["orderId", "amount"]
//!         }))
//!         .policy(policy_sync("refund-limit", |req| {
//!             let amount = req.input.and_then(|i| i["amount"].as_f64()).unwrap_or(0.0);
//!             Ok(if amount > 500.0 {
//!                 PolicyDecision::require_approval(format!("Refund of ${amount} exceeds $500"))
//!             } else {
//!                 PolicyDecision::allow()
//!             })
//!         }))
//!         .procedure(handler(|call| async move {
//!             Ok(json!({ "refundId": "ref_77", "amount": call.input["amount"] }))
//!         })),
//!     )
//!     .build()
//!     .expect("a valid registry");
//! let runtime = Runtime::builder(registry).build().expect("a valid runtime");
//!
//! let dana = Actor::user("u_dana", json!({ "orgId": "org_1" }));
//! let small = runtime
//!     .invoke(InvokeRequest::new(Surface::AiSdk, "orders.refund", json!({"orderId": "ord_1", "amount": 20}), dana.clone()))
//!     .await;
//! assert_eq!(small.status(), "completed");
//!
//! let big = runtime
//!     .invoke(InvokeRequest::new(Surface::AiSdk, "orders.refund", json!({"orderId": "ord_42", "amount": 649}), dana))
//!     .await;
//! assert_eq!(big.status(), "approval-required");
//! # }
//! ```
//!
//! # Core concepts
//!
//! - [`Registry`](registry::Registry): capabilities ([`CapabilityDef`](registry::CapabilityDef)) checked all at once, in declaration order.
//! - [`CapabilityMeta`](meta::CapabilityMeta): exposure per [`Surface`](actor::Surface), side effect, risk, retries, approval.
//! - [`Policy`](policy::Policy): allow, deny, hide or require approval; deny > hide > require-approval > allow.
//! - [`ApprovalCoordinator`](approval::ApprovalCoordinator): where approvals live; consumption is a compare-and-set.
//! - [`Procedure`](procedure::Procedure) and [`Middleware`](procedure::Middleware): the application's operation and its authoritative gate.
//! - [`Redactor`](redact::Redactor): what leaves the trust boundary.
//! - [`AuditSink`](audit::AuditSink): evidence without payloads.
//! - [`ExecutionResult`](result::ExecutionResult): the one envelope every call returns.
//! - [`BoundedId`](id::BoundedId): the one rule for every id that crosses a trust boundary.
//! - [`Sha256Hex`](digest::Sha256Hex): the one rule for a SHA-256 digest written as text.
//! - [`metrics`]: calls, policies and approvals counted through the `metrics` facade, with
//!   labels from configuration only (install a recorder to collect them).
//!
//! # Example architecture: one request's lifecycle
//!
//! An adapter (the HTTP gateway, the MCP server, your own server code) authenticates the
//! transport and builds the [`Actor`](actor::Actor) from credentials, never from model output;
//! it hard-codes its surface. [`Runtime::invoke`](runtime::Runtime::invoke) then assigns an
//! execution id and emits `capability.requested` before anything else, so even probes for
//! hidden capabilities are on record. Resolution and exposure come before validation so
//! that an error message can never reveal a capability the surface should not see; validation
//! comes before policies so policies reason over the canonical value an approval will bind.
//! Every policy runs (no short-circuit) under one shared deadline, so audit has each stance.
//! If approval is needed, the validated input is hashed (RFC 8785 + SHA-256) and the call is
//! suspended; [`Runtime::resume`](runtime::Runtime::resume) re-checks the record, the hash and
//! the current schema, consumes the approval atomically, and continues under a new execution
//! id. The procedure runs under a composed deadline and cancellation token, behind the
//! application's middleware; its output is validated against the true contract, then redacted
//! before any envelope, event or span sees it. The [`Runtime`](runtime::Runtime) itself is
//! immutable and shared: all per-call state lives in the call.
//!
//! # Cargo features
//!
//! None: the crate is always the whole pipeline.

pub mod actor;
pub mod approval;
pub mod audit;
pub mod authz;
pub mod canonical;
pub mod clock;
pub mod defaults;
pub mod digest;
pub mod error;
pub mod id;
pub mod journal;
pub mod meta;
pub mod metrics;
mod pipeline;
pub mod policy;
pub mod procedure;
pub mod progress;
pub mod quota;
pub mod redact;
pub mod registry;
pub mod result;
pub mod runtime;
pub mod schema;
pub mod trace;
mod wire;

#[doc(hidden)]
pub use wire::unknown_spelling as __unknown_spelling;

pub use tokio_util::sync::CancellationToken;

/// The names most programs need.
pub mod prelude {
    pub use crate::actor::{Actor, ActorKind, ActorRef, Surface};
    pub use crate::approval::{
        ApprovalCoordinator, ApprovalFilter, ApprovalRecord, ApprovalStatus, DecisionStatus,
        InMemoryApprovalCoordinator,
    };
    pub use crate::audit::{
        AuditEvent, AuditSink, EventPayload, JsonLinesSink, MemorySink, TracingSink,
    };
    pub use crate::error::{CapabilityError, ErrorCode, PublicError, Stage};
    pub use crate::meta::{ApprovalConfig, CapabilityMeta, Expose, RetryConfig, Risk, SideEffect};
    pub use crate::policy::{
        Phase, Policy, PolicyDecision, PolicyError, PolicyRequest, Shadow, SharedJson, policy_fn,
        policy_sync,
    };
    pub use crate::procedure::{
        Middleware, Next, Procedure, ProcedureCall, ProcedureError, handler, middleware,
    };
    pub use crate::redact::{RedactError, Redactor, redactor_fn};
    pub use crate::registry::{CapabilityDef, Registry};
    pub use crate::result::ExecutionResult;
    pub use crate::runtime::{
        DecideRequest, Decider, DescribeOptions, InvokeRequest, ResumeOptions, Runtime,
        RuntimeBuildError, Scope,
    };
    pub use tokio_util::sync::CancellationToken;
}
