//! `[audit.export.NAME]` to running exporters (`capgate_export`): each table resolved into
//! its sink and options, started by `serve` once per process (the tables are restart keys),
//! with a `/readyz` check per sink.

use anyhow::Context;
use capgate_config::model::{ExportKind, ExportSection, SecretSetting, WebhookFormat};
use capgate_export::{
    ExportHandle, ExportOptions, ExportSink, Exporter, JsonlSink, OtlpSink, OtlpTarget,
    WebhookSink, WebhookStyle, WebhookTarget,
};
use capgate_store::Store;
use std::collections::BTreeMap;
use std::time::Duration;

/// The default `rotateBytes`: 64 MiB.
pub const DEFAULT_ROTATE_BYTES: u64 = 64 << 20;

/// The sink a table describes.
pub fn sink(
    cfg: &capgate_config::Config,
    name: &str,
    e: &ExportSection,
) -> anyhow::Result<Box<dyn ExportSink>> {
    let context = || format!("[audit.export.{name}]");
    Ok(match &e.kind {
        ExportKind::Jsonl {
            directory,
            rotate_bytes,
        } => Box::new(
            JsonlSink::new(
                cfg.relative(directory),
                rotate_bytes.unwrap_or(DEFAULT_ROTATE_BYTES),
            )
            .with_context(context)?,
        ),
        ExportKind::Webhook(w) => {
            let secret = w
                .secret
                .as_ref()
                .map(|s| crate::resolve::secret_value(cfg, s).resolve())
                .transpose()
                .with_context(|| format!("[audit.export.{name}] secret"))?;
            Box::new(
                WebhookSink::new(WebhookTarget {
                    url: w.endpoint.clone(),
                    secret,
                    style: match w.format {
                        WebhookFormat::Json => WebhookStyle::Json,
                        WebhookFormat::Slack => WebhookStyle::Slack,
                    },
                    console_url: w.console_url.clone(),
                    events: w.events.clone(),
                    namespaces: w.namespaces.clone(),
                    headers: resolved_headers(cfg, name, &w.headers)?,
                    ca_pem: ca_pem(cfg, name, w.ca_file.as_deref())?,
                    timeout: timeout(e),
                })
                .with_context(context)?,
            )
        }
        ExportKind::Otlp {
            endpoint,
            headers,
            ca_file,
        } => {
            let env = |k: &str| std::env::var(k).ok();
            let endpoint = capgate_config::telemetry::logs_endpoint(
                endpoint.as_deref(),
                cfg.telemetry.traces.as_ref(),
                env,
            )
            .map_err(|m| anyhow::anyhow!("[audit.export.{name}]: {m}"))?;
            Box::new(
                OtlpSink::new(OtlpTarget {
                    endpoint,
                    headers: resolved_headers(cfg, name, headers)?,
                    service_name: capgate_config::telemetry::logs_service_name(
                        cfg.telemetry.traces.as_ref(),
                        env,
                    ),
                    ca_pem: ca_pem(cfg, name, ca_file.as_deref())?,
                    timeout: timeout(e),
                })
                .with_context(context)?,
            )
        }
    })
}

/// The table's headers, their secrets resolved.
fn resolved_headers(
    cfg: &capgate_config::Config,
    name: &str,
    headers: &BTreeMap<String, SecretSetting>,
) -> anyhow::Result<Vec<(String, String)>> {
    headers
        .iter()
        .map(|(k, v)| {
            let value = crate::resolve::secret_value(cfg, v)
                .resolve()
                .with_context(|| format!("[audit.export.{name}] headers.{k}"))?;
            Ok((k.clone(), value))
        })
        .collect()
}

/// The table's `caFile`, read.
fn ca_pem(
    cfg: &capgate_config::Config,
    name: &str,
    ca_file: Option<&str>,
) -> anyhow::Result<Option<Vec<u8>>> {
    ca_file
        .map(|f| {
            let path = cfg.relative(f);
            std::fs::read(&path)
                .with_context(|| format!("[audit.export.{name}] caFile {}", path.display()))
        })
        .transpose()
}

/// `timeoutMs`, or the exporter's own default.
fn timeout(e: &ExportSection) -> Duration {
    e.timeout_ms
        .map_or(ExportOptions::default().timeout, Duration::from_millis)
}

/// How the table's exporter runs.
pub fn options(e: &ExportSection) -> ExportOptions {
    let d = ExportOptions::default();
    ExportOptions {
        batch_events: e.batch_events.map_or(d.batch_events, |n| {
            usize::try_from(n).unwrap_or(d.batch_events)
        }),
        timeout: timeout(e),
        max_lag: e.max_lag_seconds.map_or(d.max_lag, Duration::from_secs),
        ..d
    }
}

/// Start every configured exporter on `store`.
pub fn start(cfg: &capgate_config::Config, store: &Store) -> anyhow::Result<Vec<ExportHandle>> {
    let mut handles = Vec::new();
    for (name, e) in &cfg.audit.export {
        let outbox = store.audit_outbox(name)?;
        let exporter = Exporter::new(outbox, sink(cfg, name, e)?, options(e));
        handles.push(exporter.spawn());
    }
    Ok(handles)
}
