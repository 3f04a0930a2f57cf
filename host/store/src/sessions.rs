//! Approval console sessions as rows (`capgate_console_sessions`), so a restart of
//! `capgate serve`, or another replica on the same Postgres, keeps every approver signed in.
//!
//! The store keeps what the console hands it and nothing more: the SHA-256 of the session
//! id (the id itself is only in the browser's cookie), a key naming the principal (for the
//! per-principal cap), the credential's description as the console wrote it (JSON text:
//! never a raw credential; see `capgate_gateway::console`), the principal's namespace
//! (whose storage budget the row counts against, as its receipts and approvals do), and
//! the times. The console's
//! session-store seam is implemented over this in `capgate-server`, where the gateway and
//! the store meet.

use crate::Store;
use crate::columns::{ColumnError, Columns};
use crate::db::{Sql, Via};
use capgate_core::journal::JournalBudget;
use chrono::{DateTime, Utc};

/// One console session row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSessionRow {
    /// SHA-256 hex of the session id.
    pub id_sha256: String,
    /// Who it belongs to (the console's key for the principal), for the per-principal cap.
    pub principal: String,
    /// How the console re-establishes the principal (JSON text written by the console).
    pub credential: String,
    /// The principal's namespace: the row counts against its storage budget (empty: none).
    pub namespace: String,
    /// When it was opened (oldest-first eviction).
    pub created_at: DateTime<Utc>,
    /// When it ends.
    pub expires_at: DateTime<Utc>,
}

/// Why a session row could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionRowError {
    /// The statement failed (database away, disk full...).
    #[error("console session store unavailable: {0}")]
    Backend(#[source] capgate_core::error::BoxError),
    /// A stored row does not decode (a hostile or damaged row).
    #[error("malformed console session row: {0}")]
    Malformed(String),
    /// The namespace is at its storage budget: no session was stored (nor anyone evicted).
    #[error("namespace `{namespace}` is at its storage budget ({limit})")]
    QuotaExceeded {
        /// The namespace.
        namespace: String,
        /// Which bound: `rows` or `bytes`.
        limit: &'static str,
    },
}

/// The longest text a session row's fields may hold (a principal key, a credential
/// description): bounded so no caller can grow one row without limit.
pub const MAX_SESSION_FIELD_BYTES: usize = 16 * 1024;

/// The console's sessions on a [`Store`].
#[derive(Clone)]
pub struct ConsoleSessionRows {
    store: Store,
    budget: Option<JournalBudget>,
}

impl std::fmt::Debug for ConsoleSessionRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleSessionRows")
            .field("backend", &self.store.backend())
            .finish()
    }
}

const INSERT: &str = "INSERT INTO capgate_console_sessions \
     (id_sha256, principal, credential, created_at, expires_at, namespace) \
     VALUES ($1, $2, $3, $4, $5, $6)";
/// Insert unless the namespace is at its budget (`$7` rows, `$8` this row's bytes, `$9`
/// bytes; the usage is kept by the triggers of migration 0013): nothing inserted, no row
/// back. On Postgres the namespace's usage row is locked, as a claim's is.
const INSERT_BUDGETED: Sql = Sql {
    sqlite: "INSERT INTO capgate_console_sessions \
     (id_sha256, principal, credential, created_at, expires_at, namespace) \
     SELECT $1, $2, $3, $4, $5, $6 WHERE $8 <= $9 AND NOT EXISTS (SELECT 1 FROM capgate_journal_usage \
       WHERE namespace = $6 AND (row_count >= $7 OR byte_count + $8 > $9))",
    postgres: "WITH usage AS (SELECT row_count, byte_count FROM capgate_journal_usage \
       WHERE namespace = $6 FOR UPDATE) \
     INSERT INTO capgate_console_sessions \
     (id_sha256, principal, credential, created_at, expires_at, namespace) \
     SELECT $1, $2, $3, $4, $5, $6 WHERE $8::bigint <= $9::bigint \
       AND NOT EXISTS (SELECT 1 FROM usage WHERE row_count >= $7 OR byte_count + $8 > $9)",
};
const EVICT: &str = "DELETE FROM capgate_console_sessions WHERE principal = $1 AND id_sha256 NOT IN \
     (SELECT id_sha256 FROM capgate_console_sessions WHERE principal = $1 \
      ORDER BY created_at DESC, id_sha256 DESC LIMIT $2)";
const PURGE: &str = "DELETE FROM capgate_console_sessions WHERE expires_at <= $1";
const GET: &str = "SELECT id_sha256, principal, credential, namespace, created_at, expires_at \
     FROM capgate_console_sessions WHERE id_sha256 = $1 AND expires_at > $2";
const DELETE: &str = "DELETE FROM capgate_console_sessions WHERE id_sha256 = $1";
const COUNT: &str =
    "SELECT COUNT(*) AS n FROM capgate_console_sessions WHERE principal = $1 AND expires_at > $2";

fn backend(e: capgate_core::error::BoxError) -> SessionRowError {
    SessionRowError::Backend(e)
}

/// Delete the session row whose id digest is `id_sha256` with `delete` (a statement taking
/// the digest as `$1`), through the group writer: a console session's sign-out and an MCP
/// session's `DELETE` alike.
pub(crate) async fn delete_row(
    store: &Store,
    delete: &'static str,
    id_sha256: &str,
) -> Result<(), SessionRowError> {
    store
        .execute(Via::Group, delete, &[&id_sha256])
        .await
        .map(|_| ())
        .map_err(backend)
}

fn decode(row: &dyn Columns) -> Result<ConsoleSessionRow, ColumnError> {
    Ok(ConsoleSessionRow {
        id_sha256: row.text("id_sha256")?,
        principal: row.text("principal")?,
        credential: row.text("credential")?,
        namespace: row.text("namespace")?,
        created_at: row.ts("created_at")?,
        expires_at: row.ts("expires_at")?,
    })
}

impl Store {
    /// The approval console's sessions on this store.
    pub fn console_sessions(&self) -> ConsoleSessionRows {
        ConsoleSessionRows {
            store: self.clone(),
            budget: None,
        }
    }
}

impl ConsoleSessionRows {
    /// Refuse a new session whose namespace is at `budget`, the storage budget its
    /// receipts and approval records count against too (a sign-in stores a row):
    /// [`SessionRowError::QuotaExceeded`], nothing written. Usage is counted whether or
    /// not a budget is set.
    pub fn with_budget(mut self, budget: JournalBudget) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Keep a new session, then leave its principal at most `per_principal` live sessions
    /// (the oldest go first) and drop every expired session. Returns how many sessions of
    /// this principal were evicted.
    pub async fn insert(
        &self,
        row: &ConsoleSessionRow,
        per_principal: u32,
        now: DateTime<Utc>,
    ) -> Result<u64, SessionRowError> {
        for (field, value) in [
            ("principal", &row.principal),
            ("credential", &row.credential),
            ("id_sha256", &row.id_sha256),
            ("namespace", &row.namespace),
        ] {
            if value.len() > MAX_SESSION_FIELD_BYTES {
                return Err(SessionRowError::Malformed(format!(
                    "{field} is longer than {MAX_SESSION_FIELD_BYTES} bytes"
                )));
            }
        }
        let s = &self.store;
        s.execute(Via::Group, PURGE, &[&now])
            .await
            .map_err(backend)?;
        let params: [&dyn crate::params::Param; 6] = [
            &row.id_sha256,
            &row.principal,
            &row.credential,
            &row.created_at,
            &row.expires_at,
            &row.namespace,
        ];
        match self.budget.filter(|_| !row.namespace.is_empty()) {
            None => {
                s.execute(Via::Group, INSERT, &params)
                    .await
                    .map_err(backend)?;
            }
            Some(budget) => {
                crate::usage::ensure_row(s, &row.namespace)
                    .await
                    .map_err(backend)?;
                let size =
                    i64::try_from(row.principal.len() + row.credential.len()).unwrap_or(i64::MAX);
                let (max_rows, max_bytes) = crate::usage::limits(budget);
                let mut all = params.to_vec();
                all.extend([&max_rows as &dyn crate::params::Param, &size, &max_bytes]);
                if s.execute(Via::Group, INSERT_BUDGETED, &all)
                    .await
                    .map_err(backend)?
                    == 0
                {
                    let limit = crate::usage::bound_reached(s, &row.namespace, budget, size)
                        .await
                        .map_err(backend)?
                        .unwrap_or("rows");
                    return Err(SessionRowError::QuotaExceeded {
                        namespace: row.namespace.clone(),
                        limit,
                    });
                }
            }
        }
        let keep = i64::from(per_principal.max(1));
        s.execute(Via::Group, EVICT, &[&row.principal, &keep])
            .await
            .map_err(backend)
    }

    /// The live (unexpired) session with this id digest.
    pub async fn get(
        &self,
        id_sha256: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<ConsoleSessionRow>, SessionRowError> {
        self.store
            .fetch_optional(Via::Readers, GET, &[&id_sha256, &now], decode)
            .await
            .map_err(backend)?
            .transpose()
            .map_err(SessionRowError::Malformed)
    }

    /// End a session (sign-out, or its credential was revoked).
    pub async fn delete(&self, id_sha256: &str) -> Result<(), SessionRowError> {
        delete_row(&self.store, DELETE, id_sha256).await
    }

    /// Live sessions of one principal (operators and tests).
    pub async fn count_for(
        &self,
        principal: &str,
        now: DateTime<Utc>,
    ) -> Result<u64, SessionRowError> {
        let n = self
            .store
            .fetch_optional(Via::Readers, COUNT, &[&principal, &now], |row| row.int("n"))
            .await
            .map_err(backend)?
            .transpose()
            .map_err(SessionRowError::Malformed)?
            .unwrap_or(0);
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
