//! `[audit.export.NAME]` to running exporters (`capgate_export`): each table resolved into
//! its sink and options, started by `serve` once per process (the tables are restart keys),
//! with a `/readyz` check per sink.

use anyhow::Context;
use capgate_config::model::{ExportSection, ExportTo, WebhookFormat};
use capgate_export::{
    ExportHandle, ExportOptions, ExportSink, Exporter, JsonlSink, OtlpSink, OtlpTarget,
    WebhookSink, WebhookStyle, WebhookTarget,
};
use capgate_store::Store;
use std::time::Duration;

/// The default `rotateBytes`: 64 MiB.
pub const DEFAULT_ROTATE_BYTES: u64 = 64 << 20;

/// The sink a table describes.
pub fn sink(
    cfg: &capgate_config::Config,
    name: &str,
    e: &ExportSection,
) -> anyhow::Result<Box<dyn ExportSink>> {
    Ok(match e.to {
        ExportTo::Jsonl => {
            let dir = e
                .directory
                .as_deref()
                .with_context(|| format!("[audit.export.{name}] needs `directory`"))?;
            Box::new(
                JsonlSink::new(
                    cfg.relative(dir),
                    e.rotate_bytes.unwrap_or(DEFAULT_ROTATE_BYTES),
                )
                .with_context(|| format!("[audit.export.{name}]"))?,
            )
        }
        ExportTo::Webhook => {
            let url = e
                .endpoint
                .clone()
                .with_context(|| format!("[audit.export.{name}] needs `endpoint`"))?;
            let secret = e
                .secret
                .as_ref()
                .map(|s| crate::resolve::secret_value(cfg, s).resolve())
                .transpose()
                .with_context(|| format!("[audit.export.{name}] secret"))?;
            Box::new(
                WebhookSink::new(WebhookTarget {
                    url,
                    secret,
                    style: match e.format.unwrap_or_default() {
                        WebhookFormat::Json => WebhookStyle::Json,
                        WebhookFormat::Slack => WebhookStyle::Slack,
                    },
                    console_url: e.console_url.clone(),
                    events: e.events.clone(),
                    namespaces: e.namespaces.clone(),
                    headers: headers(cfg, name, e)?,
                    ca_pem: ca_pem(cfg, name, e)?,
                    timeout: timeout(e),
                })
                .with_context(|| format!("[audit.export.{name}]"))?,
            )
        }
        ExportTo::Otlp => {
            let env = |k: &str| std::env::var(k).ok();
            let endpoint = capgate_config::telemetry::logs_endpoint(
                e.endpoint.as_deref(),
                cfg.telemetry.traces.as_ref(),
                env,
            )
            .map_err(|m| anyhow::anyhow!("[audit.export.{name}]: {m}"))?;
            Box::new(
                OtlpSink::new(OtlpTarget {
                    endpoint,
                    headers: headers(cfg, name, e)?,
                    service_name: capgate_config::telemetry::logs_service_name(
                        cfg.telemetry.traces.as_ref(),
                        env,
                    ),
                    ca_pem: ca_pem(cfg, name, e)?,
                    timeout: timeout(e),
                })
                .with_context(|| format!("[audit.export.{name}]"))?,
            )
        }
    })
}

/// The table's headers, their secrets resolved.
fn headers(
    cfg: &capgate_config::Config,
    name: &str,
    e: &ExportSection,
) -> anyhow::Result<Vec<(String, String)>> {
    e.headers
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
    e: &ExportSection,
) -> anyhow::Result<Option<Vec<u8>>> {
    e.ca_file
        .as_ref()
        .map(|f| {
            let path = cfg.relative(f);
            std::fs::read(&path)
                .with_context(|| format!("[audit.export.{name}] caFile {}", path.display()))
        })
        .transpose()
}

fn timeout(e: &ExportSection) -> Duration {
    Duration::from_millis(e.timeout_ms.unwrap_or(10_000))
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
