//! capgate-store: the durable homes of approvals, audit events and the invocation journal,
//! on an embedded SQLite file (the default, no setup) or a shared Postgres (any number of
//! stateless replicas).
//!
//! Every cross-replica guarantee capgate makes (one decision per approval, one execution
//! per approval, one admission per invocation id) is a single conditional statement in the
//! database, never an in-process lock: two processes, or two pools in one process, sharing
//! a database get the same guarantees as one.
//!
//! ```
//! use capgate_core::prelude::*;
//! use capgate_store::{AuditSinkOptions, Store};
//! use serde_json::json;
//! use std::sync::Arc;
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // SQLite: created if missing, WAL, migrated at open. Postgres: `postgres://…`, then
//! // `store.migrate()` (or `capgate migrate`).
//! let dir = tempfile::tempdir()?;
//! let url = format!("sqlite://{}", dir.path().join("capgate.db").display());
//! let store = Store::open(&url).await?;
//!
//! let registry = Registry::builder()
//!     .capability(
//!         CapabilityDef::new(
//!             "orders.lookup",
//!             CapabilityMeta::new("Look up an order", SideEffect::Read, Risk::Low)
//!                 .exposed_on([Surface::AiSdk]),
//!         )
//!         .procedure(handler(|_call| async move { Ok(json!({ "status": "shipped" })) })),
//!     )
//!     .build()?;
//! let runtime = Runtime::builder(registry)
//!     .approvals(Arc::new(store.approvals()))
//!     .audit_sink(Arc::new(store.audit_sink(AuditSinkOptions::default())?))
//!     .strict_audit(true) // no durable `capability.started`, no execution
//!     .build()?;
//! let journal = store.journal(); // for the gateway
//!
//! let dana = Actor::user("u_dana", json!({}));
//! let result = runtime
//!     .invoke(InvokeRequest::new(Surface::AiSdk, "orders.lookup", json!({}), dana))
//!     .await;
//! assert_eq!(result.status(), "completed");
//! runtime.drain_audit().await?;
//!
//! // What `capgate audit tail` prints: the call's trail, oldest first.
//! let recent = store.audit_log().tail(20).await?;
//! let types: Vec<&str> = recent
//!     .iter()
//!     .filter_map(|row| row.event.as_ref().ok())
//!     .map(|event| event.type_name())
//!     .collect();
//! assert_eq!(types, ["capability.requested", "capability.started", "capability.completed"]);
//! # let _ = journal;
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! - [`Store`] opens a URL, owns the pools, runs the embedded migrations.
//!   Postgres takes libpq's TLS parameters (`sslmode=verify-full&sslrootcert=ca.pem`); a
//!   refused handshake is [`StoreError::Tls`] with a [`TlsFailure`].
//! - [`SqlApprovalCoordinator`] implements `capgate_core::approval::ApprovalCoordinator`.
//! - [`SqlAuditSink`] implements `capgate_core::audit::AuditSink`, batched with write-through for
//!   `capability.started`; [`AuditLog`] reads events back.
//! - [`SqlInvocationJournal`] implements `capgate_core::journal::InvocationJournal`.
//! - [`ConsoleSessionRows`] keeps the approval console's sessions (hashed ids, no raw
//!   credentials), so restarts and replicas keep them; [`McpSessionRows`] the same for MCP
//!   sessions over streamable HTTP (hashed ids and principals).
//! - [`SqlQuotaStore`] implements `capgate_core::quota::QuotaStore`: rate-limit buckets every
//!   replica shares, one conditional upsert per request.
//!
//! SQLite has one writer, so concurrent writes are committed in groups: the journal's and
//! the approvals' statements go to one task that runs whatever is waiting in one
//! transaction and answers each caller after the commit (a failing statement rolls its
//! batch back and every statement is retried alone), and concurrent written-through audit
//! events share one insert. Each statement keeps its meaning: a batch runs them in arrival
//! order on one connection, exactly as they would run one after the other.
//!
//! Rows read back are treated as hostile: each is validated and a bad one becomes a typed
//! `Malformed` error naming the record, never a panic.

mod approvals;
mod audit;
mod columns;
mod db;
mod group;
mod inline;
mod journal;
mod limits;
mod mcp_sessions;
mod mcp_tasks;
pub mod metrics;
mod params;
mod sessions;
mod time;
mod tls;
mod traced;
mod usage;

pub use approvals::SqlApprovalCoordinator;
pub use audit::{
    AuditExportError, AuditLog, AuditOrder, AuditOutbox, AuditQuery, AuditQueryError,
    AuditSinkOptions, AuditSinkStats, ChainSummary, CheckpointKeyError, CheckpointSigner,
    ExportedCheckpoint, ExportedEvent, Finding, MAX_EXPORT_BATCH, MalformedAuditRow, PurgeOptions,
    PurgeReport, SqlAuditSink, StoredAuditEvent, Tamper, VerifyOptions, VerifyReport, key_id,
};
pub use db::{
    Backend, MigrationReport, MigrationState, Store, StoreError, StoreOptions, migrate_url,
    migration_status_url,
};
pub use journal::{
    DEFAULT_REPLAY_HORIZON, InvocationFilter, RecordedInvocation, RecordedPage,
    SqlInvocationJournal,
};
pub use limits::SqlQuotaStore;
pub use mcp_sessions::{McpSessionRow, McpSessionRows};
pub use mcp_tasks::{MAX_TASK_FIELD_BYTES, McpTaskRow, McpTaskRowError, McpTaskRows};
pub use sessions::{
    ConsoleSessionRow, ConsoleSessionRows, MAX_SESSION_FIELD_BYTES, SessionRowError,
};
pub use tls::TlsFailure;
pub use traced::{Traced, db_system};
