//! The durable [`InvocationJournal`]: one row per `(scope, invocation_id)`. A claim is one
//! `INSERT … ON CONFLICT DO NOTHING`; resume, settle and reconcile are single conditional
//! UPDATEs, so the database (not a process) decides who owns an invocation.

use crate::columns::{record_errors, row};
use crate::db::{Sql, Store, Via};
use crate::params::Json;
use crate::time::trunc;
use async_trait::async_trait;
use capgate_core::journal::{
    ClaimOutcome, ClaimRequest, InvocationJournal, InvocationRecord, InvocationState,
    JournalBudget, JournalError, ResumeClaim, SettleClaim, Settlement, new_claim_token,
    validate_id,
};
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;

macro_rules! cols {
    () => {
        "scope, invocation_id, state, claim_token, approval_id, awaiting_approval, capability_id, \
         input, input_hash, idempotency_key, correlation_id, contract_digest, outcome, reconciled, \
         created_at, updated_at"
    };
}

/// Insert-if-absent, within the namespace's budget: nothing is inserted when the record
/// exists or when the namespace's usage (kept by the triggers of migration 0005) would go
/// past `$12` rows or `$14` bytes with this record's `$13` bytes. SQLite runs it on its one
/// writer, so the check and the insert see every earlier claim; Postgres locks the
/// namespace's usage row first (`FOR UPDATE` waits for a concurrent claim and then reads its
/// count), so concurrent claims cannot overshoot the budget either.
const CLAIM: Sql = Sql {
    sqlite: "INSERT INTO capgate_invocations (scope, invocation_id, state, claim_token, capability_id, \
     input, input_hash, idempotency_key, correlation_id, contract_digest, created_at, updated_at, namespace) \
     SELECT $1, $2, 'pending', $3, $4, $5, $6, $7, $8, $9, $10, $10, $11 \
     WHERE $11 IS NULL OR NOT EXISTS (SELECT 1 FROM capgate_journal_usage \
       WHERE namespace = $11 AND (row_count >= $12 OR byte_count + $13 > $14)) \
     ON CONFLICT (scope, invocation_id) DO NOTHING RETURNING invocation_id",
    postgres: "WITH usage AS (SELECT row_count, byte_count FROM capgate_journal_usage \
       WHERE namespace = $11 FOR UPDATE) \
     INSERT INTO capgate_invocations (scope, invocation_id, state, claim_token, capability_id, \
     input, input_hash, idempotency_key, correlation_id, contract_digest, created_at, updated_at, namespace) \
     SELECT $1, $2, 'pending', $3, $4, $5, $6, $7, $8, $9, $10, $10, $11 \
     WHERE $11::text IS NULL OR NOT EXISTS (SELECT 1 FROM usage \
       WHERE row_count >= $12 OR byte_count + $13 > $14) \
     ON CONFLICT (scope, invocation_id) DO NOTHING RETURNING invocation_id",
};

const GET: &str = concat!(
    "SELECT ",
    cols!(),
    " FROM capgate_invocations WHERE scope = $1 AND invocation_id = $2"
);

const FIND_APPROVAL: &str = concat!(
    "SELECT ",
    cols!(),
    " FROM capgate_invocations WHERE scope = $1 AND approval_id = $2 \
     ORDER BY created_at ASC, invocation_id ASC LIMIT 1"
);

/// Postgres: lock the record's namespace usage row before the record itself. A claim locks
/// the usage row and then waits on the record (its insert conflicts with it); the usage
/// trigger of an update takes the usage row after the record. Taking the usage row first
/// here keeps one lock order, so a settlement racing claims of the same id never deadlocks.
macro_rules! usage_first {
    () => {
        "WITH usage AS (SELECT 1 FROM capgate_journal_usage WHERE namespace = \
         (SELECT namespace FROM capgate_invocations WHERE scope = $1 AND invocation_id = $2) \
         FOR UPDATE) "
    };
}

/// Reopen an approval-required record for its resume (usage row first on Postgres, as
/// [`SETTLE`]).
const CLAIM_RESUME: Sql = Sql {
    sqlite: concat!(
        "UPDATE capgate_invocations SET state = 'pending', claim_token = $4, \
         awaiting_approval = FALSE, outcome = NULL, updated_at = $5 \
         WHERE scope = $1 AND invocation_id = $2 AND state = 'settled' \
         AND awaiting_approval = TRUE AND approval_id = $3 RETURNING ",
        cols!()
    ),
    postgres: concat!(
        usage_first!(),
        "UPDATE capgate_invocations SET state = 'pending', claim_token = $4, \
         awaiting_approval = FALSE, outcome = NULL, updated_at = $5 \
         WHERE scope = $1 AND invocation_id = $2 AND state = 'settled' \
         AND awaiting_approval = TRUE AND approval_id = $3 \
         AND (SELECT count(*) FROM usage) >= 0 RETURNING ",
        cols!()
    ),
};

/// Settle a pending claim (the caller's claim token must still hold it).
const SETTLE: Sql = Sql {
    sqlite: concat!(
        "UPDATE capgate_invocations SET state = 'settled', outcome = $4, \
         approval_id = COALESCE($5, approval_id), awaiting_approval = $6, reconciled = $7, \
         updated_at = $8 \
         WHERE scope = $1 AND invocation_id = $2 AND state = 'pending' AND claim_token = $3 RETURNING ",
        cols!()
    ),
    postgres: concat!(
        usage_first!(),
        "UPDATE capgate_invocations SET state = 'settled', outcome = $4, \
         approval_id = COALESCE($5, approval_id), awaiting_approval = $6, reconciled = $7, \
         updated_at = $8 \
         WHERE scope = $1 AND invocation_id = $2 AND state = 'pending' AND claim_token = $3 \
         AND (SELECT count(*) FROM usage) >= 0 RETURNING ",
        cols!()
    ),
};

/// Records created in `[$1, $4)` after the keyset position `($1, $2, $3)` (created, scope,
/// invocation id), oldest first: the pages of [`SqlInvocationJournal::recorded`].
const RECORDED: &str = concat!(
    "SELECT ",
    cols!(),
    ", namespace FROM capgate_invocations \
     WHERE (created_at > $1 OR (created_at = $1 AND (scope > $2 OR (scope = $2 AND invocation_id > $3)))) \
     AND created_at < $4 \
     ORDER BY created_at, scope, invocation_id LIMIT $5"
);

/// Pending records last changed before `$1`, oldest first, at most `$2`: the receipts the
/// pending horizon settles as `outcome-unknown`.
const PENDING_BEFORE: &str = concat!(
    "SELECT ",
    cols!(),
    ", namespace FROM capgate_invocations WHERE state = 'pending' AND updated_at < $1 \
     ORDER BY updated_at, scope, invocation_id LIMIT $2"
);

/// Withdraw a pending claim (its call was concealed before it ran): deleted only while the
/// caller's claim token holds it pending (usage row first on Postgres, as [`SETTLE`]).
const RELEASE: Sql = Sql {
    sqlite: "DELETE FROM capgate_invocations \
     WHERE scope = $1 AND invocation_id = $2 AND state = 'pending' AND claim_token = $3",
    postgres: concat!(
        usage_first!(),
        "DELETE FROM capgate_invocations \
         WHERE scope = $1 AND invocation_id = $2 AND state = 'pending' AND claim_token = $3 \
         AND (SELECT count(*) FROM usage) >= 0"
    ),
};

/// The receipts an operator looks for (`capgate invocations list` and `show ID`): each
/// filter applies when it is set, oldest first, after the `(created_at, scope, id)` cursor.
const LIST: Sql = Sql {
    sqlite: concat!(
        "SELECT ",
        cols!(),
        ", namespace FROM capgate_invocations \
         WHERE ($1 IS NULL OR state = $1) AND ($2 IS NULL OR namespace = $2) \
         AND ($3 IS NULL OR capability_id = $3) AND ($4 IS NULL OR invocation_id = $4) \
         AND ($5 IS NULL OR scope = $5) \
         ORDER BY created_at, scope, invocation_id LIMIT $6"
    ),
    postgres: concat!(
        "SELECT ",
        cols!(),
        ", namespace FROM capgate_invocations \
         WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR namespace = $2) \
         AND ($3::text IS NULL OR capability_id = $3) AND ($4::text IS NULL OR invocation_id = $4) \
         AND ($5::text IS NULL OR scope = $5) \
         ORDER BY created_at, scope, invocation_id LIMIT $6"
    ),
};

const PURGE: &str = "DELETE FROM capgate_invocations WHERE state = 'settled' AND updated_at < $1";

/// One recorded invocation, as [`SqlInvocationJournal::recorded`] pages through them: the
/// record and the namespace it counts against (`None` for rows older than migration 0005).
#[derive(Debug, Clone)]
pub struct RecordedInvocation {
    /// The tenant namespace of the call.
    pub namespace: Option<String>,
    /// The record, input included.
    pub record: InvocationRecord,
}

/// Where a page of [`SqlInvocationJournal::recorded`] starts: the first page at `since`,
/// each next one after the last record of the previous.
#[derive(Debug, Clone)]
pub struct RecordedPage {
    /// Records created at or after this instant (and after `after` when it is set).
    pub since: DateTime<Utc>,
    /// The `(scope, invocation id)` of the last record already read at `since`.
    pub after: Option<(String, String)>,
    /// Records created before this instant.
    pub until: DateTime<Utc>,
    /// At most this many records.
    pub limit: u32,
}

impl RecordedPage {
    /// The page after `last`, the final record of this one.
    pub fn next_after(&self, last: &InvocationRecord) -> RecordedPage {
        RecordedPage {
            since: last.created_at,
            after: Some((last.scope.clone(), last.invocation_id.clone())),
            until: self.until,
            limit: self.limit,
        }
    }
}

/// Which receipts [`SqlInvocationJournal::list`] answers: every filter that is set must
/// hold.
#[derive(Debug, Clone, Default)]
pub struct InvocationFilter {
    /// Only receipts in this state.
    pub state: Option<InvocationState>,
    /// Only calls of this namespace.
    pub namespace: Option<String>,
    /// Only calls of this capability.
    pub capability: Option<String>,
    /// Only this invocation id (in any scope unless `scope` is set).
    pub invocation_id: Option<String>,
    /// Only this journal scope ([`capgate_core::journal::scope_hash`]).
    pub scope: Option<String>,
    /// At most this many (oldest first).
    pub limit: u32,
}

/// Receipts are kept at least this long by [`SqlInvocationJournal::purge_expired`]
/// unless configured otherwise: 30 days.
pub const DEFAULT_REPLAY_HORIZON: Duration = Duration::from_secs(30 * 24 * 3600);

/// The [`InvocationJournal`] on a [`Store`]: SQLite or Postgres, shared safely by any
/// number of gateway replicas.
#[derive(Clone)]
pub struct SqlInvocationJournal {
    store: Store,
    replay_horizon: Duration,
    budget: Option<JournalBudget>,
}

record_errors!(JournalError, invocation_id, RawInvocation => InvocationRecord);

row! {
    /// A row as read, before validation.
    struct RawInvocation {
        scope: String,
        invocation_id: String,
        state: String,
        claim_token: String,
        approval_id: Option<String>,
        awaiting_approval: bool,
        capability_id: String,
        input: Value,
        input_hash: String,
        idempotency_key: String,
        correlation_id: Option<String>,
        contract_digest: Option<String>,
        outcome: Option<Value>,
        reconciled: bool,
        created_at: DateTime<Utc>,
        updated_at: DateTime<Utc>,
    }
}

impl RawInvocation {
    fn validate(self) -> Result<InvocationRecord, JournalError> {
        let id = self.invocation_id;
        let bad = |reason: String| malformed(&id, reason);
        let state = InvocationState::parse(&self.state)
            .ok_or_else(|| bad(format!("unknown state `{}`", self.state)))?;
        for (what, v) in [
            ("scope", &self.scope),
            ("invocation id", &id),
            ("capability id", &self.capability_id),
            ("claim token", &self.claim_token),
        ] {
            validate_id(what, v).map_err(|e| bad(e.to_string()))?;
        }
        if let Some(a) = &self.approval_id {
            validate_id("approval id", a).map_err(|e| bad(e.to_string()))?;
        }
        let consistent = match state {
            InvocationState::Pending => !self.awaiting_approval && self.outcome.is_none(),
            InvocationState::Settled => {
                self.outcome.is_some() && (!self.awaiting_approval || self.approval_id.is_some())
            }
        };
        if !consistent {
            return Err(bad(format!(
                "state `{}` contradicts its outcome or approval",
                state.as_str()
            )));
        }
        Ok(InvocationRecord {
            scope: self.scope,
            invocation_id: id,
            capability_id: self.capability_id,
            input: self.input,
            input_hash: self.input_hash,
            idempotency_key: self.idempotency_key,
            claim_token: self.claim_token,
            state,
            approval_id: self.approval_id,
            awaiting_approval: self.awaiting_approval,
            correlation_id: self.correlation_id,
            contract_digest: self.contract_digest,
            outcome: self.outcome,
            reconciled: self.reconciled,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

impl SqlInvocationJournal {
    /// A journal on `store` (also [`Store::journal`]).
    pub fn new(store: Store) -> Self {
        SqlInvocationJournal {
            store,
            replay_horizon: DEFAULT_REPLAY_HORIZON,
            budget: None,
        }
    }

    /// Refuse claims that would take a namespace past `budget` (claims whose
    /// [`ClaimRequest::namespace`] is set; usage is counted whether or not a budget is set).
    pub fn with_budget(mut self, budget: JournalBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// The budget in force, if any.
    pub fn budget(&self) -> Option<JournalBudget> {
        self.budget
    }

    /// Which bound of the budget `namespace` is at, if any (`rows` or `bytes`), for a claim
    /// of `size` bytes.
    async fn over_budget(
        &self,
        namespace: &str,
        size: i64,
    ) -> Result<Option<&'static str>, JournalError> {
        let Some(budget) = self.budget else {
            return Ok(None);
        };
        crate::usage::bound_reached(&self.store, namespace, budget, size)
            .await
            .map_err(backend)
    }

    /// Keep settled receipts for `horizon` (at least as long as clients may retry or look
    /// up an invocation).
    pub fn with_replay_horizon(mut self, horizon: Duration) -> Self {
        self.replay_horizon = horizon;
        self
    }

    /// The replay horizon in force.
    pub fn replay_horizon(&self) -> Duration {
        self.replay_horizon
    }

    /// Delete settled receipts older than the replay horizon as of `now`; returns how many.
    /// Run it periodically (or from an operator command); pending receipts are never purged.
    pub async fn purge_expired(&self, now: DateTime<Utc>) -> Result<u64, JournalError> {
        let cutoff = self.horizon_cutoff(now)?;
        self.purge_settled_before(cutoff).await
    }

    /// The end of the replay horizon as of `now`: what is older is purged (settled
    /// receipts here, expired approvals by [`crate::SqlApprovalCoordinator::purge_expired_before`]).
    pub fn horizon_cutoff(&self, now: DateTime<Utc>) -> Result<DateTime<Utc>, JournalError> {
        let horizon = chrono::Duration::from_std(self.replay_horizon)
            .map_err(|e| JournalError::Invalid(format!("replay horizon: {e}")))?;
        now.checked_sub_signed(horizon)
            .ok_or_else(|| JournalError::Invalid("replay horizon reaches before time".into()))
    }

    /// One page of the records created in a window, oldest first, inputs included: what
    /// `capgate replay` re-decides. A malformed row is an error naming it, never skipped.
    pub async fn recorded(
        &self,
        page: &RecordedPage,
    ) -> Result<Vec<RecordedInvocation>, JournalError> {
        let since = trunc(page.since);
        let until = trunc(page.until);
        let (scope, id) = page.after.clone().unwrap_or_default();
        let limit = i64::from(page.limit);
        self.fetch_recorded(RECORDED, &[&since, &scope, &id, &until, &limit])
            .await
    }

    /// The records (with their namespaces) a read of `cols!(), namespace` answers; a
    /// malformed row is an error naming it, never skipped.
    async fn fetch_recorded(
        &self,
        sql: impl Into<Sql>,
        params: &[&dyn crate::params::Param],
    ) -> Result<Vec<RecordedInvocation>, JournalError> {
        let rows = self
            .store
            .fetch_all(sql, params, |row| {
                let raw = <RawInvocation as crate::columns::Record>::decode(row)?;
                let namespace = row
                    .opt_text("namespace")
                    .map_err(|e| malformed(&raw.invocation_id, e))?;
                Ok::<_, JournalError>((raw, namespace))
            })
            .await
            .map_err(backend)?;
        rows.into_iter()
            .map(|row| {
                let (raw, namespace) = row?;
                Ok(RecordedInvocation {
                    namespace,
                    record: raw.validate()?,
                })
            })
            .collect()
    }

    /// The receipts `filter` selects, oldest first, with their namespaces (inputs included,
    /// so a caller shows them only to an operator). A malformed row is an error naming it.
    pub async fn list(
        &self,
        filter: &InvocationFilter,
    ) -> Result<Vec<RecordedInvocation>, JournalError> {
        let state = filter.state.map(|s| s.as_str().to_string());
        let limit = i64::from(filter.limit);
        self.fetch_recorded(
            LIST,
            &[
                &state,
                &filter.namespace,
                &filter.capability,
                &filter.invocation_id,
                &filter.scope,
                &limit,
            ],
        )
        .await
    }

    /// Settle up to `limit` receipts still pending since before `cutoff` as
    /// `outcome-unknown` (marked reconciled, each a compare-and-set on the claim token it
    /// was read with, so a receipt settled meanwhile is left as it is), and return them: a
    /// call nobody reconciled within the pending horizon stops holding its namespace's
    /// budget once the replay horizon purges it. The caller audits each.
    pub async fn abandon_pending_before(
        &self,
        cutoff: DateTime<Utc>,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<RecordedInvocation>, JournalError> {
        let cutoff = trunc(cutoff);
        let limit = i64::from(limit);
        let rows = self
            .fetch_recorded(PENDING_BEFORE, &[&cutoff, &limit])
            .await?;
        let mut abandoned = Vec::new();
        for RecordedInvocation { namespace, record } in rows {
            let outcome = serde_json::json!({
                "status": "outcome-unknown",
                "invocationId": record.invocation_id,
            });
            let observed = capgate_core::journal::ObservedClaim {
                scope: &record.scope,
                invocation_id: &record.invocation_id,
                claim_token: &record.claim_token,
            };
            match self
                .reconcile(observed, Settlement::final_outcome(outcome), now)
                .await
            {
                Ok(settled) => abandoned.push(RecordedInvocation {
                    namespace,
                    record: settled,
                }),
                // Settled or reclaimed meanwhile: not abandoned.
                Err(JournalError::StaleClaim(_) | JournalError::NotPending(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(abandoned)
    }

    /// The record `sql` selects by scope and `key` (its invocation or approval id).
    async fn fetch(
        &self,
        sql: &'static str,
        scope: &str,
        key: &str,
    ) -> Result<Option<InvocationRecord>, JournalError> {
        self.store
            .fetch_record::<RawInvocation>(Via::Readers, sql, &[&scope, &key])
            .await
    }

    /// [`Self::fetch`] as the store operation `operation`, timed.
    async fn read(
        &self,
        operation: &'static str,
        sql: &'static str,
        scope: &str,
        key: &str,
    ) -> Result<Option<InvocationRecord>, JournalError> {
        crate::metrics::timed(self.store.backend(), operation, self.fetch(sql, scope, key)).await
    }
}

#[async_trait]
impl InvocationJournal for SqlInvocationJournal {
    async fn claim(
        &self,
        request: ClaimRequest,
        now: DateTime<Utc>,
    ) -> Result<ClaimOutcome, JournalError> {
        crate::metrics::timed(self.store.backend(), "journal.claim", async move {
            let now = trunc(now);
            let (max_rows, max_bytes) = self
                .budget
                .map_or((i64::MAX, i64::MAX), crate::usage::limits);
            let size = crate::usage::json_size(&request.input);
            if let Some(ns) = &request.namespace {
                crate::usage::ensure_row(&self.store, ns)
                    .await
                    .map_err(backend)?;
            }
            // An existing row is reported as it is; a row that vanishes between the insert
            // and the read (a purge) is claimed again.
            for _ in 0..3 {
                let token = new_claim_token();
                let r = &request;
                let inserted = self
                    .store
                    .fetch_optional(
                        Via::Group,
                        CLAIM,
                        &[
                            &r.scope,
                            &r.invocation_id,
                            &token,
                            &r.capability_id,
                            &Json("input", &r.input),
                            &r.input_hash,
                            &r.idempotency_key,
                            &r.correlation_id,
                            &r.contract_digest,
                            &now,
                            &r.namespace,
                            &max_rows,
                            &size,
                            &max_bytes,
                        ],
                        |_| (),
                    )
                    .await
                    .map_err(backend)?
                    .is_some();
                if inserted {
                    // The row is exactly what was just inserted: no need to read it back.
                    return Ok(ClaimOutcome::Admitted {
                        claim_token: token.clone(),
                        record: request.into_record(token, now),
                    });
                }
                if let Some(existing) = self.fetch(GET, &r.scope, &r.invocation_id).await? {
                    return Ok(existing.existing_claim(&r.capability_id, &r.input_hash));
                }
                if let Some(ns) = &r.namespace
                    && let Some(limit) = self.over_budget(ns, size).await?
                {
                    return Err(JournalError::QuotaExceeded {
                        namespace: ns.clone(),
                        limit,
                    });
                }
            }
            Err(backend(format!(
                "invocation `{}` kept disappearing while being claimed",
                request.invocation_id
            )))
        })
        .await
    }

    async fn claim_resume(
        &self,
        scope: &str,
        invocation_id: &str,
        approval_id: &str,
        now: DateTime<Utc>,
    ) -> Result<ResumeClaim, JournalError> {
        crate::metrics::timed(self.store.backend(), "journal.claim_resume", async move {
            let now = trunc(now);
            // The UPDATE and the read that explains a refusal are two statements: a record
            // that became resumable in between (its first run settling approval-required)
            // is claimed again rather than reported as not resumable.
            for _ in 0..3 {
                let token = new_claim_token();
                let reopened = self
                    .store
                    .fetch_record::<RawInvocation>(
                        Via::Group,
                        CLAIM_RESUME,
                        &[&scope, &invocation_id, &approval_id, &token, &now],
                    )
                    .await?;
                if let Some(record) = reopened {
                    return Ok(ResumeClaim::Admitted {
                        claim_token: token,
                        record,
                    });
                }
                match self.fetch(GET, scope, invocation_id).await? {
                    Some(r) if r.resumable_for(approval_id) => continue,
                    Some(r) => return Ok(ResumeClaim::NotResumable(r)),
                    None => return Ok(ResumeClaim::NotFound),
                }
            }
            Err(backend(format!(
                "invocation `{invocation_id}` kept changing while being resumed"
            )))
        })
        .await
    }

    async fn settle_claim(
        &self,
        claim: SettleClaim<'_>,
        settlement: Settlement,
        now: DateTime<Utc>,
    ) -> Result<InvocationRecord, JournalError> {
        let operation = claim.pick("journal.settle", "journal.reconcile");
        crate::metrics::timed(self.store.backend(), operation, async move {
            settlement.validate()?;
            let now = trunc(now);
            let awaiting = settlement.awaiting_approval.is_some();
            let settled = self
                .store
                .fetch_record::<RawInvocation>(
                    Via::Group,
                    SETTLE,
                    &[
                        &claim.scope,
                        &claim.invocation_id,
                        &claim.claim_token,
                        &Json("outcome", &settlement.outcome),
                        &settlement.awaiting_approval,
                        &awaiting,
                        &claim.reconciled,
                        &now,
                    ],
                )
                .await?;
            if let Some(record) = settled {
                return Ok(record);
            }
            // Nothing matched: say why. A record that became settleable in between (it
            // cannot, short of a resume racing the settlement) is reported not pending.
            let id = claim.invocation_id;
            match self.fetch(GET, claim.scope, id).await? {
                None => Err(JournalError::NotFound(id.to_string())),
                Some(r) => {
                    r.settleable_by(claim.claim_token)?;
                    Err(JournalError::NotPending(id.to_string()))
                }
            }
        })
        .await
    }

    async fn release(
        &self,
        scope: &str,
        invocation_id: &str,
        claim_token: &str,
    ) -> Result<bool, JournalError> {
        crate::metrics::timed(self.store.backend(), "journal.release", async move {
            let deleted = self
                .store
                .execute(Via::Group, RELEASE, &[&scope, &invocation_id, &claim_token])
                .await
                .map_err(backend)?;
            Ok(deleted > 0)
        })
        .await
    }

    async fn get(
        &self,
        scope: &str,
        invocation_id: &str,
    ) -> Result<Option<InvocationRecord>, JournalError> {
        self.read("journal.get", GET, scope, invocation_id).await
    }

    async fn find_approval(
        &self,
        scope: &str,
        approval_id: &str,
    ) -> Result<Option<InvocationRecord>, JournalError> {
        self.read("journal.find_approval", FIND_APPROVAL, scope, approval_id)
            .await
    }

    async fn purge_settled_before(&self, cutoff: DateTime<Utc>) -> Result<u64, JournalError> {
        crate::metrics::timed(
            self.store.backend(),
            "journal.purge_settled_before",
            async move {
                let cutoff = trunc(cutoff);
                let done = self
                    .store
                    .execute(Via::Writer, PURGE, &[&cutoff])
                    .await
                    .map_err(backend)?;
                Ok(done)
            },
        )
        .await
    }
}
