//! Execution events and tunnel frames, their progress dispositions
//! ([`classify_runtime_event`], [`classify_provider_tunnel_frame`]), and the ordered
//! [`EventEmitter`] that publishes exactly one terminal.

use crate::provider::TokenUsage;
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use tokio::sync::mpsc;

/// Constructors of events and frames that set one field on an empty one of a type
/// (`Self::of(kind)`): `name(arg: Type) => kind, field: value;`. Events and frames are
/// built the same way, so the shape is written once.
macro_rules! one_field {
    ($(
        $(#[$doc:meta])*
        $name:ident($arg:ident: $ty:ty) => $kind:expr, $field:ident: $value:expr;
    )*) => {$(
        $(#[$doc])*
        pub fn $name($arg: $ty) -> Self {
            Self {
                $field: $value,
                ..Self::of($kind)
            }
        }
    )*};
}

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
    /// The provider started (`EventTypeStart`); the watchdog already runs from admission.
    Start,
    /// Incremental output text: progress.
    Delta,
    /// A progress message.
    Message,
    /// A token usage report.
    Usage,
    /// The run ended successfully (terminal).
    Complete,
    /// The run failed (terminal).
    Error,
    /// The run was cancelled (terminal).
    Cancelled,
    /// Anything this runtime does not know.
    #[serde(other)]
    Unknown,
}

/// One execution event.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeEvent {
    /// What kind of event this is.
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
    /// A `start` event: the provider began the run.
    pub fn start() -> Self {
        Self::of(EventType::Start)
    }
    one_field! {
        /// A `delta` with text.
        delta(text: impl Into<String>) => EventType::Delta, delta: text.into();
        /// A `message` with text.
        message(text: impl Into<String>) => EventType::Message, message: text.into();
        /// A `usage` report.
        usage(usage: TokenUsage) => EventType::Usage, usage: Some(usage);
        /// `complete`, optionally with final usage.
        complete(usage: Option<TokenUsage>) => EventType::Complete, usage: usage;
        /// `error` with a code or message.
        error(message: impl Into<String>) => EventType::Error, message: message.into();
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
    /// A `cancelled` terminal.
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
    /// The exchange ended successfully (terminal).
    End,
    /// The exchange failed (terminal).
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
    /// What kind of frame this is.
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
    one_field! {
        /// A `body` chunk.
        body(bytes: impl Into<Vec<u8>>) => FrameType::Body, body: bytes.into();
        /// `end`, optionally with final usage.
        end(usage: Option<TokenUsage>) => FrameType::End, usage: usage;
        /// An `error` terminal with its message.
        error(message: impl Into<String>) => FrameType::Error, error: message.into();
        /// A `usage` report.
        usage(usage: TokenUsage) => FrameType::Usage, usage: Some(usage);
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

/// [`Classified`] for an event or frame type: its classifier and the constructors of its
/// three terminals. Events and frames are classified the same way, so it is written once.
macro_rules! classified {
    ($ty:ident {
        disposition: $classify:path,
        success: $success:path,
        failure: $failure:path,
        cancellation: $cancellation:expr $(,)?
    }) => {
        impl Classified for $ty {
            fn disposition(&self) -> ProgressDisposition {
                $classify(self)
            }
            fn usage(&self) -> Option<&TokenUsage> {
                self.usage.as_ref()
            }
            fn success(usage: Option<TokenUsage>) -> Self {
                $success(usage)
            }
            fn failure(message: &str) -> Self {
                $failure(message)
            }
            fn cancellation() -> Self {
                $cancellation
            }
        }
    };
}

classified! {
    RuntimeEvent {
        disposition: classify_runtime_event,
        success: RuntimeEvent::complete,
        failure: RuntimeEvent::error,
        cancellation: RuntimeEvent::cancelled(),
    }
}

classified! {
    TunnelFrame {
        disposition: classify_provider_tunnel_frame,
        success: TunnelFrame::end,
        failure: TunnelFrame::error,
        cancellation: TunnelFrame::error("cancelled"),
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
