//! capgate's composition root as a library: a `capgate.toml` checked, assembled into a
//! deployment, and served (HTTP capability routes, MCP at `/mcp`, the approvals API and
//! console, admin reload, health and metrics), with the audit export, traces and the
//! background jobs beside it. The `capgate` binary is a command line over this crate; a
//! platform team that runs its own process serves a deployment with it the same way.
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! // Check the file as `capgate check` does: every problem located, nothing opened yet.
//! let checked = capgate_server::validate::validate("capgate.toml".as_ref())?;
//! // Serve it on a listener of the embedder's choosing, over the configuration's store.
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let served = capgate_server::serve::start(checked, None, listener).await?;
//! println!("serving on {}", served.addr());
//! // Reload the file when the embedder decides (audited as trigger `embedder`) …
//! let _answer = served.reload().await;
//! // … and stop: unready, drain, flush, close.
//! served.stop().await
//! # }
//! ```
//!
//! Concepts:
//! - **[`validate`]** is the one validation path: [`validate::Checked`] is a deployment
//!   that every check passed (plugins loaded and pinned, providers built, each route built
//!   over a scratch runtime); nothing can fail after it but the store or a listener.
//! - **[`resolve`]** turns the file's sections into what the running crates read, once, as
//!   [`validate`] assembles: typed settings with private fields (the gateway's doors and
//!   stop times, the journal's budget and horizons, metrics, audit, the store, the export
//!   sinks, traces against the `OTEL_*` environment, approval escalation, the MCP pins,
//!   the inventory `inspect` prints) and the provider's upstream settings. The file model
//!   is a private field of [`validate::Checked`]: downstream code reads these accessors,
//!   never the file.
//! - **[`build`]** opens the store's side of a checked deployment: the journal, the
//!   approvals, the audit sinks ([`build::Deployment`]).
//! - **[`serve`]** mounts the doors ([`serve::app`]), runs the background jobs (receipt
//!   and audit purges, approval expiry, the shared limits' cleanup) and the shutdown
//!   sequence; [`reload`] swaps in a new configuration whole, refusing keys only a
//!   restart applies; [`audit_export`], [`telemetry`], [`metrics`] and [`upstreams`] (the
//!   MCP pin watch) are started by it; [`store`] reads store URLs; [`logs`] writes the
//!   log as text or JSON lines.
//!
//! One request's lifecycle: the listener hands it to the application current when it
//! arrived (an `ArcSwap` a reload replaces; calls in flight keep theirs), whose door
//! authenticates the principal, admits it (rate limits, the journal claim), and runs the
//! call through the runtime's pipeline; the audit events it records are committed to the
//! store, which the exporters read as their outbox.

pub mod audit_export;
pub mod build;
pub mod logs;
pub mod metrics;
pub mod reload;
pub mod replay;
pub mod resolve;
pub mod scenario;
pub mod serve;
pub mod store;
pub mod telemetry;
pub mod upstreams;
pub mod validate;
