//! capgate-wasm: the logic teams write themselves — policies, redactors, procedure adapters,
//! gateway authorizers — as sandboxed WebAssembly components, bound by the WIT interface
//! they export (`capgate:plugin@0.3.0`, `wit/capgate.wit`; components built against 0.1.0
//! and 0.2.0 keep loading). A Wasm plugin is just another
//! implementation of capgate-core's traits, so the pipeline cannot tell it from native code,
//! except that a plugin that loops, bloats, traps or lies fails closed.
//!
//! ```
//! use capgate_core::prelude::*;
//! use capgate_wasm::{Binding, PluginDir, WasmHost, sha256_hex};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! // Built by `cargo xtask build-plugins`.
//! let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../plugins/target/wasm32-wasip2/release");
//! # let pin = sha256_hex(&std::fs::read(format!("{dir}/refund_limit.wasm"))
//! #     .expect("run `cargo xtask build-plugins` first"));
//! // In a deployment the pin comes from the configuration file, never from the file itself.
//! let host = WasmHost::shared().expect("engine");
//! let plugin = host
//!     .load(&PluginDir::open(dir).expect("plugin dir"), "refund_limit.wasm", &pin)
//!     .expect("pinned, compiled, pre-linked");
//! let refund_limit = plugin
//!     .policy(Binding::new("refundLimit").config(json!({ "maxAmount": 500 })))
//!     .expect("it exports capgate:plugin/policy");
//!
//! let registry = Registry::builder()
//!     .capability(
//!         CapabilityDef::new(
//!             "orders.refund",
//!             CapabilityMeta::new("Refund an order", SideEffect::Write, Risk::High)
//!                 .exposed_on([Surface::AiSdk]),
//!         )
//!         .policy(refund_limit)
//!         .procedure(handler(|call| async move { Ok(json!({ "refundId": "ref_77", "amount": call.input["amount"] })) })),
//!     )
//!     .build()
//!     .expect("registry");
//! let runtime = Runtime::builder(registry).build().expect("a valid runtime");
//! let dana = Actor::user("u_dana", json!({ "orgId": "org_1" }));
//! let big = runtime
//!     .invoke(InvokeRequest::new(Surface::AiSdk, "orders.refund", json!({ "orderId": "ord_42", "amount": 649 }), dana))
//!     .await;
//! assert_eq!(big.approval().expect("held").reasons, ["Refund of $649 exceeds $500"]);
//! # }
//! ```
//!
//! # Core concepts
//!
//! - [`WasmHost`]: one per process — the `Engine` (component model, pooling allocator, epoch
//!   interruption, fuel), the epoch ticker thread, the upkeep thread (retires finished
//!   instances, refills reserves) and the slow lane (where a guest call that outlives its
//!   inline slice finishes).
//! - [`PluginDir`]: where components are read from, through cap-std (no path escapes it),
//!   with an optional compiled-code cache keyed by digest and engine compatibility hash.
//! - [`Plugin`]: a component checked against its SHA-256 pin, compiled, pre-linked
//!   (`InstancePre`); it knows its exports and refuses bindings it cannot serve.
//! - [`Binding`]: name, `config`, [`Limits`] (fuel, deadline, memory, output size, log rate)
//!   and [`Isolation`] (fresh per call by default, pooled on request) for one use of a plugin;
//!   a fresh binding's [`ReserveOptions`] say how many instances to keep ready ahead of calls.
//! - [`WasmPolicy`], [`WasmRedactor`], [`WasmProcedure`], [`WasmAuthorizer`]: core's traits.
//! - [`CallError`]: every way a call can fail; each trait maps it fail-closed.
//!
//! # One call's lifecycle
//!
//! Core calls [`WasmPolicy::evaluate`](capgate_core::policy::Policy::evaluate) with what is
//! left of the batch deadline. The binding takes the earlier of that and its own timeout,
//! turns it into whole epoch ticks (plus one: the epoch is engine-wide), and gets an
//! instance: in fresh mode a never-called one from the binding's reserve (instantiated ahead
//! by the upkeep thread), or, when the reserve is empty, a new `Store` (an empty WASI context,
//! built on the guest's first WASI call: no files, environment, sockets; clocks frozen)
//! instantiated now from the `InstancePre`
//! in a pooling-allocator slot; in pooled mode a warm instance of the binding's namespace.
//! Fuel and the deadline are armed before instantiation, so start-up code counts too. The
//! guest runs under `call_async` on the caller's task for at most the inline slice (1 ms);
//! past it, it yields at the next epoch tick and finishes on the slow lane, so guest code
//! never holds a Tokio worker, and a caller that stops waiting stops the guest at the next
//! tick. The request crosses as WIT
//! records with JSON text; the answer is checked (size caps, decision shape, JSON). Any trap
//! — deadline, fuel, the `ResourceLimiter`'s memory cap, stack overflow, a panic — becomes a
//! [`CallError`] and then a `PolicyError`, so core answers POLICY_FAILED and audits
//! `policy-failed`; a trapped instance is never entered again. The finished `Store` goes to
//! the upkeep thread, so the caller has its answer before the slot is reset; on a process
//! that may run on one CPU only it is dropped at once instead
//! ([`HostOptions::reaper_queue`]), since there the upkeep thread could only run in the
//! callers' time, a whole queue at once.

mod authorizer;
mod binding;
mod convert;
pub mod decode;
mod error;
mod host;
mod idle;
mod lazy;
mod limits;
pub mod metrics;
mod plugin;
mod policy;
mod procedure;
mod redactor;
mod sandbox;
mod store_data;
mod wit;

pub use authorizer::WasmAuthorizer;
pub use binding::Binding;
pub use error::{CallError, LoadError};
pub use host::{HostOptions, WasmHost};
pub use limits::{Isolation, Limits, ReserveOptions};
pub use plugin::{
    CONFIG_SCHEMA_SECTION, LoadSource, MAX_CONFIG_SCHEMA_BYTES, Plugin, PluginDir,
    declared_config_schema, sha256_hex,
};
pub use policy::WasmPolicy;
pub use procedure::WasmProcedure;
pub use redactor::WasmRedactor;
pub use sandbox::ReserveStats;
