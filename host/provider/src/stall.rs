//! The response-stall timeout (validation, resolution, wire normalisation), the
//! [`StallWatchdog`], and the typed `response_stalled` terminal ([`StallTerminal`]) with its
//! allowlisted metadata.
//!
//! # Feeding the watchdog from a procedure's progress
//!
//! The watchdog resets only on [`ProgressDisposition::Progress`]. Inside the provider
//! runtime every event a provider emits through its [`Sink`](crate::runtime::Sink) is
//! classified and fed to the attempt's watchdog. A procedure that only knows core's
//! `ProgressFn` (a native handler, or a Wasm procedure component whose `progress.report`
//! import calls `ProcedureCall::report_progress`) is wrapped by
//! [`ProcedureProvider`](crate::bridge::ProcedureProvider), which hands it a `ProgressFn`
//! that emits [`RuntimeEvent::progress`](crate::events::RuntimeEvent::progress) into the
//! sink. Code holding a bare watchdog can do the same with [`StallWatchdog::progress_fn`].

use crate::events::ProgressDisposition;
use crate::health::JoinedHealth;
use capgate_core::error::{CapabilityError, ErrorCode};
use capgate_core::procedure::{ProcedureError, ProgressFn};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The documented default stall timeout (`DefaultResponseStallTimeoutMS`, five minutes) and
/// the largest accepted one (`maxSafeStallTimeoutMS`).
pub use capgate_core::defaults::http_upstream::{
    DEFAULT_RESPONSE_STALL_TIMEOUT_MS, MAX_SAFE_STALL_TIMEOUT_MS,
};

/// The fixed close grace: how long a stalled provider gets to release ownership after it is
/// told to stop. `retryable` is true only when it did so within this grace.
pub const DEFAULT_CLOSE_GRACE_MS: u64 = 2_000;

/// The failure code of the stall terminal.
pub const RESPONSE_STALLED: &str = "response_stalled";

/// Why a stall timeout was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StallTimeoutError {
    /// The timeout is below zero.
    #[error("response_stall_timeout_ms must not be negative (got {0})")]
    Negative(String),
    /// Above [`MAX_SAFE_STALL_TIMEOUT_MS`] (or beyond 64 bits on the wire).
    #[error(
        "response_stall_timeout_ms exceeds the maximum of {MAX_SAFE_STALL_TIMEOUT_MS} (got {0})"
    )]
    Overflow(String),
    /// Not an integer on the wire.
    #[error("response_stall_timeout_ms must be an integer number of milliseconds (got {0})")]
    NotAnInteger(String),
}

/// `ValidateStallTimeoutMS`: negative and over-max values are rejected; zero is allowed
/// (it means "use the default").
pub fn validate_stall_timeout_ms(ms: i64) -> Result<(), StallTimeoutError> {
    if ms < 0 {
        return Err(StallTimeoutError::Negative(ms.to_string()));
    }
    if ms > MAX_SAFE_STALL_TIMEOUT_MS {
        return Err(StallTimeoutError::Overflow(ms.to_string()));
    }
    Ok(())
}

/// `ResolveStallTimeoutMS`: validate, then map zero to the default; safe positive values
/// pass through.
pub fn resolve_stall_timeout_ms(ms: i64) -> Result<u64, StallTimeoutError> {
    validate_stall_timeout_ms(ms)?;
    match u64::try_from(ms) {
        Ok(0) => Ok(DEFAULT_RESPONSE_STALL_TIMEOUT_MS),
        Ok(v) => Ok(v),
        Err(_) => Err(StallTimeoutError::Negative(ms.to_string())),
    }
}

/// The wire-boundary rule for a raw JSON `response_stall_timeout_ms`: absent, `null` or
/// zero → the default; negative, beyond 64 bits, over the maximum, or not an integer →
/// rejected. Returns the resolved milliseconds.
pub fn normalize_wire_stall_timeout(
    value: Option<&serde_json::Value>,
) -> Result<u64, StallTimeoutError> {
    let n = match value {
        None | Some(serde_json::Value::Null) => return Ok(DEFAULT_RESPONSE_STALL_TIMEOUT_MS),
        Some(serde_json::Value::Number(n)) => n,
        Some(other) => return Err(StallTimeoutError::NotAnInteger(other.to_string())),
    };
    if let Some(i) = n.as_i64() {
        return resolve_stall_timeout_ms(i);
    }
    if n.as_u64().is_some() {
        return Err(StallTimeoutError::Overflow(n.to_string()));
    }
    // A float: an integral float beyond i64 is an overflow, anything else not an integer.
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f < 0.0 => Err(StallTimeoutError::Negative(n.to_string())),
        Some(f) if f.fract() == 0.0 && f.abs() >= 9.2e18 => {
            Err(StallTimeoutError::Overflow(n.to_string()))
        }
        _ => Err(StallTimeoutError::NotAnInteger(n.to_string())),
    }
}

/// Normalise the `response_stall_timeout_ms` field of a raw JSON request in place, before
/// anything else reads the request: the wire boundary for `RunRequest` and
/// `ProviderTunnelRequest`. Returns the resolved milliseconds.
pub fn normalize_wire_request(request: &mut serde_json::Value) -> Result<u64, StallTimeoutError> {
    let ms = normalize_wire_stall_timeout(request.get("response_stall_timeout_ms"))?;
    if let Some(obj) = request.as_object_mut() {
        obj.insert("response_stall_timeout_ms".into(), ms.into());
    }
    Ok(ms)
}

/// Where a watchdog is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchdogPhase {
    /// Watching for progress.
    Watching,
    /// Stopped by the provider's terminal.
    Stopped,
    /// A stall was claimed; all later output is fenced.
    Stalled,
}

/// What an observation did to the watchdog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    /// Accepted without resetting (start, none).
    Ignored,
    /// Progress: the idle clock restarted.
    Reset,
    /// The provider's terminal: the watchdog stopped.
    Stopped,
    /// The watchdog was already stopped; nothing changed.
    AfterStop,
    /// A stall was claimed earlier: this output is fenced and must be dropped.
    Fenced,
}

/// A claimed stall: how long the attempt had been idle when the watchdog claimed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StallClaim {
    /// Time since admission or the last progress.
    pub idle: Duration,
}

struct WatchdogState {
    phase: WatchdogPhase,
    last_progress: Instant,
}

/// The per-attempt stall watchdog. It starts at attempt admission
/// ([`StallWatchdog::admit`]), resets only on progress dispositions, stops on the provider's
/// terminal, and claims a stall at most once; after a claim every observation is fenced.
/// It never retries anything and never infers recovery. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct StallWatchdog {
    timeout: Duration,
    state: Arc<Mutex<WatchdogState>>,
}

impl StallWatchdog {
    /// Admit an attempt: the idle clock starts now.
    pub fn admit(timeout: Duration) -> Self {
        StallWatchdog {
            timeout,
            state: Arc::new(Mutex::new(WatchdogState {
                phase: WatchdogPhase::Watching,
                last_progress: Instant::now(),
            })),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WatchdogState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The configured timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The current phase.
    pub fn phase(&self) -> WatchdogPhase {
        self.lock().phase
    }

    /// Feed one classified event or frame.
    pub fn observe(&self, disposition: ProgressDisposition) -> Observed {
        let mut st = self.lock();
        match st.phase {
            WatchdogPhase::Stalled => Observed::Fenced,
            WatchdogPhase::Stopped => Observed::AfterStop,
            WatchdogPhase::Watching => match disposition {
                ProgressDisposition::Progress => {
                    st.last_progress = Instant::now();
                    Observed::Reset
                }
                ProgressDisposition::Terminal => {
                    st.phase = WatchdogPhase::Stopped;
                    Observed::Stopped
                }
                ProgressDisposition::Start | ProgressDisposition::None => Observed::Ignored,
            },
        }
    }

    /// Report progress (same as observing a progress disposition).
    pub fn progress(&self) -> Observed {
        self.observe(ProgressDisposition::Progress)
    }

    /// Stop on the provider's terminal. Fails with the claim's phase when a stall was
    /// claimed first: the terminal is then late output and stays fenced.
    pub fn stop(&self) -> Result<(), WatchdogPhase> {
        let mut st = self.lock();
        match st.phase {
            WatchdogPhase::Watching | WatchdogPhase::Stopped => {
                st.phase = WatchdogPhase::Stopped;
                Ok(())
            }
            WatchdogPhase::Stalled => Err(WatchdogPhase::Stalled),
        }
    }

    /// Wait for a stall and claim it. Returns `None` once the watchdog is stopped (or a
    /// stall was claimed elsewhere); a claim happens at most once per watchdog.
    pub async fn stalled(&self) -> Option<StallClaim> {
        loop {
            let deadline = {
                let mut st = self.lock();
                if st.phase != WatchdogPhase::Watching {
                    return None;
                }
                let now = Instant::now();
                match st.last_progress.checked_add(self.timeout) {
                    Some(deadline) if now >= deadline => {
                        st.phase = WatchdogPhase::Stalled;
                        return Some(StallClaim {
                            idle: now.saturating_duration_since(st.last_progress),
                        });
                    }
                    other => other,
                }
            };
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                // Beyond the clock's range: this watchdog can never fire.
                None => std::future::pending::<()>().await,
            }
        }
    }

    /// A core `ProgressFn` that resets this watchdog and then forwards to `forward`. This is
    /// how a Wasm procedure's `progress` import (or any `ProgressFn` producer) feeds a
    /// watchdog that is not behind a provider sink. Fenced progress is not forwarded.
    pub fn progress_fn(&self, forward: Option<ProgressFn>) -> ProgressFn {
        let dog = self.clone();
        Arc::new(move |value: serde_json::Value| {
            let empty = value.is_null() || value.as_str().is_some_and(str::is_empty);
            let observed = if empty {
                dog.observe(ProgressDisposition::None)
            } else {
                dog.progress()
            };
            if observed != Observed::Fenced
                && let Some(f) = &forward
            {
                f(value);
            }
        })
    }
}

/// Whether the stalled provider released ownership within the close grace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseFence {
    /// It stopped within the grace.
    Confirmed,
    /// It did not; the runtime abandoned it.
    Unconfirmed,
}

/// The keys a `response_stalled` terminal's metadata may carry, and nothing else.
pub const STALL_METADATA_KEYS: [&str; 10] = [
    "code",
    "provider_health",
    "liveness_classification",
    "idle_ms",
    "run_id",
    "attempt_id",
    "close_fence",
    "adapter",
    "target",
    "health_observation_seq",
];

/// The typed `response_stalled` terminal. Every field is runtime-owned: nothing the caller
/// or the provider sent is copied in, so no raw payload, credential or recovery signal can
/// reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StallTerminal {
    /// The run the stalled attempt belongs to.
    pub run_id: String,
    /// The runtime-owned attempt identity.
    pub attempt_id: String,
    /// The provider's adapter.
    pub adapter: String,
    /// The provider's exact target.
    pub target: String,
    /// Idle time when the stall was claimed.
    pub idle_ms: u64,
    /// The joined exact-target health evidence (one of the three allowed pairs).
    pub health: JoinedHealth,
    /// The local close fence.
    pub close_fence: CloseFence,
    /// Connection-scoped observation sequence; `None` on internal paths (key omitted).
    pub health_observation_seq: Option<u64>,
}

impl StallTerminal {
    /// True only when the local ownership fence was confirmed within the close grace.
    pub fn retryable(&self) -> bool {
        self.close_fence == CloseFence::Confirmed
    }

    /// The allowlisted metadata, exactly [`STALL_METADATA_KEYS`] (the sequence only when
    /// bound to a connection).
    pub fn metadata(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("code".into(), RESPONSE_STALLED.into());
        m.insert(
            "provider_health".into(),
            self.health.provider_health().as_str().into(),
        );
        m.insert(
            "liveness_classification".into(),
            self.health.liveness_classification().as_str().into(),
        );
        m.insert("idle_ms".into(), self.idle_ms.into());
        m.insert("run_id".into(), self.run_id.clone().into());
        m.insert("attempt_id".into(), self.attempt_id.clone().into());
        m.insert(
            "close_fence".into(),
            match self.close_fence {
                CloseFence::Confirmed => "confirmed",
                CloseFence::Unconfirmed => "unconfirmed",
            }
            .into(),
        );
        m.insert("adapter".into(), self.adapter.clone().into());
        m.insert("target".into(), self.target.clone().into());
        if let Some(seq) = self.health_observation_seq {
            m.insert("health_observation_seq".into(), seq.into());
        }
        serde_json::Value::Object(m)
    }

    /// The governed error stage 11 reports: TIMEOUT (a cancelled envelope), `retryable` from
    /// the fence, the metadata under `adapterMetadata` in private details — audit sees it,
    /// the model-visible error never does.
    pub fn to_capability_error(&self) -> CapabilityError {
        CapabilityError::new(ErrorCode::Timeout)
            .with_retryable(self.retryable())
            .with_cause(RESPONSE_STALLED)
            .with_private_details(serde_json::json!({ "adapterMetadata": self.metadata() }))
    }

    /// [`StallTerminal::to_capability_error`] as a procedure error.
    pub fn to_procedure_error(&self) -> ProcedureError {
        ProcedureError::Governed(self.to_capability_error())
    }
}
