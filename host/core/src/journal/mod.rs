//! The invocation journal (docs/gateway.md, "Invocation semantics"): how a stateless
//! gateway replica admits each invocation id at most once, replays a settled result, and
//! continues an approval under the original invocation id.
//!
//! The journal binds a caller-chosen invocation id, inside a *scope* (a hash of namespace,
//! actor kind, actor id and surface), to the capability and the canonical input hash. A
//! claim is insert-if-absent: the first caller is admitted with a private claim token;
//! every later caller with the same id and the same fingerprint sees the existing record,
//! and one with a different fingerprint gets a conflict. Only the holder of the claim
//! token may settle; a pending record is never taken over after a timeout, only settled by
//! an explicit, server-side [`InvocationJournal::reconcile`] once an operator has verified
//! the original execution stopped.
//!
//! This module holds the trait, its record types and the hashing rules; [`memory`] a
//! development-only in-memory implementation. Durable implementations live in
//! `capgate-store`.

use crate::actor::{ActorKind, ActorRef, Surface};
use crate::canonical::{canonical_json, input_hash};
use crate::digest::sha256_hex;
use crate::id::BoundedId;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub mod memory;

pub use memory::InMemoryInvocationJournal;

/// Check an id against the journal's bounds, those of every [`BoundedId`]: non-empty, at
/// most [`BoundedId::MAX_CHARS`] characters, no control characters. `what` names the field
/// in the error.
pub fn validate_id(what: &str, id: &str) -> Result<(), JournalError> {
    BoundedId::check(id).map_err(|e| JournalError::Invalid(format!("{what} {e}")))
}

fn hash_parts(parts: &[&str]) -> Result<String, JournalError> {
    // A canonical JSON array of strings is an unambiguous encoding of the tuple (every part
    // is quoted and escaped), so no two distinct tuples hash the same bytes.
    let value = serde_json::Value::from(parts.iter().map(|p| (*p).to_string()).collect::<Vec<_>>());
    let bytes = canonical_json(&value).map_err(|e| JournalError::Invalid(e.to_string()))?;
    Ok(sha256_hex(bytes))
}

/// The journal scope: lower-case hex SHA-256 over namespace, actor kind, actor id and
/// surface. Records in one scope are invisible from every other, so one tenant's or
/// actor's invocation ids can never collide with (or reveal) another's. An empty namespace
/// or an anonymous actor is refused: neither identifies anyone.
pub fn scope_hash(
    namespace: &str,
    actor: &ActorRef,
    surface: Surface,
) -> Result<String, JournalError> {
    if namespace.trim().is_empty() {
        return Err(JournalError::Invalid(
            "the journal namespace is empty".into(),
        ));
    }
    if actor.kind == ActorKind::Anonymous {
        return Err(JournalError::Invalid(
            "anonymous actors cannot use the invocation journal".into(),
        ));
    }
    validate_id("actor id", &actor.id)?;
    hash_parts(&[
        "capgate.journal.scope.v1",
        namespace,
        actor.kind.as_str(),
        &actor.id,
        surface.as_str(),
    ])
}

/// The stable idempotency key the procedure sees (`idk_` + SHA-256 over scope, invocation
/// id, capability and input hash): the same logical call always gets the same key, so a
/// downstream system can deduplicate the effect.
pub fn idempotency_key(
    scope: &str,
    invocation_id: &str,
    capability_id: &str,
    input_hash: &str,
) -> Result<String, JournalError> {
    Ok(format!(
        "idk_{}",
        hash_parts(&[
            "capgate.journal.idempotency-key.v1",
            scope,
            invocation_id,
            capability_id,
            input_hash,
        ])?
    ))
}

/// A fresh, unguessable claim token (`clm_` + random UUID). Journal implementations call
/// this when they admit a claim; only the admitted caller ever learns it.
pub fn new_claim_token() -> String {
    format!("clm_{}", uuid::Uuid::new_v4().simple())
}

/// Whether a receipt has an authoritative result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InvocationState {
    /// Admitted, no authoritative result yet: the effect may or may not have happened.
    Pending,
    /// A result is recorded.
    Settled,
}

crate::wire_enum! {
    InvocationState {
        Pending => "pending",
        Settled => "settled",
    }
}

/// A journal entry: the public receipt plus the private fields (scope, input, hashes,
/// claim token) that must never reach a model or a client.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvocationRecord {
    /// The scope hash ([`scope_hash`]).
    pub scope: String,
    /// The caller-chosen invocation id.
    pub invocation_id: String,
    /// The capability the id is bound to.
    pub capability_id: String,
    /// The original input (authorization of receipt reads sees it; never a model).
    pub input: serde_json::Value,
    /// SHA-256 of the canonical input: with the capability, the binding fingerprint.
    pub input_hash: String,
    /// The stable key handed to the procedure ([`idempotency_key`]).
    pub idempotency_key: String,
    /// The token of the current (or last) claim; settling requires it.
    pub claim_token: String,
    /// Pending or settled.
    pub state: InvocationState,
    /// The approval this invocation asked for, kept after it is resumed.
    pub approval_id: Option<String>,
    /// Settled as approval-required and not yet resumed: [`InvocationJournal::claim_resume`]
    /// may reopen it.
    pub awaiting_approval: bool,
    /// Caller correlation id.
    pub correlation_id: Option<String>,
    /// The contract digest the caller invoked against.
    pub contract_digest: Option<String>,
    /// The settled outcome (the gateway's `CapabilityOutcome` JSON); `None` while pending.
    pub outcome: Option<serde_json::Value>,
    /// Settled by an operator through [`InvocationJournal::reconcile`], not by the call.
    pub reconciled: bool,
    /// When first claimed.
    pub created_at: DateTime<Utc>,
    /// When last claimed or settled.
    pub updated_at: DateTime<Utc>,
}

impl InvocationRecord {
    /// Whether this record is bound to the same capability and input.
    pub fn binds(&self, capability_id: &str, input_hash: &str) -> bool {
        self.capability_id == capability_id && self.input_hash == input_hash
    }

    /// What a claim of this record's id with `capability_id` and `input_hash` finds: the
    /// record itself when the fingerprint is the same, a conflict otherwise.
    pub fn existing_claim(self, capability_id: &str, input_hash: &str) -> ClaimOutcome {
        if self.binds(capability_id, input_hash) {
            ClaimOutcome::Existing(self)
        } else {
            ClaimOutcome::Conflict
        }
    }

    /// Whether [`InvocationJournal::claim_resume`] for `approval_id` may reopen this
    /// record: settled as approval-required for exactly that approval.
    pub fn resumable_for(&self, approval_id: &str) -> bool {
        self.state == InvocationState::Settled
            && self.awaiting_approval
            && self.approval_id.as_deref() == Some(approval_id)
    }

    /// Whether `claim_token` may settle this record now: it must be the token of the
    /// current claim ([`JournalError::StaleClaim`] otherwise) and the record pending
    /// ([`JournalError::NotPending`] otherwise).
    pub fn settleable_by(&self, claim_token: &str) -> Result<(), JournalError> {
        if self.claim_token != claim_token {
            Err(JournalError::StaleClaim(self.invocation_id.clone()))
        } else if self.state != InvocationState::Pending {
            Err(JournalError::NotPending(self.invocation_id.clone()))
        } else {
            Ok(())
        }
    }

    /// The public receipt (no scope, input, hashes or claim token), with the stored
    /// outcome as JSON.
    pub fn receipt(&self) -> InvocationReceipt {
        self.receipt_with(self.outcome.clone())
    }

    /// The public receipt with the outcome as the caller reads it back (the gateway's
    /// typed `CapabilityOutcome`, say); `outcome` is what the caller decoded from
    /// [`InvocationRecord::outcome`].
    pub fn receipt_with<O>(&self, outcome: Option<O>) -> InvocationReceipt<O> {
        InvocationReceipt {
            invocation_id: self.invocation_id.clone(),
            capability_id: self.capability_id.clone(),
            contract_digest: self.contract_digest.clone(),
            correlation_id: self.correlation_id.clone(),
            approval_id: self.approval_id.clone(),
            state: self.state,
            outcome,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

/// What a client may learn about an invocation (`InvocationReceipt`, docs/gateway.md): the
/// one receipt type, whose outcome is JSON here and the gateway's typed outcome on the
/// wire (`capgate_client::wire::InvocationReceipt`). Timestamps are RFC 3339 UTC with
/// milliseconds on the wire.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvocationReceipt<O = serde_json::Value> {
    /// The invocation id.
    pub invocation_id: String,
    /// The capability the invocation id is bound to.
    pub capability_id: String,
    /// The contract digest the call was made against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract_digest: Option<String>,
    /// Caller correlation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// The approval, if one was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// Pending (no authoritative result; the effect may have happened) or settled.
    pub state: InvocationState,
    /// The settled outcome.
    pub outcome: Option<O>,
    /// When first claimed.
    #[serde(with = "rfc3339_millis")]
    pub created_at: DateTime<Utc>,
    /// When last changed.
    #[serde(with = "rfc3339_millis")]
    pub updated_at: DateTime<Utc>,
}

/// Receipt timestamps on the wire: `2026-11-29T08:00:00.123Z`.
mod rfc3339_millis {
    use chrono::{DateTime, SecondsFormat, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        DateTime::parse_from_rfc3339(&text)
            .map(|t| t.with_timezone(&Utc))
            .map_err(serde::de::Error::custom)
    }
}

/// A request to admit one invocation. Built with [`ClaimRequest::new`], which validates
/// the ids and computes the input hash and idempotency key, so every implementation binds
/// the same fingerprint.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimRequest {
    /// The scope hash.
    pub scope: String,
    /// The invocation id.
    pub invocation_id: String,
    /// The capability to bind the id to.
    pub capability_id: String,
    /// The input as received.
    pub input: serde_json::Value,
    /// SHA-256 of its canonical form.
    pub input_hash: String,
    /// The derived idempotency key.
    pub idempotency_key: String,
    /// Caller correlation id.
    pub correlation_id: Option<String>,
    /// The contract digest the caller invoked against, kept for its receipt.
    pub contract_digest: Option<String>,
    /// The caller's tenant partition, whose storage budget the record counts against
    /// ([`JournalBudget`]); `None` counts against none.
    pub namespace: Option<String>,
}

/// How much of the journal one namespace may hold: a claim that would take the namespace
/// past either bound is refused ([`JournalError::QuotaExceeded`]) with nothing written, so
/// one tenant's agents cannot fill the store every tenant shares. Settled receipts leave
/// the count when the replay horizon purges them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalBudget {
    /// Records (pending and settled) per namespace.
    pub max_rows: u64,
    /// Bytes of stored input and outcome JSON per namespace.
    pub max_bytes: u64,
}

impl JournalBudget {
    /// The default: 100 000 records and 256 MiB per namespace.
    pub const DEFAULT: JournalBudget = JournalBudget {
        max_rows: 100_000,
        max_bytes: 256 * 1024 * 1024,
    };
}

impl Default for JournalBudget {
    fn default() -> Self {
        JournalBudget::DEFAULT
    }
}

impl ClaimRequest {
    /// Validate the ids (≤ 256 characters) and derive the input hash and idempotency key.
    pub fn new(
        scope: impl Into<String>,
        invocation_id: impl Into<String>,
        capability_id: impl Into<String>,
        input: serde_json::Value,
    ) -> Result<Self, JournalError> {
        let scope = scope.into();
        let invocation_id = invocation_id.into();
        let capability_id = capability_id.into();
        validate_id("scope", &scope)?;
        validate_id("invocation id", &invocation_id)?;
        validate_id("capability id", &capability_id)?;
        let input_hash = input_hash(&input).map_err(|e| JournalError::Invalid(e.to_string()))?;
        let idempotency_key = idempotency_key(&scope, &invocation_id, &capability_id, &input_hash)?;
        Ok(ClaimRequest {
            scope,
            invocation_id,
            capability_id,
            input,
            input_hash,
            idempotency_key,
            correlation_id: None,
            contract_digest: None,
            namespace: None,
        })
    }

    /// Count the record against `namespace`'s storage budget.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Result<Self, JournalError> {
        let namespace = namespace.into();
        validate_id("namespace", &namespace)?;
        self.namespace = Some(namespace);
        Ok(self)
    }

    /// Record the caller's correlation id.
    pub fn correlation_id(mut self, id: impl Into<String>) -> Result<Self, JournalError> {
        let id = id.into();
        validate_id("correlation id", &id)?;
        self.correlation_id = Some(id);
        Ok(self)
    }

    /// Record the contract digest the caller invoked against.
    pub fn contract_digest(mut self, digest: impl Into<String>) -> Result<Self, JournalError> {
        let digest = digest.into();
        validate_id("contract digest", &digest)?;
        self.contract_digest = Some(digest);
        Ok(self)
    }

    /// The pending record a successful claim stores.
    pub fn into_record(self, claim_token: String, now: DateTime<Utc>) -> InvocationRecord {
        InvocationRecord {
            scope: self.scope,
            invocation_id: self.invocation_id,
            capability_id: self.capability_id,
            input: self.input,
            input_hash: self.input_hash,
            idempotency_key: self.idempotency_key,
            claim_token,
            state: InvocationState::Pending,
            approval_id: None,
            awaiting_approval: false,
            correlation_id: self.correlation_id,
            contract_digest: self.contract_digest,
            outcome: None,
            reconciled: false,
            created_at: now,
            updated_at: now,
        }
    }
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// This caller owns the invocation: run it, then settle with the token.
    Admitted {
        /// Proof of ownership for [`InvocationJournal::settle`].
        claim_token: String,
        /// The stored pending record.
        record: InvocationRecord,
    },
    /// The same id with the same capability and input exists: replay it if settled,
    /// report an unknown outcome if pending. Never run it again.
    Existing(InvocationRecord),
    /// The same id is bound to a different capability or input (`INVOCATION_CONFLICT`).
    Conflict,
}

/// The answer to [`InvocationJournal::claim_resume`].
#[derive(Debug, Clone, PartialEq)]
pub enum ResumeClaim {
    /// Reopened (settled approval-required → pending): continue, then settle with the token.
    Admitted {
        /// Proof of ownership of the resumed run.
        claim_token: String,
        /// The pending record.
        record: InvocationRecord,
    },
    /// The record exists but is not awaiting this approval (already resumed, pending,
    /// or settled otherwise).
    NotResumable(InvocationRecord),
    /// No record for this approval in this scope.
    NotFound,
}

/// A pending record's claim as an operator observed it (read through
/// [`InvocationJournal::get`] or `capgate invocations show`): what
/// [`InvocationJournal::reconcile`] settles, and only while it is still the current claim,
/// so a late original caller and the operator cannot both win.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObservedClaim<'a> {
    /// The record's scope.
    pub scope: &'a str,
    /// The record's invocation id.
    pub invocation_id: &'a str,
    /// The claim token the operator saw on the record.
    pub claim_token: &'a str,
}

impl<'a> From<&'a InvocationRecord> for ObservedClaim<'a> {
    fn from(record: &'a InvocationRecord) -> Self {
        ObservedClaim {
            scope: &record.scope,
            invocation_id: &record.invocation_id,
            claim_token: &record.claim_token,
        }
    }
}

/// The pending record a settlement applies to and the claim it is made under: what
/// [`InvocationJournal::settle`] and [`InvocationJournal::reconcile`] hand to
/// [`InvocationJournal::settle_claim`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettleClaim<'a> {
    /// The record's scope.
    pub scope: &'a str,
    /// The record's invocation id.
    pub invocation_id: &'a str,
    /// The claim token the settlement is made with: the caller's own, or the one an
    /// operator observed.
    pub claim_token: &'a str,
    /// Settled by an operator ([`InvocationJournal::reconcile`]), not by the call.
    pub reconciled: bool,
}

impl SettleClaim<'_> {
    /// `settle` for the call's own settlement, `reconcile` for an operator's: how an
    /// implementation names the operation it runs (in metrics, in spans).
    pub fn pick<T>(&self, settle: T, reconcile: T) -> T {
        if self.reconciled { reconcile } else { settle }
    }
}

/// How a pending invocation ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Settlement {
    /// The outcome to record (the gateway's `CapabilityOutcome` JSON).
    pub outcome: serde_json::Value,
    /// Set when the outcome is approval-required: the record then awaits that approval.
    pub awaiting_approval: Option<String>,
}

impl Settlement {
    /// A final outcome (completed, failed, cancelled before the procedure ran).
    pub fn final_outcome(outcome: serde_json::Value) -> Self {
        Settlement {
            outcome,
            awaiting_approval: None,
        }
    }

    /// An approval-required outcome, resumable through `claim_resume`.
    pub fn approval_required(approval_id: impl Into<String>, outcome: serde_json::Value) -> Self {
        Settlement {
            outcome,
            awaiting_approval: Some(approval_id.into()),
        }
    }

    /// Check the approval id bound.
    pub fn validate(&self) -> Result<(), JournalError> {
        match &self.awaiting_approval {
            Some(a) => validate_id("approval id", a),
            None => Ok(()),
        }
    }
}

/// Why the journal refused or failed an operation.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// A request field is out of bounds.
    #[error("invalid journal request: {0}")]
    Invalid(String),
    /// No record with that id in that scope.
    #[error("invocation `{0}` not found")]
    NotFound(String),
    /// The claim token is not the current one: another claim owns the record now.
    #[error("invocation `{0}`: stale claim token")]
    StaleClaim(String),
    /// The record is not pending (already settled).
    #[error("invocation `{0}` is not pending")]
    NotPending(String),
    /// A stored record could not be read back (tampered or corrupt).
    #[error("invocation `{invocation_id}` is malformed: {reason}")]
    Malformed {
        /// The invocation id of the unreadable record.
        invocation_id: String,
        /// What is wrong.
        reason: String,
    },
    /// Admitting the claim would take its namespace past its storage budget
    /// ([`JournalBudget`]); nothing was written.
    #[error("namespace `{namespace}` is over its invocation journal budget ({limit})")]
    QuotaExceeded {
        /// The namespace that is over budget.
        namespace: String,
        /// Which bound: `rows` or `bytes`.
        limit: &'static str,
    },
    /// The backing store failed (the database error, or why the store gave up).
    #[error("invocation journal unavailable: {0}")]
    Backend(#[source] crate::error::BoxError),
}

/// The durable record of invocations a gateway admitted. Every operation that changes a
/// record is one compare-and-set in the implementation, so any number of replicas can
/// share one journal. Callers pass the clock. Never expose these methods to a model.
#[async_trait]
pub trait InvocationJournal: Send + Sync + 'static {
    /// Insert-if-absent: admit the first claim of `(scope, invocation_id)`, return an
    /// identical existing one, or report a conflict when the fingerprint differs.
    async fn claim(
        &self,
        request: ClaimRequest,
        now: DateTime<Utc>,
    ) -> Result<ClaimOutcome, JournalError>;

    /// Reopen a record settled as approval-required for `approval_id` (→ pending, with a
    /// new claim token). At most one caller wins.
    async fn claim_resume(
        &self,
        scope: &str,
        invocation_id: &str,
        approval_id: &str,
        now: DateTime<Utc>,
    ) -> Result<ResumeClaim, JournalError>;

    /// Settle a pending record, only with its current claim token.
    async fn settle(
        &self,
        scope: &str,
        invocation_id: &str,
        claim_token: &str,
        settlement: Settlement,
        now: DateTime<Utc>,
    ) -> Result<InvocationRecord, JournalError> {
        let claim = SettleClaim {
            scope,
            invocation_id,
            claim_token,
            reconciled: false,
        };
        self.settle_claim(claim, settlement, now).await
    }

    /// Operator path for an orphaned pending record: after verifying that the original
    /// execution stopped and reconciling the domain effect, settle the claim the operator
    /// `observed` (read through [`InvocationJournal::get`]). Marks the record
    /// reconciled. Never invent success; never call this from a model-facing path.
    async fn reconcile(
        &self,
        observed: ObservedClaim<'_>,
        settlement: Settlement,
        now: DateTime<Utc>,
    ) -> Result<InvocationRecord, JournalError> {
        let claim = SettleClaim {
            scope: observed.scope,
            invocation_id: observed.invocation_id,
            claim_token: observed.claim_token,
            reconciled: true,
        };
        let record = self.settle_claim(claim, settlement, now).await?;
        let invocation_id = observed.invocation_id;
        tracing::warn!(target: "capgate::journal", invocation_id, "pending invocation settled by reconcile");
        Ok(record)
    }

    /// The one compare-and-set behind [`InvocationJournal::settle`] and
    /// [`InvocationJournal::reconcile`]: settle the pending record `claim` names, only
    /// while `claim.claim_token` is its current token ([`InvocationRecord::settleable_by`]
    /// says why not), recording `claim.reconciled`. Implementations provide this; callers
    /// use `settle` or `reconcile`.
    async fn settle_claim(
        &self,
        claim: SettleClaim<'_>,
        settlement: Settlement,
        now: DateTime<Utc>,
    ) -> Result<InvocationRecord, JournalError>;

    /// Withdraw a pending claim whose call turned out to be concealed before anything of it
    /// ran (hidden by an execution-phase policy, SI-8): the record is deleted, so the
    /// invocation id reads and can be reused exactly as one that was never claimed, as for
    /// an unknown name. Only while `claim_token` still holds the record pending; `false`
    /// when it no longer does (nothing is deleted then).
    async fn release(
        &self,
        scope: &str,
        invocation_id: &str,
        claim_token: &str,
    ) -> Result<bool, JournalError>;

    /// Load a record.
    async fn get(
        &self,
        scope: &str,
        invocation_id: &str,
    ) -> Result<Option<InvocationRecord>, JournalError>;

    /// The record that asked for an approval, within a scope: the oldest if several did
    /// (ties broken by invocation id).
    async fn find_approval(
        &self,
        scope: &str,
        approval_id: &str,
    ) -> Result<Option<InvocationRecord>, JournalError>;

    /// Delete settled records last changed before `cutoff` (the end of the replay
    /// horizon). Pending records are kept: they need reconciling, not forgetting.
    async fn purge_settled_before(&self, cutoff: DateTime<Utc>) -> Result<u64, JournalError>;

    /// Whether records survive a restart.
    fn is_durable(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dana() -> ActorRef {
        ActorRef {
            id: "u_dana".into(),
            kind: ActorKind::User,
        }
    }

    fn scope() -> String {
        scope_hash("org_1", &dana(), Surface::AiSdk).unwrap_or_default()
    }

    #[test]
    fn scope_differs_by_each_part_and_refuses_anonymous_or_empty_namespace() {
        let base = scope();
        assert_eq!(base.len(), 64);
        let other_kind = ActorRef {
            id: "u_dana".into(),
            kind: ActorKind::Service,
        };
        for other in [
            scope_hash("org_2", &dana(), Surface::AiSdk),
            scope_hash("org_1", &other_kind, Surface::AiSdk),
            scope_hash("org_1", &dana(), Surface::Mcp),
        ] {
            assert_ne!(other.ok(), Some(base.clone()));
        }
        assert!(scope_hash("", &dana(), Surface::AiSdk).is_err());
        let anon = ActorRef {
            id: "anon".into(),
            kind: ActorKind::Anonymous,
        };
        assert!(scope_hash("org_1", &anon, Surface::AiSdk).is_err());
    }

    #[test]
    fn ids_longer_than_256_characters_are_refused() {
        let long = "x".repeat(257);
        assert!(ClaimRequest::new(scope(), long, "orders.refund", json!({})).is_err());
        assert!(ClaimRequest::new(scope(), "x".repeat(256), "orders.refund", json!({})).is_ok());
    }

    #[test]
    fn idempotency_key_is_stable_and_bound_to_the_input() {
        let a = ClaimRequest::new(scope(), "inv_1", "orders.refund", json!({"a": 1, "b": 2}));
        let b = ClaimRequest::new(scope(), "inv_1", "orders.refund", json!({"b": 2, "a": 1}));
        let c = ClaimRequest::new(scope(), "inv_1", "orders.refund", json!({"a": 2}));
        let (Ok(a), Ok(b), Ok(c)) = (a, b, c) else {
            panic!("valid requests");
        };
        assert_eq!(a.idempotency_key, b.idempotency_key);
        assert_ne!(a.idempotency_key, c.idempotency_key);
        assert!(a.idempotency_key.starts_with("idk_"));
    }
}
