//! Time budgets: each capability's worst case (attempts, backoff, policy batches) against
//! the gateway's request budget.
use super::*;

/// The longest a governed call can take inside the runtime, as the runtime runs it: each
/// policy batch it has (stage 7 and stage 9, each under one shared deadline of
/// `policyTimeoutMs`; `policy_batches` of them, 0 to 2), then every attempt up to its
/// timeout (stages 10–11), plus the backoff between attempts (`backoffMs × 2^(n-1)` before
/// attempt n+1). A resume runs the same two batches (its freshness re-check and stage 9).
pub fn worst_case_ms(meta: &CapabilityMeta, defaults: &Defaults, policy_batches: u32) -> WorstCase {
    let timeout = meta.timeout_ms.unwrap_or(defaults.timeout_ms);
    let retry = meta.retry.as_ref().filter(|_| meta.retry_eligible());
    let retries = retry.map_or(0, |r| r.max_attempts);
    let base = retry
        .and_then(|r| r.backoff_ms)
        .unwrap_or(defaults.retry_backoff_ms);
    let backoff = (1..=retries).fold(0u64, |sum, n| {
        sum.saturating_add(base.saturating_mul(1u64 << (n - 1).min(20)))
    });
    let attempts = 1 + retries;
    let policies = defaults
        .policy_timeout_ms
        .saturating_mul(u64::from(policy_batches));
    WorstCase {
        attempts,
        timeout,
        backoff,
        policy_batches,
        policy_timeout: defaults.policy_timeout_ms,
        total: timeout
            .saturating_mul(u64::from(attempts))
            .saturating_add(backoff)
            .saturating_add(policies),
    }
}

/// [`worst_case_ms`], itemized for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorstCase {
    /// Attempts (1 + retries).
    pub attempts: u32,
    /// Per-attempt timeout.
    pub timeout: u64,
    /// Sum of the backoffs.
    pub backoff: u64,
    /// Policy batches the call runs (invocation phase, execution phase: 0 to 2).
    pub policy_batches: u32,
    /// The deadline of each policy batch (`runtime.policyTimeoutMs`).
    pub policy_timeout: u64,
    /// The total.
    pub total: u64,
}

impl Validation<'_> {
    /// Every capability a gateway route serves must be able to finish (or time out) inside
    /// the gateway's work budget, policy batches included (`policies`: the bound policy
    /// bindings, for their phases). Within it, a hung procedure is ended by the runtime's
    /// own timer (TIMEOUT in the audit trail, the envelope `cancelled` with effect unknown);
    /// past it the gateway cancels it first (CANCELLED). Over HTTP both answer
    /// `outcome-unknown` and leave the receipt pending: the effect may have happened.
    pub(super) fn budgets(&mut self, policies: &BTreeMap<String, Arc<dyn Policy>>) {
        let g = &self.cfg.gateway;
        let budget = g
            .request_timeout_ms
            .saturating_sub(g.audit_drain_timeout_ms);
        let defaults = Defaults {
            timeout_ms: self.cfg.runtime.timeout_ms,
            policy_timeout_ms: self.cfg.runtime.policy_timeout_ms,
            ..Defaults::default()
        };
        let surfaces: Vec<Surface> = g.routes.iter().map(|r| r.surface).collect();
        for (i, c) in self.cfg.capabilities.iter().enumerate() {
            let served: Vec<&str> = surfaces
                .iter()
                .filter(|s| c.expose.allows(**s))
                .map(|s| s.as_str())
                .collect();
            if served.is_empty() {
                continue;
            }
            // Runtime policies, then the capability's own: a batch runs when any of them
            // (shadow ones too) takes part in its phase.
            let bound: Vec<&Arc<dyn Policy>> = self
                .cfg
                .runtime
                .policies
                .iter()
                .chain(&c.policies)
                .filter_map(|name| policies.get(name))
                .collect();
            let batches = [Phase::Invocation, Phase::Execution]
                .into_iter()
                .filter(|phase| bound.iter().any(|p| p.phases().contains(phase)))
                .count();
            let batches = u32::try_from(batches).unwrap_or(2);
            let w = worst_case_ms(&meta_of(c), &defaults, batches);
            if w.total <= budget {
                continue;
            }
            let at = format!("/capabilities/{i}");
            let (pointer, what) = if w.attempts > 1 {
                (format!("{at}/retry"), "timeoutMs or retry.maxAttempts")
            } else if c.timeout_ms.is_some() {
                (format!("{at}/timeoutMs"), "timeoutMs")
            } else if w.policy_batches > 0 && !c.policies.is_empty() {
                (
                    format!("{at}/policies"),
                    "its timeoutMs (it uses runtime.timeoutMs) or runtime.policyTimeoutMs",
                )
            } else {
                (
                    format!("{at}/id"),
                    "its timeoutMs (it uses runtime.timeoutMs)",
                )
            };
            let mut breakdown = if w.attempts > 1 {
                format!(
                    "{} attempts × {} ms + {} ms backoff",
                    w.attempts, w.timeout, w.backoff
                )
            } else {
                format!("its {} ms timeout", w.timeout)
            };
            if w.policy_batches > 0 {
                breakdown = format!(
                    "{} policy batch{} × {} ms (runtime.policyTimeoutMs) + {breakdown}",
                    w.policy_batches,
                    if w.policy_batches > 1 { "es" } else { "" },
                    w.policy_timeout
                );
            }
            self.problem(
                &pointer,
                format!(
                    "`{}` may run for {} ms ({breakdown}), longer than the {budget} ms the gateway gives a call \
                     (gateway.requestTimeoutMs {} − auditDrainTimeoutMs {}) on {}: a hung call would outlast it, \
                     so the gateway would stop waiting and cancel it (audited as CANCELLED) before the runtime's \
                     own timeout could end it (TIMEOUT); over HTTP it answers outcome-unknown either way, as its \
                     effect is unknown. Lower {what}, or raise gateway.requestTimeoutMs",
                    c.id,
                    w.total,
                    g.request_timeout_ms,
                    g.audit_drain_timeout_ms,
                    served.join(", ")
                ),
            );
        }
    }
}
