//! Single sign-on with the identity provider (`P/oidc/login`, `P/oidc/callback`): the
//! authorization-code flow with PKCE ([`crate::identity::oidc`]). The sign-in under way is
//! kept by the browser in an `HttpOnly`, `SameSite=Lax` cookie scoped to `P/oidc` (Lax: the
//! provider's redirect back is a cross-site navigation, which a `Strict` cookie would not
//! follow), for ten minutes; the callback must bring back its `state`. The ID token's
//! claims map to the principal as a bearer token's do, and the session then opens exactly
//! as a pasted credential's: the same doorkeeper, the same "can decide something" rule,
//! ending with the ID token's `exp` or earlier.
//!
//! A failed sign-in sends the browser back to the page with `?signInError=CODE`
//! (`denied`, `expired`, `refused`, `unavailable`), never with the provider's words.

use super::csrf::is_loopback_host;
use super::handlers::open_session;
use super::router::{Console, St};
use super::{LOG, SecureCookie};
use crate::auth::principal_of;
use crate::door::Door;
use crate::identity::oidc::{OidcClient, OidcError, PendingSignIn, constant_time_eq};
use crate::reject::Reject;
use axum::extract::{Query, Request};
use axum::http::StatusCode;
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use std::sync::Arc;

/// The cookie a sign-in under way is kept in.
pub const SIGN_ON_COOKIE: &str = "capgate_console_oidc";
/// How long a sign-in may take at the provider.
pub const SIGN_ON_SECONDS: i64 = 600;
/// Longest `code` or `state` accepted from the callback.
const MAX_PARAM_BYTES: usize = 4096;

/// The console's single sign-on: the provider's client and how ID-token claims map to
/// the principal.
#[derive(Debug, Clone)]
pub struct SignOn {
    /// The provider's client.
    pub client: Arc<OidcClient>,
    /// How the ID token's claims map to the principal.
    pub claims: crate::auth::ClaimMap,
}

/// The callback's query.
#[derive(Debug, serde::Deserialize)]
pub(super) struct Callback {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

impl Console {
    fn sign_on_cookie(&self, headers: &HeaderMap, value: &str, max_age: i64) -> HeaderValue {
        let secure = match self.options.secure_cookie {
            SecureCookie::Always => true,
            SecureCookie::Never => false,
            SecureCookie::Auto => !is_loopback_host(headers),
        };
        let c = cookie::Cookie::build((SIGN_ON_COOKIE, value.to_owned()))
            .path(format!("{}/oidc", self.options.prefix))
            .http_only(true)
            .same_site(cookie::SameSite::Lax)
            .secure(secure)
            .max_age(cookie::time::Duration::seconds(max_age))
            .build();
        // base64url and a checked path: always a valid header value.
        HeaderValue::from_str(&c.to_string()).unwrap_or(HeaderValue::from_static(""))
    }

    /// A redirect to the page, with the sign-on cookie cleared and maybe a session cookie.
    fn back_to_page(
        &self,
        headers: &HeaderMap,
        error: Option<&str>,
        session: Option<HeaderValue>,
    ) -> Response {
        let location = match error {
            None => format!("{}/", self.options.prefix),
            Some(code) => format!("{}/?signInError={code}", self.options.prefix),
        };
        let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response();
        let h = r.headers_mut();
        h.append(header::SET_COOKIE, self.sign_on_cookie(headers, "", 0));
        if let Some(s) = session {
            h.append(header::SET_COOKIE, s);
        }
        r
    }
}

fn pending_of(headers: &HeaderMap) -> Option<PendingSignIn> {
    let raw = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == SIGN_ON_COOKIE)?
        .value()
        .to_owned();
    if raw.len() > MAX_PARAM_BYTES {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(raw).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Both routes of a console without single sign-on: a 404 like any unknown page.
fn not_configured() -> Response {
    Reject::new(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        "Single sign-on is not configured.",
    )
    .into_response()
}

/// `GET P/oidc/login`: start a sign-in and send the browser to the provider.
pub(super) async fn login(axum::extract::State(c): St, request: Request) -> Response {
    let Some(sign_on) = &c.options.sign_on else {
        return not_configured();
    };
    // Starting a sign-in verifies nothing and keeps nothing on the server (the pending
    // sign-in is in the browser's cookie): it is not throttled, so nobody sharing an
    // address can keep a colleague from signing in. Refused callbacks are (`callback`).
    let (parts, _) = request.into_parts();
    let (pending, url) = match sign_on.client.start() {
        Ok(started) => started,
        Err(e) => {
            tracing::error!(target: LOG, error = %e, "single sign-on could not start");
            return Reject::internal().into_response();
        }
    };
    let Ok(value) = serde_json::to_vec(&pending).map(|v| URL_SAFE_NO_PAD.encode(v)) else {
        return Reject::internal().into_response();
    };
    let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, url)]).into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        c.sign_on_cookie(&parts.headers, &value, SIGN_ON_SECONDS),
    );
    r
}

/// `GET P/oidc/callback`: finish the sign-in, open the session, back to the page.
pub(super) async fn callback(
    axum::extract::State(c): St,
    Query(q): Query<Callback>,
    request: Request,
) -> Response {
    let Some(sign_on) = c.options.sign_on.clone() else {
        return not_configured();
    };
    let (parts, _) = request.into_parts();
    let headers = &parts.headers;
    // A refused callback spends its address's sign-in budget; past it, refusals answer
    // 429. A sign-in that succeeds is never refused for its address.
    let client = c.doorkeeper.client(&parts.extensions, headers);
    let refused = |why: &str| -> Response {
        if let (Some(t), Some(ip)) = (&c.per_address, client)
            && let Err(secs) = t.charge(&ip.to_string())
        {
            tracing::info!(target: LOG, client = %ip, "console sign-in throttled for this address");
            return Reject::too_many_requests(secs).into_response();
        }
        c.back_to_page(headers, Some(why), None)
    };
    let Some(pending) = pending_of(headers) else {
        tracing::info!(target: LOG, "single sign-on callback without a sign-in under way (expired, or another browser)");
        return refused("expired");
    };
    let state_ok = q.state.as_deref().is_some_and(|s| {
        s.len() <= MAX_PARAM_BYTES && constant_time_eq(s.as_bytes(), pending.state.as_bytes())
    });
    if !state_ok {
        tracing::info!(target: LOG, "single sign-on callback refused: state mismatch");
        return refused("expired");
    }
    if let Some(error) = &q.error {
        let error: String = error
            .chars()
            .take(64)
            .filter(|c| c.is_ascii_graphic())
            .collect();
        tracing::info!(target: LOG, error = %error, "the identity provider did not sign the user in");
        return refused("denied");
    }
    let Some(code) = q
        .code
        .as_deref()
        .filter(|c| !c.is_empty() && c.len() <= MAX_PARAM_BYTES)
    else {
        return refused("refused");
    };
    let claims = match sign_on.client.finish(&pending, code).await {
        Ok(claims) => claims,
        Err(e @ OidcError::Provider(_)) => {
            tracing::warn!(target: LOG, error = %e, "single sign-on: the identity provider is unreachable");
            return c.back_to_page(headers, Some("unavailable"), None);
        }
        Err(e) => {
            tracing::info!(target: LOG, error = %e, "single sign-on refused");
            return refused("refused");
        }
    };
    let who = match principal_of(&sign_on.claims, &claims) {
        Ok(who) => who,
        Err(e) => {
            tracing::info!(target: LOG, error = %e, "single sign-on refused: the ID token's claims do not map to a principal");
            return refused("refused");
        }
    };
    let who = match c.doorkeeper.admit_principal(who, Door::Approvals).await {
        Ok(who) => who,
        Err(e) if e.status == StatusCode::TOO_MANY_REQUESTS => return e.into_response(),
        Err(_) => return refused("refused"),
    };
    match open_session(&c, headers, who).await {
        Ok((_, session)) => c.back_to_page(headers, None, Some(session)),
        Err(e) if e.status == StatusCode::FORBIDDEN => refused("refused"),
        Err(e) => e.into_response(),
    }
}

/// The sign-in button the page shows (HTML-escaped name), or nothing.
pub(super) fn button_html(prefix: &str, sign_on: Option<&SignOn>) -> String {
    let Some(s) = sign_on else {
        return String::new();
    };
    let name: String = s
        .client
        .display_name
        .chars()
        .map(|ch| match ch {
            '&' => "&amp;".to_owned(),
            '<' => "&lt;".to_owned(),
            '>' => "&gt;".to_owned(),
            '"' => "&quot;".to_owned(),
            '\'' => "&#39;".to_owned(),
            other => other.to_string(),
        })
        .collect();
    format!(
        "<p class=\"signin-sso\"><a class=\"button button-primary\" data-testid=\"signin-oidc\" href=\"{prefix}/oidc/login\">Sign in with {name}</a></p>\n      <p class=\"signin-or\">or paste a key or token:</p>"
    )
}
