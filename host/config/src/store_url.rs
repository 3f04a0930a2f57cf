//! Store URLs as the configuration takes them: what one points at ([`kind`]), so
//! `capgate check` refuses a URL capgate cannot open without opening anything, and the
//! password-free form messages show ([`redact_url`]).

use std::path::PathBuf;

/// What a store URL points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A SQLite file, with the URL's query (`?mode=…`) if any.
    SqliteFile {
        /// The path as written (relative paths are resolved by whoever opens it).
        path: PathBuf,
        /// The URL's query, e.g. `mode=rwc`.
        query: Option<String>,
    },
    /// An in-memory SQLite database.
    SqliteMemory,
    /// A Postgres server.
    Postgres,
}

/// What `url` points at, or why it is not a store URL.
pub fn kind(url: &str) -> Result<Kind, String> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Kind::Postgres);
    }
    let Some(rest) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    else {
        return Err(format!(
            "`{}` is not a store URL (expected sqlite://FILE or postgres://USER:PASSWORD@HOST/DB)",
            redact_url(url)
        ));
    };
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q.to_string())),
        None => (rest, None),
    };
    if path == ":memory:" || query.as_deref().is_some_and(|q| q.contains("mode=memory")) {
        return Ok(Kind::SqliteMemory);
    }
    if path.is_empty() {
        return Err(format!(
            "`{url}` names no database file (e.g. sqlite://capgate.db)"
        ));
    }
    Ok(Kind::SqliteFile {
        path: PathBuf::from(path),
        query,
    })
}

/// Is this a store URL capgate can open? (Nothing is resolved or touched.)
pub fn check_url(url: &str) -> Result<(), String> {
    kind(url).map(|_| ())
}

/// A URL without its password, for messages.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{}:***{}", &url[..s + 3], user, &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}
