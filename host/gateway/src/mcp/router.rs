//! Streamable HTTP: every request is authenticated before rmcp sees it, and MCP sessions are
//! bound to the principal that opened them.

use super::McpOptions;
use super::handlers::{CapgateMcp, McpIdentity};
use crate::door::{Door, Doorkeeper};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use capgate_core::actor::Surface;
use capgate_core::runtime::Runtime;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Where the application mounts the MCP endpoint (`Router::nest_service`).
pub const PREFIX: &str = "/mcp";

/// The session header of the streamable HTTP transport.
const SESSION_HEADER: &str = "mcp-session-id";
/// Most session bindings remembered; the oldest are forgotten first (a forgotten session is
/// re-bound to the next principal that uses it, which still holds no authority of its own).
const MAX_BINDINGS: usize = 65_536;

#[derive(Clone)]
struct McpHttpState {
    service: StreamableHttpService<CapgateMcp, LocalSessionManager>,
    /// rmcp's sessions, to close one opened past its principal's cap.
    manager: Arc<LocalSessionManager>,
    /// [`McpOptions::max_sessions_per_principal`].
    max_sessions_per_principal: usize,
    doorkeeper: Doorkeeper,
    bindings: Arc<SessionBindings>,
    /// The shared session rows, to learn who opened a session another replica opened.
    shared: Option<Arc<dyn SharedMcpSessions>>,
    /// The `WWW-Authenticate` of a `401`, naming the protected-resource metadata.
    challenge: Option<axum::http::HeaderValue>,
}

tokio::task_local! {
    /// The digest of the principal of the request rmcp is handling: what a shared session
    /// row records as its opener when rmcp stores the handshake.
    static OPENER: String;
}

/// A stored MCP session as the store hands it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedMcpSession {
    /// SHA-256 hex of the key naming the principal that opened it.
    pub principal_sha256: String,
    /// The client's `initialize` parameters, JSON text as [`SharedMcpSessions::put`] got it.
    pub state: String,
}

/// Where MCP sessions live when replicas share them: the seam `capgate serve` implements
/// over its store (this crate does not know the store). Session ids and principals arrive
/// as SHA-256 hex digests, never as themselves.
#[async_trait::async_trait]
pub trait SharedMcpSessions: Send + Sync + 'static {
    /// Keep a session opened by `principal_sha256` (the same id twice: the first stays).
    async fn put(
        &self,
        id_sha256: &str,
        principal_sha256: &str,
        state: &str,
    ) -> Result<(), SessionStoreError>;
    /// The session with this id digest, if stored.
    async fn get(&self, id_sha256: &str) -> Result<Option<SharedMcpSession>, SessionStoreError>;
    /// Forget a session (the client ended it).
    async fn delete(&self, id_sha256: &str) -> Result<(), SessionStoreError>;
}

/// rmcp's session store over [`SharedMcpSessions`]: the handshake kept under the digest of
/// its id, with the digest of the principal whose request opened it.
struct SharedSessionStore(Arc<dyn SharedMcpSessions>);

#[async_trait::async_trait]
impl SessionStore for SharedSessionStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(row) = self
            .0
            .get(&capgate_core::digest::sha256_hex(session_id))
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(serde_json::from_str(&row.state)?))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let opener = OPENER
            .try_with(Clone::clone)
            .map_err(|_| "an MCP session stored outside a request")?;
        let state = serde_json::to_string(state)?;
        self.0
            .put(
                &capgate_core::digest::sha256_hex(session_id),
                &opener,
                &state,
            )
            .await
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.0
            .delete(&capgate_core::digest::sha256_hex(session_id))
            .await
    }
}

/// The streamable HTTP MCP endpoint as an axum router with a fallback only, so it can be
/// nested anywhere (`Router::new().nest("/mcp", streamable_http_router(…))`).
///
/// Every HTTP request passes the `mcp` door of `doorkeeper` (authenticated, bound to the
/// `mcp` surface, within quota: 401 / 429 otherwise, also mid-session once a token
/// expires); the MCP handler then acts as the principal of that very request and asks the
/// same doorkeeper's authorizer for every list, call and resume. A session id used by
/// another principal than the one that opened it answers 404, as an unknown session would.
pub fn streamable_http_router(
    runtime: Runtime,
    doorkeeper: Doorkeeper,
    options: McpOptions,
) -> axum::Router {
    streamable_http_router_with(runtime, doorkeeper, options, McpSessions::default())
}

/// What of the MCP endpoint outlives one router: which principal holds which session id
/// and, for [`McpSessions::in_memory`], every session's handshake. `capgate serve` keeps
/// one across configuration reloads: a session opened before a reload is restored by the
/// new router from its stored handshake (as a replica restores one from a shared
/// [`SessionStore`]), served by the new configuration, and still bound to its principal.
#[derive(Clone, Default)]
pub struct McpSessions {
    bindings: Arc<SessionBindings>,
    store: Option<Arc<dyn SessionStore>>,
    shared: Option<Arc<dyn SharedMcpSessions>>,
}

crate::debug::debug_fields! { McpSessions { store: Option::is_some, shared: Option::is_some } }

impl McpSessions {
    /// Bindings plus an in-process store of handshakes (at most 65 536, the
    /// oldest forgotten first; a forgotten session answers `404` and its client starts a
    /// new one, as MCP prescribes).
    pub fn in_memory() -> Self {
        McpSessions {
            bindings: Arc::new(SessionBindings::default()),
            store: Some(Arc::new(MemorySessionStore::default())),
            shared: None,
        }
    }

    /// Sessions in a store every replica reaches: a session opened on one replica is
    /// restored by any other from its stored handshake (no sticky routing), and still
    /// belongs to the principal that opened it there (another principal's request with its
    /// id is answered `404`, as an unknown session would be).
    pub fn shared(rows: Arc<dyn SharedMcpSessions>) -> Self {
        McpSessions {
            bindings: Arc::new(SessionBindings::default()),
            store: Some(Arc::new(SharedSessionStore(rows.clone()))),
            shared: Some(rows),
        }
    }
}

/// [`streamable_http_router`] over sessions that outlive it. A store configured in
/// `options.session_store` takes precedence over the handle's.
pub fn streamable_http_router_with(
    runtime: Runtime,
    doorkeeper: Doorkeeper,
    options: McpOptions,
    sessions: McpSessions,
) -> axum::Router {
    let mut config =
        StreamableHttpServerConfig::default().with_legacy_session_mode(options.stateful_sessions);
    if let Some(hosts) = &options.allowed_hosts {
        config = if hosts.is_empty() {
            config.disable_allowed_hosts()
        } else {
            config.with_allowed_hosts(hosts.clone())
        };
    }
    config.session_store = options.session_store.clone().or(sessions.store);
    let challenge = options
        .protected_resource
        .as_ref()
        .and_then(|p| p.challenge());
    let max_sessions_per_principal = options.max_sessions_per_principal.max(1);
    let handler = CapgateMcp::new(
        runtime,
        McpIdentity::PerRequest,
        doorkeeper.authorizer.clone(),
        options,
    );
    let manager = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(move || Ok(handler.clone()), manager.clone(), config);
    let state = McpHttpState {
        service,
        manager,
        max_sessions_per_principal,
        doorkeeper,
        bindings: sessions.bindings,
        shared: sessions.shared,
        challenge,
    };
    axum::Router::new().fallback(mcp_entry).with_state(state)
}

async fn mcp_entry(State(state): State<McpHttpState>, mut request: Request) -> Response {
    let client = state
        .doorkeeper
        .client(request.extensions(), request.headers());
    let authenticated = match state
        .doorkeeper
        .admit(request.headers(), client, Door::Surface(Surface::Mcp))
        .await
    {
        Ok(a) => a,
        Err(reject) => {
            let unauthenticated = reject.status == StatusCode::UNAUTHORIZED;
            let mut response = reject.into_response();
            if unauthenticated && let Some(challenge) = &state.challenge {
                response
                    .headers_mut()
                    .insert(axum::http::header::WWW_AUTHENTICATE, challenge.clone());
            }
            return response;
        }
    };
    let principal = format!(
        "{}\u{0}{}\u{0}{}",
        authenticated.principal.namespace,
        authenticated.principal.actor.kind.as_str(),
        authenticated.principal.actor.id
    );
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let opener = capgate_core::digest::sha256_hex(&principal);
    // A session this replica never saw: whoever opened it elsewhere holds it.
    if let Some(id) = &session
        && let Some(shared) = &state.shared
        && !state.bindings.knows(id)
    {
        match shared.get(&capgate_core::digest::sha256_hex(id)).await {
            Ok(Some(row)) if row.principal_sha256 != opener => {
                tracing::info!(target: "capgate::mcp", "MCP session used by another principal; refused");
                return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(target: "capgate::mcp", error = %e, "the MCP session store did not answer");
                return crate::reject::Reject::unavailable("MCP session store").into_response();
            }
        }
    }
    if let Some(id) = &session
        && !state.bindings.check_or_bind(id, &principal)
    {
        tracing::info!(target: "capgate::mcp", "MCP session used by another principal; refused");
        return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
    }
    let is_delete = request.method() == axum::http::Method::DELETE;
    request.extensions_mut().insert(authenticated);
    let response = OPENER.scope(opener, state.service.handle(request)).await;
    let opened = response
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|id| session.as_deref() != Some(*id))
        .map(str::to_string);
    if let Some(id) = opened {
        // A handshake opened a session: past the principal's cap it is closed at once and
        // the handshake refused, so one key cannot hold the memory of every tenant.
        if state.bindings.live_for(&principal) >= state.max_sessions_per_principal
            && !state.bindings.knows(&id)
        {
            let sid: rmcp::transport::streamable_http_server::session::SessionId =
                id.as_str().into();
            if let Err(e) =
                rmcp::transport::streamable_http_server::session::SessionManager::close_session(
                    state.manager.as_ref(),
                    &sid,
                )
                .await
            {
                tracing::warn!(target: "capgate::mcp", error = %e, "closing a session past the cap failed");
            }
            if let Some(store) = &state.shared {
                let _ = store.delete(&capgate_core::digest::sha256_hex(&id)).await;
            }
            tracing::info!(target: "capgate::mcp", limit = state.max_sessions_per_principal, "MCP session refused: the principal holds the most sessions allowed");
            return too_many_sessions(state.max_sessions_per_principal);
        }
        state.bindings.check_or_bind(&id, &principal);
    }
    if let Some(id) = &session {
        state.bindings.touch(id);
    }
    if is_delete && let Some(id) = &session {
        state.bindings.forget(id);
    }
    response.map(Body::new)
}

/// The refusal of a handshake past the principal's session cap: `429` with a JSON-RPC error
/// saying what to do.
fn too_many_sessions(limit: usize) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32000,
            "message": format!(
                "This principal holds {limit} open MCP sessions, the most allowed: end one \
                 (HTTP DELETE with its mcp-session-id) or let one idle out, then connect again."
            ),
        },
    });
    let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("60"),
    );
    response
}

/// How long a session nobody uses stays open: rmcp's session keep-alive, after which its
/// worker ends (and the session no longer counts against its principal's cap).
const SESSION_IDLE: std::time::Duration =
    rmcp::transport::streamable_http_server::session::local::SessionConfig::DEFAULT_KEEP_ALIVE;

/// Which principal opened which MCP session, and when each was last used.
#[derive(Default)]
struct SessionBindings {
    inner: Mutex<Bindings>,
}

#[derive(Default)]
struct Bindings {
    by_session: HashMap<String, String>,
    order: VecDeque<String>,
    /// When each bound session was last used.
    used: HashMap<String, std::time::Instant>,
}

impl SessionBindings {
    /// True when the session is unbound (it becomes bound to `principal`) or bound to
    /// `principal`; false when another principal holds it.
    fn check_or_bind(&self, session: &str, principal: &str) -> bool {
        // A poisoned lock only means a panic between two plain map updates; the map is
        // still usable.
        let mut b = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match b.by_session.get(session) {
            Some(owner) => owner == principal,
            None => {
                if b.order.len() >= MAX_BINDINGS
                    && let Some(oldest) = b.order.pop_front()
                {
                    b.by_session.remove(&oldest);
                    b.used.remove(&oldest);
                }
                b.by_session
                    .insert(session.to_string(), principal.to_string());
                b.order.push_back(session.to_string());
                b.used
                    .insert(session.to_string(), std::time::Instant::now());
                true
            }
        }
    }

    /// Whether this process has seen the session.
    fn knows(&self, session: &str) -> bool {
        let b = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        b.by_session.contains_key(session)
    }

    fn forget(&self, session: &str) {
        let mut b = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        b.used.remove(session);
        if b.by_session.remove(session).is_some() {
            b.order.retain(|s| s != session);
        }
    }

    /// Note a use of a bound session (it stays open for another [`SESSION_IDLE`]).
    fn touch(&self, session: &str) {
        let mut b = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = b.used.get_mut(session) {
            *at = std::time::Instant::now();
        }
    }

    /// How many sessions `principal` holds open: bound to it and used within
    /// [`SESSION_IDLE`]. Sessions idle past it are forgotten on the way (rmcp ended them).
    fn live_for(&self, principal: &str) -> usize {
        let mut b = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        let idle: Vec<String> = b
            .by_session
            .iter()
            .filter(|(s, owner)| {
                *owner == principal
                    && b.used
                        .get(*s)
                        .is_none_or(|at| now.saturating_duration_since(*at) > SESSION_IDLE)
            })
            .map(|(s, _)| s.clone())
            .collect();
        for s in &idle {
            b.by_session.remove(s);
            b.used.remove(s);
        }
        if !idle.is_empty() {
            b.order.retain(|s| !idle.contains(s));
        }
        b.by_session.values().filter(|o| *o == principal).count()
    }
}

/// Session handshakes kept in this process, bounded: what lets a router built after a
/// configuration reload restore a session the previous router opened.
#[derive(Default)]
struct MemorySessionStore {
    inner: Mutex<StoredSessions>,
}

#[derive(Default)]
struct StoredSessions {
    by_session: HashMap<String, SessionState>,
    order: VecDeque<String>,
}

#[async_trait::async_trait]
impl SessionStore for MemorySessionStore {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Ok(s.by_session.get(session_id).cloned())
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if s.by_session
            .insert(session_id.to_string(), state.clone())
            .is_none()
        {
            s.order.push_back(session_id.to_string());
            while s.order.len() > MAX_BINDINGS {
                if let Some(oldest) = s.order.pop_front() {
                    s.by_session.remove(&oldest);
                }
            }
        }
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if s.by_session.remove(session_id).is_some() {
            s.order.retain(|id| id != session_id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_belongs_to_the_principal_that_used_it_first() {
        let b = SessionBindings::default();
        assert!(b.check_or_bind("s1", "alice"));
        assert!(b.check_or_bind("s1", "alice"));
        assert!(!b.check_or_bind("s1", "mallory"));
        b.forget("s1");
        assert!(b.check_or_bind("s1", "mallory"));
    }
}
