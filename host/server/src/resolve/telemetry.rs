//! `[telemetry.traces]` resolved: the table, over the standard `OTEL_*` environment
//! variables, over the defaults ([`TraceSettings::resolve`]), and where audit export's OTLP
//! logs go ([`logs_endpoint`]). The file's checks are `capgate_config::telemetry`'s; this is
//! what the exporter runs with.
//!
//! Precedence: the configuration file wins over the environment, which wins over the
//! defaults (OpenTelemetry's rule that programmatic configuration overrides environment
//! variables). `OTEL_SDK_DISABLED=true` turns traces off even when the table is present.

use axum::http;
use capgate_config::telemetry::{
    MAX_EXPORT_TIMEOUT_MS, MAX_QUEUE_SIZE, TracesSection, check_endpoint, check_protocol,
};
use std::collections::BTreeMap;
use std::time::Duration;

const DEFAULT_EXPORT_TIMEOUT_MS: u64 = 10_000;
const DEFAULT_QUEUE_SIZE: usize = 2048;
const DEFAULT_BATCH_SIZE: usize = 512;
const DEFAULT_SCHEDULE_DELAY_MS: u64 = 5000;

/// `[telemetry.traces]` as the deployment keeps it: resolved against the environment when
/// the exporters start (`serve`, `mcp`), so `check` does not depend on the shell it runs in.
#[derive(Debug, Clone, Default)]
pub struct TelemetrySettings {
    traces: Option<TracesSection>,
}

impl TelemetrySettings {
    /// `[telemetry]`'s traces table.
    pub fn of(cfg: &capgate_config::Config) -> TelemetrySettings {
        TelemetrySettings {
            traces: cfg.telemetry.traces.clone(),
        }
    }

    /// What the span exporter runs with under the environment `env`, or `None` when traces
    /// are off.
    pub fn traces(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<TraceSettings>, String> {
        TraceSettings::resolve(self.traces.as_ref(), env)
    }

    /// Where an OTLP export sink with endpoint `own` sends its logs ([`logs_endpoint`]).
    pub fn logs_endpoint(
        &self,
        own: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<String, String> {
        logs_endpoint(own, self.traces.as_ref(), env)
    }

    /// The `service.name` of export's OTLP logs ([`logs_service_name`]).
    pub fn logs_service_name(&self, env: impl Fn(&str) -> Option<String>) -> String {
        logs_service_name(self.traces.as_ref(), env)
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
}
