//! `[telemetry]`: the tables a platform team configures capgate's metrics and traces
//! with, and their checks. How `[telemetry.traces]` combines with the standard `OTEL_*`
//! environment variables is the server's business (`capgate_server::resolve::telemetry`).

use crate::keys::Keys;
use crate::located::{Located, Problem, seg};
use serde::Deserialize;
use std::collections::BTreeMap;

/// `[telemetry]`
#[derive(Keys, Debug, Clone, Default, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TelemetrySection {
    /// `[telemetry.traces]`: OpenTelemetry traces over OTLP; off when absent.
    #[key(table)]
    pub traces: Option<TracesSection>,
    /// `[telemetry.metrics]`: Prometheus metrics; off when absent.
    #[key(table)]
    pub metrics: Option<crate::model::MetricsSection>,
}

/// `[telemetry.traces]`. Every key is optional; what is left out comes from the `OTEL_*`
/// environment variables, then the defaults.
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TracesSection {
    /// Export traces (default `true`: the table's presence turns them on).
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    /// The collector: a base URL (`http://collector:4318`, capgate adds `/v1/traces`) or a
    /// full URL with a path, used as it is. Default `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
    /// then `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`, then
    /// `http://localhost:4318/v1/traces`.
    pub endpoint: Option<String>,
    /// `http/protobuf`, the only protocol built in: `grpc` is refused (it would add a second
    /// HTTP/2 and protobuf-service stack to every build for the same data).
    pub protocol: Option<String>,
    /// The share of new traces recorded, 0 to 1 (default `OTEL_TRACES_SAMPLER_ARG`, then 1).
    /// A caller's `traceparent` decides for its own trace (parent-based sampling).
    #[key(range = 0.0..=1.0)]
    pub sampling_ratio: Option<f64>,
    /// `service.name` (default `OTEL_SERVICE_NAME`, then `capgate`).
    pub service_name: Option<String>,
    /// More resource attributes (merged over `OTEL_RESOURCE_ATTRIBUTES`).
    #[serde(default)]
    pub resource_attributes: BTreeMap<String, String>,
    /// The bound on one export request (default `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, then
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`, then 10000).
    #[key(range = 1..=MAX_EXPORT_TIMEOUT_MS, unit = "milliseconds")]
    pub export_timeout_ms: Option<u64>,
    /// Ended spans waiting for export; past it new spans are dropped and counted (default
    /// `OTEL_BSP_MAX_QUEUE_SIZE`, then 2048).
    #[key(range = 1..=MAX_QUEUE_SIZE, unit = "spans")]
    pub max_queue_size: Option<usize>,
}

fn enabled_by_default() -> bool {
    true
}

/// Why `protocol = "grpc"` is refused.
pub const GRPC_REFUSED: &str = "`grpc` is not built into capgate: use `http/protobuf` (the OTLP/HTTP port, 4318), which every OpenTelemetry Collector and OTLP backend accepts. gRPC would add a second HTTP/2 and protobuf-service stack (tonic) to every build for the same data";

/// The largest `exportTimeoutMs` (one export request).
pub const MAX_EXPORT_TIMEOUT_MS: u64 = 60_000;
/// The largest `maxQueueSize`.
pub const MAX_QUEUE_SIZE: usize = 1 << 20;

/// The checks of `capgate check` on `[telemetry]` beyond the ranges its keys declare,
/// each problem located.
pub fn check(t: &TelemetrySection, doc: &Located, problems: &mut Vec<Problem>) {
    let Some(tr) = &t.traces else { return };
    let at = |key: &str| format!("/telemetry/traces/{key}");
    if let Some(e) = &tr.endpoint
        && let Err(m) = check_endpoint(e)
    {
        problems.push(doc.problem(&at("endpoint"), m));
    }
    if let Some(p) = &tr.protocol
        && let Err(m) = check_protocol(p)
    {
        problems.push(doc.problem(&at("protocol"), m));
    }
    if let Some(n) = &tr.service_name
        && n.trim().is_empty()
    {
        problems.push(doc.problem(&at("serviceName"), "must not be empty"));
    }
    for k in tr.resource_attributes.keys() {
        let key = format!("/telemetry/traces/resourceAttributes/{}", seg(k));
        if k.trim().is_empty() {
            problems.push(doc.problem(&key, "an attribute name must not be empty"));
        } else if k == "service.name" {
            problems.push(doc.problem(&key, "set the service name with `serviceName`"));
        }
    }
}

/// An OTLP protocol name capgate speaks (`http/protobuf`), else why not.
pub fn check_protocol(p: &str) -> Result<(), String> {
    match p {
        "http/protobuf" => Ok(()),
        "grpc" => Err(GRPC_REFUSED.to_string()),
        "http/json" => Err(
            "`http/json` is not built into capgate: use `http/protobuf`, which every OTLP receiver accepts"
                .to_string(),
        ),
        other => Err(format!(
            "`{other}` is not an OTLP protocol capgate speaks (expected `http/protobuf`)"
        )),
    }
}

/// An OTLP collector URL: `http://` or `https://` with a host.
pub fn check_endpoint(e: &str) -> Result<(), String> {
    let uri: http::Uri = e
        .parse()
        .map_err(|err| format!("`{e}` is not a URL: {err}"))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http" | "https"), Some(_)) => Ok(()),
        _ => Err(format!(
            "`{e}` must be an http:// or https:// URL with a host (e.g. http://127.0.0.1:4318)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    fn problems_of(traces: &str) -> Vec<String> {
        problems_in(&format!("[telemetry.traces]\n{traces}\n"))
    }

    /// The located problems of a whole file.
    fn problems_in(text: &str) -> Vec<String> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("capgate.toml");
        std::fs::write(&path, text).expect("write");
        match Config::load(&path) {
            Ok(_) => Vec::new(),
            Err(problems) => problems
                .iter()
                .map(|p| format!("{}:{}: {}: {}", p.line, p.column, p.key, p.message))
                .collect(),
        }
    }

    #[test]
    fn a_sound_traces_table_has_no_problem() {
        let ok = problems_of(
            "endpoint = \"http://127.0.0.1:4318\"\nprotocol = \"http/protobuf\"\nsamplingRatio = 0.1\nserviceName = \"gw\"\nresourceAttributes = { \"deployment.environment.name\" = \"prod\" }\nexportTimeoutMs = 2000\nmaxQueueSize = 4096",
        );
        assert_eq!(ok, Vec::<String>::new());
        assert_eq!(problems_of(""), Vec::<String>::new());
        assert_eq!(problems_of("samplingRatio = 1"), Vec::<String>::new());
    }

    #[test]
    fn grpc_is_refused_at_its_key_saying_what_is_supported_and_why() {
        let p = problems_of("protocol = \"grpc\"");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("2:1: telemetry.traces.protocol: "),
            "{p:?}"
        );
        assert!(
            p[0].contains("http/protobuf") && p[0].contains("tonic"),
            "{p:?}"
        );
    }

    #[test]
    fn every_bad_value_is_located_at_its_key_in_one_run() {
        let p = problems_of(
            "endpoint = \"collector:4318\"\nprotocol = \"thrift\"\nsamplingRatio = 1.5\nserviceName = \" \"\nresourceAttributes = { \"service.name\" = \"x\" }\nexportTimeoutMs = 0\nmaxQueueSize = 0",
        );
        let keys: Vec<&str> = p.iter().filter_map(|l| l.split(": ").nth(1)).collect();
        for key in [
            "telemetry.traces.endpoint",
            "telemetry.traces.protocol",
            "telemetry.traces.samplingRatio",
            "telemetry.traces.serviceName",
            "telemetry.traces.resourceAttributes.\"service.name\"",
            "telemetry.traces.exportTimeoutMs",
            "telemetry.traces.maxQueueSize",
        ] {
            assert!(keys.contains(&key), "{key} missing from {p:#?}");
        }
        assert_eq!(p.len(), 7, "{p:#?}");
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_located() {
        let p = problems_of("endpont = \"http://x:4318\"");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("telemetry.traces.endpont"), "{p:?}");
        let p = problems_of("resourceAttributes = { team = 7 }");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].contains("telemetry.traces.resourceAttributes.team"),
            "{p:?}"
        );
        let p = problems_of("samplingRatio = \"half\"");
        assert!(p[0].contains("telemetry.traces.samplingRatio"), "{p:?}");
    }

    #[test]
    fn an_export_sink_is_checked_at_its_keys() {
        assert_eq!(
            problems_in(
                "[audit.export.siem]\nto = \"otlp\"\nendpoint = \"http://127.0.0.1:4318\"\nbatchEvents = 100\n\n[audit.export.archive]\nto = \"jsonl\"\ndirectory = \"audit-export\"\nrotateBytes = 1048576\n"
            ),
            Vec::<String>::new()
        );
        // What a kind needs and takes is said once, by the sink's conversion, all of it in
        // one problem at the table.
        let p = problems_in("[audit.export.archive]\nto = \"jsonl\"\nendpoint = \"http://x:1\"\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].contains("audit.export.archive: a `jsonl` sink needs `directory`")
                && p[0].contains("`endpoint` is for `otlp` and `webhook` sinks"),
            "{p:?}"
        );
        let p = problems_in(
            "[audit.export.siem]\nto = \"otlp\"\nendpoint = \"ftp://x\"\nbatchEvents = 0\n",
        );
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            p.iter()
                .any(|m| m.starts_with("3:1: audit.export.siem.endpoint: ")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|m| m.starts_with("4:1: audit.export.siem.batchEvents: ")),
            "{p:?}"
        );
        let p = problems_in(
            "[audit.export.siem]\nto = \"otlp\"\nheaders = { \"bad header\" = \"x\" }\n",
        );
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].contains("`bad header` is not an HTTP header name"),
            "{p:?}"
        );
        let p = problems_in("[audit.export.approvers]\nto = \"webhook\"\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].contains("a `webhook` sink needs `endpoint`")
                && p[0].contains("a `webhook` sink needs `secret`"),
            "{p:?}"
        );
        assert_eq!(
            problems_in(
                "[audit.export.slack]\nto = \"webhook\"\nformat = \"slack\"\nendpoint = \"https://hooks.slack.com/services/T/B/X\"\nconsoleUrl = \"https://capgate.example.com/console\"\n"
            ),
            Vec::<String>::new()
        );
        let p = problems_in("[audit.export.siem]\nto = \"otlp\"\nformat = \"slack\"\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("`format` is for `webhook` sinks"), "{p:?}");
        let p = problems_in("[audit.export.\"a b\"]\nto = \"otlp\"\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("a sink's name is letters, digits"), "{p:?}");
    }

    #[test]
    fn retention_needs_the_checkpoint_key() {
        let p = problems_in("[audit]\nretainDays = 90\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with(
                "2:1: audit.retainDays: retention purges each chain up to a signed checkpoint"
            ),
            "{p:?}"
        );
        let p = problems_in("[audit]\nretainDays = 0\ncheckpointKey = \"x\"\n");
        assert!(p.iter().any(|m| m.contains("audit.retainDays")), "{p:?}");
    }
}
