//! `[audit.export.NAME]` to running exporters (`capgate_export`): each resolved table
//! ([`ExportSettings`]) made into its sink, started by `serve` once per process (the tables
//! are restart keys), with a `/readyz` check per sink.

use crate::resolve::{ExportSettings, ExportSpec, ExportTarget, TelemetrySettings};
use anyhow::Context;
use capgate_export::{
    ExportHandle, ExportSink, Exporter, JsonlSink, OtlpSink, OtlpTarget, WebhookSink, WebhookTarget,
};
use capgate_provider::mcp::SecretValue;
use capgate_store::Store;
use std::path::Path;

/// The sink a table describes: its secrets read and its `caFile` loaded now.
pub fn sink(
    spec: &ExportSpec,
    telemetry: &TelemetrySettings,
) -> anyhow::Result<Box<dyn ExportSink>> {
    let name = spec.name();
    let context = || format!("[audit.export.{name}]");
    let timeout = spec.options().timeout;
    Ok(match spec.target() {
        ExportTarget::Jsonl {
            directory,
            rotate_bytes,
        } => Box::new(JsonlSink::new(directory.clone(), *rotate_bytes).with_context(context)?),
        ExportTarget::Webhook {
            url,
            secret,
            style,
            console_url,
            events,
            namespaces,
            headers,
            ca_file,
        } => {
            let secret = secret
                .as_ref()
                .map(SecretValue::resolve)
                .transpose()
                .with_context(|| format!("[audit.export.{name}] secret"))?;
            Box::new(
                WebhookSink::new(WebhookTarget {
                    url: url.clone(),
                    secret,
                    style: *style,
                    console_url: console_url.clone(),
                    events: events.clone(),
                    namespaces: namespaces.clone(),
                    headers: resolved_headers(name, headers)?,
                    ca_pem: ca_pem(name, ca_file.as_deref())?,
                    timeout,
                })
                .with_context(context)?,
            )
        }
        ExportTarget::Otlp {
            endpoint,
            headers,
            ca_file,
        } => {
            let env = |k: &str| std::env::var(k).ok();
            let endpoint = telemetry
                .logs_endpoint(endpoint.as_deref(), env)
                .map_err(|m| anyhow::anyhow!("[audit.export.{name}]: {m}"))?;
            Box::new(
                OtlpSink::new(OtlpTarget {
                    endpoint,
                    headers: resolved_headers(name, headers)?,
                    service_name: telemetry.logs_service_name(env),
                    ca_pem: ca_pem(name, ca_file.as_deref())?,
                    timeout,
                })
                .with_context(context)?,
            )
        }
    })
}

/// The table's headers, their secrets resolved.
fn resolved_headers(
    name: &str,
    headers: &[(String, SecretValue)],
) -> anyhow::Result<Vec<(String, String)>> {
    headers
        .iter()
        .map(|(k, v)| {
            let value = v
                .resolve()
                .with_context(|| format!("[audit.export.{name}] headers.{k}"))?;
            Ok((k.clone(), value))
        })
        .collect()
}

/// The table's `caFile`, read.
fn ca_pem(name: &str, ca_file: Option<&Path>) -> anyhow::Result<Option<Vec<u8>>> {
    ca_file
        .map(|path| {
            std::fs::read(path)
                .with_context(|| format!("[audit.export.{name}] caFile {}", path.display()))
        })
        .transpose()
}

/// Start every configured exporter on `store`.
pub fn start(
    exports: &ExportSettings,
    telemetry: &TelemetrySettings,
    store: &Store,
) -> anyhow::Result<Vec<ExportHandle>> {
    let mut handles = Vec::new();
    for spec in exports.iter() {
        let outbox = store.audit_outbox(spec.name())?;
        let exporter = Exporter::new(outbox, sink(spec, telemetry)?, spec.options().clone());
        handles.push(exporter.spawn());
    }
    Ok(handles)
}
