//! How the console is served: its prefix, session bounds, cookie and sign-in throttles.

use crate::approvals_api::APPROVER_ROLE;
use crate::throttle::PerMinute;
use std::time::Duration;

/// The session cookie's name over plain HTTP (a loopback host, or `secureCookie = false`).
pub const COOKIE: &str = "capgate_console";
/// The session cookie's name whenever it is `Secure`: the `__Host-` prefix makes browsers
/// accept it only from this origin over HTTPS with `Path=/` and no `Domain`, so a
/// neighbouring subdomain or a plain-HTTP page cannot plant (or overwrite) a session
/// cookie here. Only this name is read on a secure console.
pub const SECURE_COOKIE: &str = "__Host-capgate_console";
/// The header state-changing requests carry the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// Default session lifetime.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// Default bound on live sessions of an [`InMemorySessionStore`](super::InMemorySessionStore).
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;
pub use capgate_core::defaults::console::{
    DEFAULT_MAX_SESSIONS_PER_PRINCIPAL, DEFAULT_SIGN_IN_PER_ADDRESS, DEFAULT_SIGN_IN_PER_PRINCIPAL,
};
/// Largest sign-in body (a JWT with many claims fits).
pub const MAX_SIGN_IN_BODY_BYTES: usize = 16 * 1024;
/// Longest credential accepted at sign-in.
pub const MAX_CREDENTIAL_BYTES: usize = 8 * 1024;

/// The Content-Security-Policy of every console response: nothing inline, nothing from
/// elsewhere, no frames, no plugins, no `<base>`.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

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
    /// The most live sessions [`console_router`](super::console_router)'s own in-memory store keeps; sign-in is
    /// refused (`503`) beyond it.
    pub max_sessions: usize,
    /// The most live sessions one principal keeps; a new sign-in evicts its oldest.
    pub max_sessions_per_principal: u32,
    /// Sign-ins per principal (`None`: not throttled).
    pub sign_in_per_principal: Option<PerMinute>,
    /// Refused sign-ins per client address (`None`: not throttled); a valid sign-in is never
    /// refused by it.
    pub sign_in_per_address: Option<PerMinute>,
    /// The role an approver holds (the approvals API's).
    pub approver_role: String,
    /// Single sign-on with the identity provider (`None`: paste a key or token only).
    pub sign_on: Option<super::SignOn>,
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
            approver_role: APPROVER_ROLE.into(),
            sign_on: None,
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
