//! Where console sessions live: the [`SessionStore`] seam, what it keeps (never a raw
//! credential), and the in-memory store of a single process.

use capgate_core::actor::Actor;
use capgate_core::authz::Principal;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How a stored session re-establishes its principal: never a raw credential.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
pub enum SessionCredential {
    /// A configured API key, by its SHA-256 hex: re-admitted through
    /// [`crate::auth::Authenticator::by_api_key_hash`] on every request (a removed key ends
    /// the session).
    ApiKey {
        /// SHA-256 hex of the key.
        sha256: String,
    },
    /// The principal a token (a JWT) mapped to, kept until the session's expiry, which is
    /// never later than the token's own.
    #[serde(rename_all = "camelCase")]
    Principal {
        /// The actor.
        actor: Actor,
        /// Its namespace.
        namespace: String,
        /// Its roles.
        roles: Vec<String>,
        /// Whether it opens the requester door.
        requester_door: bool,
        /// The application context of its calls.
        context: serde_json::Value,
    },
}

/// One console session as a [`SessionStore`] keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSession {
    /// SHA-256 hex of the session id (the id itself is only in the cookie).
    pub id_sha256: String,
    /// The principal it belongs to ([`principal_key`]), for the per-principal cap.
    pub principal: String,
    /// How its principal is re-established.
    pub credential: SessionCredential,
    /// The principal's namespace, whose storage budget a stored session counts against.
    pub namespace: String,
    /// When it was opened (eviction goes oldest first).
    pub created_at: DateTime<Utc>,
    /// When it ends.
    pub expires_at: DateTime<Utc>,
}

/// Why a session store failed; the console answers `503` (`507` past a storage budget)
/// and logs it.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SessionStoreError {
    /// The store cannot be reached, refused the write, or is full.
    #[error("console session store unavailable: {0}")]
    Unavailable(String),
    /// A stored session does not decode.
    #[error("malformed console session: {0}")]
    Malformed(String),
    /// The principal's namespace is at its storage budget: nothing was stored, nobody
    /// signed out; the console answers `507 STORAGE_QUOTA_EXCEEDED`.
    #[error("namespace `{namespace}` is at its storage budget ({limit})")]
    QuotaExceeded {
        /// The namespace.
        namespace: String,
        /// Which bound: `rows` or `bytes`.
        limit: &'static str,
    },
}

/// Where console sessions live: implemented over the deployment's database by
/// `capgate serve` (so restarts and replicas keep them), in memory by
/// [`InMemorySessionStore`]. Keys are the SHA-256 hex of session ids.
#[async_trait::async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// Keep a new session; then leave its principal at most `per_principal` live sessions,
    /// evicting the oldest, and forget expired ones.
    async fn open(
        &self,
        session: StoredSession,
        per_principal: u32,
        now: DateTime<Utc>,
    ) -> Result<(), SessionStoreError>;
    /// The live (unexpired) session with this id digest.
    async fn get(
        &self,
        id_sha256: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<StoredSession>, SessionStoreError>;
    /// End a session.
    async fn close(&self, id_sha256: &str) -> Result<(), SessionStoreError>;
}

/// The key naming a principal in a session store: `["namespace","kind","id"]` as JSON
/// (unambiguous whatever the parts hold).
pub fn principal_key(p: &Principal) -> String {
    serde_json::json!([p.namespace, p.actor.kind.as_str(), p.actor.id]).to_string()
}

/// Sessions in this process's memory, at most `max` live ones (sign-in beyond it is
/// refused with `503`): a restart signs everyone out, and replicas do not share them.
#[derive(Debug)]
pub struct InMemorySessionStore {
    by_digest: Mutex<HashMap<String, StoredSession>>,
    max: usize,
}

impl InMemorySessionStore {
    /// Empty, at most `max` live sessions.
    pub fn new(max: usize) -> Self {
        InMemorySessionStore {
            by_digest: Mutex::new(HashMap::new()),
            max,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, StoredSession>> {
        // Every operation leaves the map consistent: keep serving after a panic.
        self.by_digest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait::async_trait]
impl SessionStore for InMemorySessionStore {
    async fn open(
        &self,
        session: StoredSession,
        per_principal: u32,
        now: DateTime<Utc>,
    ) -> Result<(), SessionStoreError> {
        let mut map = self.lock();
        map.retain(|_, s| s.expires_at > now);
        let mut own: Vec<(DateTime<Utc>, String)> = map
            .values()
            .filter(|s| s.principal == session.principal)
            .map(|s| (s.created_at, s.id_sha256.clone()))
            .collect();
        own.sort();
        let keep = usize::try_from(per_principal.max(1)).unwrap_or(usize::MAX);
        let evict = (own.len() + 1).saturating_sub(keep);
        for (_, id) in own.into_iter().take(evict) {
            map.remove(&id);
        }
        if map.len() >= self.max {
            return Err(SessionStoreError::Unavailable(format!(
                "{} live sessions (the most this process keeps)",
                self.max
            )));
        }
        map.insert(session.id_sha256.clone(), session);
        Ok(())
    }

    async fn get(
        &self,
        id_sha256: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<StoredSession>, SessionStoreError> {
        let mut map = self.lock();
        match map.get(id_sha256) {
            Some(s) if s.expires_at > now => Ok(Some(s.clone())),
            Some(_) => {
                map.remove(id_sha256);
                Ok(None)
            }
            None => Ok(None),
        }
    }

    async fn close(&self, id_sha256: &str) -> Result<(), SessionStoreError> {
        self.lock().remove(id_sha256);
        Ok(())
    }
}

/// The console's sessions, as a handle that outlives one router: `capgate serve` keeps it
/// across configuration reloads so that a reload signs nobody out (each request still
/// re-admits the session's principal through the current doorkeeper, so a key the new
/// configuration removed ends its sessions).
#[derive(Clone)]
pub struct ConsoleSessions(pub(super) Arc<dyn SessionStore>);

impl ConsoleSessions {
    /// Sessions kept by `store`.
    pub fn new(store: Arc<dyn SessionStore>) -> Self {
        ConsoleSessions(store)
    }

    /// Sessions in this process's memory, at most `max` live ones.
    pub fn in_memory(max: usize) -> Self {
        ConsoleSessions(Arc::new(InMemorySessionStore::new(max)))
    }
}

impl std::fmt::Debug for ConsoleSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleSessions").finish_non_exhaustive()
    }
}
