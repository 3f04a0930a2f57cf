//! `[audit.export.NAME]` resolved: each table's sink with its paths against the config file
//! and its secrets as the provider resolves them (when the exporter starts), and how its
//! exporter runs. `crate::audit_export` starts them.

use super::{Base, secret_value};
use capgate_config::model::{ExportKind, ExportSection, SecretSetting, WebhookFormat};
use capgate_export::{ExportOptions, WebhookStyle};
use capgate_provider::mcp::SecretValue;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The default `rotateBytes`: 64 MiB.
pub const DEFAULT_ROTATE_BYTES: u64 = 64 << 20;

/// Every `[audit.export.NAME]`, in name order.
#[derive(Debug, Clone, Default)]
pub struct ExportSettings {
    exports: Vec<ExportSpec>,
}

impl ExportSettings {
    /// `[audit.export]`, paths against the config file's directory `base`.
    pub(crate) fn of(base: &Base, export: &BTreeMap<String, ExportSection>) -> ExportSettings {
        ExportSettings {
            exports: export
                .iter()
                .map(|(name, e)| ExportSpec::of(base, name, e))
                .collect(),
        }
    }

    /// The sinks, in name order.
    pub fn iter(&self) -> impl Iterator<Item = &ExportSpec> {
        self.exports.iter()
    }
}

/// One `[audit.export.NAME]`.
#[derive(Debug, Clone)]
pub struct ExportSpec {
    name: String,
    target: ExportTarget,
    options: ExportOptions,
}

impl ExportSpec {
    fn of(base: &Base, name: &str, e: &ExportSection) -> ExportSpec {
        let headers = |h: &BTreeMap<String, SecretSetting>| {
            h.iter()
                .map(|(k, v)| (k.clone(), secret_value(base, v)))
                .collect()
        };
        let ca = |f: &Option<String>| f.as_ref().map(|f| base.relative(f));
        let target = match &e.kind {
            ExportKind::Jsonl {
                directory,
                rotate_bytes,
            } => ExportTarget::Jsonl {
                directory: base.relative(directory),
                rotate_bytes: rotate_bytes.unwrap_or(DEFAULT_ROTATE_BYTES),
            },
            ExportKind::Webhook(w) => ExportTarget::Webhook {
                url: w.endpoint.clone(),
                secret: w.secret.as_ref().map(|s| secret_value(base, s)),
                style: match w.format {
                    WebhookFormat::Json => WebhookStyle::Json,
                    WebhookFormat::Slack => WebhookStyle::Slack,
                },
                console_url: w.console_url.clone(),
                events: w.events.clone(),
                namespaces: w.namespaces.clone(),
                headers: headers(&w.headers),
                ca_file: ca(&w.ca_file),
            },
            ExportKind::Otlp {
                endpoint,
                headers: h,
                ca_file,
            } => ExportTarget::Otlp {
                endpoint: endpoint.clone(),
                headers: headers(h),
                ca_file: ca(ca_file),
            },
        };
        let d = ExportOptions::default();
        let options = ExportOptions {
            batch_events: e.batch_events.map_or(d.batch_events, |n| {
                usize::try_from(n).unwrap_or(d.batch_events)
            }),
            timeout: e.timeout_ms.map_or(d.timeout, Duration::from_millis),
            max_lag: e.max_lag_seconds.map_or(d.max_lag, Duration::from_secs),
            ..d
        };
        ExportSpec {
            name: name.to_string(),
            target,
            options,
        }
    }

    /// `NAME`: the outbox cursor and the `/readyz` check are named after it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the events go.
    pub fn target(&self) -> &ExportTarget {
        &self.target
    }

    /// How the exporter runs (batch, timeout, the lag that fails `/readyz`).
    pub fn options(&self) -> &ExportOptions {
        &self.options
    }
}

/// An export sink's kind with its settings resolved.
#[derive(Debug, Clone)]
pub enum ExportTarget {
    /// `to = "jsonl"`.
    Jsonl {
        /// Where the files go.
        directory: PathBuf,
        /// The size at which a new file starts.
        rotate_bytes: u64,
    },
    /// `to = "webhook"`.
    Webhook {
        /// The URL notifications are POSTed to.
        url: String,
        /// The Standard Webhooks signing secret.
        secret: Option<SecretValue>,
        /// capgate's JSON or a Slack message.
        style: WebhookStyle,
        /// The console URL each notification links to.
        console_url: Option<String>,
        /// Which notifications it sends (absent: all).
        events: Option<Vec<String>>,
        /// Only these namespaces' approvals (absent: all).
        namespaces: Option<Vec<String>>,
        /// Headers sent with every notification.
        headers: Vec<(String, SecretValue)>,
        /// Extra trusted roots.
        ca_file: Option<PathBuf>,
    },
    /// `to = "otlp"`.
    Otlp {
        /// The table's own collector, if it names one (else the environment's, then the
        /// traces' collector: [`super::TelemetrySettings::logs_endpoint`]).
        endpoint: Option<String>,
        /// Headers sent with every export.
        headers: Vec<(String, SecretValue)>,
        /// Extra trusted roots.
        ca_file: Option<PathBuf>,
    },
}
