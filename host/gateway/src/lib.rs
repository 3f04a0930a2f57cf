//! capgate-gateway: the doors models, hosts and humans come through.
//!
//! The core runtime governs a call once it has an actor and a surface; this crate is what
//! gets it there over the network. Each door authenticates the caller from credentials
//! (never from the request body), fixes the surface, rate-limits and authorizes, then hands
//! the call to the runtime: the HTTP capability gateway (describe, invoke, getInvocation,
//! getApproval, resumeApproval, with an invocation journal so every call is admitted once),
//! the MCP server, and the human approvals API and console, which no model door can reach.
//! The wire contract is described in docs/gateway.md.
//!
//! One route on the `aiSdk` surface, one API key, one call through it:
//!
//! ```
//! use async_trait::async_trait;
//! use axum::body::Body;
//! use axum::http::{Request, StatusCode};
//! use capgate_core::authz::{AuthorizeError, AuthorizeRequest, Authorizer};
//! use capgate_core::journal::InMemoryInvocationJournal;
//! use capgate_core::prelude::*;
//! use capgate_gateway::auth::{ApiKeyEntry, ApiKeys, BuiltinAuthenticator, hash_api_key};
//! use capgate_gateway::door::Doorkeeper;
//! use capgate_gateway::routes::{GatewayOptions, capability_router};
//! use serde_json::{Value, json};
//! use std::sync::Arc;
//! use tower::ServiceExt;
//!
//! /// Any authenticated caller may use every operation; the policies stay the authority.
//! struct AnyAuthenticated;
//!
//! #[async_trait]
//! impl Authorizer for AnyAuthenticated {
//!     async fn authorize(&self, _: &AuthorizeRequest<'_>) -> Result<(), AuthorizeError> {
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let registry = Registry::builder()
//!     .capability(
//!         CapabilityDef::new(
//!             "orders.lookup",
//!             CapabilityMeta::new("Look up an order", SideEffect::Read, Risk::Low)
//!                 .exposed_on([Surface::AiSdk]),
//!         )
//!         .input_schema(json!({
//!             "type": "object",
//!             "properties": { "orderId": {"type": "string"} },
//!             "required": ["orderId"]
//!         }))
//!         .procedure(handler(|call| async move {
//!             Ok(json!({ "orderId": call.input["orderId"], "status": "shipped" }))
//!         })),
//!     )
//!     .build()
//!     .expect("a valid registry");
//! let runtime = Runtime::builder(registry).build().expect("a valid runtime");
//!
//! // Dana's key: stored as its SHA-256, bound to the aiSdk door, in namespace org_1.
//! let mut keys = ApiKeys::new();
//! keys.insert_hashed(
//!     hash_api_key("dana-key"),
//!     ApiKeyEntry::new(
//!         Actor::user("u_dana", json!({})),
//!         "org_1",
//!         vec![],
//!         vec![Surface::AiSdk],
//!         json!({}),
//!     ),
//! );
//! let authenticator = BuiltinAuthenticator { api_keys: keys, jwt: None };
//! let doorkeeper = Doorkeeper::new(Arc::new(authenticator), Arc::new(AnyAuthenticated));
//! // The in-memory journal is for development; use capgate-store's anywhere else.
//! let journal = Arc::new(InMemoryInvocationJournal::new());
//! let config = GatewayOptions::new(Surface::AiSdk, "rev-1", runtime, journal, doorkeeper);
//! let app = axum::Router::new().nest("/agent", capability_router(config).expect("a valid route"));
//!
//! let call = json!({
//!     "capabilityId": "orders.lookup",
//!     "input": { "orderId": "ord_42" },
//!     "invocationId": "call_1"
//! });
//! let request = Request::post("/agent/invoke")
//!     .header("authorization", "Bearer dana-key")
//!     .header("content-type", "application/json")
//!     .body(Body::from(call.to_string()))
//!     .expect("a request");
//! let response = app.oneshot(request).await.expect("the router never fails");
//! assert_eq!(response.status(), StatusCode::OK);
//! let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("a body");
//! let outcome: Value = serde_json::from_slice(&body).expect("JSON");
//! assert_eq!(outcome["status"], "completed");
//! assert_eq!(outcome["invocationId"], "call_1");
//! assert_eq!(outcome["output"], json!({ "orderId": "ord_42", "status": "shipped" }));
//! # }
//! ```
//!
//! # Modules
//!
//! - [`app`]: the application of a deployment ([`app::AppBuilder`]): every door mounted, the
//!   layers in one order, the state that survives a reload ([`app::Kept`]) and the paths it
//!   reserves ([`app::RESERVED`]).
//!
//! Each door is a module of one shape (`options`, `router`, `handlers`):
//!
//! - [`routes`]: the capability routes on one fixed surface ([`routes::capability_router`])
//!   and its configuration.
//! - [`health`]: `/healthz` + `/readyz` ([`health::readiness_router`]).
//! - [`mcp`]: the MCP server, over streamable HTTP and stdio.
//! - [`approvals_api`]: the human decision API ([`approvals_api::approvals_router`]),
//!   tenant-scoped.
//! - [`console`]: the approval console ([`console::console_router`]), a web page on that API.
//! - [`admin`]: the operator's `POST /admin/reload` ([`admin::admin_router`]).
//! - [`metrics`]: HTTP request metrics and the Prometheus `/metrics` route.
//!
//! What the doors share:
//!
//! - [`door`]: the one principal model every door runs (authenticate, bind the credential
//!   to its surfaces, rate-limit, authorize), as axum extractors.
//! - [`auth`]: authenticators — API keys stored as SHA-256, JWT bearer tokens — and the
//!   checks every principal must pass.
//! - [`identity`]: an OpenID Provider's keys (JWKS by URL or discovery, refreshed on
//!   rotation), claim mapping by JSON pointer, and the console's OIDC sign-in.
//! - [`wire`]: the camelCase request and answer shapes of the capability gateway
//!   (re-exported from `capgate-client`, the Rust client agent hosts use, so the two cannot
//!   drift).
//! - [`contract`] and [`tools`]: the portable contract, its digests and the tool formats,
//!   re-exported from [`capgate_contract`] (where they live, with the compatibility diff)
//!   for callers that name them through the gateway.
//! - [`throttle`]: per-address and per-principal throttles (unauthenticated requests,
//!   console sign-ins) and which client address a request comes from (trusted proxies).
//! - [`trace_context`]: W3C trace context on the doors (`traceparent` in, spans out).

pub mod admin;
pub mod app;
pub mod approvals_api;
pub mod auth;
pub mod console;
pub mod door;
pub mod health;
pub mod identity;
pub mod mcp;
pub mod metrics;
pub mod routes;
pub mod throttle;
pub mod trace_context;

mod debug;
mod reject;

/// The wire shapes the gateway serves, from [`capgate_client`] so the two cannot drift.
pub use capgate_client::wire;
/// The portable contract and its digests ([`capgate_contract::export`]), at the path they
/// had when the gateway defined them.
pub use capgate_contract::export as contract;
/// The tool formats ([`capgate_contract::tools`]), at the path they had when the gateway
/// defined them.
pub use capgate_contract::tools;
