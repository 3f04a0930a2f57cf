//! The pipeline's metrics: what a platform team alerts on (error rates, latency, approval
//! backlog), recorded through the [`metrics`] facade. Nothing is recorded anywhere until the
//! embedder installs a recorder (the `capgate` binary installs a Prometheus one); without
//! one each call below costs a few nanoseconds.
//!
//! Label values come only from configuration — capability ids of the registry, policy
//! names, surfaces, phases and the fixed error codes — never from request data, so the
//! number of series is bounded by the deployment: an id the registry does not know is
//! counted as [`UNKNOWN_CAPABILITY`].
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `capgate_calls_total` | counter | `capability`, `surface`, `outcome`, `code` |
//! | `capgate_call_duration_seconds` | histogram | `capability`, `surface` |
//! | `capgate_policy_evaluations_total` | counter | `policy`, `phase`, `stance` |
//! | `capgate_policy_evaluation_duration_seconds` | histogram | `policy`, `phase` |
//! | `capgate_policy_shadow_divergences_total` | counter | `policy`, `capability`, `phase`, `would_be` (the verdict a shadow policy would have reached; `error` when it failed) |
//! | `capgate_approvals_total` | counter | `event` (`created`, `approved`, `rejected`, `consumed`, `expired`: an approval nobody decided, once per approval, when the sweeper marks it — `capgate serve` runs it every 2 s; an embedder calls `runtime.approvals().expire_due(n)`) |

use crate::actor::Surface;
use crate::policy::{Phase, PolicyDecision, PolicyError};
use crate::result::ExecutionResult;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static CACHING: AtomicBool = AtomicBool::new(false);

/// Keep the metric handles of the call path once made, from now on: for a process whose
/// recorder is installed for good before its first call (the `capgate` binary calls this
/// right after installing its Prometheus recorder). A recording then costs one map lookup
/// under a read lock and an atomic add, instead of building, hashing and looking up the
/// metric's key in the recorder, with the label strings allocated, every time: under load
/// that was most of what metrics cost. Without it (the default, and right for an embedder
/// that installs or swaps recorders later) every recording asks the current recorder.
pub fn cache_handles() {
    CACHING.store(true, Ordering::Relaxed);
}

/// Metric handles by their label values: a configured name (a capability, policy, plugin or
/// route) and labels from a fixed set (`S`). Bounded, like the labels themselves, by the
/// deployment. Shared by the crates that record on the call path.
pub struct Handles<S, H> {
    map: RwLock<Option<HashMap<String, HashMap<S, H>>>>,
}

impl<S: Copy + Eq + Hash, H: Clone> Handles<S, H> {
    /// An empty cache (usable in a `static`).
    pub const fn new() -> Self {
        Handles {
            map: RwLock::new(None),
        }
    }

    /// The handle for `name` and `rest`: cached when [`cache_handles`] was called, else made
    /// by `make` now.
    pub fn get(&self, name: &str, rest: S, make: impl FnOnce() -> H) -> H {
        if !CACHING.load(Ordering::Relaxed) {
            return make();
        }
        if let Ok(map) = self.map.read()
            && let Some(h) = map.as_ref().and_then(|m| m.get(name)?.get(&rest))
        {
            return h.clone();
        }
        let h = make();
        if let Ok(mut map) = self.map.write() {
            map.get_or_insert_with(HashMap::new)
                .entry(name.to_owned())
                .or_default()
                .insert(rest, h.clone());
        }
        h
    }
}

impl<S: Copy + Eq + Hash, H: Clone> Default for Handles<S, H> {
    fn default() -> Self {
        Self::new()
    }
}

/// One kind of finished event of a configured thing (a governed call of a capability, an
/// evaluation of a policy): counted by its name, its `T` labels and its `C` outcome labels,
/// and timed by its name and its `T` labels. Handles cached as [`Handles`] says.
struct Finished<T, C> {
    /// The counter's metric name.
    count: &'static str,
    /// The duration histogram's metric name.
    duration: &'static str,
    /// The label that carries the configured name (`capability`, `policy`).
    name_label: &'static str,
    counters: Handles<(T, C), metrics::Counter>,
    histograms: Handles<T, metrics::Histogram>,
}

/// Label pairs whose values come from fixed sets (surfaces, phases, outcomes, codes).
type Fixed<'a> = &'a [(&'static str, &'static str)];

impl<T: Copy + Eq + Hash, C: Copy + Eq + Hash> Finished<T, C> {
    const fn new(count: &'static str, duration: &'static str, name_label: &'static str) -> Self {
        Finished {
            count,
            duration,
            name_label,
            counters: Handles::new(),
            histograms: Handles::new(),
        }
    }

    /// Record one event of `name` that took `elapsed`: `timed` with its labels on both
    /// metrics, `counted` with its labels on the counter only.
    fn record(
        &self,
        name: &str,
        (timed, timed_labels): (T, Fixed<'_>),
        (counted, counted_labels): (C, Fixed<'_>),
        elapsed: Duration,
    ) {
        let labels = |fixed: &[Fixed<'_>]| {
            let named = metrics::Label::new(self.name_label, name.to_owned());
            std::iter::once(named)
                .chain(
                    fixed
                        .iter()
                        .flat_map(|f| f.iter())
                        .map(metrics::Label::from),
                )
                .collect::<Vec<_>>()
        };
        self.counters
            .get(name, (timed, counted), || {
                metrics::counter!(self.count, labels(&[timed_labels, counted_labels]))
            })
            .increment(1);
        self.histograms
            .get(name, timed, || {
                metrics::histogram!(self.duration, labels(&[timed_labels]))
            })
            .record(elapsed.as_secs_f64());
    }
}

static CALLS_FINISHED: Finished<Surface, (&str, &str)> =
    Finished::new(CALLS, CALL_DURATION, "capability");
static POLICIES_EVALUATED: Finished<Phase, &str> =
    Finished::new(POLICY_EVALUATIONS, POLICY_DURATION, "policy");

/// Governed calls (invoke and resume), by how they ended.
pub const CALLS: &str = "capgate_calls_total";
/// Governed call latency, request to answer.
pub const CALL_DURATION: &str = "capgate_call_duration_seconds";
/// Policy evaluations, by stance (`error` when the policy failed).
pub const POLICY_EVALUATIONS: &str = "capgate_policy_evaluations_total";
/// Policy evaluation latency.
pub const POLICY_DURATION: &str = "capgate_policy_evaluation_duration_seconds";
/// Shadow policy divergences: evaluations that would have changed a call's outcome.
pub const SHADOW_DIVERGENCES: &str = "capgate_policy_shadow_divergences_total";
/// Approval lifecycle events.
pub const APPROVALS: &str = "capgate_approvals_total";

/// Tell the installed recorder what this crate's series mean (`# HELP` on `/metrics`).
pub fn describe() {
    metrics::describe_counter!(
        CALLS,
        "Governed calls (invoke and resume), by capability, surface and how they ended."
    );
    metrics::describe_histogram!(
        CALL_DURATION,
        "Governed call latency, request to answer, in seconds."
    );
    metrics::describe_counter!(
        POLICY_EVALUATIONS,
        "Policy evaluations, by policy and stance (error when the policy failed)."
    );
    metrics::describe_histogram!(POLICY_DURATION, "Policy evaluation latency in seconds.");
    metrics::describe_counter!(
        SHADOW_DIVERGENCES,
        "Shadow policy evaluations that would have changed a call's outcome."
    );
    metrics::describe_counter!(APPROVALS, "Approval lifecycle events, by event.");
}

/// The `capability` label of an id the registry does not have (request data never
/// becomes a label).
pub const UNKNOWN_CAPABILITY: &str = "(unknown)";

/// The `outcome` label of a finished call: `completed`, `approval-required`, `failed`,
/// `cancelled`, or `outcome-unknown` (failed or cancelled after the procedure was entered:
/// the effect may have happened).
pub fn outcome(result: &ExecutionResult) -> &'static str {
    if result.effect_unknown() {
        "outcome-unknown"
    } else {
        result.status()
    }
}

/// Record one finished governed call. `capability` must be a registry id or
/// [`UNKNOWN_CAPABILITY`].
pub(crate) fn call_finished(
    capability: &str,
    surface: Surface,
    result: &ExecutionResult,
    elapsed: Duration,
) {
    let code = result.error().map_or("", |e| e.code().as_str());
    let outcome = outcome(result);
    CALLS_FINISHED.record(
        capability,
        (surface, &[("surface", surface.as_str())]),
        ((outcome, code), &[("outcome", outcome), ("code", code)]),
        elapsed,
    );
}

/// The `stance` label of one policy outcome.
pub fn stance(outcome: &Result<PolicyDecision, PolicyError>) -> &'static str {
    match outcome {
        Ok(d) => d.kind(),
        Err(_) => "error",
    }
}

/// Record one policy evaluation. `policy` is the configured policy name.
pub(crate) fn policy_evaluated(
    policy: &str,
    phase: Phase,
    outcome: &Result<PolicyDecision, PolicyError>,
    elapsed: Duration,
) {
    let stance = stance(outcome);
    POLICIES_EVALUATED.record(
        policy,
        (phase, &[("phase", phase.as_str())]),
        (stance, &[("stance", stance)]),
        elapsed,
    );
}

/// Record one shadow divergence (see [`crate::policy::Shadow`]).
pub(crate) fn shadow_divergence(
    policy: &str,
    capability: &str,
    phase: Phase,
    would_be: &'static str,
) {
    metrics::counter!(
        SHADOW_DIVERGENCES,
        "policy" => policy.to_owned(),
        "capability" => capability.to_owned(),
        "phase" => phase.as_str(),
        "would_be" => would_be,
    )
    .increment(1);
}

/// One approval lifecycle event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalEvent {
    /// A call was held for approval.
    Created,
    /// A human approved.
    Approved,
    /// A human rejected.
    Rejected,
    /// A resumed call consumed its approval.
    Consumed,
    /// An approval nobody decided expired: counted once per approval, by the sweeper
    /// (`Approvals::expire_due`), not per refused resume.
    Expired,
}

crate::wire_enum! {
    ApprovalEvent {
        Created => "created",
        Approved => "approved",
        Rejected => "rejected",
        Consumed => "consumed",
        Expired => "expired",
    }
}

/// Record one approval lifecycle event.
pub(crate) fn approval(event: ApprovalEvent) {
    metrics::counter!(APPROVALS, "event" => event.as_str()).increment(1);
}
