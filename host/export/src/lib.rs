//! Audit export for capgate: the audit trail, already committed in the store, delivered
//! to the systems an organisation keeps its evidence in — an OpenTelemetry collector (OTLP
//! logs) and rotated JSON-lines files — and approval notifications to the people who decide
//! (signed webhooks, Slack), at least once, in order, and without ever holding up a call.
//!
//! ```no_run
//! # async fn run(store: capgate_store::Store) -> Result<(), Box<dyn std::error::Error>> {
//! use capgate_export::{ExportOptions, Exporter, JsonlSink};
//! let sink = JsonlSink::new("audit-export", 64 << 20)?;
//! let exporter = Exporter::new(store.audit_outbox("archive")?, Box::new(sink), ExportOptions::default());
//! let handle = exporter.spawn();
//! // … serve …
//! handle.stop().await;
//! # Ok(()) }
//! ```
//!
//! Concepts:
//! - **The outbox** is the store itself ([`capgate_store::AuditOutbox`]): a cursor per sink
//!   and chain, and a lease per sink, so one replica exports each sink and another takes
//!   over when it stops.
//! - **A sink** ([`ExportSink`]) delivers a batch and says when it is safe: the collector
//!   answered 2xx ([`OtlpSink`]), the lines are written and fsynced ([`JsonlSink`]). A
//!   sink may also keep the chains' signed checkpoints ([`ExportSink::deliver_checkpoints`]:
//!   the JSON-lines sink writes them as lines, the OTLP sink as log records named
//!   [`CHECKPOINT_EVENT`]), the copy off the box `capgate audit verify --checkpoints`
//!   checks the store against.
//! - **The exporter** ([`Exporter`]) loops: renew the lease, read the next batch after the
//!   cursors, deliver it within a timeout, then move the cursors. A failed delivery is
//!   retried with a growing, jittered back-off; the same batch goes again, so nothing is
//!   skipped, and a process killed between delivery and acknowledgement repeats at most
//!   that one batch. [`ExportStatus`] holds its lag and failures for `/readyz`; the metrics
//!   are `capgate_audit_export_*`.

mod exporter;
mod jsonl;
mod otlp;
mod sink;
mod webhook;

pub use exporter::{
    ExportHandle, ExportOptions, ExportStatus, Exporter, describe as describe_metrics,
};
pub use jsonl::{JsonlSink, jsonl_checkpoint_line, jsonl_line};
pub use otlp::{CHECKPOINT_EVENT, OtlpSink, OtlpTarget, checkpoint_records, log_records};
pub use sink::{Delivered, ExportSink, SinkError};
pub use webhook::{WebhookSink, WebhookStyle, WebhookTarget, notification, signature};
