//! `[audit.export.NAME]` to running exporters (`capgate_export`): each table resolved into
//! its sink and options, started by `serve` once per process (the tables are restart keys),
//! with a `/readyz` check per sink.

use anyhow::Context;
use capgate_config::model::{ExportSection, ExportTo};
use capgate_export::{
    ExportHandle, ExportOptions, ExportSink, Exporter, JsonlSink, OtlpSink, OtlpTarget,
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
        ExportTo::Otlp => {
            let env = |k: &str| std::env::var(k).ok();
            let endpoint = capgate_config::telemetry::logs_endpoint(
                e.endpoint.as_deref(),
                cfg.telemetry.traces.as_ref(),
                env,
            )
            .map_err(|m| anyhow::anyhow!("[audit.export.{name}]: {m}"))?;
            let mut headers = Vec::new();
            for (k, v) in &e.headers {
                let value = cfg
                    .secret_value(v)
                    .resolve()
                    .with_context(|| format!("[audit.export.{name}] headers.{k}"))?;
                headers.push((k.clone(), value));
            }
            let ca_pem = match &e.ca_file {
                Some(f) => {
                    let path = cfg.relative(f);
                    Some(std::fs::read(&path).with_context(|| {
                        format!("[audit.export.{name}] caFile {}", path.display())
                    })?)
                }
                None => None,
            };
            Box::new(
                OtlpSink::new(OtlpTarget {
                    endpoint,
                    headers,
                    service_name: capgate_config::telemetry::logs_service_name(
                        cfg.telemetry.traces.as_ref(),
                        env,
                    ),
                    ca_pem,
                    timeout: timeout(e),
                })
                .with_context(|| format!("[audit.export.{name}]"))?,
            )
        }
    })
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
