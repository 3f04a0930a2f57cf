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
//! as every other door. The session keeps the credential server-side and every `P/api`
//! request presents it again as a bearer token to the approvals API itself, so a revoked
//! key or an expired JWT ends the session at once, and the role check, the namespace scope,
//! the requester door, the authorizer and the rate limits are exactly the API's. A bearer
//! header sent to `P/api` is dropped: there, only a session counts.
//!
//! **The session** is a random 256-bit id in an `HttpOnly`, `SameSite=Strict` cookie scoped
//! to `P` (`Secure` unless the page is reached on a loopback host, or as configured), with
//! an absolute expiry no later than the credential's own. Sessions live in this process's
//! memory, bounded ([`ConsoleOptions::max_sessions`]): a restart signs everyone out, and
//! behind a load balancer with several replicas the console needs session affinity.
//!
//! **CSRF.** Every state-changing request (`POST`/`DELETE` under `P/api`, and sign-out)
//! carries the session's token in `X-CSRF-Token`; a request from another origin (`Origin`
//! that is not this host, or `Sec-Fetch-Site: cross-site`) is refused before anything
//! else, sign-in included. Sign-in also needs `Content-Type: application/json`, which no
//! HTML form can send.
//!
//! **The page** is three static files (no framework, no build step, no CDN) under a strict
//! Content-Security-Policy: scripts and styles only from the console itself, nothing inline,
//! no `eval`, no frames. It renders every value a model or requester wrote with
//! `textContent`, never as HTML.

use crate::door::{Door, Doorkeeper};
use crate::reject::{Reject, json_refusals};
use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use capgate_core::actor::ActorRef;
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
/// Default bound on live sessions.
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;
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
    /// The most live sessions kept; sign-in is refused (`503`) beyond it.
    pub max_sessions: usize,
    /// The role an approver holds (the approvals API's).
    pub approver_role: String,
}

impl Default for ConsoleOptions {
    fn default() -> Self {
        ConsoleOptions {
            prefix: "/console".into(),
            session_ttl: DEFAULT_SESSION_TTL,
            secure_cookie: SecureCookie::Auto,
            max_sessions: DEFAULT_MAX_SESSIONS,
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

struct Session {
    credential: String,
    csrf: String,
    view: SessionView,
}

/// The console's live sessions, as a handle that outlives one router: `capgate serve`
/// keeps it across configuration reloads so that a reload signs nobody out (each request
/// still re-admits the session's credential through the current doorkeeper, so a key the
/// new configuration removed ends its sessions).
#[derive(Clone)]
pub struct ConsoleSessions(Arc<Sessions>);

impl ConsoleSessions {
    /// An empty set of at most `max` live sessions.
    pub fn new(max: usize) -> Self {
        ConsoleSessions(Arc::new(Sessions {
            by_digest: Mutex::new(HashMap::new()),
            max,
        }))
    }
}

impl std::fmt::Debug for ConsoleSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleSessions")
            .field("max", &self.0.max)
            .finish_non_exhaustive()
    }
}

/// Live sessions, keyed by the SHA-256 of their id (the id itself is only in the cookie).
struct Sessions {
    by_digest: Mutex<HashMap<[u8; 32], Arc<Session>>>,
    max: usize,
}

impl Sessions {
    fn digest(id: &str) -> [u8; 32] {
        Sha256::digest(id.as_bytes()).into()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Arc<Session>>> {
        // A panic while holding the lock leaves a map that is still consistent (every
        // operation is a single insert/remove/retain): keep serving.
        self.by_digest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn insert(&self, id: &str, session: Session, now: DateTime<Utc>) -> Result<(), Reject> {
        let mut map = self.lock();
        if map.len() >= self.max {
            map.retain(|_, s| s.view.expires_at > now);
        }
        if map.len() >= self.max {
            tracing::warn!(target: LOG, max = self.max, "console sign-in refused: too many live sessions");
            return Err(Reject::unavailable("console sessions"));
        }
        map.insert(Self::digest(id), Arc::new(session));
        Ok(())
    }

    fn get(&self, id: &str, now: DateTime<Utc>) -> Option<Arc<Session>> {
        let digest = Self::digest(id);
        let mut map = self.lock();
        match map.get(&digest) {
            Some(s) if s.view.expires_at > now => Some(s.clone()),
            Some(_) => {
                map.remove(&digest);
                None
            }
            None => None,
        }
    }

    fn remove(&self, id: &str) {
        self.lock().remove(&Self::digest(id));
    }
}

struct Console {
    doorkeeper: Doorkeeper,
    options: ConsoleOptions,
    sessions: Arc<Sessions>,
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
    let sessions = ConsoleSessions::new(options.max_sessions);
    console_router_with(approvals, doorkeeper, options, sessions)
}

/// [`console_router`] over sessions that outlive it (its `max_sessions` is then the
/// handle's own bound).
pub fn console_router_with(
    approvals: Router,
    doorkeeper: Doorkeeper,
    options: ConsoleOptions,
    sessions: ConsoleSessions,
) -> Result<Router, ConsoleError> {
    check_prefix(&options.prefix)?;
    if options.session_ttl.is_zero() || options.max_sessions == 0 || sessions.0.max == 0 {
        return Err(ConsoleError::Bounds);
    }
    let prefix = options.prefix.clone();
    let console = Arc::new(Console {
        index: INDEX_HTML.replace(PREFIX_PLACEHOLDER, &prefix),
        sessions: sessions.0,
        doorkeeper,
        options,
    });
    let api = approvals.layer(axum::middleware::from_fn_with_state(
        console.clone(),
        session_to_bearer,
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

    /// The live, unexpired session a request's cookie names.
    fn lookup(&self, headers: &HeaderMap) -> Option<(String, Arc<Session>)> {
        let now = self.doorkeeper.clock.now();
        session_id(headers).and_then(|id| self.sessions.get(&id, now).map(|s| (id, s)))
    }

    /// The live session of a request, re-admitted through the doorkeeper (a revoked
    /// credential ends it). `Err` is the response to send instead.
    async fn session(&self, headers: &HeaderMap) -> Result<(String, Arc<Session>), Box<Response>> {
        let unauthenticated = || Box::new(self.unauthenticated(headers));
        let (id, session) = self.lookup(headers).ok_or_else(unauthenticated)?;
        let auth = bearer_headers(&session.credential).ok_or_else(unauthenticated)?;
        if let Err(e) = self.doorkeeper.admit(&auth, Door::Approvals).await {
            if e.status == StatusCode::UNAUTHORIZED {
                self.sessions.remove(&id);
                return Err(unauthenticated());
            }
            return Err(Box::new(e.into_response()));
        }
        Ok((id, session))
    }
}

/// Headers presenting `credential` as a bearer token (`None`: it is no header value).
fn bearer_headers(credential: &str) -> Option<HeaderMap> {
    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(&format!("Bearer {credential}")).ok()?;
    headers.insert(header::AUTHORIZATION, value);
    Some(headers)
}

/// Whether the request carries the session's CSRF token (compared in constant time).
fn csrf_ok(headers: &HeaderMap, session: &Session) -> bool {
    let Some(sent) = headers.get(CSRF_HEADER) else {
        return false;
    };
    let a = Sha256::digest(sent.as_bytes());
    let b = Sha256::digest(session.csrf.as_bytes());
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

async fn sign_in(State(c): St, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    match sign_in_inner(&c, &headers, &body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn sign_in_inner(c: &Console, headers: &HeaderMap, body: &[u8]) -> Result<Response, Reject> {
    same_origin(headers)?;
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
    let who = c.doorkeeper.admit(&auth, Door::Approvals).await?;
    let now = c.doorkeeper.clock.now();
    let ttl =
        chrono::Duration::from_std(c.options.session_ttl).unwrap_or(chrono::Duration::hours(8));
    let expires_at = who.expires_at.map_or(now + ttl, |e| e.min(now + ttl));
    let id = random_hex()?;
    let csrf = random_hex()?;
    let view = SessionView {
        actor: who.principal.actor.reference(),
        namespace: who.principal.namespace.clone(),
        roles: who.roles.clone(),
        approver: who.has_role(&c.options.approver_role),
        csrf_token: csrf.clone(),
        expires_at,
    };
    c.sessions.insert(
        &id,
        Session {
            credential,
            csrf,
            view: view.clone(),
        },
        now,
    )?;
    tracing::info!(target: LOG, actor = %view.actor.id, namespace = %view.namespace, "console session opened");
    let max_age = (expires_at - now).to_std().unwrap_or(Duration::ZERO);
    let mut response = Json(view).into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, c.cookie(headers, &id, max_age));
    Ok(response)
}

async fn current(State(c): St, headers: HeaderMap) -> Response {
    if let Err(e) = same_origin(&headers) {
        return e.into_response();
    }
    match c.session(&headers).await {
        Ok((_, s)) => Json(s.view.clone()).into_response(),
        Err(r) => *r,
    }
}

async fn sign_out(State(c): St, headers: HeaderMap) -> Response {
    if let Err(e) = same_origin(&headers) {
        return e.into_response();
    }
    let now = c.doorkeeper.clock.now();
    let Some(id) = session_id(&headers) else {
        return cleared(&c, &headers);
    };
    let Some(session) = c.sessions.get(&id, now) else {
        return cleared(&c, &headers);
    };
    if !csrf_ok(&headers, &session) {
        return forbidden(
            "Missing or wrong CSRF token (send the session's csrfToken in X-CSRF-Token).",
        )
        .into_response();
    }
    c.sessions.remove(&id);
    tracing::info!(target: LOG, actor = %session.view.actor.id, "console session closed");
    cleared(&c, &headers)
}

fn cleared(c: &Console, headers: &HeaderMap) -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, c.cleared_cookie(headers));
    r
}

/// The tower layer in front of the approvals API under `P/api`: the session becomes the
/// bearer credential it was opened with; state-changing requests must carry its CSRF
/// token; any bearer header of the request itself is dropped.
async fn session_to_bearer(State(c): St, mut request: Request<Body>, next: Next) -> Response {
    let headers = request.headers();
    if let Err(e) = same_origin(headers) {
        return e.into_response();
    }
    // The approvals API admits the credential itself (authentication, quotas): here only
    // the session is looked up, and a 401 from the API ends it.
    let Some((id, session)) = c.lookup(headers) else {
        return c.unauthenticated(headers);
    };
    let original = headers.clone();
    let safe = matches!(*request.method(), Method::GET | Method::HEAD);
    if !safe && !csrf_ok(headers, &session) {
        tracing::info!(target: LOG, actor = %session.view.actor.id, "console request refused: CSRF token missing or wrong");
        return forbidden(
            "Missing or wrong CSRF token (send the session's csrfToken in X-CSRF-Token).",
        )
        .into_response();
    }
    let value = match HeaderValue::from_str(&format!("Bearer {}", session.credential)) {
        Ok(v) => v,
        Err(_) => return Reject::unauthenticated().into_response(),
    };
    let headers = request.headers_mut();
    headers.remove(header::AUTHORIZATION);
    headers.remove(HeaderName::from_static(CSRF_HEADER));
    headers.insert(header::AUTHORIZATION, value);
    let response = next.run(request).await;
    if response.status() == StatusCode::UNAUTHORIZED {
        // The credential was revoked or has expired: so has the session.
        c.sessions.remove(&id);
        return c.unauthenticated(&original);
    }
    response
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
