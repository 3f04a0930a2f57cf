//! Policies decide whether the agent may ask at all (stages 7 and 9, discovery). They see the
//! validated input (SI-6), can never rewrite it, and fail closed (SI-7).

use crate::actor::{Actor, Surface};
use crate::approval::ApprovalRef;
use crate::meta::{Risk, SideEffect};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// When a policy runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Building tool lists; no input.
    Discovery,
    /// Stage 7: before the call is held or run, with the validated input.
    Invocation,
    /// Stage 9: after approval, for freshness.
    Execution,
}

crate::wire_enum! {
    Phase {
        Discovery => "discovery",
        Invocation => "invocation",
        Execution => "execution",
    }
}

/// The default phases of a policy: invocation only, so nothing runs twice unless it opts in.
pub const DEFAULT_PHASES: &[Phase] = &[Phase::Invocation];

/// A policy's stance (combined as in docs/pipeline.md, stage 7).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum PolicyDecision {
    /// Let the call go ahead.
    Allow,
    /// Refuse with POLICY_DENIED; `message` becomes the public message.
    Deny {
        /// Private code for audit/logs.
        code: Option<String>,
        /// Public message shown to the model.
        message: Option<String>,
    },
    /// Conceal: CAPABILITY_NOT_FOUND externally, `hidden` in audit.
    Hide,
    /// Hold for a human.
    #[serde(rename_all = "camelCase")]
    RequireApproval {
        /// Why (required, non-empty).
        reason: String,
        /// Approval type (e.g. `manager`).
        approval_type: Option<String>,
        /// Expiry; the minimum over all policies wins.
        expires_in_ms: Option<u64>,
    },
}

impl PolicyDecision {
    /// Let the call go ahead (`allow()`).
    pub fn allow() -> Self {
        PolicyDecision::Allow
    }
    /// Refuse the call with `message` as its public message (`deny(message)`).
    pub fn deny(message: impl Into<String>) -> Self {
        PolicyDecision::Deny {
            code: None,
            message: Some(message.into()),
        }
    }
    /// Conceal the capability from this caller (`hide()`): it reads as not found.
    pub fn hide() -> Self {
        PolicyDecision::Hide
    }
    /// Hold the call for a human's approval, for `reason` (`requireApproval({reason})`).
    pub fn require_approval(reason: impl Into<String>) -> Self {
        PolicyDecision::RequireApproval {
            reason: reason.into(),
            approval_type: None,
            expires_in_ms: None,
        }
    }

    /// The audit spelling of the stance.
    pub fn kind(&self) -> &'static str {
        match self {
            PolicyDecision::Allow => "allow",
            PolicyDecision::Deny { .. } => "deny",
            PolicyDecision::Hide => "hide",
            PolicyDecision::RequireApproval { .. } => "require-approval",
        }
    }

    /// A decision the runtime can act on; anything else is a policy failure.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            PolicyDecision::RequireApproval {
                reason,
                expires_in_ms,
                ..
            } => {
                if reason.trim().is_empty() {
                    return Err("require-approval needs a non-empty reason".into());
                }
                if *expires_in_ms == Some(0) {
                    return Err("require-approval expiresInMs must be positive".into());
                }
                Ok(())
            }
            PolicyDecision::Deny {
                message: Some(m), ..
            } if m.len() > 4096 => Err("deny message longer than 4096 bytes".into()),
            _ => Ok(()),
        }
    }
}

/// What a policy may know about the capability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityInfo {
    /// The capability's id.
    pub id: String,
    /// What the capability does to the world.
    pub side_effect: SideEffect,
    /// How much harm misuse would do.
    pub risk: Risk,
    /// The capability's tags, for policies that apply to a family of capabilities.
    pub tags: Vec<String>,
}

/// The question put to a policy.
#[derive(Debug, Clone, Copy)]
pub struct PolicyRequest<'a> {
    /// The phase being evaluated, so one policy can act differently per phase.
    pub phase: Phase,
    /// The capability being called.
    pub capability: &'a CapabilityInfo,
    /// The surface of the call.
    pub surface: Surface,
    /// The tenant partition of the call (empty when the embedder has none). Pooled Wasm
    /// instances are keyed by it, so no guest state crosses tenants.
    pub namespace: &'a str,
    /// The actor (from authenticated credentials).
    pub actor: &'a Actor,
    /// The application context projection.
    pub context: &'a serde_json::Value,
    /// The validated input; `None` in discovery.
    pub input: Option<&'a serde_json::Value>,
    /// The execution id (empty in discovery).
    pub execution_id: &'a str,
    /// The approval, in the execution phase after a resume.
    pub approval: Option<&'a ApprovalRef>,
    /// The JSON text of `input`, `context` and the actor's attributes, serialized at most
    /// once per batch however many sandboxed policies ask for it (the shared parts of a
    /// request are lowered once per call, not once per policy). Read it through
    /// [`PolicyRequest::input_json`] and its siblings. One per request: a `SharedJson` filled
    /// for one request would answer for another. Native policies ignore it.
    pub shared: &'a SharedJson,
}

/// Lazily serialized JSON text of the values every policy of a batch receives. Sandboxed
/// policies (Wasm) take these values as text; with several of them in one batch, serializing
/// once and copying the text is cheaper than serializing per policy.
#[derive(Debug, Default)]
pub struct SharedJson {
    input: std::sync::OnceLock<Option<String>>,
    context: std::sync::OnceLock<String>,
    attributes: std::sync::OnceLock<String>,
    values: std::sync::OnceLock<std::sync::Arc<SharedValues>>,
}

/// Owned copies of a request's input, context and actor attributes, made at most once per
/// batch, for sandboxed policies that read them one field at a time while their call runs
/// (a Wasm guest asking the host for `/amount` instead of parsing the whole input): the call
/// may outlive the request's borrow, so it holds these instead.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SharedValues {
    /// The validated input; `None` in discovery.
    pub input: Option<serde_json::Value>,
    /// The context projection.
    pub context: serde_json::Value,
    /// The actor's attributes.
    pub attributes: serde_json::Value,
}

impl PolicyRequest<'_> {
    /// The input as JSON text (`None` in discovery), serialized once per request.
    pub fn input_json(&self) -> Option<&str> {
        self.shared
            .input
            .get_or_init(|| self.input.map(|v| v.to_string()))
            .as_deref()
    }

    /// The context as JSON text, serialized once per request.
    pub fn context_json(&self) -> &str {
        self.shared.context.get_or_init(|| self.context.to_string())
    }

    /// The actor's attributes as JSON text, serialized once per request.
    pub fn attributes_json(&self) -> &str {
        self.shared
            .attributes
            .get_or_init(|| self.actor.attributes.to_string())
    }

    /// Owned copies of the input, context and attributes, cloned once per request however
    /// many sandboxed policies read them field by field.
    pub fn shared_values(&self) -> std::sync::Arc<SharedValues> {
        self.shared
            .values
            .get_or_init(|| {
                std::sync::Arc::new(SharedValues {
                    input: self.input.cloned(),
                    context: self.context.clone(),
                    attributes: self.actor.attributes.clone(),
                })
            })
            .clone()
    }
}

/// Why a policy could not decide. Every variant fails the batch closed (POLICY_FAILED).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The policy reported an error.
    #[error("policy error: {0}")]
    Failed(String),
    /// The policy's sandbox stopped it (fuel, memory, trap...).
    #[error("policy aborted: {0}")]
    Aborted(String),
    /// The decision was malformed.
    #[error("invalid decision: {0}")]
    InvalidDecision(String),
    /// The batch deadline passed.
    #[error("policy timed out after {0} ms")]
    Timeout(u64),
    /// The policy panicked.
    #[error("policy panicked")]
    Panicked,
}

/// A governance rule. Implemented natively (closures via [`policy_fn`]) and by Wasm plugins.
#[async_trait]
pub trait Policy: Send + Sync + 'static {
    /// A stable name for audit and the governance manifest.
    fn name(&self) -> &str;
    /// Phases in which it runs (default: invocation).
    fn phases(&self) -> &[Phase] {
        DEFAULT_PHASES
    }
    /// Whether the policy runs in shadow mode (default: no, it enforces): evaluated like
    /// any other, but its stance never changes the outcome; where it would have, the call
    /// records a `capgate.policy.shadow_divergence` event. Wrap a policy in [`Shadow`] to
    /// roll it out this way.
    fn shadow(&self) -> bool {
        false
    }
    /// Which build and configuration decide (a sandboxed plugin's digests), recorded with
    /// its stance in the audit events that carry decisions. Default: none (native code is
    /// part of the binary).
    fn provenance(&self) -> Option<Arc<Provenance>> {
        None
    }
    /// Decide. `deadline` is what is left of the batch's shared deadline; sandboxed
    /// implementations should bound themselves by it (the runtime also enforces it).
    async fn evaluate(
        &self,
        request: &PolicyRequest<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<PolicyDecision, PolicyError>;
}

type PolicyFnBox = dyn for<'a> Fn(
        &'a PolicyRequest<'a>,
    )
        -> Pin<Box<dyn Future<Output = Result<PolicyDecision, PolicyError>> + Send + 'a>>
    + Send
    + Sync;

/// A policy made from an async closure. Build with [`policy_fn`] or [`policy_sync`].
pub struct FnPolicy {
    name: String,
    phases: Vec<Phase>,
    f: Box<PolicyFnBox>,
}

impl FnPolicy {
    /// Set the phases (default: invocation).
    pub fn with_phases(mut self, phases: impl IntoIterator<Item = Phase>) -> Self {
        self.phases = phases.into_iter().collect();
        self
    }
}

#[async_trait]
impl Policy for FnPolicy {
    fn name(&self) -> &str {
        &self.name
    }
    fn phases(&self) -> &[Phase] {
        &self.phases
    }
    async fn evaluate(
        &self,
        request: &PolicyRequest<'_>,
        _deadline: tokio::time::Instant,
    ) -> Result<PolicyDecision, PolicyError> {
        (self.f)(request).await
    }
}

/// A policy from an async closure returning a boxed future.
///
/// ```
/// use capgate_core::policy::{policy_fn, PolicyDecision};
/// let p = policy_fn("always-allow", |_req| Box::pin(async { Ok(PolicyDecision::allow()) }));
/// # let _ = p;
/// ```
pub fn policy_fn<F>(name: impl Into<String>, f: F) -> FnPolicy
where
    F: for<'a> Fn(
            &'a PolicyRequest<'a>,
        )
            -> Pin<Box<dyn Future<Output = Result<PolicyDecision, PolicyError>> + Send + 'a>>
        + Send
        + Sync
        + 'static,
{
    FnPolicy {
        name: name.into(),
        phases: DEFAULT_PHASES.to_vec(),
        f: Box::new(f),
    }
}

/// A policy from a synchronous closure: the common case for native rules.
///
/// ```
/// use capgate_core::policy::{policy_sync, PolicyDecision};
/// let refund_limit = policy_sync("refund-limit", |req| {
///     let amount = req.input.and_then(|i| i["amount"].as_f64()).unwrap_or(0.0);
///     Ok(if amount > 500.0 {
///         PolicyDecision::require_approval(format!("Refund of ${amount} exceeds $500"))
///     } else {
///         PolicyDecision::allow()
///     })
/// });
/// # let _ = refund_limit;
/// ```
pub fn policy_sync<F>(name: impl Into<String>, f: F) -> FnPolicy
where
    F: Fn(&PolicyRequest<'_>) -> Result<PolicyDecision, PolicyError> + Send + Sync + 'static,
{
    let f = Arc::new(f);
    policy_fn(name, move |req| {
        let r = f(req);
        Box::pin(std::future::ready(r))
    })
}

/// A policy rolled out in shadow mode: it is evaluated exactly like the policy it wraps
/// (same phases, same deadline, same sandbox), but its stance never changes a call's
/// outcome. Where it would have (a deny, hide or approval requirement the enforcing
/// policies did not reach, or a failure), the call records a divergence instead; a shadow
/// policy that traps or times out is counted, never fails the call.
///
/// ```
/// use capgate_core::policy::{policy_sync, PolicyDecision, Shadow, Policy};
/// let strict = Shadow::new(policy_sync("strict-refunds", |_| Ok(PolicyDecision::deny("no"))));
/// assert!(strict.shadow());
/// ```
pub struct Shadow(Arc<dyn Policy>);

impl Shadow {
    /// Run `policy` in shadow mode: evaluated, recorded, never enforced.
    pub fn new(policy: impl Policy) -> Self {
        Shadow(Arc::new(policy))
    }
    /// Wrap a shared policy.
    pub fn from_arc(policy: Arc<dyn Policy>) -> Self {
        Shadow(policy)
    }
}

#[async_trait]
impl Policy for Shadow {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn phases(&self) -> &[Phase] {
        self.0.phases()
    }
    fn shadow(&self) -> bool {
        true
    }
    fn provenance(&self) -> Option<Arc<Provenance>> {
        self.0.provenance()
    }
    async fn evaluate(
        &self,
        request: &PolicyRequest<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<PolicyDecision, PolicyError> {
        self.0.evaluate(request, deadline).await
    }
}

/// Where a shadow policy would have changed a call's outcome (see [`Shadow`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// The shadow policy.
    pub policy: String,
    /// Its own stance (`deny`, `hide`, `require-approval`, `allow` or `error`).
    pub stance: &'static str,
    /// The batch's verdict without it (what happened).
    pub outcome: &'static str,
    /// The batch's verdict had it enforced.
    pub would_be: &'static str,
}

/// The divergences of `shadows` from the verdict of `enforcing`: for each shadow policy,
/// the verdict the batch would have reached had it enforced, where that differs.
pub fn divergences(enforcing: &[Evaluated], shadows: &[Evaluated]) -> Vec<Divergence> {
    if shadows.is_empty() {
        return Vec::new();
    }
    let outcome = combine(enforcing).kind();
    let mut with = enforcing.to_vec();
    shadows
        .iter()
        .filter_map(|s| {
            with.push(s.clone());
            let would_be = combine(&with).kind();
            with.pop();
            (would_be != outcome).then(|| Divergence {
                policy: s.policy.clone(),
                stance: crate::metrics::stance(&s.outcome),
                outcome,
                would_be,
            })
        })
        .collect()
}

/// Which build and configuration of a policy decided: so "why was this allowed" has an
/// exact answer months later. Digests only, never a value (SI-10).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Provenance {
    /// SHA-256 (hex) of the plugin's Wasm bytes.
    pub plugin_sha256: String,
    /// SHA-256 (hex) of the binding's configuration, canonical JSON (RFC 8785).
    pub config_sha256: String,
    /// The deployment revision (`revision` in capgate.toml) it was bound under.
    pub revision: Option<String>,
}

/// One policy's recorded stance, as audit lists it (`{policy, type}`; `type` may be `error`),
/// with the phase it ran in and its provenance where known (capgate extensions).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStance {
    /// The policy's name.
    pub policy: String,
    /// `allow | deny | hide | require-approval | error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The phase it ran in, where a list spans phases (`capability.started`).
    #[serde(default)]
    pub phase: Option<Phase>,
    /// SHA-256 of the plugin build that decided (sandboxed policies).
    #[serde(default)]
    pub plugin_sha256: Option<String>,
    /// SHA-256 of its configuration.
    #[serde(default)]
    pub config_sha256: Option<String>,
    /// The deployment revision it was bound under.
    #[serde(default)]
    pub revision: Option<String>,
}

/// Outcome of one policy in a batch.
#[derive(Debug, Clone)]
pub struct Evaluated {
    /// The policy's name.
    pub policy: String,
    /// Its decision or failure.
    pub outcome: Result<PolicyDecision, PolicyError>,
    /// Which build and configuration decided (see [`Policy::provenance`]).
    pub provenance: Option<Arc<Provenance>>,
}

/// The reason code recorded for a capability's own `approval.required`
/// ([`ApprovalRequirement::reason_codes`]).
pub const CAPABILITY_REASON_CODE: &str = "approval.required";

/// The merged approval requirement of a batch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApprovalRequirement {
    /// Every reason, in policy order.
    pub reasons: Vec<String>,
    /// Every distinct type, in first-seen order.
    pub types: Vec<String>,
    /// Every distinct policy that asked, in policy order (none for the capability's own
    /// `approval.required`).
    pub policies: Vec<String>,
    /// The minimum expiry requested, if any.
    pub expires_in_ms: Option<u64>,
    /// At least one requirement named no type: never self-confirmable (SI-4).
    pub untyped: bool,
    /// The capability's own `approval.required` is one of the requirements.
    pub by_capability: bool,
}

impl ApprovalRequirement {
    /// What the audit trail, exports and notifications record of why approval is needed:
    /// where each requirement came from (the asking policy's name, `approval.required` for
    /// the capability's own), never a reason's text. A reason is policy text that may quote
    /// the input ("Refund of $649 exceeds $500"); it stays with the approval record, which
    /// approvers read together with the input (SI-10).
    pub fn reason_codes(&self) -> Vec<String> {
        self.by_capability
            .then(|| CAPABILITY_REASON_CODE.to_string())
            .into_iter()
            .chain(self.policies.iter().cloned())
            .collect()
    }

    /// Merge one more requirement in, from `policy` (`None`: the capability's own):
    /// reasons appended, types and policies deduplicated, minimum expiry; a requirement
    /// without a type marks the whole as untyped.
    pub fn merge(
        &mut self,
        policy: Option<&str>,
        reason: &str,
        approval_type: Option<&str>,
        expires_in_ms: Option<u64>,
    ) {
        self.reasons.push(reason.to_string());
        match policy {
            Some(p) if !self.policies.iter().any(|x| x == p) => self.policies.push(p.to_string()),
            Some(_) => {}
            None => self.by_capability = true,
        }
        match approval_type {
            Some(t) if !self.types.iter().any(|x| x == t) => self.types.push(t.to_string()),
            Some(_) => {}
            None => self.untyped = true,
        }
        if let Some(e) = expires_in_ms {
            self.expires_in_ms = Some(self.expires_in_ms.map_or(e, |cur| cur.min(e)));
        }
    }
}

/// The combined verdict of a batch: failure > deny > hide > require-approval > allow.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// At least one policy failed (SI-7): the name and reason of the first.
    Failed {
        /// The failing policy.
        policy: String,
        /// Why it failed (private: audit and logs only).
        reason: String,
    },
    /// At least one deny: the first deny's policy, code and message.
    Denied {
        /// The denying policy.
        policy: String,
        /// The denying policy's private code, for audit and logs.
        code: Option<String>,
        /// The denying policy's public message, what the caller is told.
        message: Option<String>,
    },
    /// At least one hide.
    Hidden {
        /// The hiding policy.
        policy: String,
    },
    /// Approval needed, merged.
    ApprovalRequired(ApprovalRequirement),
    /// Everyone allowed (or there were no policies).
    Allowed,
}

impl Verdict {
    /// The verdict as a stance word: `error` (a policy failed), `deny`, `hide`,
    /// `require-approval` or `allow`.
    pub fn kind(&self) -> &'static str {
        match self {
            Verdict::Failed { .. } => "error",
            Verdict::Denied { .. } => "deny",
            Verdict::Hidden { .. } => "hide",
            Verdict::ApprovalRequired(_) => "require-approval",
            Verdict::Allowed => "allow",
        }
    }
}

/// Combine a batch's outcomes with the precedence of docs/pipeline.md, stage 7.
pub fn combine(results: &[Evaluated]) -> Verdict {
    let mut deny = None;
    let mut hide = None;
    let mut approval: Option<ApprovalRequirement> = None;
    for e in results {
        match &e.outcome {
            Err(err) => {
                return Verdict::Failed {
                    policy: e.policy.clone(),
                    reason: err.to_string(),
                };
            }
            Ok(PolicyDecision::Deny { code, message }) => {
                if deny.is_none() {
                    deny = Some((e.policy.clone(), code.clone(), message.clone()));
                }
            }
            Ok(PolicyDecision::Hide) => {
                if hide.is_none() {
                    hide = Some(e.policy.clone());
                }
            }
            Ok(PolicyDecision::RequireApproval {
                reason,
                approval_type,
                expires_in_ms,
            }) => approval.get_or_insert_with(Default::default).merge(
                Some(&e.policy),
                reason,
                approval_type.as_deref(),
                *expires_in_ms,
            ),
            Ok(PolicyDecision::Allow) => {}
        }
    }
    if let Some((policy, code, message)) = deny {
        Verdict::Denied {
            policy,
            code,
            message,
        }
    } else if let Some(policy) = hide {
        Verdict::Hidden { policy }
    } else if let Some(req) = approval {
        Verdict::ApprovalRequired(req)
    } else {
        Verdict::Allowed
    }
}

/// The audit list of every policy's stance.
pub fn stances(results: &[Evaluated]) -> Vec<PolicyStance> {
    stances_with(results, None)
}

/// [`stances`], each marked with the phase it ran in.
pub fn stances_in(results: &[Evaluated], phase: Phase) -> Vec<PolicyStance> {
    stances_with(results, Some(phase))
}

fn stances_with(results: &[Evaluated], phase: Option<Phase>) -> Vec<PolicyStance> {
    results
        .iter()
        .map(|e| {
            let p = e.provenance.as_deref();
            PolicyStance {
                policy: e.policy.clone(),
                kind: match &e.outcome {
                    Ok(d) => d.kind().to_string(),
                    Err(_) => "error".to_string(),
                },
                phase,
                plugin_sha256: p.map(|p| p.plugin_sha256.clone()),
                config_sha256: p.map(|p| p.config_sha256.clone()),
                revision: p.and_then(|p| p.revision.clone()),
            }
        })
        .collect()
}
