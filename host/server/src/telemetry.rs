//! `[telemetry]`: what a platform team watches capgate with. This module holds the
//! trace exporter (OpenTelemetry over OTLP/HTTP protobuf); the `[telemetry.traces]` table
//! and its checks are `capgate_config::telemetry`, its resolution against the `OTEL_*`
//! environment [`crate::resolve::telemetry`], the log's line formats [`crate::logs`].
//!
//! How it fits together:
//! - [`init_logging`] installs the process's one `tracing` subscriber: the log (filtered by
//!   `CAPGATE_LOG`, default `warn`; text or JSON lines, [`crate::logs::LogFormat`]) and, beside it with a filter of its own, a switch that
//!   forwards capgate's info-level spans to an OpenTelemetry layer once [`start_traces`] has
//!   installed one. `CAPGATE_LOG` governs the log only; the traces see capgate's spans
//!   (targets `capgate*`) and never log events, so no plugin- or model-written text reaches
//!   the collector (SI-10).
//! - Sampling is decided at the head, before any span exists: the HTTP doors decide per
//!   request (`capgate_gateway::trace_context`: the caller's `traceparent` flag, else the
//!   configured ratio) and an unsampled request opens no span at all — the filter below
//!   refuses every span started inside its work. Root spans opened elsewhere (an MCP stdio
//!   session) get the same coin in the switch; a span inherits its parent's decision. At
//!   10 % sampling, nine calls in ten pay a task-local lookup per would-be span and nothing
//!   more. (One consequence: an unsampled call sends no `traceparent` to its HTTP upstreams.)
//! - [`start_traces`] builds the tracer: parent-based, always-on behind the switch's head
//!   decision, the resource (`service.name`, attributes), and
//!   capgate's own batch processor: ended spans go into a bounded queue without waiting, and
//!   one Tokio task exports them in batches, each export bounded by the export timeout. A
//!   full queue drops the span; a failed or timed-out export drops its batch; both are
//!   counted ([`dropped_spans`]). A call never waits for the collector.
//! - [`Traces::shutdown`] exports what is queued at server shutdown, within a bound.
//!
//! Precedence: the configuration file wins over the environment, which wins over the
//! defaults (OpenTelemetry's rule that programmatic configuration overrides environment
//! variables). `OTEL_SDK_DISABLED=true` turns traces off even when the table is present.

use crate::resolve::{TelemetrySettings, TraceSettings};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    Sampler, SdkTracerProvider, SpanData, SpanExporter as _, SpanProcessor,
};
use std::any::TypeId;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tracing::subscriber::Interest;
use tracing::{Level, Metadata};
use tracing_subscriber::Registry;
use tracing_subscriber::layer::{Context, Filter, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

// ── The subscriber ──

/// Whether capgate's spans go to the OpenTelemetry layer (set once, by [`start_traces`]).
static TRACES_ON: AtomicBool = AtomicBool::new(false);
/// The OpenTelemetry layer, once traces are started.
static OTEL: OnceLock<
    tracing_opentelemetry::OpenTelemetryLayer<Registry, opentelemetry_sdk::trace::Tracer>,
> = OnceLock::new();

/// Install the process's subscriber: the log on stderr in `format`, filtered by
/// `CAPGATE_LOG` (default `warn`), and the (for now empty) trace switch beside it.
pub fn init_logging(format: crate::logs::LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAPGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Colour only for a person at a terminal: a file or a log pipeline gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let log = match format {
        crate::logs::LogFormat::Text => log.boxed(),
        crate::logs::LogFormat::Json => log
            .with_ansi(false)
            .event_format(crate::logs::JsonLines)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(TraceSwitch.with_filter(CapgateSpans))
        .with(log.with_filter(filter))
        .init();
}

/// The spans traces carry: capgate's own (targets `capgate*`), info level and above, once
/// traces are on; never events.
struct CapgateSpans;

fn traced(meta: &Metadata<'_>) -> bool {
    TRACES_ON.load(Ordering::Relaxed)
        && meta.is_span()
        && meta.target().starts_with("capgate")
        && *meta.level() <= Level::INFO
}

impl<S> Filter<S> for CapgateSpans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn enabled(&self, meta: &Metadata<'_>, ctx: &Context<'_, S>) -> bool {
        // A span opened inside an unsampled trace is not wanted by the traces at all: when
        // the log does not want it either, it is never created (a disabled span costs one
        // branch), which is what makes nine unsampled calls in ten nearly free. (capgate
        // opens no span with an explicit parent; one that did would be judged by its
        // contextual parent here and by its own parent in `TraceSwitch`.)
        // A span with no parent inside an unsampled request's work (the HTTP door decided
        // before opening any span) is not wanted either.
        traced(meta)
            && match ctx.lookup_current() {
                Some(parent) => parent.extensions().get::<Unsampled>().is_none(),
                None => !capgate_gateway::trace_context::in_unsampled_trace(),
            }
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if traced(meta) {
            // Asked per span: whether it is wanted depends on the trace it opens in.
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(if TRACES_ON.load(Ordering::Relaxed) {
            tracing::level_filters::LevelFilter::INFO
        } else {
            tracing::level_filters::LevelFilter::OFF
        })
    }
}

/// Forwards spans to the OpenTelemetry layer once there is one, for sampled traces only
/// (the head decision, module docs). Events are not forwarded: log lines (a plugin's among
/// them) never become span events.
struct TraceSwitch;

/// Marks a span of an unsampled trace; its descendants inherit the decision.
struct Unsampled;

/// Whether a root span starts a sampled trace: as the HTTP door decided (its request span
/// carries the decision), else at the ratio.
fn head_sampled(attrs: &tracing::span::Attributes<'_>) -> bool {
    struct Decided(Option<bool>);
    impl tracing::field::Visit for Decided {
        fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
            if field.name() == capgate_gateway::trace_context::PARENT_SAMPLED {
                self.0 = Some(value);
            }
        }
        fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
    }
    let mut decided = Decided(None);
    attrs.record(&mut decided);
    capgate_gateway::trace_context::head_decision(decided.0).unwrap_or(false)
}

impl Layer<Registry> for TraceSwitch {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, Registry>,
    ) {
        let Some(l) = OTEL.get() else { return };
        let parent = if attrs.is_root() {
            None
        } else if attrs.is_contextual() {
            ctx.lookup_current()
        } else {
            attrs.parent().and_then(|p| ctx.span(p))
        };
        let sampled = match &parent {
            Some(p) => p.extensions().get::<Unsampled>().is_none(),
            None => head_sampled(attrs),
        };
        drop(parent);
        if sampled {
            l.on_new_span(attrs, id, ctx);
        } else if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Unsampled);
        }
    }
    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: Context<'_, Registry>,
    ) {
        if let Some(l) = OTEL.get() {
            l.on_record(id, values, ctx);
        }
    }
    fn on_follows_from(
        &self,
        id: &tracing::span::Id,
        follows: &tracing::span::Id,
        ctx: Context<'_, Registry>,
    ) {
        if let Some(l) = OTEL.get() {
            l.on_follows_from(id, follows, ctx);
        }
    }
    // `on_enter` is not forwarded: with neither context activation nor inactivity
    // tracking (both off in `start_traces`), the OpenTelemetry layer does nothing on entry.
    fn on_exit(&self, id: &tracing::span::Id, ctx: Context<'_, Registry>) {
        if let Some(l) = OTEL.get() {
            l.on_exit(id, ctx);
        }
    }
    fn on_close(&self, id: tracing::span::Id, ctx: Context<'_, Registry>) {
        if let Some(l) = OTEL.get() {
            l.on_close(id, ctx);
        }
    }
    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // SAFETY: forwarded to the layer the pointer points into, which lives for 'static
        // (a `OnceLock` static is never cleared).
        OTEL.get().and_then(|l| unsafe { l.downcast_raw(id) })
    }
}

// ── Export ──

static DROPPED: AtomicU64 = AtomicU64::new(0);
static EXPORTED: AtomicU64 = AtomicU64::new(0);

/// Spans that never reached the collector since start: dropped because the queue was full,
/// or lost with a batch whose export failed or timed out (a dead or black-holing collector).
pub fn dropped_spans() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Spans the collector accepted since start.
pub fn exported_spans() -> u64 {
    EXPORTED.load(Ordering::Relaxed)
}

/// Running traces: shut them down to export what is queued.
pub struct Traces {
    provider: SdkTracerProvider,
    control: mpsc::UnboundedSender<Control>,
}

enum Control {
    Shutdown(oneshot::Sender<()>),
}

/// Start traces as `section` and the environment say (nothing when they are off). Must run
/// inside the Tokio runtime: the exporter is a task of it.
pub fn start_traces(telemetry: &TelemetrySettings) -> anyhow::Result<Option<Traces>> {
    let settings = telemetry
        .traces(|k| std::env::var(k).ok())
        .map_err(|m| anyhow::anyhow!("traces: {m}"))?;
    let Some(s) = settings else { return Ok(None) };
    if OTEL.get().is_some() {
        anyhow::bail!("traces: already started in this process");
    }
    let mut exporter = {
        use opentelemetry_otlp::WithExportConfig;
        opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(s.endpoint.clone())
            .with_timeout(s.export_timeout)
            .build()
            .map_err(|e| anyhow::anyhow!("traces: the OTLP exporter for {}: {e}", s.endpoint))?
    };
    let resource = opentelemetry_sdk::Resource::builder_empty()
        .with_service_name(s.service_name.clone())
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_attributes(
            s.resource_attributes
                .iter()
                .map(|(k, v)| opentelemetry::KeyValue::new(k.clone(), v.clone())),
        )
        .build();
    exporter.set_resource(&resource);
    let (spans, queue) = mpsc::channel(s.max_queue_size);
    let (control, commands) = mpsc::unbounded_channel();
    tokio::spawn(export_loop(exporter, queue, commands, s.clone()));
    let provider = SdkTracerProvider::builder()
        .with_span_processor(QueueProcessor { spans })
        // The ratio is applied at the head, by the switch (module docs): what reaches the
        // tracer is sampled.
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
        .with_resource(resource)
        .build();
    let scope = opentelemetry::InstrumentationScope::builder("capgate")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer_with_scope(scope))
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        // Nothing reads the OpenTelemetry context as "current" (HTTP upstreams take it from
        // the span itself), so entering a span need not activate it: entering and leaving
        // spans, which async code does on every poll, stays cheap.
        .with_context_activation(false);
    if OTEL.set(layer).is_err() {
        anyhow::bail!("traces: already started in this process");
    }
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    capgate_gateway::trace_context::set_head_sampling(Some(s.sampling_ratio));
    TRACES_ON.store(true, Ordering::Relaxed);
    tracing::callsite::rebuild_interest_cache();
    tracing::info!(
        target: "capgate::telemetry",
        endpoint = %s.endpoint,
        sampling_ratio = s.sampling_ratio,
        "traces on"
    );
    Ok(Some(Traces { provider, control }))
}

impl Traces {
    /// Export what is queued, waiting at most `within`; then stop exporting.
    pub async fn shutdown(self, within: Duration) {
        let (done, finished) = oneshot::channel();
        if self.control.send(Control::Shutdown(done)).is_ok()
            && tokio::time::timeout(within, finished).await.is_err()
        {
            tracing::warn!(target: "capgate::telemetry", "traces: the last spans were not exported in time");
        }
        TRACES_ON.store(false, Ordering::Relaxed);
        capgate_gateway::trace_context::set_head_sampling(None);
        tracing::callsite::rebuild_interest_cache();
        drop(self.provider);
        eprintln!(
            "capgate: traces: {} span(s) exported, {} dropped (queue full or collector unavailable)",
            exported_spans(),
            dropped_spans()
        );
    }
}

/// The span processor: hands sampled ended spans to the export task without waiting.
#[derive(Debug)]
struct QueueProcessor {
    spans: mpsc::Sender<SpanData>,
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.spans.try_send(span).is_err() {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// The export task: batches of up to `max_batch_size`, sent when full or every
/// `schedule_delay`, one request at a time, each bounded by `export_timeout`. A shutdown
/// command (or the [`Traces`] handle going away) exports what is queued and ends it.
async fn export_loop(
    exporter: opentelemetry_otlp::SpanExporter,
    mut queue: mpsc::Receiver<SpanData>,
    mut commands: mpsc::UnboundedReceiver<Control>,
    s: TraceSettings,
) {
    let mut batch = Vec::with_capacity(s.max_batch_size);
    let mut tick = tokio::time::interval(s.schedule_delay);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            biased;
            command = commands.recv() => {
                while let Ok(span) = queue.try_recv() {
                    batch.push(span);
                    if batch.len() >= s.max_batch_size {
                        export(&exporter, &mut batch, &s, &mut failing).await;
                    }
                }
                export(&exporter, &mut batch, &s, &mut failing).await;
                let _ = exporter.shutdown();
                if let Some(Control::Shutdown(done)) = command {
                    let _ = done.send(());
                }
                return;
            }
            span = queue.recv() => match span {
                Some(span) => {
                    batch.push(span);
                    if batch.len() >= s.max_batch_size {
                        export(&exporter, &mut batch, &s, &mut failing).await;
                    }
                }
                None => {
                    export(&exporter, &mut batch, &s, &mut failing).await;
                    return;
                }
            },
            _ = tick.tick() => export(&exporter, &mut batch, &s, &mut failing).await,
        }
    }
}

async fn export(
    exporter: &opentelemetry_otlp::SpanExporter,
    batch: &mut Vec<SpanData>,
    s: &TraceSettings,
    failing: &mut bool,
) {
    if batch.is_empty() {
        return;
    }
    let spans = std::mem::replace(batch, Vec::with_capacity(s.max_batch_size));
    let n = spans.len() as u64;
    let outcome = tokio::time::timeout(s.export_timeout, exporter.export(spans)).await;
    let error = match outcome {
        Ok(Ok(())) => {
            EXPORTED.fetch_add(n, Ordering::Relaxed);
            if std::mem::take(failing) {
                tracing::warn!(target: "capgate::telemetry", endpoint = %s.endpoint, "traces: the collector accepts spans again");
            }
            return;
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {} ms", s.export_timeout.as_millis()),
    };
    DROPPED.fetch_add(n, Ordering::Relaxed);
    // One line when exporting starts failing, not one per batch.
    if !std::mem::replace(failing, true) {
        tracing::warn!(
            target: "capgate::telemetry",
            endpoint = %s.endpoint,
            "traces: export failed ({error}); spans are dropped and counted until the collector answers"
        );
    }
}
