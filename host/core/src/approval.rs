//! Human approval bound to the exact operation (SI-4, SI-5): the request/record types,
//! the [`ApprovalCoordinator`] seam that durable stores implement, an in-memory
//! coordinator for tests and development, and the optional inline handler.

use crate::actor::{Actor, ActorRef, Surface};
use crate::clock::TimeRange;
use crate::meta::{Risk, SideEffect};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;

/// Lifecycle of an approval record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalStatus {
    /// Waiting for a human.
    Pending,
    /// Approved, not yet executed.
    Approved,
    /// A human said no: the call never runs.
    Rejected,
    /// Past its expiry (also computed lazily from `expires_at`).
    Expired,
    /// Withdrawn before anyone decided: it can no longer be approved or run.
    Cancelled,
    /// Executed once; can never execute again.
    Consumed,
}

crate::wire_enum! {
    ApprovalStatus {
        Pending => "pending",
        Approved => "approved",
        Rejected => "rejected",
        Expired => "expired",
        Cancelled => "cancelled",
        Consumed => "consumed",
    }
}

/// What stage 8 asks a coordinator to store.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    /// The approval's id (`apr_…`), what a resume names.
    pub id: String,
    /// The capability the approval binds.
    pub capability_id: String,
    /// The surface of the original call.
    pub surface: Surface,
    /// The requester (with attributes: resume runs as this actor).
    pub actor: Actor,
    /// The validated input (SI-6).
    pub input: serde_json::Value,
    /// SHA-256 hex of the canonical input (SI-5).
    pub input_hash: String,
    /// Every reason (merged from policies and static config).
    pub reasons: Vec<String>,
    /// Every distinct approval type.
    pub types: Vec<String>,
    /// The policies that asked for approval, in evaluation order, each once (empty when
    /// only the capability's own `approval.required` did). Shown to approvers beside the
    /// reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<String>,
    /// The capability's risk.
    pub risk: Risk,
    /// The capability's side effect.
    pub side_effect: SideEffect,
    /// When it was requested.
    pub requested_at: DateTime<Utc>,
    /// When it stops being decidable or resumable.
    pub expires_at: DateTime<Utc>,
    /// The execution that requested it.
    pub execution_id: String,
    /// The correlation id of the original call, kept for the resumed execution.
    pub correlation_id: Option<String>,
    /// The tenant partition the call was made in (empty when the embedder has none). The
    /// approvals API lists, shows and decides only within the approver's namespace, and a
    /// resume must come from the same one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// A policy asked for approval without naming a type. Such a requirement is never
    /// self-confirmable, whatever types it was merged with (SI-4).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub untyped: bool,
    /// The adapter's digest of the capability's own contract when the call asked for
    /// approval (the gateway's per-capability digest without the deployment revision): a
    /// door resumes only while the capability's current digest is the same, so a
    /// deployment that changed nothing about this capability keeps its pending approvals.
    #[serde(default)]
    pub descriptor_digest: Option<String>,
}

/// A human decision.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// `approved` or `rejected`.
    pub status: DecisionStatus,
    /// Who decided, recorded as the envelope actor of the decision's event.
    pub approver: ActorRef,
    /// What the approver wrote beside the decision, if anything (kept for review).
    pub comment: Option<String>,
    /// When the decision was made, by the runtime's clock.
    pub decided_at: DateTime<Utc>,
    /// The namespace the approver decided from (`None` for an operator's shell decision and
    /// for records decided before namespaces were recorded).
    pub approver_namespace: Option<String>,
    /// How the decision was made: by an approver through the approvals API, by the
    /// requester confirming their own self-confirmable request, or by an operator from the
    /// shell on someone's behalf.
    #[serde(default)]
    pub via: DecidedVia,
}

/// Who stood behind a decision: an authenticated approver, the requester confirming their
/// own call through the requester door, or an operator acting from the shell
/// (`capgate approvals approve --as ID`), recorded so the audit trail says which.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecidedVia {
    /// An approver authenticated by the approvals API (or an inline handler).
    #[default]
    Approver,
    /// An operator's shell action on behalf of the named approver.
    Operator,
    /// The human who requested the call, confirming (or declining) it themselves: only
    /// possible when every type of the approval is self-confirmable.
    Requester,
}

crate::wire_enum! {
    DecidedVia {
        Approver => "approver",
        Operator => "operator",
        Requester => "requester",
    }
}

/// The two possible decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DecisionStatus {
    /// The call may run once, when it is resumed.
    Approved,
    /// The call must not run.
    Rejected,
}

crate::wire_enum! {
    DecisionStatus {
        Approved => "approved",
        Rejected => "rejected",
    }
}

/// A stored approval: the request plus its state.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRecord {
    /// The request as stored.
    #[serde(flatten)]
    pub request: ApprovalRequest,
    /// Current status (see [`ApprovalRecord::effective_status`] for lazy expiry).
    pub status: ApprovalStatus,
    /// The decision, once made.
    pub decision: Option<Decision>,
    /// The execution that consumed it.
    pub consumed_by_execution_id: Option<String>,
}

impl ApprovalRecord {
    /// A fresh pending record.
    pub fn pending(request: ApprovalRequest) -> Self {
        ApprovalRecord {
            request,
            status: ApprovalStatus::Pending,
            decision: None,
            consumed_by_execution_id: None,
        }
    }

    /// Status with lazy expiry applied: a pending or approved record past `expires_at` is
    /// expired.
    pub fn effective_status(&self, now: DateTime<Utc>) -> ApprovalStatus {
        match self.status {
            ApprovalStatus::Pending | ApprovalStatus::Approved
                if now >= self.request.expires_at =>
            {
                ApprovalStatus::Expired
            }
            s => s,
        }
    }

    /// Whether this record may change as one whose status at `now` is `expected` (a
    /// decision needs a pending record, a consumption an approved one):
    /// [`ApprovalStoreError::WrongStatus`] otherwise.
    pub fn expect_status(
        &self,
        expected: ApprovalStatus,
        now: DateTime<Utc>,
    ) -> Result<(), ApprovalStoreError> {
        let status = self.effective_status(now);
        if status == expected {
            Ok(())
        } else {
            Err(ApprovalStoreError::WrongStatus {
                id: self.request.id.clone(),
                status: status.as_str(),
                expected: expected.as_str(),
            })
        }
    }

    /// The model-safe summary.
    pub fn summary(&self, now: DateTime<Utc>) -> ApprovalSummary {
        ApprovalSummary {
            id: self.request.id.clone(),
            capability_id: self.request.capability_id.clone(),
            status: self.effective_status(now),
            reasons: self.request.reasons.clone(),
            types: self.request.types.clone(),
            requested_at: self.request.requested_at,
            expires_at: self.request.expires_at,
        }
    }
}

/// What an `approval-required` envelope carries: enough to tell a human, no stored input
/// and no actor record (the same fields as the gateway's `PortableApproval`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalSummary {
    /// The approval's id (`apr_…`), what the model hands back to resume.
    pub id: String,
    /// The capability the held call is for.
    pub capability_id: String,
    /// Status at the time of the summary.
    pub status: ApprovalStatus,
    /// Why approval is needed.
    pub reasons: Vec<String>,
    /// The approval types asked for (e.g. `manager`), which decide who may approve.
    pub types: Vec<String>,
    /// When the call was held for approval.
    pub requested_at: DateTime<Utc>,
    /// When it expires.
    pub expires_at: DateTime<Utc>,
}

/// Who approved a resumed execution; visible to the procedure in its agent info.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRef {
    /// The approval the execution consumed (`apr_…`).
    pub id: String,
    /// Who approved, so the procedure can record or check it.
    pub approver: ActorRef,
}

/// Filters for listing approvals.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalFilter {
    /// Only this effective status.
    pub status: Option<ApprovalStatus>,
    /// Only this capability.
    pub capability_id: Option<String>,
    /// Only this requester.
    pub actor_id: Option<String>,
    /// Only this tenant partition (the approvals API always sets the approver's).
    pub namespace: Option<String>,
    /// Requested at or after.
    pub requested_after: Option<DateTime<Utc>>,
    /// Only records requested strictly before this instant.
    pub requested_before: Option<DateTime<Utc>>,
    /// Page size (default 100, at most 1000).
    pub limit: Option<u32>,
    /// Records to skip.
    pub offset: Option<u32>,
}

impl ApprovalFilter {
    /// The page size to use.
    pub fn effective_limit(&self) -> usize {
        self.limit.unwrap_or(100).clamp(1, 1000) as usize
    }

    /// Whether a record matches (for in-memory implementations).
    pub fn matches(&self, r: &ApprovalRecord, now: DateTime<Utc>) -> bool {
        self.status.is_none_or(|s| r.effective_status(now) == s)
            && self
                .capability_id
                .as_ref()
                .is_none_or(|c| &r.request.capability_id == c)
            && self
                .actor_id
                .as_ref()
                .is_none_or(|a| &r.request.actor.id == a)
            && self
                .namespace
                .as_ref()
                .is_none_or(|n| &r.request.namespace == n)
            && self.requested().contains(r.request.requested_at)
    }

    /// When the listed records were requested: `requestedAfter` up to, not including,
    /// `requestedBefore`.
    pub fn requested(&self) -> TimeRange {
        TimeRange {
            since: self.requested_after,
            until: self.requested_before,
        }
    }
}

/// Why a coordinator refused an operation.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalStoreError {
    /// No record with that id.
    #[error("approval `{0}` not found")]
    NotFound(String),
    /// The operation needs another status (e.g. decide on a non-pending record).
    #[error("approval `{id}` is {status}, not {expected}")]
    WrongStatus {
        /// The approval's id.
        id: String,
        /// Its effective status.
        status: &'static str,
        /// What the operation needed.
        expected: &'static str,
    },
    /// The id exists already.
    #[error("approval `{0}` already exists")]
    Duplicate(String),
    /// A row could not be read back (tampered or corrupt).
    #[error("approval `{id}` is malformed: {reason}")]
    Malformed {
        /// The approval's id.
        id: String,
        /// What is wrong.
        reason: String,
    },
    /// The backing store failed (the database error, or why the store gave up).
    #[error("approval store unavailable: {0}")]
    Backend(#[source] crate::error::BoxError),
    /// The requester's namespace is at its storage budget (the one its invocation receipts
    /// count against): nothing was written.
    #[error("namespace `{namespace}` is over its storage budget ({limit})")]
    QuotaExceeded {
        /// The namespace that is over budget.
        namespace: String,
        /// Which bound: `rows` or `bytes`.
        limit: &'static str,
    },
}

/// The durable home of approvals. Every cross-process guarantee (one decision, one
/// execution) must be a single compare-and-set in the implementation; callers pass the
/// runtime's clock so that expiry is evaluated consistently and lazily.
#[async_trait]
pub trait ApprovalCoordinator: Send + Sync + 'static {
    /// Store a new pending record.
    async fn create(&self, request: ApprovalRequest) -> Result<ApprovalRecord, ApprovalStoreError>;
    /// Load a record.
    async fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, ApprovalStoreError>;
    /// Decide a record that is pending and unexpired at `now`; anything else is refused.
    async fn decide(
        &self,
        id: &str,
        decision: Decision,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, ApprovalStoreError>;
    /// Atomically move approved + unexpired + unconsumed → consumed by `execution_id`.
    async fn mark_consumed(
        &self,
        id: &str,
        execution_id: &str,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, ApprovalStoreError>;
    /// List records, newest first.
    async fn list(
        &self,
        filter: &ApprovalFilter,
        now: DateTime<Utc>,
    ) -> Result<Vec<ApprovalRecord>, ApprovalStoreError>;
    /// Withdraw a record nobody has run: pending, or approved and not yet consumed, and
    /// unexpired at `now`, becomes `cancelled` (a compare-and-set), so it can no longer be
    /// decided or run. An MCP client's `tasks/cancel` of a held call does this. Anything
    /// else is refused with [`ApprovalStoreError::WrongStatus`] (expected `pending`).
    /// Required (no default), so a wrapping coordinator cannot silently drop it.
    async fn withdraw(
        &self,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, ApprovalStoreError>;
    /// Mark up to `limit` records past their expiry at `now` that are still pending, or were
    /// approved and never run (consumed), as expired and return them, each to exactly one
    /// caller across processes (a compare-and-set per record), so an expiry, or an approval
    /// that lapsed unused, is announced once ([`crate::runtime::Approvals::expire_due`]).
    /// The default marks nothing: expiry then stays lazy (every read at `now` still sees it).
    async fn expire_due(
        &self,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<ApprovalRecord>, ApprovalStoreError> {
        let _ = (now, limit);
        Ok(Vec::new())
    }
    /// Mark up to `limit` approvals still pending (and unexpired) at `now` that were
    /// requested at or before `requested_before` and never escalated as escalated, and
    /// return them, each to exactly one caller across processes
    /// ([`crate::runtime::Approvals::escalate_due`]). The default escalates nothing.
    async fn escalate_due(
        &self,
        requested_before: DateTime<Utc>,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<ApprovalRecord>, ApprovalStoreError> {
        let _ = (requested_before, now, limit);
        Ok(Vec::new())
    }
    /// Whether records survive a restart (the runtime warns about gated capabilities on a
    /// non-durable coordinator).
    fn is_durable(&self) -> bool {
        true
    }
}

/// Development-only coordinator: a mutex-protected map. Not durable, not shared across
/// processes.
#[derive(Default)]
pub struct InMemoryApprovalCoordinator {
    records: Mutex<HashMap<String, ApprovalRecord>>,
    /// Approvals already escalated (escalation fires once).
    escalated: Mutex<std::collections::HashSet<String>>,
}

impl InMemoryApprovalCoordinator {
    /// An empty coordinator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Test hook: mutate a stored record in place (e.g. to simulate tampering).
    pub fn tamper(&self, id: &str, f: impl FnOnce(&mut ApprovalRecord)) -> bool {
        let mut map = self.lock();
        match map.get_mut(id) {
            Some(r) => {
                f(r);
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ApprovalRecord>> {
        // A poisoned lock only means another thread panicked mid-update of a plain map;
        // every update below is a single assignment, so the data is still consistent.
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The compare-and-set a decision and a consumption are: `change` approval `id` only
    /// while its status at `now` is `expected`.
    fn transition(
        &self,
        id: &str,
        expected: ApprovalStatus,
        now: DateTime<Utc>,
        change: impl FnOnce(&mut ApprovalRecord),
    ) -> Result<ApprovalRecord, ApprovalStoreError> {
        let mut map = self.lock();
        let r = map
            .get_mut(id)
            .ok_or_else(|| ApprovalStoreError::NotFound(id.to_string()))?;
        r.expect_status(expected, now)?;
        change(r);
        Ok(r.clone())
    }
}

#[async_trait]
impl ApprovalCoordinator for InMemoryApprovalCoordinator {
    async fn create(&self, request: ApprovalRequest) -> Result<ApprovalRecord, ApprovalStoreError> {
        let mut map = self.lock();
        if map.contains_key(&request.id) {
            return Err(ApprovalStoreError::Duplicate(request.id));
        }
        let record = ApprovalRecord::pending(request);
        map.insert(record.request.id.clone(), record.clone());
        Ok(record)
    }

    async fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, ApprovalStoreError> {
        Ok(self.lock().get(id).cloned())
    }

    async fn decide(
        &self,
        id: &str,
        decision: Decision,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, ApprovalStoreError> {
        self.transition(id, ApprovalStatus::Pending, now, |r| {
            r.status = match decision.status {
                DecisionStatus::Approved => ApprovalStatus::Approved,
                DecisionStatus::Rejected => ApprovalStatus::Rejected,
            };
            r.decision = Some(decision);
        })
    }

    async fn mark_consumed(
        &self,
        id: &str,
        execution_id: &str,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, ApprovalStoreError> {
        self.transition(id, ApprovalStatus::Approved, now, |r| {
            r.status = ApprovalStatus::Consumed;
            r.consumed_by_execution_id = Some(execution_id.to_string());
        })
    }

    async fn withdraw(
        &self,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, ApprovalStoreError> {
        let expected = match self.lock().get(id).map(|r| r.effective_status(now)) {
            Some(ApprovalStatus::Approved) => ApprovalStatus::Approved,
            _ => ApprovalStatus::Pending,
        };
        self.transition(id, expected, now, |r| r.status = ApprovalStatus::Cancelled)
    }

    async fn list(
        &self,
        filter: &ApprovalFilter,
        now: DateTime<Utc>,
    ) -> Result<Vec<ApprovalRecord>, ApprovalStoreError> {
        let map = self.lock();
        let mut out: Vec<ApprovalRecord> = map
            .values()
            .filter(|r| filter.matches(r, now))
            .cloned()
            .collect();
        out.sort_by(|a, b| {
            b.request
                .requested_at
                .cmp(&a.request.requested_at)
                .then_with(|| b.request.id.cmp(&a.request.id))
        });
        Ok(out
            .into_iter()
            .skip(filter.offset.unwrap_or(0) as usize)
            .take(filter.effective_limit())
            .collect())
    }

    async fn expire_due(
        &self,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<ApprovalRecord>, ApprovalStoreError> {
        let mut map = self.lock();
        let mut due: Vec<&mut ApprovalRecord> = map
            .values_mut()
            .filter(|r| {
                matches!(r.status, ApprovalStatus::Pending | ApprovalStatus::Approved)
                    && r.request.expires_at <= now
            })
            .collect();
        due.sort_by_key(|r| r.request.expires_at);
        Ok(due
            .into_iter()
            .take(limit)
            .map(|r| {
                r.status = ApprovalStatus::Expired;
                r.clone()
            })
            .collect())
    }

    async fn escalate_due(
        &self,
        requested_before: DateTime<Utc>,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<ApprovalRecord>, ApprovalStoreError> {
        let map = self.lock();
        let mut escalated = self.escalated.lock().unwrap_or_else(|p| p.into_inner());
        let mut due: Vec<&ApprovalRecord> = map
            .values()
            .filter(|r| {
                r.status == ApprovalStatus::Pending
                    && r.request.expires_at > now
                    && r.request.requested_at <= requested_before
                    && !escalated.contains(&r.request.id)
            })
            .collect();
        due.sort_by_key(|r| r.request.requested_at);
        Ok(due
            .into_iter()
            .take(limit)
            .map(|r| {
                escalated.insert(r.request.id.clone());
                r.clone()
            })
            .collect())
    }

    fn is_durable(&self) -> bool {
        false
    }
}

/// An inline decision returned by an [`ApprovalHandler`].
#[derive(Debug, Clone, PartialEq)]
pub struct InlineDecision {
    /// Approved or rejected.
    pub status: DecisionStatus,
    /// Who decided (a human in the loop, a deterministic system).
    pub approver: ActorRef,
    /// What the deciding system wrote beside the decision, if anything.
    pub comment: Option<String>,
}

/// Decide approvals in the same call (a confirmation prompt the application shows). Returning
/// `Ok(None)` defers the request to the coordinator.
#[async_trait]
pub trait ApprovalHandler: Send + Sync + 'static {
    /// Decide, or defer with `None`. An error fails the call with INTERNAL_ERROR at stage
    /// approval.
    async fn decide(
        &self,
        request: &ApprovalRequest,
    ) -> Result<Option<InlineDecision>, Box<dyn std::error::Error + Send + Sync>>;
}
