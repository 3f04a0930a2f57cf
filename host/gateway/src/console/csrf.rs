//! What stops another site from acting with a signed-in human's cookie: the origin check,
//! the CSRF token derived from the session id, and reading the cookie itself.

use super::CSRF_HEADER;
use crate::reject::Reject;
use axum::http::header::{self, HeaderMap};
use sha2::{Digest, Sha256};

/// The CSRF token of a session: derived from its id, so it is never stored and only the
/// cookie's holder can compute it.
pub(super) fn csrf_of(id: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"capgate-console-csrf\0");
    h.update(id.as_bytes());
    hex::encode(h.finalize())
}

/// A `403` whose reason the page shows.
pub(super) fn forbidden(message: &str) -> Reject {
    Reject::forbidden_because(message)
}

/// Refuse a request that says it comes from another site: an `Origin` that is not this
/// host, or `Sec-Fetch-Site: cross-site`. Requests that say neither (curl, old browsers)
/// pass; for them the cookie's `SameSite=Strict` and the CSRF token remain.
pub(super) fn same_origin(headers: &HeaderMap) -> Result<(), Reject> {
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

/// The session id from the `Cookie` headers' cookie `name` (the console's
/// [`super::Console::cookie_name`] for the request), if any.
pub(super) fn session_id(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == name)
        .map(|c| c.value().to_owned())
        .filter(|v| capgate_core::digest::Sha256Hex::is_valid(&v.to_ascii_lowercase()))
}

pub(super) fn is_loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    matches!(name, "localhost" | "127.0.0.1" | "[::1]")
}

/// Whether the request carries the CSRF token of session `id` (compared in constant time).
pub(super) fn csrf_ok(headers: &HeaderMap, id: &str) -> bool {
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
