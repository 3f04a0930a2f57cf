//! The OTLP logs sink: each batch as one `ExportLogsServiceRequest` (OTLP/HTTP, protobuf)
//! following the OpenTelemetry log data model, POSTed to the collector traces go to.
//!
//! A record per event: `time_unix_nano` is when it happened, `event_name` its type
//! (`capability.started`), the body the spec's event envelope as a map, and the attributes
//! `capgate.audit.chain`, `capgate.audit.seq` and `capgate.audit.hash`, so a receiver can
//! drop a repeated delivery (`(chain, seq)` is unique) and check the chain.
//!
//! The chains' signed records (start records and checkpoints) travel the same way, one
//! record each named [`CHECKPOINT_EVENT`], the body the record as `capgate audit verify
//! --checkpoints` reads it (a JSON-lines line's `checkpoint`): the collector's copy is the
//! one off the box a database writer cannot rewrite.

use crate::sink::{Delivered, ExportSink, SinkError};
use capgate_store::{ExportedCheckpoint, ExportedEvent};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList, any_value,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use serde_json::Value;
use std::time::Duration;

/// Where and how an [`OtlpSink`] exports.
#[derive(Debug, Clone)]
pub struct OtlpTarget {
    /// The full URL logs are POSTed to (`http://collector:4318/v1/logs`).
    pub endpoint: String,
    /// Headers sent with every request (already resolved: credentials from the
    /// environment or a file).
    pub headers: Vec<(String, String)>,
    /// The resource's `service.name`.
    pub service_name: String,
    /// PEM CA certificates trusted besides the system's (an `https://` collector).
    pub ca_pem: Option<Vec<u8>>,
    /// The bound on one request.
    pub timeout: Duration,
}

/// The `event_name` of a log record carrying a chain's signed record (start or checkpoint).
pub const CHECKPOINT_EVENT: &str = "capgate.audit.checkpoint";

/// The largest collector answer read (a partial-success message is a few bytes).
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// OpenTelemetry logs over OTLP/HTTP protobuf.
pub struct OtlpSink {
    client: reqwest::Client,
    target: OtlpTarget,
}

impl OtlpSink {
    /// A sink for `target`.
    pub fn new(target: OtlpTarget) -> Result<OtlpSink, SinkError> {
        let client = crate::sink::http_client(target.timeout, target.ca_pem.as_deref())?;
        Ok(OtlpSink { client, target })
    }
}

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..KeyValue::default()
    }
}

/// A JSON value as an OTLP `AnyValue`: objects as maps, arrays as arrays, integers as
/// integers (a number outside `i64` as a double), `null` as the empty value.
fn any(v: &Value) -> AnyValue {
    use any_value::Value as V;
    let value = match v {
        Value::Null => None,
        Value::Bool(b) => Some(V::BoolValue(*b)),
        Value::Number(n) => Some(match n.as_i64() {
            Some(i) => V::IntValue(i),
            None => V::DoubleValue(n.as_f64().unwrap_or(f64::NAN)),
        }),
        Value::String(s) => Some(V::StringValue(s.clone())),
        Value::Array(a) => Some(V::ArrayValue(ArrayValue {
            values: a.iter().map(any).collect(),
        })),
        Value::Object(m) => Some(V::KvlistValue(KeyValueList {
            values: m
                .iter()
                .map(|(k, v)| KeyValue {
                    key: k.clone(),
                    value: Some(any(v)),
                    ..KeyValue::default()
                })
                .collect(),
        })),
    };
    AnyValue { value }
}

fn nanos(t: chrono::DateTime<chrono::Utc>) -> u64 {
    t.timestamp_nanos_opt()
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(0)
}

/// The log records of `events`, one each, as the module docs describe.
pub fn log_records(events: &[ExportedEvent]) -> Vec<LogRecord> {
    let observed = nanos(chrono::Utc::now());
    events
        .iter()
        .map(|e| {
            let mut attributes = Vec::with_capacity(3);
            if let Some(c) = &e.chain {
                attributes.push(kv(
                    "capgate.audit.chain",
                    any_value::Value::StringValue(c.clone()),
                ));
            }
            if let Some(s) = e.seq {
                attributes.push(kv("capgate.audit.seq", any_value::Value::IntValue(s)));
            }
            if let Some(h) = &e.hash {
                attributes.push(kv(
                    "capgate.audit.hash",
                    any_value::Value::StringValue(h.clone()),
                ));
            }
            LogRecord {
                time_unix_nano: nanos(e.at),
                observed_time_unix_nano: observed,
                severity_number: SeverityNumber::Info as i32,
                severity_text: "INFO".into(),
                event_name: e
                    .event
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                body: Some(any(&e.event)),
                attributes,
                ..LogRecord::default()
            }
        })
        .collect()
}

/// The log records of a chain's signed records, one each: [`CHECKPOINT_EVENT`], the
/// record as the body, its chain and seq as attributes.
pub fn checkpoint_records(records: &[ExportedCheckpoint]) -> Vec<LogRecord> {
    let observed = nanos(chrono::Utc::now());
    records
        .iter()
        .map(|c| LogRecord {
            time_unix_nano: nanos(c.at),
            observed_time_unix_nano: observed,
            severity_number: SeverityNumber::Info as i32,
            severity_text: "INFO".into(),
            event_name: CHECKPOINT_EVENT.into(),
            body: Some(any(&serde_json::to_value(c).unwrap_or(Value::Null))),
            attributes: vec![
                kv(
                    "capgate.audit.chain",
                    any_value::Value::StringValue(c.chain.clone()),
                ),
                kv("capgate.audit.seq", any_value::Value::IntValue(c.seq)),
            ],
            ..LogRecord::default()
        })
        .collect()
}

fn request(log_records: Vec<LogRecord>, service_name: &str) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![kv(
                    "service.name",
                    any_value::Value::StringValue(service_name.to_string()),
                )],
                ..Resource::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "capgate.audit".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..InstrumentationScope::default()
                }),
                log_records,
                ..ScopeLogs::default()
            }],
            ..ResourceLogs::default()
        }],
    }
}

#[async_trait::async_trait]
impl ExportSink for OtlpSink {
    fn kind(&self) -> &'static str {
        "otlp"
    }

    async fn deliver(&mut self, events: &[ExportedEvent]) -> Result<Delivered, SinkError> {
        self.post(log_records(events)).await
    }

    /// The signed records go to the collector as log records of their own, the copy off
    /// the box `capgate audit verify --checkpoints` checks a store against.
    async fn deliver_checkpoints(
        &mut self,
        records: &[ExportedCheckpoint],
    ) -> Result<Delivered, SinkError> {
        self.post(checkpoint_records(records)).await
    }
}

impl OtlpSink {
    /// POST one request of `records`; what the collector rejected of them.
    async fn post(&self, records: Vec<LogRecord>) -> Result<Delivered, SinkError> {
        let body = request(records, &self.target.service_name).encode_to_vec();
        let mut req = self
            .client
            .post(&self.target.endpoint)
            .header("content-type", "application/x-protobuf")
            .body(body);
        for (k, v) in &self.target.headers {
            req = req.header(k, v);
        }
        let mut resp = req.send().await.map_err(SinkError::transport)?;
        let status = resp.status();
        if !status.is_success() {
            return Err(SinkError::Status {
                status: status.as_u16(),
            });
        }
        // A partial success names records the collector refused; read a bounded answer.
        let mut answer = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(SinkError::transport)? {
            if answer.len() + chunk.len() > MAX_RESPONSE_BYTES {
                break;
            }
            answer.extend_from_slice(&chunk);
        }
        let rejected = ExportLogsServiceResponse::decode(answer.as_slice())
            .ok()
            .and_then(|r| r.partial_success)
            .map_or(0, |p| u64::try_from(p.rejected_log_records).unwrap_or(0));
        Ok(Delivered { rejected })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_event_becomes_a_record_with_its_type_time_body_and_chain() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-04T10:00:00.123456Z")
            .expect("time")
            .with_timezone(&chrono::Utc);
        let e = ExportedEvent {
            id: 9,
            at,
            chain: Some("019a".into()),
            seq: Some(3),
            hash: Some("ab".into()),
            event: json!({"type": "capability.denied", "data": {"n": 1, "f": 0.5, "ok": true, "x": null, "l": ["a"]}}),
        };
        let bytes = request(log_records(std::slice::from_ref(&e)), "gw").encode_to_vec();
        let back = ExportLogsServiceRequest::decode(bytes.as_slice()).expect("decodes");
        let rl = &back.resource_logs[0];
        let r = &rl.scope_logs[0].log_records[0];
        assert_eq!(r.event_name, "capability.denied");
        assert_eq!(r.time_unix_nano, 1_796_378_400_123_456_000);
        let attr = |k: &str| {
            r.attributes
                .iter()
                .find(|a| a.key == k)
                .and_then(|a| a.value.clone())
                .and_then(|v| v.value)
        };
        assert_eq!(
            attr("capgate.audit.seq"),
            Some(any_value::Value::IntValue(3))
        );
        assert_eq!(
            attr("capgate.audit.chain"),
            Some(any_value::Value::StringValue("019a".into()))
        );
        assert_eq!(r.body, Some(any(&e.event)));
        let Some(any_value::Value::KvlistValue(body)) = r.body.clone().and_then(|b| b.value) else {
            panic!("the body is a map");
        };
        assert!(body.values.iter().any(|kv| kv.key == "data"));
        assert_eq!(
            rl.resource.as_ref().map(|r| r.attributes[0].key.as_str()),
            Some("service.name")
        );
    }

    #[test]
    fn a_checkpoint_becomes_a_record_whose_body_verify_reads_back() {
        let c = ExportedCheckpoint {
            chain: "019a".into(),
            seq: 8,
            hash: "ab".repeat(32),
            at: chrono::DateTime::from_timestamp(1_796_378_400, 0).unwrap_or_default(),
            key_id: "k1".into(),
            signature: "cd".repeat(64),
            kind: Some("checkpoint".into()),
            prev: Some("ef".repeat(32)),
            every_events: None,
            unchained_through: None,
        };
        let bytes = request(checkpoint_records(std::slice::from_ref(&c)), "gw").encode_to_vec();
        let back = ExportLogsServiceRequest::decode(bytes.as_slice()).expect("decodes");
        let r = &back.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!(r.event_name, CHECKPOINT_EVENT);
        assert_eq!(r.time_unix_nano, 1_796_378_400_000_000_000);
        assert_eq!(
            r.body,
            Some(any(&serde_json::to_value(&c).expect("serializes")))
        );
        assert!(r.attributes.iter().any(|a| a.key == "capgate.audit.seq"
            && a.value.as_ref().and_then(|v| v.value.clone())
                == Some(any_value::Value::IntValue(8))));
    }
}
