//! Execution events and tunnel frames, their progress dispositions
//! ([`classify_runtime_event`], [`classify_provider_tunnel_frame`]), and the ordered
//! [`EventEmitter`] that publishes exactly one terminal.

use crate::provider::TokenUsage;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use tokio::sync::mpsc;

/// What an event or frame means to the stall watchdog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressDisposition {
    /// Nothing: does not reset the watchdog.
    None,
    /// The provider started; the watchdog already runs from admission, so no reset.
    Start,
    /// Progress: resets the watchdog.
    Progress,
    /// The provider's terminal: stops the watchdog.
    Terminal,
}

/// The type of an execution event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    /// `EventTypeStart`.
    Start,
    /// Incremental output.
    Delta,
    /// A progress message.
    Message,
    /// A token usage report.
    Usage,
    /// Successful end.
    Complete,
    /// Failed end.
    Error,
    /// Cancelled end.
    Cancelled,
    /// Anything this runtime does not know.
    #[serde(other)]
    Unknown,
}

/// One execution event.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeEvent {
    /// The type.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// Incremental output text.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub delta: String,
    /// A progress message.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// A structured progress value (what a `ProgressFn` receives), if any.
    pub data: Option<serde_json::Value>,
    /// Token usage, observation data.
    pub usage: Option<TokenUsage>,
}

impl RuntimeEvent {
    /// An event of a type with no content.
    pub fn of(event_type: EventType) -> Self {
        RuntimeEvent {
            event_type,
            delta: String::new(),
            message: String::new(),
            data: None,
            usage: None,
        }
    }
    /// `start`.
    pub fn start() -> Self {
        Self::of(EventType::Start)
    }
    /// A `delta` with text.
    pub fn delta(text: impl Into<String>) -> Self {
        RuntimeEvent {
            delta: text.into(),
            ..Self::of(EventType::Delta)
        }
    }
    /// A `message` with text.
    pub fn message(text: impl Into<String>) -> Self {
        RuntimeEvent {
            message: text.into(),
            ..Self::of(EventType::Message)
        }
    }
    /// A structured progress report: a `message` whose text is the value (a string as is,
    /// anything else as compact JSON; `null` and `""` are empty) and whose data is the value.
    pub fn progress(value: serde_json::Value) -> Self {
        let message = match &value {
            serde_json::Value::Null => String::new(),
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        RuntimeEvent {
            message,
            data: Some(value),
            ..Self::of(EventType::Message)
        }
    }
    /// A `usage` report.
    pub fn usage(usage: TokenUsage) -> Self {
        RuntimeEvent {
            usage: Some(usage),
            ..Self::of(EventType::Usage)
        }
    }
    /// `complete`, optionally with final usage.
    pub fn complete(usage: Option<TokenUsage>) -> Self {
        RuntimeEvent {
            usage,
            ..Self::of(EventType::Complete)
        }
    }
    /// `error` with a code or message.
    pub fn error(message: impl Into<String>) -> Self {
        RuntimeEvent {
            message: message.into(),
            ..Self::of(EventType::Error)
        }
    }
    /// `cancelled`.
    pub fn cancelled() -> Self {
        Self::of(EventType::Cancelled)
    }
}

/// `ClassifyRuntimeEvent`: start for `start`; terminal for complete/error/cancelled, checked
/// before usage (a `complete` carrying usage is terminal); progress for a non-empty
/// delta/message or for non-terminal usage; none for empty and unknown events.
pub fn classify_runtime_event(event: &RuntimeEvent) -> ProgressDisposition {
    match event.event_type {
        EventType::Start => return ProgressDisposition::Start,
        EventType::Complete | EventType::Error | EventType::Cancelled => {
            return ProgressDisposition::Terminal;
        }
        EventType::Unknown => return ProgressDisposition::None,
        EventType::Delta | EventType::Message | EventType::Usage => {}
    }
    if !event.delta.is_empty() || !event.message.is_empty() {
        return ProgressDisposition::Progress;
    }
    if event.usage.is_some() {
        return ProgressDisposition::Progress;
    }
    ProgressDisposition::None
}

/// The type of a tunnel frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameType {
    /// The response began (status, maybe headers).
    ResponseStart,
    /// A chunk of the response body.
    Body,
    /// Successful end.
    End,
    /// Failed end.
    Error,
    /// A token usage report.
    Usage,
    /// Anything this runtime does not know.
    #[serde(other)]
    Unknown,
}

/// One frame of a provider tunnel's response.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TunnelFrame {
    /// The type.
    #[serde(rename = "type")]
    pub frame_type: FrameType,
    /// Response status (on `response_start`).
    pub status: Option<u16>,
    /// Response headers (on `response_start`, optional).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// Body bytes (the payload).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub body: Vec<u8>,
    /// Error text (on `error`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// Token usage, observation data.
    pub usage: Option<TokenUsage>,
}

impl TunnelFrame {
    /// A frame of a type with no content.
    pub fn of(frame_type: FrameType) -> Self {
        TunnelFrame {
            frame_type,
            status: None,
            headers: Vec::new(),
            body: Vec::new(),
            error: String::new(),
            usage: None,
        }
    }
    /// `response_start` with a status and headers (possibly none).
    pub fn response_start(status: u16, headers: Vec<(String, String)>) -> Self {
        TunnelFrame {
            status: Some(status),
            headers,
            ..Self::of(FrameType::ResponseStart)
        }
    }
    /// A `body` chunk.
    pub fn body(bytes: impl Into<Vec<u8>>) -> Self {
        TunnelFrame {
            body: bytes.into(),
            ..Self::of(FrameType::Body)
        }
    }
    /// `end`, optionally with final usage.
    pub fn end(usage: Option<TokenUsage>) -> Self {
        TunnelFrame {
            usage,
            ..Self::of(FrameType::End)
        }
    }
    /// `error`.
    pub fn error(message: impl Into<String>) -> Self {
        TunnelFrame {
            error: message.into(),
            ..Self::of(FrameType::Error)
        }
    }
    /// A `usage` report.
    pub fn usage(usage: TokenUsage) -> Self {
        TunnelFrame {
            usage: Some(usage),
            ..Self::of(FrameType::Usage)
        }
    }
}

/// `ClassifyProviderTunnelFrame`: terminal for end/error, checked before the payload (an
/// error frame with a body is terminal); progress for `response_start` with or without
/// headers, for a non-empty body and for usage; none for empty and unknown frames.
pub fn classify_provider_tunnel_frame(frame: &TunnelFrame) -> ProgressDisposition {
    match frame.frame_type {
        FrameType::End | FrameType::Error => return ProgressDisposition::Terminal,
        FrameType::ResponseStart => return ProgressDisposition::Progress,
        FrameType::Unknown => return ProgressDisposition::None,
        FrameType::Body | FrameType::Usage => {}
    }
    if !frame.body.is_empty() {
        return ProgressDisposition::Progress;
    }
    if frame.usage.is_some() {
        return ProgressDisposition::Progress;
    }
    ProgressDisposition::None
}

/// Anything the emitter and the watchdog can classify: runtime events and tunnel frames.
pub trait Classified: Send + 'static {
    /// The progress disposition.
    fn disposition(&self) -> ProgressDisposition;
    /// Usage carried, if any.
    fn usage(&self) -> Option<&TokenUsage>;
    /// The terminal the runtime publishes for a successful end.
    fn success(usage: Option<TokenUsage>) -> Self;
    /// The terminal the runtime publishes for a failure (including `response_stalled`).
    fn failure(message: &str) -> Self;
    /// The terminal the runtime publishes for a cancellation.
    fn cancellation() -> Self;
}

impl Classified for RuntimeEvent {
    fn disposition(&self) -> ProgressDisposition {
        classify_runtime_event(self)
    }
    fn usage(&self) -> Option<&TokenUsage> {
        self.usage.as_ref()
    }
    fn success(usage: Option<TokenUsage>) -> Self {
        RuntimeEvent::complete(usage)
    }
    fn failure(message: &str) -> Self {
        RuntimeEvent::error(message)
    }
    fn cancellation() -> Self {
        RuntimeEvent::cancelled()
    }
}

impl Classified for TunnelFrame {
    fn disposition(&self) -> ProgressDisposition {
        classify_provider_tunnel_frame(self)
    }
    fn usage(&self) -> Option<&TokenUsage> {
        self.usage.as_ref()
    }
    fn success(usage: Option<TokenUsage>) -> Self {
        TunnelFrame::end(usage)
    }
    fn failure(message: &str) -> Self {
        TunnelFrame::error(message)
    }
    fn cancellation() -> Self {
        TunnelFrame::error("cancelled")
    }
}

/// What happened to one emitted event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emitted {
    /// Delivered, with its disposition.
    Delivered(ProgressDisposition),
    /// Dropped and counted: the terminal was already published (this covers a second
    /// terminal too).
    AfterTerminal,
    /// Dropped and counted: the gate refused it (output fenced after a stall).
    Fenced,
}

impl Emitted {
    /// Whether the event reached the subscriber.
    pub fn delivered(self) -> bool {
        matches!(self, Emitted::Delivered(_))
    }
}

struct EmitterState {
    terminated: bool,
    dropped: u64,
}

type Deliver<E> = Box<dyn Fn(E) + Send + Sync>;

/// An ordered event emitter with exactly one terminal. Delivery happens under one lock, so
/// the subscriber sees events in emission order; once a terminal is delivered every later
/// event — a second terminal included — is dropped and counted, never delivered.
pub struct EventEmitter<E> {
    state: Mutex<EmitterState>,
    deliver: Deliver<E>,
}

impl<E: Classified> EventEmitter<E> {
    /// An emitter delivering to a callback (called in order, under the emitter's lock: keep
    /// it short and never emit from inside it).
    pub fn new(deliver: impl Fn(E) + Send + Sync + 'static) -> Self {
        EventEmitter {
            state: Mutex::new(EmitterState {
                terminated: false,
                dropped: 0,
            }),
            deliver: Box::new(deliver),
        }
    }

    /// An emitter delivering into an unbounded channel.
    pub fn channel() -> (Self, mpsc::UnboundedReceiver<E>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Self::new(move |e| {
                let _ = tx.send(e);
            }),
            rx,
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, EmitterState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Emit one event.
    pub fn emit(&self, event: E) -> Emitted {
        self.emit_gated(event, |_| true)
    }

    /// Emit one event if `admit` accepts its disposition; `admit` runs under the emitter's
    /// lock, only for events that come before the terminal, so a gate (the stall watchdog)
    /// and the emitter agree on one order.
    pub fn emit_gated(&self, event: E, admit: impl FnOnce(ProgressDisposition) -> bool) -> Emitted {
        let mut st = self.lock();
        if st.terminated {
            st.dropped += 1;
            return Emitted::AfterTerminal;
        }
        let d = event.disposition();
        if !admit(d) {
            st.dropped += 1;
            return Emitted::Fenced;
        }
        if d == ProgressDisposition::Terminal {
            st.terminated = true;
        }
        (self.deliver)(event);
        Emitted::Delivered(d)
    }

    /// Publish the runtime's own terminal unless one was already published. Returns whether
    /// it was published; an already-terminated emitter counts nothing here, because the
    /// runtime's closing terminal is not a stray event.
    pub fn finish(&self, terminal: E) -> bool {
        let mut st = self.lock();
        if st.terminated {
            return false;
        }
        st.terminated = true;
        (self.deliver)(terminal);
        true
    }

    /// Whether the terminal was published.
    pub fn is_terminated(&self) -> bool {
        self.lock().terminated
    }

    /// How many events were dropped (after the terminal, or fenced).
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }
}

/// A sink for tunnel frames (the frame-typed [`crate::runtime::Sink`]).
pub type FrameSink = crate::runtime::Sink<TunnelFrame>;
