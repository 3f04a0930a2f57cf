//! capgate-gateway: the doors models and hosts come through — the HTTP capability gateway
//! (describe, invoke, getInvocation, getApproval, resumeApproval), the human approvals API,
//! the portable contract and the MCP server. Its wire shapes are [`capgate_client`]'s, the
//! Rust client agent hosts use.
//!
//! - [`gateway::capability_router`]: the gateway on one fixed surface, backed by an
//!   invocation journal; [`gateway::health_router`] for `/healthz` and `/readyz`.
//! - [`door`]: the one principal model every door runs (authenticate, bind the credential
//!   to its surfaces, rate-limit, authorize), as axum extractors.
//! - [`approvals_api::approvals_router`]: the human decision API, tenant-scoped.
//! - [`console::console_router`]: the approval console, a web page on that API.
//! - [`contract::export_contract`]: the portable contract and its digests.
//! - [`wire`]: the bodies the doors read and answer (re-exported from `capgate-client`).
//! - [`admin::admin_router`]: the operator's `POST /admin/reload`.

#![warn(missing_docs)]

pub mod admin;
pub mod approvals_api;
pub mod auth;
pub mod console;
pub mod contract;
pub mod door;
pub mod gateway;
pub mod mcp;
pub mod metrics;
pub mod tools;
pub mod trace_context;

mod reject;

/// The wire shapes the gateway serves, from [`capgate_client`] so the two cannot drift.
pub use capgate_client::wire;
