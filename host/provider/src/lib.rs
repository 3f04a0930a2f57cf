//! capgate-provider: procedure adapters as providers.
//!
//! Stage 11 of the capgate pipeline runs the application's operation through a procedure
//! adapter — a native Rust handler, an HTTP upstream (the application's existing backend)
//! or a Wasm procedure component. This crate is the provider execution runtime every such
//! adapter runs under (docs/provider.md): a narrow [`Provider`]
//! interface and registry, ordered events with exactly one terminal, a per-attempt stall
//! watchdog whose `response_stalled` terminal carries only allowlisted metadata, and
//! fail-closed exact-target health probes. [`ProviderProcedure`] plugs a provider into
//! core's `Procedure` seam; [`HttpUpstream`] and [`ProcedureProvider`] are the adapters.
//!
//! ```
//! use capgate_core::prelude::*;
//! use capgate_provider::prelude::*;
//! use serde_json::json;
//! use std::sync::Arc;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! // A native handler as a provider, reporting progress (which feeds the stall watchdog).
//! let refunds = native_handler("refunds", |call| async move {
//!     call.report_progress(json!({ "step": "charging" }));
//!     Ok(json!({ "refundId": "ref_77", "amount": call.input["amount"] }))
//! });
//! let id = refunds.identity().clone();
//! let mut providers = ProviderRegistry::new();
//! providers
//!     .register(Arc::new(refunds), ProviderConf { response_stall_timeout_ms: 60_000, ..Default::default() })
//!     .expect("unique identity");
//! let providers = ProviderRuntime::new(providers);
//!
//! // The capability's procedure is the provider, run under the provider runtime.
//! let registry = Registry::builder()
//!     .capability(
//!         CapabilityDef::new(
//!             "orders.refund",
//!             CapabilityMeta::new("Refund an order", SideEffect::Write, Risk::High)
//!                 .exposed_on([Surface::AiSdk]),
//!         )
//!         .procedure(ProviderProcedure::new(providers, id)),
//!     )
//!     .build()
//!     .expect("a valid registry");
//! let runtime = Runtime::builder(registry).build().expect("a valid runtime");
//! let result = runtime
//!     .invoke(InvokeRequest::new(Surface::AiSdk, "orders.refund", json!({ "amount": 20 }), Actor::user("u_dana", json!({}))))
//!     .await;
//! assert_eq!(result.status(), "completed");
//! # }
//! ```
//!
//! # Where things are
//!
//! - [`provider`]: the `Provider` trait, optional lifecycle/command/tunnel capabilities, the
//!   registry, the closed command allowlist, requests, results and token usage.
//! - [`events`]: runtime events, tunnel frames, their classification, the one-terminal
//!   emitter.
//! - [`stall`]: stall-timeout validation and wire normalisation, the watchdog, the
//!   `response_stalled` terminal.
//! - [`health`]: probe vocabulary, classification/normalisation, the probe coordinator,
//!   `health_observation_seq`.
//! - [`runtime`]: the [`ProviderRuntime`] that ties them together for one attempt.
//! - [`bridge`]: the bridge to core's `Procedure` in both directions (and how a Wasm
//!   procedure's `progress` import feeds the watchdog).
//! - [`http`]: the HTTP upstream adapter and its documented JSON / NDJSON wire format.
//! - [`mcp`]: MCP servers as upstreams (stdio or streamable HTTP), one tool per capability,
//!   pinned to the digest of its reviewed definition.
//!
//! # Cargo features
//!
//! - `tls`: HTTPS upstreams and health endpoints (rustls). Plain HTTP needs nothing.

pub mod bridge;
pub mod events;
pub mod health;
pub mod http;
pub mod mcp;
pub mod provider;
pub mod runtime;
pub mod stall;
mod trace_context;

pub use bridge::{ProcedureProvider, ProviderProcedure, native_handler};
pub use http::{HttpRequestMapping, HttpUpstream, HttpUpstreamConfig};
pub use provider::{Provider, ProviderConf, ProviderIdentity, ProviderRegistry};
pub use runtime::ProviderRuntime;

/// The names most programs need.
pub mod prelude {
    pub use crate::bridge::{ProcedureProvider, ProviderProcedure, native_handler};
    pub use crate::events::{
        EventEmitter, EventType, FrameType, ProgressDisposition, RuntimeEvent, TunnelFrame,
        classify_provider_tunnel_frame, classify_runtime_event,
    };
    pub use crate::health::{
        JoinedHealth, LivenessClassification, ObservationScope, ProbeOutcome, ProbeTarget,
        ProviderHealth, ProviderProber, Session, classify_probe_outcome, normalize_probe_outcome,
        probe_health,
    };
    pub use crate::http::{HttpRequestMapping, HttpUpstream, HttpUpstreamConfig};
    pub use crate::provider::{
        ExecutionOutcome, Provider, ProviderCommand, ProviderConf, ProviderFailure,
        ProviderIdentity, ProviderRegistry, ProviderRun, RunRequest, TokenUsage,
    };
    pub use crate::runtime::{ProviderRuntime, ProviderRuntimeConfig, RunOptions, Sink};
    pub use crate::stall::{
        DEFAULT_RESPONSE_STALL_TIMEOUT_MS, StallTerminal, StallWatchdog, resolve_stall_timeout_ms,
        validate_stall_timeout_ms,
    };
}
