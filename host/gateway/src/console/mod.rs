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
//! | `GET P/oidc/login`, `P/oidc/callback` | single sign-on with the identity provider ([`SignOn`]) |
//! | `P/api/approvals…` | the human approvals API ([`crate::approvals_api`]), authenticated by the session |
//!
//! **One principal, one door.** Signing in runs the credential (an API key or a JWT, the
//! same ones the approvals API accepts as a bearer token) through the same [`Doorkeeper`](crate::door::Doorkeeper)
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
//! own oldest), and sign-in is throttled per principal
//! ([`ConsoleOptions::sign_in_per_principal`], every sign-in) and per client address
//! ([`ConsoleOptions::sign_in_per_address`], refused sign-ins only: a valid one is never
//! refused for what others did from its address), `429` with `Retry-After`. The throttles are this process's and start afresh at a
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
//!
//! The shape of every door: `options` ([`ConsoleOptions`]), `router` ([`console_router`]),
//! `handlers` (one function per route), plus `store` (where sessions live), `session` (a
//! live session and its cookie), `csrf` (the origin check and the CSRF token) and `page`
//! (the embedded files in `assets/`).

mod csrf;
mod handlers;
mod options;
mod page;
mod router;
mod session;
mod sign_on;
mod store;

pub use options::{
    CONTENT_SECURITY_POLICY, COOKIE, CSRF_HEADER, ConsoleError, ConsoleOptions,
    DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SESSIONS_PER_PRINCIPAL, DEFAULT_SESSION_TTL,
    DEFAULT_SIGN_IN_PER_ADDRESS, DEFAULT_SIGN_IN_PER_PRINCIPAL, MAX_CREDENTIAL_BYTES,
    MAX_SIGN_IN_BODY_BYTES, SECURE_COOKIE, SecureCookie, check_prefix,
};
pub use router::{console_router, console_router_with};
pub use session::SessionView;
pub use sign_on::{SIGN_ON_COOKIE, SignOn};
pub use store::{
    ConsoleSessions, InMemorySessionStore, SessionCredential, SessionStore, SessionStoreError,
    StoredSession, principal_key,
};

const LOG: &str = "capgate::console";

#[cfg(test)]
mod tests {
    use super::csrf::{csrf_of, csrf_ok, is_loopback_host, same_origin, session_id};
    use super::page::{CONSOLE_JS, INDEX_HTML, PREFIX_PLACEHOLDER};
    use super::session::digest;
    use super::*;
    use axum::http::header::{self, HeaderMap, HeaderValue};
    use chrono::DateTime;

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
        assert_eq!(session_id(&h, COOKIE), Some(id.clone()));
        assert_eq!(
            session_id(&h, SECURE_COOKIE),
            None,
            "the plain name on a secure console"
        );
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("capgate_console=short"),
        );
        assert_eq!(session_id(&h, COOKIE), None);
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
            namespace: "org_1".into(),
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

    #[test]
    fn a_namespace_at_its_storage_budget_is_told_507_and_a_broken_store_503() {
        let full = super::session::store_failed(&SessionStoreError::QuotaExceeded {
            namespace: "org_2".into(),
            limit: "rows",
        });
        assert_eq!(
            (full.status.as_u16(), full.code),
            (507, "STORAGE_QUOTA_EXCEEDED")
        );
        assert!(!full.message.contains("org_2"), "{}", full.message);
        let down = super::session::store_failed(&SessionStoreError::Unavailable("disk".into()));
        assert_eq!(down.status.as_u16(), 503);
        assert!(!down.message.contains("disk"), "{}", down.message);
    }
}
