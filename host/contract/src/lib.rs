//! capgate-contract: the portable contract of a capgate deployment, and whether two
//! contracts are compatible.
//!
//! A gateway route offers capabilities to remote agent hosts; the contract is what such a
//! host may know about them (docs/gateway.md, "Other shapes"): one
//! [`PortableCapabilityDescriptor`] per capability exposed on the route's surface, with a
//! digest that changes whenever anything the capability's governance depends on changes.
//! This crate is that concept in one place: the descriptors (the wire types the gateway
//! serves and `capgate-client` decodes), exporting them from a runtime, their digests, the
//! tool lists agent frameworks take, and the compatibility diff `capgate contract diff`
//! prints. It depends on `capgate-core` and serde only (no HTTP, no Wasm engine, no store),
//! so an agent host can check at start-up that the gateway still serves the contract it was
//! built against:
//!
//! ```
//! use capgate_contract::{Compatibility, Contract, check, export_contract};
//! use capgate_core::prelude::*;
//! use serde_json::json;
//!
//! /// A deployment with one refund capability of the given risk, on the aiSdk surface.
//! fn deployment(risk: Risk) -> Runtime {
//!     let registry = Registry::builder()
//!         .capability(
//!             CapabilityDef::new(
//!                 "orders.refund",
//!                 CapabilityMeta::new("Refund an order", SideEffect::Write, risk)
//!                     .exposed_on([Surface::AiSdk]),
//!             )
//!             .input_schema(json!({
//!                 "type": "object",
//!                 "properties": { "orderId": {"type": "string"}, "amount": {"type": "number"} },
//!                 "required": ["orderId", "amount"]
//!             }))
//!             .procedure(handler(|_| async { Ok(json!({ "refunded": true })) })),
//!         )
//!         .build()
//!         .expect("a valid registry");
//!     Runtime::builder(registry).build().expect("a valid runtime")
//! }
//!
//! // What the host was built against (`capgate contract export --surface aiSdk`).
//! let built = export_contract(&deployment(Risk::High), Surface::AiSdk, "rev-1");
//! assert_eq!(built[0].tool_names.ai_sdk, "orders_refund");
//! assert_eq!(built[0].contract_digest.len(), 64);
//! let expected = Contract::on(Surface::AiSdk, built);
//!
//! // A new revision that lowers the risk: every call still works, only the digest moved.
//! let lowered = export_contract(&deployment(Risk::Medium), Surface::AiSdk, "rev-2");
//! let verdict = check(&expected, &Contract::on(Surface::AiSdk, lowered));
//! assert!(verdict.is_compatible());
//!
//! // One that raises it is breaking, and says why.
//! let raised = export_contract(&deployment(Risk::Critical), Surface::AiSdk, "rev-3");
//! let verdict = check(&expected, &Contract::on(Surface::AiSdk, raised));
//! assert!(matches!(verdict, Compatibility::Breaking { .. }));
//! assert_eq!(verdict.to_string(), "breaking: orders.refund: risk raised: high → critical (risk)");
//! ```
//!
//! # Concepts
//!
//! - **Descriptor** ([`descriptor`]): one capability as a remote host sees it (id, input
//!   schema, side effect, risk, tags, approval hint, discovery, tool names, digest),
//!   version [`CONTRACT_VERSION`]. A contract file is the JSON array of one surface's
//!   descriptors ([`parse_contract`] reads one).
//! - **Contract** ([`Contract`]): a deployment's descriptors per surface. Contracts are per
//!   surface because exposure is: a capability may be on `aiSdk` and not on `mcp`.
//! - **Digests** ([`export`]): the per-capability [`contract_digest`] (meta, schemas, tool
//!   names, governance manifest and revision; a call may pin it), the
//!   [`descriptor_digest`] without the revision (what a pending approval is bound to), and
//!   the [`deployment_digest`] over every served surface (what a reload reports).
//! - **Tool formats** ([`tools`]): the tool list in an agent framework's own shape (Vercel
//!   AI SDK, OpenAI function calling), from live descriptors or from a contract.
//! - **Compatibility** ([`diff`], [`check`]): each change between two contracts is
//!   *breaking* when a call the old contract allowed can fail or reach another tool under
//!   the new one, *additive* otherwise; input schemas are compared by a JSON-Schema
//!   compatibility engine that counts what it cannot prove safe as breaking.

#![warn(missing_docs)]

mod check;
pub mod descriptor;
pub mod diff;
pub mod export;
pub mod tools;

#[cfg(test)]
mod testing;

pub use check::{Compatibility, check};
pub use descriptor::{
    CONTRACT_VERSION, Contract, ParseError, PortableCapabilityDescriptor, ToolNames, parse_contract,
};
pub use export::{
    ContractError, contract_digest, deployment_digest, descriptor_digest, export_contract,
    try_export_contract,
};
