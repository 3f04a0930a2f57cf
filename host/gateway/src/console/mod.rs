//! The approval console: a web page where humans review and decide held calls, served by
//! `capgate serve` under a prefix (`/console` by default) on top of the human approvals API.
//!
//! | route (prefix `P`) | what |
//! |---|---|
//! | `GET P`, `P/`, `P/history`, `P/approvals/{id}` | the page (one document; it routes on its path) |
//! | `GET P/assets/console.js`, `P/assets/console.css` | its script and stylesheet, embedded in the binary |
//! | `POST P/session` `{"credential": "…"}` | sign in: a [`SessionView`] and the session cookie |
//! | `GET P/session` | the current [`SessionView`] (`401` without a live session) |
//! | `DELETE P/session` | sign out (CSRF token required) |
//! | `P/api/approvals…` | the human approvals API ([`crate::approvals_api`]), authenticated by the session |
//!
//! **One principal, one door.** Signing in runs the credential (an API key or a JWT, the
//! same ones the approvals API accepts as a bearer token) through the same [`Doorkeeper`]
//! as every other door, and only a credential that can decide something signs in: an
//! approver's (the approver role), or a human's that opens the requester door
//! ([`crate::auth::Authenticated::requester_door`]); an agent's key is refused (`403`).
//! Every `P/api` request re-admits the session's principal through the doorkeeper and hands
//! it to the approvals API itself, so the role check, the namespace scope, the requester
//! door, the authorizer and the rate limits are exactly the API's. A bearer header sent to
//! `P/api` is dropped: there, only a session counts.
//!
//! **The session** is a random 256-bit id in an `HttpOnly`, `SameSite=Strict` cookie scoped
//! to `P` (`Secure` unless the page is reached on a loopback host, or as configured), with
//! an absolute expiry no later than the credential's own. Sessions are kept by a
//! [`SessionStore`] — rows in the deployment's database under `capgate serve`, so a
//! restart or another replica keeps them; [`InMemorySessionStore`] for a single process —
//! which never holds a credential: only the SHA-256 of the session id, and
//! [`SessionCredential`]: for an API key its SHA-256 (re-admitted against the configured
//! keys on every request, so a removed key ends its sessions at once), for a token (a JWT)
//! the principal it mapped to, until the token's own expiry (a JWT cannot be revoked
//! before it expires anyway).
//!
//! **Nobody fills the table for others.** Each principal keeps at most
//! [`ConsoleOptions::max_sessions_per_principal`] live sessions (a new sign-in evicts its
//! own oldest), and sign-in is throttled per principal and per client address
//! ([`ConsoleOptions::sign_in_per_principal`], [`ConsoleOptions::sign_in_per_address`]:
//! `429` with `Retry-After`). The throttles are this process's and start afresh at a
//! reload.
//!
//! **CSRF.** Every state-changing request (`POST`/`DELETE` under `P/api`, and sign-out)
//! carries the session's token in `X-CSRF-Token`; a request from another origin (`Origin`
//! that is not this host, or `Sec-Fetch-Site: cross-site`) is refused before anything
//! else, sign-in included. Sign-in also needs `Content-Type: application/json`, which no
//! HTML form can send. The token is derived from the session id (SHA-256 of a label and
//! the id), so it survives restarts without being stored, and only the cookie's holder can
//! compute it.
//!
//! **The page** is three static files (no framework, no build step, no CDN) under a strict
//! Content-Security-Policy: scripts and styles only from the console itself, nothing inline,
//! no `eval`, no frames. It renders every value a model or requester wrote with
//! `textContent`, never as HTML.

use crate::auth::{Authenticated, Credential};
use crate::door::{Door, Doorkeeper, SessionPrincipal};
use crate::reject::{Reject, json_refusals};
use crate::throttle::{PerMinute, Throttle};
use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use capgate_core::actor::{Actor, ActorRef};
use capgate_core::authz::Principal;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower_http::set_header::SetResponseHeaderLayer;

const LOG: &str = "capgate::console";

/// The session cookie's name.
pub const COOKIE: &str = "capgate_console";
/// The header state-changing requests carry the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Default session lifetime.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// Default bound on live sessions of an [`InMemorySessionStore`].
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;
/// Default bound on one principal's live sessions (a new sign-in evicts its oldest).
pub const DEFAULT_MAX_SESSIONS_PER_PRINCIPAL: u32 = 10;
/// Default sign-ins per principal: per minute, and burst.
pub const DEFAULT_SIGN_IN_PER_PRINCIPAL: (u32, u32) = (10, 10);
/// Default sign-ins per client address: per minute, and burst.
pub const DEFAULT_SIGN_IN_PER_ADDRESS: (u32, u32) = (30, 30);
/// Largest sign-in body (a JWT with many claims fits).
pub const MAX_SIGN_IN_BODY_BYTES: usize = 16 * 1024;
/// Longest credential accepted at sign-in.
pub const MAX_CREDENTIAL_BYTES: usize = 8 * 1024;

/// The Content-Security-Policy of every console response: nothing inline, nothing from
/// elsewhere, no frames, no plugins, no `<base>`.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const INDEX_HTML: &str = include_str!("assets/index.html");
const CONSOLE_JS: &str = include_str!("assets/console.js");
const CONSOLE_CSS: &str = include_str!("assets/console.css");
/// What index.html says where the prefix goes.
const PREFIX_PLACEHOLDER: &str = "__CONSOLE_PREFIX__";

/// When the session cookie carries `Secure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecureCookie {
    /// Always, except when the page is reached on a loopback host (`localhost`,
    /// `127.0.0.1`, `[::1]`), where there is no network to protect it from.
    #[default]
    Auto,
    /// Always (the console is reached over HTTPS, e.g. behind a TLS proxy).
    Always,
    /// Never (plain HTTP on a trusted network; not recommended).
    Never,
}

/// How the console is served.
#[derive(Debug, Clone)]
pub struct ConsoleOptions {
    /// The path prefix (`/console`): starts with `/`, no trailing slash.
    pub prefix: String,
    /// How long a session lives (capped by the credential's own expiry).
    pub session_ttl: Duration,
    /// When the cookie is `Secure`.
    pub secure_cookie: SecureCookie,
    /// The most live sessions [`console_router`]'s own in-memory store keeps; sign-in is
    /// refused (`503`) beyond it.
    pub max_sessions: usize,
    /// The most live sessions one principal keeps; a new sign-in evicts its oldest.
    pub max_sessions_per_principal: u32,
    /// Sign-ins per principal (`None`: not throttled).
    pub sign_in_per_principal: Option<PerMinute>,
    /// Sign-ins per client address, successful or not (`None`: not throttled).
    pub sign_in_per_address: Option<PerMinute>,
    /// The role an approver holds (the approvals API's).
    pub approver_role: String,
}

impl Default for ConsoleOptions {
    fn default() -> Self {
        let (pp, pb) = DEFAULT_SIGN_IN_PER_PRINCIPAL;
        let (ap, ab) = DEFAULT_SIGN_IN_PER_ADDRESS;
        ConsoleOptions {
            prefix: "/console".into(),
            session_ttl: DEFAULT_SESSION_TTL,
            secure_cookie: SecureCookie::Auto,
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_sessions_per_principal: DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
            sign_in_per_principal: PerMinute::new(pp, pb),
            sign_in_per_address: PerMinute::new(ap, ab),
            approver_role: "approver".into(),
        }
    }
}

/// Why a console cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConsoleError {
    /// The prefix is not a plain absolute path.
    #[error(
        "the console path `{0}` must start with `/`, not end with `/`, and use only letters, digits, `-`, `_` and `/`"
    )]
    Prefix(String),
    /// A zero lifetime or session bound.
    #[error("the console's session lifetime and session bound must be positive")]
    Bounds,
}

/// Whether `prefix` is a console path: `/` then segments of `[A-Za-z0-9_-]`.
pub fn check_prefix(prefix: &str) -> Result<(), ConsoleError> {
    let ok = prefix.len() > 1
        && prefix.len() <= 200
        && prefix.starts_with('/')
        && !prefix.ends_with('/')
        && !prefix.contains("//")
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_'));
    if ok {
        Ok(())
    } else {
        Err(ConsoleError::Prefix(prefix.to_owned()))
    }
}

/// Who is signed in, as the page learns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    /// The signed-in actor.
    pub actor: ActorRef,
    /// Their namespace (what they see).
    pub namespace: String,
    /// Their roles.
    pub roles: Vec<String>,
    /// Whether they hold the approver role (else only the requester door is open to them).
    pub approver: bool,
    /// The token state-changing requests carry in `X-CSRF-Token`.
    pub csrf_token: String,
    /// When the session ends.
    pub expires_at: DateTime<Utc>,
}

/// The sign-in body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    credential: String,
}

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
    /// When it was opened (eviction goes oldest first).
    pub created_at: DateTime<Utc>,
    /// When it ends.
    pub expires_at: DateTime<Utc>,
}

/// Why a session store failed; the console answers `503` and logs it.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SessionStoreError {
    /// The store cannot be reached, refused the write, or is full.
    #[error("console session store unavailable: {0}")]
    Unavailable(String),
    /// A stored session does not decode.
    #[error("malformed console session: {0}")]
    Malformed(String),
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
pub struct ConsoleSessions(Arc<dyn SessionStore>);

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

/// SHA-256 hex of a session id: its key in the store.
fn digest(id: &str) -> String {
    hex::encode(Sha256::digest(id.as_bytes()))
}

/// The CSRF token of a session: derived from its id, so it is never stored and only the
/// cookie's holder can compute it.
fn csrf_of(id: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"capgate-console-csrf\0");
    h.update(id.as_bytes());
    hex::encode(h.finalize())
}

/// A live session, re-admitted: its id, its principal, when it ends.
struct Live {
    id: String,
    who: Authenticated,
    expires_at: DateTime<Utc>,
}

struct Console {
    doorkeeper: Doorkeeper,
    options: ConsoleOptions,
    sessions: Arc<dyn SessionStore>,
    per_principal: Option<Throttle>,
    per_address: Option<Throttle>,
    index: String,
}

type St = State<Arc<Console>>;

/// The console as an axum router with full paths (merge it into the application):
/// the page, its session routes, and `approvals` — the human approvals API router, built
/// by [`crate::approvals_api::ApprovalsRouter`] over the same doorkeeper — under `P/api`.
pub fn console_router(
    approvals: Router,
    doorkeeper: Doorkeeper,
    options: ConsoleOptions,
) -> Result<Router, ConsoleError> {
    let sessions = ConsoleSessions::in_memory(options.max_sessions);
    console_router_with(approvals, doorkeeper, options, sessions)
}

/// [`console_router`] over sessions that outlive it (`max_sessions` is then the store's
/// own business).
pub fn console_router_with(
    approvals: Router,
    doorkeeper: Doorkeeper,
    options: ConsoleOptions,
    sessions: ConsoleSessions,
) -> Result<Router, ConsoleError> {
    check_prefix(&options.prefix)?;
    if options.session_ttl.is_zero()
        || options.max_sessions == 0
        || options.max_sessions_per_principal == 0
    {
        return Err(ConsoleError::Bounds);
    }
    let prefix = options.prefix.clone();
    let console = Arc::new(Console {
        index: INDEX_HTML.replace(PREFIX_PLACEHOLDER, &prefix),
        sessions: sessions.0,
        per_principal: options.sign_in_per_principal.map(Throttle::new),
        per_address: options.sign_in_per_address.map(Throttle::new),
        doorkeeper,
        options,
    });
    let api = approvals.layer(axum::middleware::from_fn_with_state(
        console.clone(),
        session_to_principal,
    ));
    let page = Router::new()
        .route(&prefix, get(index))
        .route(&format!("{prefix}/"), get(index))
        .route(&format!("{prefix}/history"), get(index))
        .route(&format!("{prefix}/approvals/{{id}}"), get(index))
        .route(&format!("{prefix}/assets/console.js"), get(script))
        .route(&format!("{prefix}/assets/console.css"), get(stylesheet))
        .route(
            &format!("{prefix}/session"),
            get(current).post(sign_in).delete(sign_out),
        )
        // Anything else under the prefix: a JSON 404 that carries the console's headers.
        .route(&format!("{prefix}/{{*rest}}"), axum::routing::any(unknown))
        .layer(DefaultBodyLimit::max(MAX_SIGN_IN_BODY_BYTES))
        .layer(axum::middleware::map_response(json_refusals))
        .with_state(console.clone());
    let headers = [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ),
        (
            HeaderName::from_static("cross-origin-resource-policy"),
            "same-origin",
        ),
    ];
    let mut router = page.merge(Router::new().nest(&format!("{prefix}/api"), api));
    for (name, value) in headers {
        router = router.layer(SetResponseHeaderLayer::overriding(
            name,
            HeaderValue::from_static(value),
        ));
    }
    Ok(router)
}

async fn unknown() -> Reject {
    Reject::new(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        "No such console page or resource.",
    )
}

async fn index(State(c): St) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        c.index.clone(),
    )
        .into_response()
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        CONSOLE_JS,
    )
        .into_response()
}

async fn stylesheet() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        CONSOLE_CSS,
    )
        .into_response()
}

fn forbidden(message: &str) -> Reject {
    Reject::forbidden_because(message)
}

/// Refuse a request that says it comes from another site: an `Origin` that is not this
/// host, or `Sec-Fetch-Site: cross-site`. Requests that say neither (curl, old browsers)
/// pass; for them the cookie's `SameSite=Strict` and the CSRF token remain.
fn same_origin(headers: &HeaderMap) -> Result<(), Reject> {
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site")
    {
        return Err(forbidden("Cross-site requests are refused by the console."));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let origin_host = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, rest)| rest);
        if host.is_none() || origin_host != host {
            return Err(forbidden(
                "Requests from another origin are refused by the console.",
            ));
        }
    }
    Ok(())
}

/// The session id from the `Cookie` headers, if any.
fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .map(|c| c.value().to_owned())
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn is_loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    matches!(name, "localhost" | "127.0.0.1" | "[::1]")
}

impl Console {
    fn cookie(&self, headers: &HeaderMap, value: &str, max_age: Duration) -> HeaderValue {
        let secure = match self.options.secure_cookie {
            SecureCookie::Always => true,
            SecureCookie::Never => false,
            SecureCookie::Auto => !is_loopback_host(headers),
        };
        let c = cookie::Cookie::build((COOKIE, value.to_owned()))
            .path(self.options.prefix.clone())
            .http_only(true)
            .same_site(cookie::SameSite::Strict)
            .secure(secure)
            .max_age(cookie::time::Duration::seconds(
                i64::try_from(max_age.as_secs()).unwrap_or(i64::MAX),
            ))
            .build();
        // The id is hex and the path was checked: always a valid header value.
        HeaderValue::from_str(&c.to_string()).unwrap_or(HeaderValue::from_static(""))
    }

    fn cleared_cookie(&self, headers: &HeaderMap) -> HeaderValue {
        self.cookie(headers, "", Duration::ZERO)
    }

    /// `401` with the cookie cleared.
    fn unauthenticated(&self, headers: &HeaderMap) -> Response {
        let mut r = Reject::unauthenticated().into_response();
        r.headers_mut()
            .insert(header::SET_COOKIE, self.cleared_cookie(headers));
        r
    }

    /// The live session a request's cookie names, its principal re-admitted through the
    /// doorkeeper (a removed key ends it). `Err` is the response to send instead.
    async fn session(&self, headers: &HeaderMap) -> Result<Live, Box<Response>> {
        let unauthenticated = || Box::new(self.unauthenticated(headers));
        let id = session_id(headers).ok_or_else(unauthenticated)?;
        let key = digest(&id);
        let now = self.doorkeeper.clock.now();
        let stored = self
            .sessions
            .get(&key, now)
            .await
            .map_err(|e| Box::new(store_failed(&e).into_response()))?
            .ok_or_else(unauthenticated)?;
        let who = match &stored.credential {
            SessionCredential::ApiKey { sha256 } => {
                match self.doorkeeper.authenticator.by_api_key_hash(sha256) {
                    Some(who) if principal_key(&who.principal) == stored.principal => who,
                    _ => {
                        tracing::info!(target: LOG, "console session ended: its key is no longer configured");
                        self.end(&key).await;
                        return Err(unauthenticated());
                    }
                }
            }
            SessionCredential::Principal {
                actor,
                namespace,
                roles,
                requester_door,
                context,
            } => Authenticated {
                principal: Principal {
                    actor: actor.clone(),
                    namespace: namespace.clone(),
                },
                context: context.clone(),
                roles: roles.clone(),
                surfaces: Vec::new(),
                expires_at: Some(stored.expires_at),
                requester_door: *requester_door,
                operator: false,
                credential: Credential::Token,
            },
        };
        if !self.may_decide_something(&who) {
            self.end(&key).await;
            return Err(unauthenticated());
        }
        match self.doorkeeper.admit_principal(who, Door::Approvals) {
            Ok(who) => Ok(Live {
                id,
                who,
                expires_at: stored.expires_at,
            }),
            Err(e) if e.status == StatusCode::UNAUTHORIZED => {
                self.end(&key).await;
                Err(unauthenticated())
            }
            Err(e) => Err(Box::new(e.into_response())),
        }
    }

    /// Whether a principal may decide anything here: an approver, or a human at the
    /// requester door.
    fn may_decide_something(&self, who: &Authenticated) -> bool {
        who.has_role(&self.options.approver_role) || who.requester_door
    }

    /// End a session (best effort: a store failure leaves it to expire).
    async fn end(&self, key: &str) {
        if let Err(e) = self.sessions.close(key).await {
            tracing::warn!(target: LOG, error = %e, "a console session could not be ended");
        }
    }

    fn view(&self, live: &Live) -> SessionView {
        SessionView {
            actor: live.who.principal.actor.reference(),
            namespace: live.who.principal.namespace.clone(),
            roles: live.who.roles.clone(),
            approver: live.who.has_role(&self.options.approver_role),
            csrf_token: csrf_of(&live.id),
            expires_at: live.expires_at,
        }
    }
}

fn store_failed(e: &SessionStoreError) -> Reject {
    tracing::error!(target: LOG, error = %e, "console session store failed");
    Reject::unavailable("console sessions")
}

/// Headers presenting `credential` as a bearer token (`None`: it is no header value).
fn bearer_headers(credential: &str) -> Option<HeaderMap> {
    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(&format!("Bearer {credential}")).ok()?;
    headers.insert(header::AUTHORIZATION, value);
    Some(headers)
}

/// Whether the request carries the CSRF token of session `id` (compared in constant time).
fn csrf_ok(headers: &HeaderMap, id: &str) -> bool {
    let Some(sent) = headers.get(CSRF_HEADER) else {
        return false;
    };
    let a = Sha256::digest(sent.as_bytes());
    let b = Sha256::digest(csrf_of(id).as_bytes());
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

fn random_hex() -> Result<String, Reject> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| {
        tracing::error!(target: LOG, error = %e, "no randomness for a console session");
        Reject::internal()
    })?;
    Ok(hex::encode(bytes))
}

async fn sign_in(State(c): St, request: Request<Body>) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_SIGN_IN_BODY_BYTES).await {
        Ok(b) => b,
        Err(_) => return Reject::too_large(Some(MAX_SIGN_IN_BODY_BYTES)).into_response(),
    };
    match sign_in_inner(&c, &parts, &body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn sign_in_inner(
    c: &Console,
    parts: &axum::http::request::Parts,
    body: &[u8],
) -> Result<Response, Reject> {
    let headers = &parts.headers;
    same_origin(headers)?;
    let client = c.doorkeeper.client(&parts.extensions, headers);
    if let (Some(t), Some(ip)) = (&c.per_address, client)
        && let Err(secs) = t.charge(&ip.to_string())
    {
        tracing::info!(target: LOG, client = %ip, "console sign-in throttled for this address");
        return Err(Reject::too_many_requests(secs));
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
        });
    if !json {
        return Err(Reject::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "BAD_REQUEST",
            "Sign in with a JSON body ({\"credential\": \"…\"}) and Content-Type: application/json.",
        ));
    }
    let SignIn { credential } = serde_json::from_slice(body)
        .map_err(|e| Reject::bad_request(format!("Invalid sign-in request: {e}.")))?;
    let credential = credential.trim().to_owned();
    if credential.is_empty() {
        return Err(Reject::bad_request("Paste an API key or a JWT to sign in."));
    }
    if credential.len() > MAX_CREDENTIAL_BYTES
        || credential
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    {
        return Err(Reject::unauthenticated());
    }
    let auth = bearer_headers(&credential).ok_or_else(Reject::unauthenticated)?;
    let who = c.doorkeeper.admit(&auth, client, Door::Approvals).await?;
    if !c.may_decide_something(&who) {
        tracing::info!(target: LOG, actor = %who.principal.actor.id, "console sign-in refused: the credential can decide nothing (an agent's key?)");
        return Err(forbidden(
            "This credential cannot decide approvals: it opens model doors (an agent's key) and holds no approver role. Sign in with your own console credential.",
        ));
    }
    let principal = principal_key(&who.principal);
    if let Some(t) = &c.per_principal
        && let Err(secs) = t.charge(&principal)
    {
        tracing::info!(target: LOG, actor = %who.principal.actor.id, "console sign-in throttled for this principal");
        return Err(Reject::too_many_requests(secs));
    }
    let now = c.doorkeeper.clock.now();
    let ttl =
        chrono::Duration::from_std(c.options.session_ttl).unwrap_or(chrono::Duration::hours(8));
    let expires_at = who.expires_at.map_or(now + ttl, |e| e.min(now + ttl));
    let id = random_hex()?;
    let stored_credential = match &who.credential {
        Credential::ApiKey { sha256 } => SessionCredential::ApiKey {
            sha256: sha256.clone(),
        },
        Credential::Token => SessionCredential::Principal {
            actor: who.principal.actor.clone(),
            namespace: who.principal.namespace.clone(),
            roles: who.roles.clone(),
            requester_door: who.requester_door,
            context: who.context.clone(),
        },
    };
    c.sessions
        .open(
            StoredSession {
                id_sha256: digest(&id),
                principal,
                credential: stored_credential,
                created_at: now,
                expires_at,
            },
            c.options.max_sessions_per_principal,
            now,
        )
        .await
        .map_err(|e| store_failed(&e))?;
    let live = Live {
        id,
        who,
        expires_at,
    };
    let view = c.view(&live);
    tracing::info!(target: LOG, actor = %view.actor.id, namespace = %view.namespace, "console session opened");
    let max_age = (expires_at - now).to_std().unwrap_or(Duration::ZERO);
    let mut response = Json(view).into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, c.cookie(headers, &live.id, max_age));
    Ok(response)
}

async fn current(State(c): St, headers: HeaderMap) -> Response {
    if let Err(e) = same_origin(&headers) {
        return e.into_response();
    }
    match c.session(&headers).await {
        Ok(live) => Json(c.view(&live)).into_response(),
        Err(r) => *r,
    }
}

async fn sign_out(State(c): St, headers: HeaderMap) -> Response {
    if let Err(e) = same_origin(&headers) {
        return e.into_response();
    }
    let Some(id) = session_id(&headers) else {
        return cleared(&c, &headers);
    };
    if !csrf_ok(&headers, &id) {
        return forbidden(
            "Missing or wrong CSRF token (send the session's csrfToken in X-CSRF-Token).",
        )
        .into_response();
    }
    if let Err(e) = c.sessions.close(&digest(&id)).await {
        return store_failed(&e).into_response();
    }
    tracing::info!(target: LOG, "console session closed");
    cleared(&c, &headers)
}

fn cleared(c: &Console, headers: &HeaderMap) -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, c.cleared_cookie(headers));
    r
}

/// The tower layer in front of the approvals API under `P/api`: the session's principal,
/// re-admitted, is the caller; state-changing requests must carry its CSRF token; any
/// bearer header of the request itself is dropped.
async fn session_to_principal(State(c): St, mut request: Request<Body>, next: Next) -> Response {
    let headers = request.headers();
    if let Err(e) = same_origin(headers) {
        return e.into_response();
    }
    let safe = matches!(*request.method(), Method::GET | Method::HEAD);
    if !safe {
        // The CSRF token before anything is looked up: a forged request costs nothing.
        match session_id(headers) {
            Some(id) if csrf_ok(headers, &id) => {}
            Some(_) => {
                tracing::info!(target: LOG, "console request refused: CSRF token missing or wrong");
                return forbidden(
                    "Missing or wrong CSRF token (send the session's csrfToken in X-CSRF-Token).",
                )
                .into_response();
            }
            None => return c.unauthenticated(headers),
        }
    }
    let live = match c.session(headers).await {
        Ok(live) => live,
        Err(r) => return *r,
    };
    let headers = request.headers_mut();
    headers.remove(header::AUTHORIZATION);
    headers.remove(HeaderName::from_static(CSRF_HEADER));
    request.extensions_mut().insert(SessionPrincipal(live.who));
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_plain_paths() {
        assert!(check_prefix("/console").is_ok());
        assert!(check_prefix("/ops/approvals-ui").is_ok());
        for bad in [
            "",
            "/",
            "console",
            "/console/",
            "/a//b",
            "/a b",
            "/<x>",
            "/\"q",
        ] {
            assert!(check_prefix(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_page_names_its_prefix_and_has_no_inline_script() {
        assert!(INDEX_HTML.contains(PREFIX_PLACEHOLDER));
        let lower = INDEX_HTML.to_ascii_lowercase();
        // Every <script> has a src (CSP: script-src 'self', nothing inline).
        for (i, _) in lower.match_indices("<script") {
            let tag_end = lower[i..].find('>').map_or(lower.len(), |e| i + e);
            assert!(
                lower[i..tag_end].contains("src="),
                "inline script in index.html"
            );
        }
        assert!(!lower.contains("<style"), "inline style in index.html");
        assert!(!lower.contains(" style="), "style attribute in index.html");
        // No event-handler attributes (` onclick=`, ` onload=`, …).
        let handler = lower.match_indices(" on").any(|(i, _)| {
            let rest = &lower[i + 3..];
            let name_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            name_len > 0 && rest[name_len..].trim_start().starts_with('=')
        });
        assert!(!handler, "event handler attribute in index.html");
        assert!(!CONSOLE_JS.contains("innerHTML"), "innerHTML in console.js");
        assert!(!CONSOLE_JS.contains("eval("), "eval in console.js");
    }

    #[test]
    fn the_session_cookie_is_read_only_when_well_formed() {
        let mut h = HeaderMap::new();
        let id = "ab".repeat(32);
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("other=1; {COOKIE}={id}"))
                .unwrap_or(HeaderValue::from_static("")),
        );
        assert_eq!(session_id(&h), Some(id));
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("capgate_console=short"),
        );
        assert_eq!(session_id(&h), None);
    }

    #[test]
    fn cross_origin_requests_are_refused() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert!(same_origin(&h).is_ok());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert!(same_origin(&h).is_ok());
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(same_origin(&h).is_err());
        h.remove(header::ORIGIN);
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(same_origin(&h).is_err());
    }

    fn stored(id: &str, principal: &str, at: i64) -> StoredSession {
        let created = DateTime::from_timestamp(at, 0).unwrap_or_default();
        StoredSession {
            id_sha256: digest(id),
            principal: principal.into(),
            credential: SessionCredential::ApiKey {
                sha256: "ab".repeat(32),
            },
            created_at: created,
            expires_at: created + chrono::Duration::hours(1),
        }
    }

    #[tokio::test]
    async fn a_principal_keeps_its_newest_sessions_and_others_are_untouched() {
        let store = InMemorySessionStore::new(100);
        let now = DateTime::from_timestamp(1_000, 0).unwrap_or_default();
        let other = stored("other", "b", 1);
        assert!(store.open(other.clone(), 2, now).await.is_ok());
        for (i, id) in ["s1", "s2", "s3"].iter().enumerate() {
            let at = 10 + i64::try_from(i).unwrap_or(0);
            assert!(store.open(stored(id, "a", at), 2, now).await.is_ok());
        }
        let live = |id: &'static str| {
            let store = &store;
            async move { store.get(&digest(id), now).await.ok().flatten().is_some() }
        };
        assert!(!live("s1").await, "the oldest was evicted");
        assert!(live("s2").await && live("s3").await);
        assert!(live("other").await, "another principal's session stays");
        // Expired sessions read as missing.
        let later = now + chrono::Duration::hours(2);
        assert!(
            store
                .get(&digest("s3"), later)
                .await
                .ok()
                .flatten()
                .is_none()
        );
    }

    #[test]
    fn the_csrf_token_is_bound_to_its_session() {
        let a = "ab".repeat(32);
        let b = "cd".repeat(32);
        let mut h = HeaderMap::new();
        h.insert(
            CSRF_HEADER,
            HeaderValue::from_str(&csrf_of(&a)).unwrap_or(HeaderValue::from_static("")),
        );
        assert!(csrf_ok(&h, &a));
        assert!(!csrf_ok(&h, &b));
        assert_ne!(csrf_of(&a), a, "the token is not the session id");
    }

    #[test]
    fn loopback_hosts_are_recognised() {
        for (host, loopback) in [
            ("127.0.0.1:8080", true),
            ("localhost", true),
            ("[::1]:9", true),
            ("approvals.example.com", false),
            ("127.0.0.1.evil.example", false),
        ] {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_static(host));
            assert_eq!(is_loopback_host(&h), loopback, "{host}");
        }
    }
}
