//! The durable [`ApprovalCoordinator`]: one row per approval; `decide` and
//! `mark_consumed` are single conditional UPDATEs (compare-and-set), expiry is compared
//! against the caller's clock inside those statements and lazily on read.

use crate::columns::{Record, record_errors, row};
use crate::db::{Sql, Store, Via};
use crate::params::{Json, Param};
use crate::time::trunc;
use async_trait::async_trait;
use capgate_core::actor::{Actor, ActorRef, Surface};
use capgate_core::approval::{
    ApprovalCoordinator, ApprovalFilter, ApprovalRecord, ApprovalRequest, ApprovalStatus,
    ApprovalStoreError, DecidedVia, Decision, DecisionStatus,
};
use capgate_core::error::BoxError;
use capgate_core::meta::{Risk, SideEffect};
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::str::FromStr;

macro_rules! cols {
    () => {
        "id, capability_id, surface, actor, input, input_hash, reasons, types, risk, side_effect, \
         status, requested_at, expires_at, execution_id, correlation_id, decision_status, \
         decided_by, decided_at, decision_comment, consumed_by_execution_id, namespace, untyped, \
         decided_namespace, decided_via, policies, descriptor_digest"
    };
}

const INSERT: &str = "INSERT INTO capgate_approvals (id, capability_id, surface, actor, input, input_hash, \
     reasons, types, risk, side_effect, status, requested_at, expires_at, execution_id, correlation_id, \
     namespace, untyped, policies, descriptor_digest) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', $11, $12, $13, $14, $15, $16, $17, $18)";

/// [`INSERT`] within the namespace's storage budget (shared with its invocation receipts,
/// kept in `capgate_journal_usage` by the triggers of migration 0012): nothing is inserted
/// when the namespace holds `$19` rows or would pass `$21` bytes with this input's `$20`.
/// SQLite runs it on its one writer; Postgres locks the namespace's usage row first, as a
/// journal claim does, so concurrent inserts cannot overshoot the budget.
const INSERT_BUDGETED: Sql = Sql {
    sqlite: "INSERT INTO capgate_approvals (id, capability_id, surface, actor, input, input_hash, \
     reasons, types, risk, side_effect, status, requested_at, expires_at, execution_id, correlation_id, \
     namespace, untyped, policies, descriptor_digest) \
     SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', $11, $12, $13, $14, $15, $16, $17, $18 \
     WHERE $20 <= $21 AND NOT EXISTS (SELECT 1 FROM capgate_journal_usage \
       WHERE namespace = $15 AND (row_count >= $19 OR byte_count + $20 > $21))",
    postgres: "WITH usage AS (SELECT row_count, byte_count FROM capgate_journal_usage \
       WHERE namespace = $15 FOR UPDATE) \
     INSERT INTO capgate_approvals (id, capability_id, surface, actor, input, input_hash, \
     reasons, types, risk, side_effect, status, requested_at, expires_at, execution_id, correlation_id, \
     namespace, untyped, policies, descriptor_digest) \
     SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'pending', $11, $12, $13, $14, $15, $16, $17, $18 \
     WHERE $20::bigint <= $21::bigint \
       AND NOT EXISTS (SELECT 1 FROM usage WHERE row_count >= $19 OR byte_count + $20 > $21)",
};

/// Forget approvals that can no longer be used: expired before the cutoff (an approval is
/// decided and consumed, or not, before its expiry), whatever their status.
const PURGE: &str = "DELETE FROM capgate_approvals WHERE expires_at < $1";

const GET: &str = concat!("SELECT ", cols!(), " FROM capgate_approvals WHERE id = $1");

const DECIDE: &str = concat!(
    "UPDATE capgate_approvals SET status = $2, decision_status = $2, decided_by = $3, \
     decided_at = $4, decision_comment = $5, decided_namespace = $7, decided_via = $8 \
     WHERE id = $1 AND status = 'pending' AND expires_at > $6 RETURNING ",
    cols!()
);

/// Mark the next approval past its expiry that nobody decided, or that was approved and
/// never run (it lapsed unused), as expired: one compare-and-set per record.
const EXPIRE_NEXT: &str = concat!(
    "UPDATE capgate_approvals SET status = 'expired' WHERE status IN ('pending', 'approved') \
     AND id = (SELECT id FROM capgate_approvals WHERE status IN ('pending', 'approved') \
     AND expires_at <= $1 ORDER BY expires_at LIMIT 1) RETURNING ",
    cols!()
);

const ESCALATE_NEXT: &str = concat!(
    "UPDATE capgate_approvals SET escalated_at = $3 WHERE escalated_at IS NULL \
     AND status = 'pending' AND id = (SELECT id FROM capgate_approvals \
     WHERE status = 'pending' AND escalated_at IS NULL AND requested_at <= $1 \
     AND expires_at > $2 ORDER BY requested_at LIMIT 1) RETURNING ",
    cols!()
);

const CONSUME: &str = concat!(
    "UPDATE capgate_approvals SET status = 'consumed', consumed_by_execution_id = $2 \
     WHERE id = $1 AND status = 'approved' AND consumed_by_execution_id IS NULL \
     AND expires_at > $3 RETURNING ",
    cols!()
);

/// Withdraw an approval nobody has run (pending, or approved and unconsumed) while it is
/// unexpired: one compare-and-set.
const WITHDRAW: &str = concat!(
    "UPDATE capgate_approvals SET status = 'cancelled' \
     WHERE id = $1 AND status IN ('pending', 'approved') AND consumed_by_execution_id IS NULL \
     AND expires_at > $2 RETURNING ",
    cols!()
);

const LIST_SQLITE: &str = concat!(
    "SELECT ",
    cols!(),
    " FROM capgate_approvals WHERE \
     ($1 IS NULL OR (CASE WHEN status IN ('pending', 'approved') AND expires_at <= $2 \
        THEN 'expired' ELSE status END) = $1) \
     AND ($3 IS NULL OR capability_id = $3) \
     AND ($4 IS NULL OR json_extract(actor, '$.id') = $4) \
     AND ($5 IS NULL OR requested_at >= $5) \
     AND ($6 IS NULL OR requested_at < $6) \
     AND ($9 IS NULL OR namespace = $9) \
     ORDER BY requested_at DESC, id DESC LIMIT $7 OFFSET $8"
);

const LIST_POSTGRES: &str = concat!(
    "SELECT ",
    cols!(),
    " FROM capgate_approvals WHERE \
     ($1::text IS NULL OR (CASE WHEN status IN ('pending', 'approved') AND expires_at <= $2 \
        THEN 'expired' ELSE status END) = $1) \
     AND ($3::text IS NULL OR capability_id = $3) \
     AND ($4::text IS NULL OR actor->>'id' = $4) \
     AND ($5::timestamptz IS NULL OR requested_at >= $5) \
     AND ($6::timestamptz IS NULL OR requested_at < $6) \
     AND ($9::text IS NULL OR namespace = $9) \
     ORDER BY requested_at DESC, id DESC LIMIT $7 OFFSET $8"
);

const LIST: Sql = Sql {
    sqlite: LIST_SQLITE,
    postgres: LIST_POSTGRES,
};

/// The [`ApprovalCoordinator`] on a [`Store`]: SQLite or Postgres, shared safely by any
/// number of runtimes, pools and processes.
#[derive(Clone)]
pub struct SqlApprovalCoordinator {
    store: Store,
    budget: Option<capgate_core::journal::JournalBudget>,
}

impl SqlApprovalCoordinator {
    /// A coordinator on `store` (also [`Store::approvals`]).
    pub fn new(store: Store) -> Self {
        SqlApprovalCoordinator {
            store,
            budget: None,
        }
    }

    /// Refuse new approvals that would take their namespace past `budget`, the storage
    /// budget its invocation receipts count against too (a held call stores its whole input
    /// with its approval, at every door): [`ApprovalStoreError::QuotaExceeded`], nothing
    /// written. Usage is counted whether or not a budget is set.
    pub fn with_budget(mut self, budget: capgate_core::journal::JournalBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Delete every approval that expired before `cutoff` (the end of the replay horizon):
    /// none of them can be decided or run any more, and each holds a call's whole input.
    /// Returns how many were deleted.
    pub async fn purge_expired_before(
        &self,
        cutoff: DateTime<Utc>,
    ) -> Result<u64, ApprovalStoreError> {
        crate::metrics::timed(self.store.backend(), "approvals.purge", async move {
            let cutoff = trunc(cutoff);
            self.store
                .execute(Via::Writer, PURGE, &[&cutoff])
                .await
                .map_err(backend)
        })
        .await
    }
}

record_errors!(ApprovalStoreError, id, RawApproval => ApprovalRecord);

row! {
    /// A row as read, before validation.
    struct RawApproval {
        id: String,
        capability_id: String,
        surface: String,
        actor: Value,
        input: Value,
        input_hash: String,
        reasons: Value,
        types: Value,
        risk: String,
        side_effect: String,
        status: String,
        requested_at: DateTime<Utc>,
        expires_at: DateTime<Utc>,
        execution_id: String,
        correlation_id: Option<String>,
        decision_status: Option<String>,
        decided_by: Option<Value>,
        decided_at: Option<DateTime<Utc>>,
        decision_comment: Option<String>,
        consumed_by: Option<String> = "consumed_by_execution_id",
        namespace: String,
        untyped: bool,
        decided_namespace: Option<String>,
        decided_via: Option<String>,
        policies: Value,
        descriptor_digest: Option<String>,
    }
}

impl RawApproval {
    /// Validate every field and the consistency of status, decision and consumption.
    fn validate(self) -> Result<ApprovalRecord, ApprovalStoreError> {
        let id = self.id;
        let bad = |reason: String| malformed(&id, reason);
        if id.is_empty() {
            return Err(bad("empty id".into()));
        }
        let surface = Surface::from_str(&self.surface).map_err(&bad)?;
        let actor: Actor =
            serde_json::from_value(self.actor).map_err(|e| bad(format!("actor: {e}")))?;
        let reasons: Vec<String> =
            serde_json::from_value(self.reasons).map_err(|e| bad(format!("reasons: {e}")))?;
        let types: Vec<String> =
            serde_json::from_value(self.types).map_err(|e| bad(format!("types: {e}")))?;
        let policies: Vec<String> =
            serde_json::from_value(self.policies).map_err(|e| bad(format!("policies: {e}")))?;
        let risk: Risk = serde_json::from_value(Value::String(self.risk))
            .map_err(|e| bad(format!("risk: {e}")))?;
        let side_effect: SideEffect = serde_json::from_value(Value::String(self.side_effect))
            .map_err(|e| bad(format!("side_effect: {e}")))?;
        let status = ApprovalStatus::parse(&self.status)
            .ok_or_else(|| bad(format!("unknown status `{}`", self.status)))?;

        let decision = match (self.decision_status, self.decided_by, self.decided_at) {
            (None, None, None) => None,
            (Some(s), Some(by), Some(at)) => {
                let status = DecisionStatus::parse(&s)
                    .ok_or_else(|| bad(format!("unknown decision `{s}`")))?;
                let approver: ActorRef =
                    serde_json::from_value(by).map_err(|e| bad(format!("decided_by: {e}")))?;
                let via = match self.decided_via.as_deref() {
                    // Rows decided before `decided_via` was recorded.
                    None => DecidedVia::Approver,
                    Some(v) => DecidedVia::parse(v)
                        .ok_or_else(|| bad(format!("unknown decided_via `{v}`")))?,
                };
                Some(Decision {
                    status,
                    approver,
                    comment: self.decision_comment,
                    decided_at: at,
                    approver_namespace: self.decided_namespace,
                    via,
                })
            }
            _ => return Err(bad("partial decision".into())),
        };
        let decided = decision.as_ref().map(|d| d.status);
        let consistent = match status {
            ApprovalStatus::Pending => decided.is_none() && self.consumed_by.is_none(),
            ApprovalStatus::Approved => {
                decided == Some(DecisionStatus::Approved) && self.consumed_by.is_none()
            }
            ApprovalStatus::Consumed => {
                decided == Some(DecisionStatus::Approved) && self.consumed_by.is_some()
            }
            ApprovalStatus::Rejected => {
                decided == Some(DecisionStatus::Rejected) && self.consumed_by.is_none()
            }
            ApprovalStatus::Expired | ApprovalStatus::Cancelled => self.consumed_by.is_none(),
        };
        if !consistent {
            return Err(bad(format!(
                "status `{}` contradicts its decision or consumption",
                status.as_str()
            )));
        }
        Ok(ApprovalRecord {
            request: ApprovalRequest {
                id,
                capability_id: self.capability_id,
                surface,
                actor,
                input: self.input,
                input_hash: self.input_hash,
                reasons,
                types,
                policies,
                risk,
                side_effect,
                requested_at: self.requested_at,
                expires_at: self.expires_at,
                execution_id: self.execution_id,
                correlation_id: self.correlation_id,
                namespace: self.namespace,
                untyped: self.untyped,
                descriptor_digest: self.descriptor_digest,
            },
            status,
            decision,
            consumed_by_execution_id: self.consumed_by,
        })
    }
}

fn validate_request(r: &ApprovalRequest) -> Result<(), ApprovalStoreError> {
    for (what, v) in [
        ("id", &r.id),
        ("capability id", &r.capability_id),
        ("execution id", &r.execution_id),
    ] {
        if v.is_empty() || v.chars().count() > 256 {
            return Err(malformed(
                &r.id,
                format!("{what} must be 1 to 256 characters"),
            ));
        }
    }
    Ok(())
}

impl SqlApprovalCoordinator {
    async fn fetch(&self, id: &str) -> Result<Option<ApprovalRecord>, ApprovalStoreError> {
        self.store
            .fetch_record::<RawApproval>(Via::Readers, GET, &[&id])
            .await
    }

    /// After a conditional UPDATE matched nothing: say why, from the current row, or
    /// `None` when the row now meets the UPDATE's condition (it was created or decided
    /// between the two statements) and the UPDATE should be tried again.
    async fn refusal(
        &self,
        id: &str,
        expected: ApprovalStatus,
        now: DateTime<Utc>,
    ) -> Option<ApprovalStoreError> {
        match self.fetch(id).await {
            Ok(None) => Some(ApprovalStoreError::NotFound(id.to_string())),
            Ok(Some(r)) => r.expect_status(expected, now).err(),
            Err(e) => Some(e),
        }
    }

    /// Run a compare-and-set UPDATE of approval `id` (`sql` with `params`, returning the
    /// row) that applies while its status at `now` is `expected`; `doing` names it in the
    /// error when the row keeps changing. The UPDATE and the read that explains a refusal
    /// are two statements: a row that met the condition in between is updated again, not
    /// refused.
    async fn compare_and_set(
        &self,
        sql: &'static str,
        params: &[&dyn Param],
        id: &str,
        expected: ApprovalStatus,
        now: DateTime<Utc>,
        doing: &str,
    ) -> Result<ApprovalRecord, ApprovalStoreError> {
        for _ in 0..3 {
            let updated = self
                .store
                .fetch_record::<RawApproval>(Via::Group, sql, params)
                .await?;
            match updated {
                Some(record) => return Ok(record),
                None => match self.refusal(id, expected, now).await {
                    Some(e) => return Err(e),
                    None => continue,
                },
            }
        }
        Err(backend(format!(
            "approval `{id}` kept changing while being {doing}"
        )))
    }
}

fn unique_violation(e: &BoxError) -> bool {
    match e.downcast_ref::<crate::group::GroupError>() {
        Some(g) => g.is_unique_violation(),
        None => {
            matches!(e.downcast_ref::<sqlx::Error>(), Some(sqlx::Error::Database(d)) if d.is_unique_violation())
        }
    }
}

#[async_trait]
impl ApprovalCoordinator for SqlApprovalCoordinator {
    async fn create(&self, request: ApprovalRequest) -> Result<ApprovalRecord, ApprovalStoreError> {
        crate::metrics::timed(self.store.backend(), "approvals.create", async move {
            validate_request(&request)?;
            let mut request = request;
            request.requested_at = trunc(request.requested_at);
            request.expires_at = trunc(request.expires_at);
            let r = &request;
            let params: [&dyn Param; 18] = [
                &r.id,
                &r.capability_id,
                &r.surface.as_str(),
                &Json("actor", &r.actor),
                &Json("input", &r.input),
                &r.input_hash,
                &Json("reasons", &r.reasons),
                &Json("types", &r.types),
                &r.risk.as_str(),
                &r.side_effect.as_str(),
                &r.requested_at,
                &r.expires_at,
                &r.execution_id,
                &r.correlation_id,
                &r.namespace,
                &r.untyped,
                &Json("policies", &r.policies),
                &r.descriptor_digest,
            ];
            let budgeted = self.budget.filter(|_| !r.namespace.is_empty());
            let result = match budgeted {
                None => self.store.execute(Via::Group, INSERT, &params).await,
                Some(budget) => {
                    crate::usage::ensure_row(&self.store, &r.namespace)
                        .await
                        .map_err(backend)?;
                    let size = crate::usage::json_size(&r.input);
                    let (max_rows, max_bytes) = crate::usage::limits(budget);
                    let mut all: Vec<&dyn Param> = params.to_vec();
                    all.extend([&max_rows as &dyn Param, &size, &max_bytes]);
                    match self.store.execute(Via::Group, INSERT_BUDGETED, &all).await {
                        Ok(0) => {
                            // Refused by the budget (a race that freed room says `rows`).
                            let limit = crate::usage::bound_reached(
                                &self.store,
                                &r.namespace,
                                budget,
                                size,
                            )
                            .await
                            .map_err(backend)?
                            .unwrap_or("rows");
                            return Err(ApprovalStoreError::QuotaExceeded {
                                namespace: r.namespace.clone(),
                                limit,
                            });
                        }
                        other => other,
                    }
                }
            };
            match result {
                Ok(_) => Ok(ApprovalRecord::pending(request)),
                Err(e) if unique_violation(&e) => Err(ApprovalStoreError::Duplicate(request.id)),
                Err(e) => Err(backend(e)),
            }
        })
        .await
    }

    async fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, ApprovalStoreError> {
        crate::metrics::timed(self.store.backend(), "approvals.get", async move {
            self.fetch(id).await
        })
        .await
    }

    async fn decide(
        &self,
        id: &str,
        decision: Decision,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, ApprovalStoreError> {
        crate::metrics::timed(self.store.backend(), "approvals.decide", async move {
            let now = trunc(now);
            let params: [&dyn Param; 8] = [
                &id,
                &decision.status.as_str(),
                &Json("approver", &decision.approver),
                &trunc(decision.decided_at),
                &decision.comment,
                &now,
                &decision.approver_namespace,
                &decision.via.as_str(),
            ];
            self.compare_and_set(DECIDE, &params, id, ApprovalStatus::Pending, now, "decided")
                .await
        })
        .await
    }

    async fn mark_consumed(
        &self,
        id: &str,
        execution_id: &str,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, ApprovalStoreError> {
        crate::metrics::timed(
            self.store.backend(),
            "approvals.mark_consumed",
            async move {
                let now = trunc(now);
                let params: [&dyn Param; 3] = [&id, &execution_id, &now];
                self.compare_and_set(
                    CONSUME,
                    &params,
                    id,
                    ApprovalStatus::Approved,
                    now,
                    "consumed",
                )
                .await
            },
        )
        .await
    }

    async fn withdraw(
        &self,
        id: &str,
        now: DateTime<Utc>,
    ) -> Result<ApprovalRecord, ApprovalStoreError> {
        crate::metrics::timed(self.store.backend(), "approvals.withdraw", async move {
            let now = trunc(now);
            let params: [&dyn Param; 2] = [&id, &now];
            match self
                .store
                .fetch_record::<RawApproval>(Via::Group, WITHDRAW, &params)
                .await?
            {
                Some(record) => Ok(record),
                None => Err(self
                    .refusal(id, ApprovalStatus::Pending, now)
                    .await
                    .unwrap_or_else(|| ApprovalStoreError::WrongStatus {
                        id: id.to_string(),
                        status: "approved",
                        expected: "pending",
                    })),
            }
        })
        .await
    }

    async fn expire_due(
        &self,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<ApprovalRecord>, ApprovalStoreError> {
        crate::metrics::timed(self.store.backend(), "approvals.expire_due", async move {
            let now = trunc(now);
            let mut expired = Vec::new();
            // One record per statement, each a compare-and-set: a record another replica
            // expired first is not `pending` (or `approved`) any more, so it is returned to
            // that one only (and this sweep stops; the next one goes on).
            while expired.len() < limit {
                match self
                    .store
                    .fetch_record::<RawApproval>(Via::Group, EXPIRE_NEXT, &[&now])
                    .await?
                {
                    Some(record) => expired.push(record),
                    None => break,
                }
            }
            Ok(expired)
        })
        .await
    }

    async fn escalate_due(
        &self,
        requested_before: DateTime<Utc>,
        now: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<ApprovalRecord>, ApprovalStoreError> {
        crate::metrics::timed(self.store.backend(), "approvals.escalate_due", async move {
            let (before, now) = (trunc(requested_before), trunc(now));
            let mut escalated = Vec::new();
            // As `expire_due`: one compare-and-set per record, so it fires once.
            while escalated.len() < limit {
                match self
                    .store
                    .fetch_record::<RawApproval>(Via::Group, ESCALATE_NEXT, &[&before, &now, &now])
                    .await?
                {
                    Some(record) => escalated.push(record),
                    None => break,
                }
            }
            Ok(escalated)
        })
        .await
    }

    async fn list(
        &self,
        filter: &ApprovalFilter,
        now: DateTime<Utc>,
    ) -> Result<Vec<ApprovalRecord>, ApprovalStoreError> {
        crate::metrics::timed(self.store.backend(), "approvals.list", async move {
            let now = trunc(now);
            let raws = self
                .store
                .fetch_all(
                    LIST,
                    &[
                        &filter.status.map(ApprovalStatus::as_str),
                        &now,
                        &filter.capability_id,
                        &filter.actor_id,
                        &filter.requested_after,
                        &filter.requested_before,
                        &(filter.effective_limit() as i64),
                        &i64::from(filter.offset.unwrap_or(0)),
                        &filter.namespace,
                    ],
                    RawApproval::decode,
                )
                .await
                .map_err(backend)?
                .into_iter()
                .collect::<Result<Vec<_>, _>>()?;
            raws.into_iter().map(RawApproval::check).collect()
        })
        .await
    }
}
