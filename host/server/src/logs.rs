//! The log's line formats (`--log-format`, `CAPGATE_LOG_FORMAT`): text for a person, or one
//! JSON object per line for a log pipeline, carrying the OpenTelemetry trace and span ids of
//! the call it was written in (when traces are on), so a log line joins its trace.
//!
//! A JSON line: `{"timestamp", "level", "target", "message", "fields": {…}, "span",
//! "traceId", "spanId"}`; `span`, `traceId` and `spanId` only inside a span (the ids only
//! when the span is traced). Colour (ANSI escapes) is for a terminal only, in either format.

use opentelemetry::trace::TraceContextExt;
use serde_json::{Map, Value};
use std::fmt;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// `tracing`'s text lines (coloured at a terminal).
    #[default]
    Text,
    /// One JSON object per line ([`JsonLines`]).
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = UnknownLogFormat;

    fn from_str(s: &str) -> Result<LogFormat, UnknownLogFormat> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(UnknownLogFormat(other.to_string())),
        }
    }
}

/// A log format that is neither `text` nor `json`.
#[derive(Debug, thiserror::Error)]
#[error("unknown log format `{0}` (expected `text` or `json`)")]
pub struct UnknownLogFormat(pub String);

/// The JSON-lines event format.
pub struct JsonLines;

/// An event's fields as JSON: `message` apart, the rest by name.
#[derive(Default)]
struct Fields {
    message: Option<String>,
    fields: Map<String, Value>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: Value) {
        if field.name() == "message" {
            self.message = Some(match value {
                Value::String(s) => s,
                other => other.to_string(),
            });
        } else {
            self.fields.insert(field.name().to_string(), value);
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_string()));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            Value::String(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        );
        line.insert("level".into(), Value::String(meta.level().to_string()));
        line.insert("target".into(), Value::String(meta.target().to_string()));
        line.insert(
            "message".into(),
            Value::String(fields.message.unwrap_or_default()),
        );
        if !fields.fields.is_empty() {
            line.insert("fields".into(), Value::Object(fields.fields));
        }
        if let Some(span) = ctx.lookup_current() {
            line.insert("span".into(), Value::String(span.name().to_string()));
            // The OpenTelemetry context of the current span, when traces are on (the
            // switch forwards the lookup to the OpenTelemetry layer; off, it is empty).
            let cx = tracing::Span::current().context();
            let sc = cx.span().span_context().clone();
            if sc.is_valid() {
                line.insert("traceId".into(), Value::String(sc.trace_id().to_string()));
                line.insert("spanId".into(), Value::String(sc.span_id().to_string()));
            }
        }
        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    /// A writer the test reads back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn each_event_is_one_json_line_with_its_fields_and_span() {
        let out = Captured::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .event_format(JsonLines)
                .with_ansi(false)
                .with_writer(move || sink.clone()),
        );
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("capgate.call", capability = "orders.refund");
            let _in = span.enter();
            tracing::warn!(target: "capgate::audit", lost = 3, chain = "c1", "audit events \"lost\"\nhere");
        });
        let text = String::from_utf8(out.0.lock().expect("lock").clone()).expect("UTF-8");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let line: Value = serde_json::from_str(lines[0]).expect("a JSON line");
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["target"], "capgate::audit");
        assert_eq!(line["message"], "audit events \"lost\"\nhere");
        assert_eq!(line["fields"]["lost"], 3);
        assert_eq!(line["fields"]["chain"], "c1");
        assert_eq!(line["span"], "capgate.call");
        // No OpenTelemetry layer here: no ids, rather than made-up ones.
        assert!(line.get("traceId").is_none(), "{line}");
        assert!(!text.contains('\u{1b}'));
        assert!("yaml".parse::<LogFormat>().is_err());
        assert_eq!("json".parse::<LogFormat>().ok(), Some(LogFormat::Json));
    }
}
