//! The fail-closed health-probe vocabulary and its coordinator: [`ProviderHealth`],
//! [`LivenessClassification`], [`ProbeOutcome`] with [`classify_probe_outcome`] and
//! [`normalize_probe_outcome`] (the only mapping from probe results to health),
//! [`probe_health`] (its own five-second bound, rooted outside any request), the joined
//! pair a stall terminal carries ([`JoinedHealth`]), and the connection-scoped
//! `health_observation_seq` ([`Session`], [`ObservationScope`]).
//!
//! Probe completion is evidence only: nothing here resets progress, changes the attempt
//! fence, authorizes a retry or sequences the watchdog terminal.

use crate::provider::Provider;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The probe coordinator's own bound.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The stable, normalized provider-health value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderHealth {
    /// The provider is available: the request itself stalled.
    RequestStalled,
    /// The exact target is validated as unavailable.
    ProviderUnhealthy,
    /// Anything inconclusive (the fail-closed default).
    #[default]
    HealthUnknown,
}

capgate_core::wire_enum! {
    ProviderHealth {
        RequestStalled => "request_stalled",
        ProviderUnhealthy => "provider_unhealthy",
        HealthUnknown => "health_unknown",
    }
}

/// The observable category a probe outcome reduces through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LivenessClassification {
    /// The exact target answered and is available.
    Available,
    /// The exact target answered and is unavailable.
    Unavailable,
    /// The probe ran out of time.
    Timeout,
    /// The probe returned an error.
    Error,
    /// The adapter cannot probe.
    Unsupported,
    /// The target reported a status this runtime does not know.
    Unknown,
    /// The answer was for another adapter, target or instance (or had none).
    IdentityMismatch,
}

impl LivenessClassification {
    /// The health this classification normalizes to.
    pub fn health(self) -> ProviderHealth {
        match self {
            LivenessClassification::Available => ProviderHealth::RequestStalled,
            LivenessClassification::Unavailable => ProviderHealth::ProviderUnhealthy,
            _ => ProviderHealth::HealthUnknown,
        }
    }
}

capgate_core::wire_enum! {
    LivenessClassification {
        Available => "available",
        Unavailable => "unavailable",
        Timeout => "timeout",
        Error => "error",
        Unsupported => "unsupported",
        Unknown => "unknown",
        IdentityMismatch => "identity_mismatch",
    }
}

/// What a prober says about the target's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    /// The target is serving.
    Available,
    /// The target is not serving.
    Unavailable,
    /// The adapter cannot probe this target.
    Unsupported,
    /// The probe could not tell (an error, an unexpected answer).
    Unknown,
}

/// A probe that returned an error. Any of these beats any reported status, so a failure
/// to ask can never pass for a positive "target absent" answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "snake_case")]
pub enum ProbeError {
    /// The endpoint could not be constructed.
    #[error("probe endpoint: {0}")]
    Endpoint(String),
    /// The request or the network failed.
    #[error("probe request: {0}")]
    Network(String),
    /// The endpoint answered with a non-success HTTP status.
    #[error("probe endpoint answered HTTP {0}")]
    HttpStatus(u16),
    /// The answer could not be decoded.
    #[error("probe answer could not be decoded: {0}")]
    Decode(String),
    /// The prober ran out of its own time.
    #[error("probe timed out")]
    Timeout,
}

/// The exact target a probe must answer for.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeTarget {
    /// The adapter that serves the target.
    pub adapter: String,
    /// The exact target.
    pub target: String,
    /// A pinned instance key, when set.
    pub instance_key: Option<String>,
}

/// The typed, target-aware result of one probe. It has no room for arbitrary metadata.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeOutcome {
    /// The adapter that answered.
    pub adapter: String,
    /// The target it answered for.
    pub target: String,
    /// The instance that answered, if known.
    pub instance_key: Option<String>,
    /// The reported status.
    pub status: ProbeStatus,
    /// A returned error (takes precedence over `status`).
    pub error: Option<ProbeError>,
}

impl ProbeOutcome {
    /// An answer for exactly `target` with a status.
    pub fn status(target: &ProbeTarget, status: ProbeStatus) -> Self {
        ProbeOutcome {
            adapter: target.adapter.clone(),
            target: target.target.clone(),
            instance_key: target.instance_key.clone(),
            status,
            error: None,
        }
    }
    /// A returned error for `target`.
    pub fn error(target: &ProbeTarget, error: ProbeError) -> Self {
        ProbeOutcome {
            error: Some(error),
            ..Self::status(target, ProbeStatus::Unknown)
        }
    }
}

/// `ClassifyProbeOutcome`. Order: a returned error (timeout or other) first; then an
/// unsupported adapter; then identity (empty or mismatched adapter/target, pinned instance
/// mismatch); only then the reported status.
pub fn classify_probe_outcome(
    expected: &ProbeTarget,
    outcome: &ProbeOutcome,
) -> LivenessClassification {
    match &outcome.error {
        Some(ProbeError::Timeout) => return LivenessClassification::Timeout,
        Some(_) => return LivenessClassification::Error,
        None => {}
    }
    if outcome.status == ProbeStatus::Unsupported {
        return LivenessClassification::Unsupported;
    }
    let identity_ok = !expected.adapter.is_empty()
        && !expected.target.is_empty()
        && outcome.adapter == expected.adapter
        && outcome.target == expected.target
        && expected
            .instance_key
            .as_ref()
            .is_none_or(|pinned| outcome.instance_key.as_ref() == Some(pinned));
    if !identity_ok {
        return LivenessClassification::IdentityMismatch;
    }
    match outcome.status {
        ProbeStatus::Available => LivenessClassification::Available,
        ProbeStatus::Unavailable => LivenessClassification::Unavailable,
        ProbeStatus::Unsupported => LivenessClassification::Unsupported,
        ProbeStatus::Unknown => LivenessClassification::Unknown,
    }
}

/// `NormalizeProbeOutcome`: available → request_stalled; a validated matching unavailable →
/// provider_unhealthy; everything else → health_unknown.
pub fn normalize_probe_outcome(expected: &ProbeTarget, outcome: &ProbeOutcome) -> ProviderHealth {
    classify_probe_outcome(expected, outcome).health()
}

/// The joined liveness/health pair of a stall terminal. Only the three allowed pairs exist:
/// `request_stalled/available`, `provider_unhealthy/unavailable`, `health_unknown/unknown`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum JoinedHealth {
    /// `request_stalled` / `available`.
    RequestStalled,
    /// `provider_unhealthy` / `unavailable`.
    ProviderUnhealthy,
    /// `health_unknown` / `unknown` (fail-closed default).
    #[default]
    HealthUnknown,
}

impl JoinedHealth {
    /// The pair for a normalized health.
    pub fn from_health(health: ProviderHealth) -> Self {
        match health {
            ProviderHealth::RequestStalled => JoinedHealth::RequestStalled,
            ProviderHealth::ProviderUnhealthy => JoinedHealth::ProviderUnhealthy,
            ProviderHealth::HealthUnknown => JoinedHealth::HealthUnknown,
        }
    }
    /// The Edge-visible health.
    pub fn provider_health(self) -> ProviderHealth {
        match self {
            JoinedHealth::RequestStalled => ProviderHealth::RequestStalled,
            JoinedHealth::ProviderUnhealthy => ProviderHealth::ProviderUnhealthy,
            JoinedHealth::HealthUnknown => ProviderHealth::HealthUnknown,
        }
    }
    /// The normalized liveness classification.
    pub fn liveness_classification(self) -> LivenessClassification {
        match self {
            JoinedHealth::RequestStalled => LivenessClassification::Available,
            JoinedHealth::ProviderUnhealthy => LivenessClassification::Unavailable,
            JoinedHealth::HealthUnknown => LivenessClassification::Unknown,
        }
    }
}

/// An exact-target health prober (`ProviderProber`). It gets its own cancellation, which
/// fires when the coordinator's bound runs out.
#[async_trait]
pub trait ProviderProber: Send + Sync + 'static {
    /// Probe exactly `target`.
    async fn probe(&self, target: &ProbeTarget, cancel: CancellationToken) -> ProbeOutcome;
}

/// `ResolveProbeFunc`: the provider's prober, or `None` when it implements none.
pub fn resolve_probe_func(provider: &dyn Provider) -> Option<Arc<dyn ProviderProber>> {
    provider.prober()
}

/// What the coordinator concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeReport {
    /// Whether the target is alive, as the probe classified it.
    pub classification: LivenessClassification,
    /// The normalized health.
    pub health: ProviderHealth,
}

impl ProbeReport {
    fn of(classification: LivenessClassification) -> Self {
        ProbeReport {
            classification,
            health: classification.health(),
        }
    }
}

/// `ProbeHealth`: probe exactly `target` under a five-second bound of its own, rooted at
/// the background (no request's cancellation or deadline reaches it). No prober → fail
/// closed to `health_unknown` without calling anything. The deadline is checked again after
/// the probe returns, and only the typed normalizer sees the outcome.
pub async fn probe_health(
    prober: Option<Arc<dyn ProviderProber>>,
    target: &ProbeTarget,
) -> ProbeReport {
    let Some(prober) = prober else {
        return ProbeReport::of(LivenessClassification::Unsupported);
    };
    let cancel = CancellationToken::new();
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let task = {
        let target = target.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move { prober.probe(&target, cancel).await })
    };
    let abort = task.abort_handle();
    let returned = tokio::select! {
        biased;
        r = task => Some(r),
        _ = tokio::time::sleep_until(deadline) => None,
    };
    let expired = Instant::now() >= deadline || cancel.is_cancelled();
    cancel.cancel();
    abort.abort();
    match returned {
        None => ProbeReport::of(LivenessClassification::Timeout),
        Some(_) if expired => ProbeReport::of(LivenessClassification::Timeout),
        Some(Err(_panicked)) => ProbeReport::of(LivenessClassification::Error),
        Some(Ok(outcome)) => ProbeReport::of(classify_probe_outcome(target, &outcome)),
    }
}

/// A transport connection's observation source. A new connection starts at zero, so its
/// first finalized observation is 1; every draw is unique and increasing, even when run
/// and tunnel observations race.
#[derive(Debug, Default)]
pub struct Session {
    seq: AtomicU64,
}

impl Session {
    /// A new connection's session.
    pub fn new() -> Arc<Self> {
        Arc::new(Session::default())
    }
    /// Draw the next `health_observation_seq`.
    pub fn next_health_observation_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst).saturating_add(1)
    }
}

/// Whether an execution is bound to a connection. Internal and unbound paths omit
/// `health_observation_seq` entirely; there is no process-global generation.
#[derive(Debug, Clone, Default)]
pub enum ObservationScope {
    /// Bound to a connection's session.
    Connection(Arc<Session>),
    /// Internal or unbound.
    #[default]
    Internal,
}

impl ObservationScope {
    /// The next sequence number, or `None` on internal paths.
    pub fn next_seq(&self) -> Option<u64> {
        match self {
            ObservationScope::Connection(s) => Some(s.next_health_observation_seq()),
            ObservationScope::Internal => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{LivenessClassification, ProviderHealth};
    use crate::provider::ProviderCommand;

    /// The `wire_enum!` spellings are the serde spellings, both ways.
    #[test]
    fn the_wire_spellings_are_the_serde_spellings() {
        for h in [
            ProviderHealth::RequestStalled,
            ProviderHealth::ProviderUnhealthy,
            ProviderHealth::HealthUnknown,
        ] {
            assert_eq!(serde_json::to_value(h).unwrap(), h.as_str());
            assert_eq!(ProviderHealth::parse(h.as_str()), Some(h));
        }
        for c in LivenessClassification::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
            assert_eq!(LivenessClassification::parse(c.as_str()), Some(c));
        }
        for c in ProviderCommand::ALL {
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
            assert_eq!(c.as_str().parse::<ProviderCommand>().ok(), Some(c));
        }
    }
}
