//! `[telemetry]`: the tables a platform team configures capgate's metrics and traces
//! with, their checks, and how `[telemetry.traces]` combines with the standard `OTEL_*`
//! environment variables ([`TraceSettings::resolve`]).
//!
//! Precedence: the configuration file wins over the environment, which wins over the
//! defaults (OpenTelemetry's rule that programmatic configuration overrides environment
//! variables). `OTEL_SDK_DISABLED=true` turns traces off even when the table is present.

use crate::keys::Keys;
use crate::located::{Located, Problem, seg};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

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
    /// `http/protobuf`, the only protocol built in (see [`GRPC_REFUSED`]).
    pub protocol: Option<String>,
    /// The share of new traces recorded, 0 to 1 (default `OTEL_TRACES_SAMPLER_ARG`, then 1).
    /// A caller's `traceparent` decides for its own trace (parent-based sampling).
    pub sampling_ratio: Option<f64>,
    /// `service.name` (default `OTEL_SERVICE_NAME`, then `capgate`).
    pub service_name: Option<String>,
    /// More resource attributes (merged over `OTEL_RESOURCE_ATTRIBUTES`).
    #[serde(default)]
    pub resource_attributes: BTreeMap<String, String>,
    /// The bound on one export request (default `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, then
    /// `OTEL_EXPORTER_OTLP_TIMEOUT`, then 10000).
    pub export_timeout_ms: Option<u64>,
    /// Ended spans waiting for export; past it new spans are dropped and counted (default
    /// `OTEL_BSP_MAX_QUEUE_SIZE`, then 2048).
    pub max_queue_size: Option<usize>,
}

fn enabled_by_default() -> bool {
    true
}

/// Why `protocol = "grpc"` is refused.
pub const GRPC_REFUSED: &str = "`grpc` is not built into capgate: use `http/protobuf` (the OTLP/HTTP port, 4318), which every OpenTelemetry Collector and OTLP backend accepts. gRPC would add a second HTTP/2 and protobuf-service stack (tonic) to every build for the same data";

const MAX_EXPORT_TIMEOUT_MS: u64 = 60_000;
const MAX_QUEUE_SIZE: usize = 1 << 20;
const DEFAULT_EXPORT_TIMEOUT_MS: u64 = 10_000;
const DEFAULT_QUEUE_SIZE: usize = 2048;
const DEFAULT_BATCH_SIZE: usize = 512;
const DEFAULT_SCHEDULE_DELAY_MS: u64 = 5000;

/// The checks of `capgate check` on `[telemetry]`, each problem located.
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
    if let Some(r) = tr.sampling_ratio
        && !(r.is_finite() && (0.0..=1.0).contains(&r))
    {
        problems.push(doc.problem(
            &at("samplingRatio"),
            "must be between 0 and 1 (0.1 records one new trace in ten)",
        ));
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
    if let Some(ms) = tr.export_timeout_ms
        && !(1..=MAX_EXPORT_TIMEOUT_MS).contains(&ms)
    {
        problems.push(doc.problem(
            &at("exportTimeoutMs"),
            format!("must be between 1 and {MAX_EXPORT_TIMEOUT_MS} (one export request)"),
        ));
    }
    if let Some(n) = tr.max_queue_size
        && !(1..=MAX_QUEUE_SIZE).contains(&n)
    {
        problems.push(doc.problem(
            &at("maxQueueSize"),
            format!("must be between 1 and {MAX_QUEUE_SIZE} spans"),
        ));
    }
}

fn check_protocol(p: &str) -> Result<(), String> {
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

pub(crate) fn check_endpoint(e: &str) -> Result<(), String> {
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

/// What the exporter runs with: the table, over the environment, over the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// The full URL spans are POSTed to.
    pub endpoint: String,
    /// The share of new traces recorded.
    pub sampling_ratio: f64,
    /// `service.name`.
    pub service_name: String,
    /// The other resource attributes.
    pub resource_attributes: BTreeMap<String, String>,
    /// The bound on one export request.
    pub export_timeout: Duration,
    /// The queue of ended spans.
    pub max_queue_size: usize,
    /// Spans per export request (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, default 512).
    pub max_batch_size: usize,
    /// How long a partial batch waits (`OTEL_BSP_SCHEDULE_DELAY`, default 5000 ms).
    pub schedule_delay: Duration,
}

impl TraceSettings {
    /// The settings of `section` with the environment `env` (a lookup, so tests need not
    /// touch the process's), or `None` when traces are off. An environment variable that is
    /// set to something capgate cannot use is an error.
    pub fn resolve(
        section: Option<&TracesSection>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<TraceSettings>, String> {
        let Some(t) = section.filter(|t| t.enabled) else {
            return Ok(None);
        };
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        if t.protocol.is_none() {
            for name in [
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ] {
                if let Some(p) = var(name) {
                    check_protocol(p.trim()).map_err(|m| format!("{name}: {m}"))?;
                    break;
                }
            }
        }
        let endpoint = match (&t.endpoint, var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
            (Some(e), _) => signal_url(e),
            (None, Some(e)) => {
                check_endpoint(&e)
                    .map_err(|m| format!("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: {m}"))?;
                e
            }
            (None, None) => match var("OTEL_EXPORTER_OTLP_ENDPOINT") {
                Some(e) => {
                    check_endpoint(&e).map_err(|m| format!("OTEL_EXPORTER_OTLP_ENDPOINT: {m}"))?;
                    format!("{}/v1/traces", e.trim_end_matches('/'))
                }
                None => "http://localhost:4318/v1/traces".to_string(),
            },
        };
        let sampling_ratio = match t.sampling_ratio {
            Some(r) => r,
            None => env_ratio(&var),
        };
        let mut resource_attributes = var("OTEL_RESOURCE_ATTRIBUTES")
            .map(|s| parse_resource_attributes(&s))
            .unwrap_or_default();
        let env_service = resource_attributes.remove("service.name");
        resource_attributes.extend(
            t.resource_attributes
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        let service_name = t
            .service_name
            .clone()
            .or_else(|| var("OTEL_SERVICE_NAME"))
            .or(env_service)
            .unwrap_or_else(|| "capgate".to_string());
        let millis = |name: &str| var(name).and_then(|v| v.trim().parse::<u64>().ok());
        let export_timeout = t
            .export_timeout_ms
            .or_else(|| millis("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"))
            .or_else(|| millis("OTEL_EXPORTER_OTLP_TIMEOUT"))
            .unwrap_or(DEFAULT_EXPORT_TIMEOUT_MS)
            .clamp(1, MAX_EXPORT_TIMEOUT_MS);
        let max_queue_size = t
            .max_queue_size
            .or_else(|| millis("OTEL_BSP_MAX_QUEUE_SIZE").map(|n| n as usize))
            .unwrap_or(DEFAULT_QUEUE_SIZE)
            .clamp(1, MAX_QUEUE_SIZE);
        let max_batch_size = millis("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
            .map_or(DEFAULT_BATCH_SIZE, |n| n as usize)
            .clamp(1, max_queue_size);
        let schedule_delay = millis("OTEL_BSP_SCHEDULE_DELAY")
            .unwrap_or(DEFAULT_SCHEDULE_DELAY_MS)
            .clamp(1, 60_000);
        Ok(Some(TraceSettings {
            endpoint,
            sampling_ratio,
            service_name,
            resource_attributes,
            export_timeout: Duration::from_millis(export_timeout),
            max_queue_size,
            max_batch_size,
            schedule_delay: Duration::from_millis(schedule_delay),
        }))
    }
}

/// Where audit export's OTLP sinks send logs "to the same collector as traces": the
/// sink's own `endpoint` (a bare base URL gets `/v1/logs`), else
/// `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT` as it is, else the traces' configured collector with
/// `/v1/logs` (its `/v1/traces` path replaced), else `OTEL_EXPORTER_OTLP_ENDPOINT` +
/// `/v1/logs`, else `http://localhost:4318/v1/logs`. An environment value that is not a URL
/// is an error.
pub fn logs_endpoint(
    own: Option<&str>,
    traces: Option<&TracesSection>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let base = |e: &str| format!("{}/v1/logs", e.trim_end_matches('/'));
    if let Some(e) = own {
        return Ok(match e.parse::<http::Uri>() {
            Ok(u) if matches!(u.path(), "" | "/") => base(e),
            _ => e.to_string(),
        });
    }
    if let Some(e) = var("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT") {
        check_endpoint(&e).map_err(|m| format!("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: {m}"))?;
        return Ok(e);
    }
    if let Some(e) = traces.and_then(|t| t.endpoint.as_deref()) {
        return Ok(match e.parse::<http::Uri>() {
            Ok(u) if matches!(u.path(), "" | "/") => base(e),
            Ok(u) if u.path().ends_with("/v1/traces") => {
                format!("{}/v1/logs", &e[..e.len() - "/v1/traces".len()])
            }
            _ => e.to_string(),
        });
    }
    match var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        Some(e) => {
            check_endpoint(&e).map_err(|m| format!("OTEL_EXPORTER_OTLP_ENDPOINT: {m}"))?;
            Ok(base(&e))
        }
        None => Ok("http://localhost:4318/v1/logs".to_string()),
    }
}

/// The `service.name` export's OTLP logs carry: the traces' (`serviceName`), else
/// `OTEL_SERVICE_NAME`, else `capgate`.
pub fn logs_service_name(
    traces: Option<&TracesSection>,
    env: impl Fn(&str) -> Option<String>,
) -> String {
    traces
        .and_then(|t| t.service_name.clone())
        .or_else(|| env("OTEL_SERVICE_NAME").filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "capgate".to_string())
}

/// A configured endpoint as the URL to POST to: a bare base URL gets `/v1/traces`.
fn signal_url(e: &str) -> String {
    match e.parse::<http::Uri>() {
        Ok(u) if matches!(u.path(), "" | "/") => {
            format!("{}/v1/traces", e.trim_end_matches('/'))
        }
        _ => e.to_string(),
    }
}

/// The ratio the environment asks for (`OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`):
/// `always_off` 0, `always_on` 1, a ratio sampler its argument; capgate always samples
/// parent-based. Anything it cannot read is ignored with a warning (OpenTelemetry's rule for
/// invalid environment values).
fn env_ratio(var: &impl Fn(&str) -> Option<String>) -> f64 {
    let sampler = var("OTEL_TRACES_SAMPLER").map(|s| s.trim().to_ascii_lowercase());
    match sampler.as_deref() {
        Some("always_off" | "parentbased_always_off") => return 0.0,
        Some("always_on" | "parentbased_always_on") => return 1.0,
        None | Some("traceidratio" | "parentbased_traceidratio") => {}
        Some(other) => {
            tracing::warn!(target: "capgate::telemetry", "OTEL_TRACES_SAMPLER={other} is not supported; using the ratio sampler");
        }
    }
    match var("OTEL_TRACES_SAMPLER_ARG").map(|a| a.trim().parse::<f64>()) {
        None => 1.0,
        Some(Ok(r)) if r.is_finite() && (0.0..=1.0).contains(&r) => r,
        Some(_) => {
            tracing::warn!(target: "capgate::telemetry", "OTEL_TRACES_SAMPLER_ARG is not a ratio between 0 and 1; using 1");
            1.0
        }
    }
}

/// `key1=value1,key2=value2` with percent-encoded values (W3C baggage octets); malformed
/// entries are skipped.
fn parse_resource_attributes(s: &str) -> BTreeMap<String, String> {
    s.split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()).then(|| (k.to_string(), percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
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

    fn section(toml_text: &str) -> TracesSection {
        let v: toml::Value = toml::from_str(toml_text).expect("toml");
        serde_json::from_value(serde_json::to_value(v).expect("json")).expect("section")
    }

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn defaults_then_environment_then_file() {
        let empty = section("");
        let d = TraceSettings::resolve(Some(&empty), env(&[]))
            .expect("ok")
            .expect("on");
        assert_eq!(d.endpoint, "http://localhost:4318/v1/traces");
        assert_eq!(d.service_name, "capgate");
        assert_eq!(d.sampling_ratio, 1.0);
        assert_eq!(d.export_timeout, Duration::from_secs(10));
        assert_eq!(d.max_queue_size, 2048);

        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318/"),
            ("OTEL_SERVICE_NAME", "from-env"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "team=pay%20ments,service.name=ignored",
            ),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
        ];
        let e = TraceSettings::resolve(Some(&empty), env(&vars))
            .expect("ok")
            .expect("on");
        assert_eq!(e.endpoint, "http://otel:4318/v1/traces");
        assert_eq!(e.service_name, "from-env");
        assert_eq!(
            e.resource_attributes.get("team").map(String::as_str),
            Some("pay ments")
        );
        assert!(!e.resource_attributes.contains_key("service.name"));
        assert_eq!(e.sampling_ratio, 0.25);
        assert_eq!(e.export_timeout, Duration::from_secs(3));
        assert_eq!(e.max_queue_size, 100);

        let traces_only = [("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/custom")];
        let t = TraceSettings::resolve(Some(&empty), env(&traces_only))
            .expect("ok")
            .expect("on");
        assert_eq!(
            t.endpoint, "http://t:1/custom",
            "the signal URL is used as it is"
        );

        let file = section(
            "endpoint = \"http://file:4318\"\nserviceName = \"file\"\nsamplingRatio = 0.5\nresourceAttributes = { team = \"ops\" }",
        );
        let f = TraceSettings::resolve(Some(&file), env(&vars))
            .expect("ok")
            .expect("on");
        assert_eq!(f.endpoint, "http://file:4318/v1/traces");
        assert_eq!(f.service_name, "file");
        assert_eq!(f.sampling_ratio, 0.5);
        assert_eq!(
            f.resource_attributes.get("team").map(String::as_str),
            Some("ops")
        );
        let full = section("endpoint = \"http://file:4318/otlp/v1/traces\"");
        let u = TraceSettings::resolve(Some(&full), env(&[]))
            .expect("ok")
            .expect("on");
        assert_eq!(u.endpoint, "http://file:4318/otlp/v1/traces");
    }

    #[test]
    fn off_when_absent_disabled_or_sdk_disabled() {
        assert_eq!(TraceSettings::resolve(None, env(&[])), Ok(None));
        let off = section("enabled = false");
        assert_eq!(TraceSettings::resolve(Some(&off), env(&[])), Ok(None));
        let on = section("");
        let disabled = [("OTEL_SDK_DISABLED", "true")];
        assert_eq!(TraceSettings::resolve(Some(&on), env(&disabled)), Ok(None));
    }

    #[test]
    fn an_environment_asking_for_grpc_or_a_bad_endpoint_is_an_error() {
        let on = section("");
        let grpc = [("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")];
        let e = TraceSettings::resolve(Some(&on), env(&grpc)).expect_err("grpc");
        assert!(
            e.starts_with("OTEL_EXPORTER_OTLP_PROTOCOL: ") && e.contains("http/protobuf"),
            "{e}"
        );
        let bad = [("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url")];
        assert!(TraceSettings::resolve(Some(&on), env(&bad)).is_err());
        // The file's protocol wins over the environment's.
        let file = section("protocol = \"http/protobuf\"");
        assert!(TraceSettings::resolve(Some(&file), env(&grpc)).is_ok());
    }

    #[test]
    fn sampler_names_from_the_environment() {
        let on = section("");
        let ratio = |vars: &[(&str, &str)]| {
            TraceSettings::resolve(Some(&on), env(vars))
                .expect("ok")
                .expect("on")
                .sampling_ratio
        };
        assert_eq!(ratio(&[("OTEL_TRACES_SAMPLER", "always_off")]), 0.0);
        assert_eq!(
            ratio(&[
                ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.1")
            ]),
            0.1
        );
        assert_eq!(ratio(&[("OTEL_TRACES_SAMPLER_ARG", "7")]), 1.0);
    }

    #[test]
    fn audit_logs_go_to_the_traces_collector_unless_told_otherwise() {
        let none = |_: &str| None;
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let traces = |endpoint: &str| TracesSection {
            enabled: true,
            endpoint: Some(endpoint.to_string()),
            protocol: None,
            sampling_ratio: None,
            service_name: Some("gw".into()),
            resource_attributes: BTreeMap::new(),
            export_timeout_ms: None,
            max_queue_size: None,
        };
        assert_eq!(
            logs_endpoint(Some("http://siem:4318"), None, none).as_deref(),
            Ok("http://siem:4318/v1/logs")
        );
        assert_eq!(
            logs_endpoint(Some("http://siem:4318/in/logs"), None, none).as_deref(),
            Ok("http://siem:4318/in/logs")
        );
        let t = traces("http://otel:4318/v1/traces");
        assert_eq!(
            logs_endpoint(None, Some(&t), none).as_deref(),
            Ok("http://otel:4318/v1/logs")
        );
        assert_eq!(
            logs_endpoint(None, Some(&traces("http://otel:4318")), none).as_deref(),
            Ok("http://otel:4318/v1/logs")
        );
        assert_eq!(
            logs_endpoint(
                None,
                Some(&t),
                vars(&[("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://l:1/x")])
            )
            .as_deref(),
            Ok("http://l:1/x")
        );
        assert_eq!(
            logs_endpoint(
                None,
                None,
                vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://e:4318/")])
            )
            .as_deref(),
            Ok("http://e:4318/v1/logs")
        );
        assert_eq!(
            logs_endpoint(None, None, none).as_deref(),
            Ok("http://localhost:4318/v1/logs")
        );
        assert!(
            logs_endpoint(None, None, vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "nope")])).is_err()
        );
        assert_eq!(logs_service_name(Some(&t), none), "gw");
        assert_eq!(logs_service_name(None, none), "capgate");
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
