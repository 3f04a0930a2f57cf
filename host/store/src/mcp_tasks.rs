//! MCP tasks as rows (`capgate_mcp_tasks`, migration 0014): a held `tools/call` on `/mcp`
//! answered with a task, so any replica answers the client's `tasks/get` and a restart
//! loses nothing. The store keeps what the gateway hands it: the task id, the SHA-256 of
//! the principal that created it (a `get` names it, so another principal's read finds
//! nothing), the namespace whose storage budget the row counts against, the approval it
//! waits for, its status and what `tasks/get` answers at the end. The gateway's seam is
//! implemented over this in `capgate-server`, where the gateway and the store meet.
//!
//! Every change is one compare-and-set: a task leaves `working` once (`finish`,
//! `cancel`), and only one replica's `claim` runs the approved call.

use crate::Store;
use crate::columns::{ColumnError, Columns};
use crate::db::{Sql, Via};
use capgate_core::journal::JournalBudget;
use chrono::{DateTime, Utc};

/// One stored MCP task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpTaskRow {
    /// The task's id (`tsk_…`, unguessable).
    pub id: String,
    /// SHA-256 hex of the key naming the principal that created it.
    pub principal_sha256: String,
    /// The principal's namespace: the row counts against its storage budget.
    pub namespace: String,
    /// The approval it waits for.
    pub approval_id: Option<String>,
    /// The capability of the held call.
    pub capability_id: String,
    /// `working`, `completed`, `failed` or `cancelled`.
    pub status: String,
    /// What the task's status says to the client (and its user).
    pub status_message: String,
    /// What `tasks/get` answers once the task ended (JSON text).
    pub outcome: Option<String>,
    /// The client answered the URL elicitation pointing its user to the console.
    pub input_answered: bool,
    /// The token of the replica running the call, once one claimed it.
    pub claim: Option<String>,
    /// Until when that run may take (past it, the replica is assumed to have stopped).
    pub run_deadline: Option<DateTime<Utc>>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it may be forgotten.
    pub purge_after: DateTime<Utc>,
}

/// Why a task row could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpTaskRowError {
    /// The statement failed (database away, disk full...).
    #[error("MCP task store unavailable: {0}")]
    Backend(#[source] capgate_core::error::BoxError),
    /// A stored row does not decode (a hostile or damaged row), or a field is too long.
    #[error("malformed MCP task row: {0}")]
    Malformed(String),
    /// The namespace is at its storage budget: nothing was stored.
    #[error("namespace `{namespace}` is at its storage budget ({limit})")]
    QuotaExceeded {
        /// The namespace.
        namespace: String,
        /// Which bound: `rows` or `bytes`.
        limit: &'static str,
    },
    /// The principal holds as many working tasks as it may: nothing was stored.
    #[error("the principal already holds {limit} working MCP tasks")]
    TooMany {
        /// The bound.
        limit: u32,
    },
}

/// The longest text a task's fields may hold (an outcome is a redacted tool result, bounded
/// by the capability's output limit upstream; this bounds what a row can cost anyway).
pub const MAX_TASK_FIELD_BYTES: usize = 4 * 1024 * 1024;

macro_rules! task_cols {
    () => {
        "id, principal_sha256, namespace, approval_id, capability_id, status, \
         status_message, outcome, input_answered, claim, run_deadline, created_at, updated_at, \
         purge_after"
    };
}

/// Insert unless the principal holds `$11` working tasks or the namespace is at its budget
/// (`$12` rows, `$13` this row's bytes, `$14` bytes); `$15`, `$16`: the claim of a task
/// created running, and its deadline.
const INSERT: Sql = Sql {
    sqlite: "INSERT INTO capgate_mcp_tasks (id, principal_sha256, namespace, approval_id, \
       capability_id, status, status_message, outcome, claim, run_deadline, created_at, updated_at, \
       purge_after) \
     SELECT $1, $2, $3, $4, $5, $6, $7, NULL, $15, $16, $8, $9, $10 \
     WHERE (SELECT COUNT(*) FROM capgate_mcp_tasks WHERE principal_sha256 = $2 AND status = 'working') < $11 \
       AND $13 <= $14 AND NOT EXISTS (SELECT 1 FROM capgate_journal_usage \
       WHERE namespace = $3 AND (row_count >= $12 OR byte_count + $13 > $14))",
    postgres: "WITH usage AS (SELECT row_count, byte_count FROM capgate_journal_usage \
       WHERE namespace = $3 FOR UPDATE) \
     INSERT INTO capgate_mcp_tasks (id, principal_sha256, namespace, approval_id, \
       capability_id, status, status_message, outcome, claim, run_deadline, created_at, updated_at, \
       purge_after) \
     SELECT $1, $2, $3, $4, $5, $6, $7, NULL, $15, $16, $8, $9, $10 \
     WHERE (SELECT COUNT(*) FROM capgate_mcp_tasks WHERE principal_sha256 = $2 AND status = 'working') < $11 \
       AND $13::bigint <= $14::bigint \
       AND NOT EXISTS (SELECT 1 FROM usage WHERE row_count >= $12 OR byte_count + $13 > $14)",
};
const WORKING: &str = "SELECT COUNT(*) AS n FROM capgate_mcp_tasks WHERE principal_sha256 = $1 AND status = 'working'";
const CLAIM: &str = "UPDATE capgate_mcp_tasks SET claim = $2, updated_at = $3, run_deadline = $4 \
     WHERE id = $1 AND status = 'working' AND claim IS NULL";
const REPORT: &str = "UPDATE capgate_mcp_tasks SET status_message = $3, updated_at = $4 \
     WHERE id = $1 AND status = 'working' AND claim = $2";
const FINISH: &str = "UPDATE capgate_mcp_tasks SET status = $2, status_message = $3, outcome = $4, \
     updated_at = $5 WHERE id = $1 AND status = 'working' AND (claim IS NULL OR claim = $6)";
const ANSWER: &str = "UPDATE capgate_mcp_tasks SET input_answered = $3, updated_at = $4 \
     WHERE id = $1 AND principal_sha256 = $2 AND status = 'working'";
const PURGE: &str = "DELETE FROM capgate_mcp_tasks WHERE purge_after <= $1";
const COUNT_BY_STATUS: &str =
    "SELECT status, COUNT(*) AS n FROM capgate_mcp_tasks GROUP BY status ORDER BY status";

const GET: &str = concat!(
    "SELECT ",
    task_cols!(),
    " FROM capgate_mcp_tasks WHERE id = $1 AND principal_sha256 = $2"
);
const CANCEL: &str = concat!(
    "UPDATE capgate_mcp_tasks SET status = 'cancelled', status_message = $3, updated_at = $4 \
     WHERE id = $1 AND principal_sha256 = $2 AND status = 'working' RETURNING ",
    task_cols!()
);

fn backend(e: capgate_core::error::BoxError) -> McpTaskRowError {
    McpTaskRowError::Backend(e)
}

fn decode(row: &dyn Columns) -> Result<McpTaskRow, ColumnError> {
    Ok(McpTaskRow {
        id: row.text("id")?,
        principal_sha256: row.text("principal_sha256")?,
        namespace: row.text("namespace")?,
        approval_id: row.opt_text("approval_id")?,
        capability_id: row.text("capability_id")?,
        status: row.text("status")?,
        status_message: row.text("status_message")?,
        outcome: row.opt_text("outcome")?,
        input_answered: row.flag("input_answered")?,
        claim: row.opt_text("claim")?,
        run_deadline: row.opt_ts("run_deadline")?,
        created_at: row.ts("created_at")?,
        updated_at: row.ts("updated_at")?,
        purge_after: row.ts("purge_after")?,
    })
}

fn bounded(fields: &[(&str, &str)]) -> Result<(), McpTaskRowError> {
    for (field, value) in fields {
        if value.len() > MAX_TASK_FIELD_BYTES {
            return Err(McpTaskRowError::Malformed(format!(
                "{field} is longer than {MAX_TASK_FIELD_BYTES} bytes"
            )));
        }
    }
    Ok(())
}

/// MCP tasks on a [`Store`].
#[derive(Clone)]
pub struct McpTaskRows {
    store: Store,
    budget: Option<JournalBudget>,
}

impl std::fmt::Debug for McpTaskRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTaskRows")
            .field("backend", &self.store.backend())
            .finish()
    }
}

impl Store {
    /// The MCP tasks on this store.
    pub fn mcp_tasks(&self) -> McpTaskRows {
        McpTaskRows {
            store: self.clone(),
            budget: None,
        }
    }
}

impl McpTaskRows {
    /// Refuse a new task whose namespace is at `budget`, the storage budget its receipts,
    /// approvals and console sessions count against too: [`McpTaskRowError::QuotaExceeded`],
    /// nothing written. Usage is counted whether or not a budget is set.
    pub fn with_budget(mut self, budget: JournalBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Keep a new task (its `status`, claim and run deadline as given, no outcome), unless its principal
    /// already holds `per_principal` working tasks ([`McpTaskRowError::TooMany`]) or its
    /// namespace is at its budget; either way nothing is written.
    pub async fn insert(
        &self,
        row: &McpTaskRow,
        per_principal: u32,
    ) -> Result<(), McpTaskRowError> {
        bounded(&[
            ("id", &row.id),
            ("principal_sha256", &row.principal_sha256),
            ("namespace", &row.namespace),
            ("approval_id", row.approval_id.as_deref().unwrap_or("")),
            ("capability_id", &row.capability_id),
            ("status_message", &row.status_message),
            ("claim", row.claim.as_deref().unwrap_or("")),
        ])?;
        let s = &self.store;
        crate::usage::ensure_row(s, &row.namespace)
            .await
            .map_err(backend)?;
        let size =
            i64::try_from(row.capability_id.len() + row.status_message.len()).unwrap_or(i64::MAX);
        let (max_rows, max_bytes) = self
            .budget
            .filter(|_| !row.namespace.is_empty())
            .map_or((i64::MAX, i64::MAX), crate::usage::limits);
        let limit = i64::from(per_principal);
        let inserted = s
            .execute(
                Via::Group,
                INSERT,
                &[
                    &row.id,
                    &row.principal_sha256,
                    &row.namespace,
                    &row.approval_id,
                    &row.capability_id,
                    &row.status,
                    &row.status_message,
                    &row.created_at,
                    &row.updated_at,
                    &row.purge_after,
                    &limit,
                    &max_rows,
                    &size,
                    &max_bytes,
                    &row.claim,
                    &row.run_deadline,
                ],
            )
            .await
            .map_err(backend)?;
        if inserted > 0 {
            return Ok(());
        }
        let working = self.working(&row.principal_sha256).await?;
        if working >= u64::from(per_principal) {
            return Err(McpTaskRowError::TooMany {
                limit: per_principal,
            });
        }
        let limit = match self.budget {
            Some(budget) => crate::usage::bound_reached(s, &row.namespace, budget, size)
                .await
                .map_err(backend)?
                .unwrap_or("rows"),
            None => "rows",
        };
        Err(McpTaskRowError::QuotaExceeded {
            namespace: row.namespace.clone(),
            limit,
        })
    }

    /// How many working tasks one principal holds.
    pub async fn working(&self, principal_sha256: &str) -> Result<u64, McpTaskRowError> {
        let n = self
            .store
            .fetch_optional(Via::Group, WORKING, &[&principal_sha256], |row| {
                row.int("n")
            })
            .await
            .map_err(backend)?
            .transpose()
            .map_err(|e| McpTaskRowError::Malformed(e.to_string()))?
            .unwrap_or(0);
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// The task `id` of the principal whose key digest is `principal_sha256`; another
    /// principal's task is `None`, as an unknown one is.
    pub async fn get(
        &self,
        id: &str,
        principal_sha256: &str,
    ) -> Result<Option<McpTaskRow>, McpTaskRowError> {
        self.store
            .fetch_optional(Via::Group, GET, &[&id, &principal_sha256], decode)
            .await
            .map_err(backend)?
            .transpose()
            .map_err(|e| McpTaskRowError::Malformed(e.to_string()))
    }

    /// Claim a working, unclaimed task for the run of its approved call, to end by
    /// `deadline`: true for exactly one caller across replicas.
    pub async fn claim(
        &self,
        id: &str,
        token: &str,
        now: DateTime<Utc>,
        deadline: DateTime<Utc>,
    ) -> Result<bool, McpTaskRowError> {
        let n = self
            .store
            .execute(Via::Group, CLAIM, &[&id, &token, &now, &deadline])
            .await
            .map_err(backend)?;
        Ok(n > 0)
    }

    /// Say how the run holding `claim` is progressing (the task's status message): true
    /// while the task is working and theirs.
    pub async fn report(
        &self,
        id: &str,
        claim: &str,
        status_message: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, McpTaskRowError> {
        bounded(&[("status_message", status_message)])?;
        let n = self
            .store
            .execute(Via::Group, REPORT, &[&id, &claim, &status_message, &now])
            .await
            .map_err(backend)?;
        Ok(n > 0)
    }

    /// End a working task (`completed` or `failed`, with what `tasks/get` answers from now
    /// on): true when this call ended it; false when it had already ended (cancelled, say)
    /// or another claim runs it.
    pub async fn finish(
        &self,
        id: &str,
        status: &str,
        status_message: &str,
        outcome: &str,
        claim: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<bool, McpTaskRowError> {
        bounded(&[("status_message", status_message), ("outcome", outcome)])?;
        let n = self
            .store
            .execute(
                Via::Group,
                FINISH,
                &[&id, &status, &status_message, &outcome, &now, &claim],
            )
            .await
            .map_err(backend)?;
        Ok(n > 0)
    }

    /// Cancel the principal's working task: the row as cancelled, or `None` when it
    /// is not theirs, unknown, or had already ended.
    pub async fn cancel(
        &self,
        id: &str,
        principal_sha256: &str,
        status_message: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<McpTaskRow>, McpTaskRowError> {
        bounded(&[("status_message", status_message)])?;
        self.store
            .fetch_optional(
                Via::Group,
                CANCEL,
                &[&id, &principal_sha256, &status_message, &now],
                decode,
            )
            .await
            .map_err(backend)?
            .transpose()
            .map_err(|e| McpTaskRowError::Malformed(e.to_string()))
    }

    /// Record that the client answered the principal's working task's URL elicitation:
    /// true when it was theirs and working.
    pub async fn answer_input(
        &self,
        id: &str,
        principal_sha256: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, McpTaskRowError> {
        let n = self
            .store
            .execute(Via::Group, ANSWER, &[&id, &principal_sha256, &true, &now])
            .await
            .map_err(backend)?;
        Ok(n > 0)
    }

    /// Forget tasks whose `purge_after` is past; how many went.
    pub async fn purge(&self, now: DateTime<Utc>) -> Result<u64, McpTaskRowError> {
        self.store
            .execute(Via::Group, PURGE, &[&now])
            .await
            .map_err(backend)
    }

    /// How many tasks are stored, by status (`/metrics`).
    pub async fn count_by_status(&self) -> Result<Vec<(String, u64)>, McpTaskRowError> {
        self.store
            .fetch_all(COUNT_BY_STATUS, &[], |row| {
                Ok::<_, ColumnError>((
                    row.text("status")?,
                    u64::try_from(row.int("n")?).unwrap_or(0),
                ))
            })
            .await
            .map_err(backend)?
            .into_iter()
            .collect::<Result<_, _>>()
            .map_err(|e| McpTaskRowError::Malformed(e.to_string()))
    }
}
