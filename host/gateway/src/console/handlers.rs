//! One function per console route: the page and its assets, sign-in, the current session,
//! sign-out.

use super::csrf::{csrf_ok, forbidden, same_origin, session_id};
use super::page::{CONSOLE_CSS, CONSOLE_JS};
use super::router::{Console, St};
use super::session::{Live, digest, store_failed};
use super::{
    LOG, MAX_CREDENTIAL_BYTES, MAX_SIGN_IN_BODY_BYTES, SessionCredential, StoredSession,
    principal_key,
};
use crate::auth::Credential;
use crate::door::Door;
use crate::reject::Reject;
use axum::Json;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::time::Duration;

/// The sign-in body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SignIn {
    credential: String,
}

pub(super) async fn unknown() -> Reject {
    Reject::new(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        "No such console page or resource.",
    )
}

pub(super) async fn index(State(c): St) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        c.index.clone(),
    )
        .into_response()
}

pub(super) async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        CONSOLE_JS,
    )
        .into_response()
}

pub(super) async fn stylesheet() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        CONSOLE_CSS,
    )
        .into_response()
}

/// Headers presenting `credential` as a bearer token (`None`: it is no header value).
pub(super) fn bearer_headers(credential: &str) -> Option<HeaderMap> {
    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(&format!("Bearer {credential}")).ok()?;
    headers.insert(header::AUTHORIZATION, value);
    Some(headers)
}

pub(super) fn random_hex() -> Result<String, Reject> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| {
        tracing::error!(target: LOG, error = %e, "no randomness for a console session");
        Reject::internal()
    })?;
    Ok(hex::encode(bytes))
}

pub(super) async fn sign_in(State(c): St, request: Request<Body>) -> Response {
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

pub(super) async fn sign_in_inner(
    c: &Console,
    parts: &axum::http::request::Parts,
    body: &[u8],
) -> Result<Response, Reject> {
    let headers = &parts.headers;
    same_origin(headers)?;
    let client = c.doorkeeper.client(&parts.extensions, headers);
    // The credential is checked first: a valid sign-in is never refused for what others
    // did from its address (only the principal's own throttle applies to it). A refused
    // sign-in spends the address's budget; past it, refusals answer 429.
    sign_in_checked(c, parts, body, client)
        .await
        .map_err(|refused| match (&c.per_address, client) {
            (Some(t), Some(ip)) if refused.status != StatusCode::TOO_MANY_REQUESTS => {
                match t.charge(&ip.to_string()) {
                    Ok(()) => refused,
                    Err(secs) => {
                        tracing::info!(target: LOG, client = %ip, "console sign-in throttled for this address");
                        Reject::too_many_requests(secs)
                    }
                }
            }
            _ => refused,
        })
}

async fn sign_in_checked(
    c: &Console,
    parts: &axum::http::request::Parts,
    body: &[u8],
    client: Option<std::net::IpAddr>,
) -> Result<Response, Reject> {
    let headers = &parts.headers;
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
    let (live, cookie) = open_session(c, headers, who).await?;
    let mut response = Json(c.view(&live)).into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    Ok(response)
}

/// Open a session for an admitted principal (a pasted credential's, or the identity
/// provider's ID token's): refused unless it can decide something, throttled per
/// principal, ending with the credential or the session lifetime, whichever is first. The
/// live session and its cookie.
pub(super) async fn open_session(
    c: &Console,
    headers: &HeaderMap,
    who: crate::auth::Authenticated,
) -> Result<(Live, HeaderValue), Reject> {
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
                namespace: who.principal.namespace.clone(),
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
    tracing::info!(target: LOG, actor = %live.who.principal.actor.id, namespace = %live.who.principal.namespace, "console session opened");
    let max_age = (expires_at - now).to_std().unwrap_or(Duration::ZERO);
    let cookie = c.cookie(headers, &live.id, max_age);
    Ok((live, cookie))
}

pub(super) async fn current(State(c): St, headers: HeaderMap) -> Response {
    if let Err(e) = same_origin(&headers) {
        return e.into_response();
    }
    match c.session(&headers).await {
        Ok(live) => Json(c.view(&live)).into_response(),
        Err(r) => *r,
    }
}

pub(super) async fn sign_out(State(c): St, headers: HeaderMap) -> Response {
    if let Err(e) = same_origin(&headers) {
        return e.into_response();
    }
    let Some(id) = session_id(&headers, c.cookie_name(&headers)) else {
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

pub(super) fn cleared(c: &Console, headers: &HeaderMap) -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    r.headers_mut()
        .insert(header::SET_COOKIE, c.cleared_cookie(headers));
    r
}
