//! MCP sessions over streamable HTTP as rows (`capgate_mcp_sessions`), so a replica that
//! never saw a session restores it from the client's `initialize` parameters: no sticky
//! routing in front of the replicas. The store keeps digests of the session id and of the
//! principal that opened it (a session id read from the table opens nothing, and a session
//! used by another principal is refused by the gateway), the parameters as the gateway
//! wrote them (JSON text) and when the row was written. The gateway's seam is implemented
//! over this in `capgate serve`, where the gateway and the store meet.

use crate::Store;
use crate::db::Via;
use crate::sessions::{MAX_SESSION_FIELD_BYTES, SessionRowError, delete_row};
use chrono::{DateTime, Utc};

/// One stored MCP session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSessionRow {
    /// SHA-256 hex of the session id.
    pub id_sha256: String,
    /// SHA-256 hex of the key naming the principal that opened it.
    pub principal_sha256: String,
    /// The client's `initialize` parameters, as JSON text.
    pub state: String,
    /// When it was stored (purged after the deployment's horizon).
    pub created_at: DateTime<Utc>,
}

const INSERT: &str = "INSERT INTO capgate_mcp_sessions (id_sha256, principal_sha256, state, created_at) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (id_sha256) DO NOTHING";
const GET: &str = "SELECT id_sha256, principal_sha256, state, created_at \
     FROM capgate_mcp_sessions WHERE id_sha256 = $1";
const DELETE: &str = "DELETE FROM capgate_mcp_sessions WHERE id_sha256 = $1";
const PURGE: &str = "DELETE FROM capgate_mcp_sessions WHERE created_at < $1";

/// MCP sessions on a [`Store`].
#[derive(Clone)]
pub struct McpSessionRows {
    store: Store,
}

impl std::fmt::Debug for McpSessionRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpSessionRows")
            .field("backend", &self.store.backend())
            .finish()
    }
}

impl Store {
    /// The MCP sessions on this store.
    pub fn mcp_sessions(&self) -> McpSessionRows {
        McpSessionRows {
            store: self.clone(),
        }
    }
}

fn backend(e: capgate_core::error::BoxError) -> SessionRowError {
    SessionRowError::Backend(e)
}

impl McpSessionRows {
    /// Keep a new session (a second write of the same id changes nothing).
    pub async fn insert(&self, row: &McpSessionRow) -> Result<(), SessionRowError> {
        for (field, value) in [
            ("id_sha256", &row.id_sha256),
            ("principal_sha256", &row.principal_sha256),
            ("state", &row.state),
        ] {
            if value.len() > MAX_SESSION_FIELD_BYTES {
                return Err(SessionRowError::Malformed(format!(
                    "{field} is longer than {MAX_SESSION_FIELD_BYTES} bytes"
                )));
            }
        }
        self.store
            .execute(
                Via::Group,
                INSERT,
                &[
                    &row.id_sha256,
                    &row.principal_sha256,
                    &row.state,
                    &row.created_at,
                ],
            )
            .await
            .map(|_| ())
            .map_err(backend)
    }

    /// The session with this id digest.
    pub async fn get(&self, id_sha256: &str) -> Result<Option<McpSessionRow>, SessionRowError> {
        self.store
            .fetch_optional(Via::Readers, GET, &[&id_sha256], |row| {
                Ok::<_, String>(McpSessionRow {
                    id_sha256: row.text("id_sha256")?,
                    principal_sha256: row.text("principal_sha256")?,
                    state: row.text("state")?,
                    created_at: row.ts("created_at")?,
                })
            })
            .await
            .map_err(backend)?
            .transpose()
            .map_err(SessionRowError::Malformed)
    }

    /// End a session (the client's `DELETE`).
    pub async fn delete(&self, id_sha256: &str) -> Result<(), SessionRowError> {
        delete_row(&self.store, DELETE, id_sha256).await
    }

    /// Forget sessions stored before `before`; how many went. A client of a forgotten
    /// session is answered `404` by a replica that does not hold it, and starts a new one,
    /// as MCP prescribes.
    pub async fn purge_before(&self, before: DateTime<Utc>) -> Result<u64, SessionRowError> {
        self.store
            .execute(Via::Group, PURGE, &[&before])
            .await
            .map_err(backend)
    }
}
