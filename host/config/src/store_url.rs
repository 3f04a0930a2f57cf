//! Store URLs as the configuration takes them: what one points at ([`kind`]), so
//! `capgate check` refuses a URL capgate cannot open without opening anything, and the
//! password-free form messages show ([`redact_url`]).
//!
//! A Postgres URL takes libpq's TLS parameters: `sslmode` (one of [`SSL_MODES`]),
//! `sslrootcert` (a PEM file of the CA certificates to trust), `sslcert` and `sslkey` (a
//! client certificate). [`check_url`] refuses an unknown `sslmode`;
//! [`check_postgres_files`] checks the files, and [`resolve_postgres_files`] makes their
//! relative paths absolute, by the same rule as every other path of the file they are
//! written in.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use std::path::{Path, PathBuf};

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

/// Is this a store URL capgate can open? (Nothing is resolved or touched.) A Postgres URL's
/// `sslmode` must be one of [`SSL_MODES`], and `sslcert` and `sslkey` come together.
pub fn check_url(url: &str) -> Result<(), String> {
    if kind(url)? != Kind::Postgres {
        return Ok(());
    }
    let params = pg_params(url);
    for (name, value) in &params {
        if *name == "sslmode" && !SSL_MODES.contains(&value.to_ascii_lowercase().as_str()) {
            return Err(format!(
                "`{}`: sslmode={value} is not a TLS mode (expected one of {})",
                redact_url(url),
                SSL_MODES.join(", ")
            ));
        }
    }
    let has = |n: &str| params.iter().any(|(name, _)| *name == n);
    if has("sslcert") != has("sslkey") {
        return Err(format!(
            "`{}`: sslcert (the client certificate) and sslkey (its private key) go together",
            redact_url(url)
        ));
    }
    Ok(())
}

/// The `sslmode` values of a Postgres URL, libpq's: `disable` and `allow` never use TLS
/// (sqlx does not implement `allow`'s fallback), `prefer` (the default) uses it when the
/// server offers it, without checking the certificate; `require` insists on TLS, checking
/// the certificate against `sslrootcert` when one is given (as libpq does); `verify-ca`
/// also checks that a trusted CA signed the server's certificate, and `verify-full` also
/// that the certificate names the host connected to.
pub const SSL_MODES: &[&str] = &[
    "disable",
    "allow",
    "prefer",
    "require",
    "verify-ca",
    "verify-full",
];

/// The URL parameters that name a file, under the name libpq uses (sqlx also takes the
/// aliases of [`canonical_param`]).
pub const PG_FILE_PARAMS: &[&str] = &["sslrootcert", "sslcert", "sslkey"];

/// The largest certificate file `capgate check` reads.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// libpq's name for a TLS parameter of a Postgres URL, given it or one of sqlx's aliases;
/// `None` for any other parameter.
pub fn canonical_param(name: &str) -> Option<&'static str> {
    Some(match name {
        "sslmode" | "ssl-mode" => "sslmode",
        "sslrootcert" | "ssl-root-cert" | "ssl-ca" => "sslrootcert",
        "sslcert" | "ssl-cert" => "sslcert",
        "sslkey" | "ssl-key" => "sslkey",
        _ => return None,
    })
}

/// The TLS parameters of a Postgres URL's query, `(libpq name, decoded value)` in order.
pub fn pg_params(url: &str) -> Vec<(&'static str, String)> {
    let Some((_, query)) = url.split_once('?') else {
        return Vec::new();
    };
    form_urlencoded::parse(query.as_bytes())
        .filter_map(|(name, value)| Some((canonical_param(&name)?, value.into_owned())))
        .collect()
}

/// Is this parameter value a PEM text rather than a path? (sqlx's own rule.)
fn is_inline_pem(value: &str) -> bool {
    let t = value.trim();
    t.starts_with("-----BEGIN") && t.ends_with("-----")
}

/// `url` with each relative path of [`PG_FILE_PARAMS`] joined to `base` (the directory of
/// the configuration file that wrote it, or the current directory for a command line), so
/// the store reads the file that `capgate check` checked whatever directory it runs in.
/// Anything else in the URL is kept byte for byte; a URL that is not Postgres is returned
/// as it is.
pub fn resolve_postgres_files(url: &str, base: &Path) -> String {
    if kind(url) != Ok(Kind::Postgres) {
        return url.to_string();
    }
    let Some((head, query)) = url.split_once('?') else {
        return url.to_string();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| {
            let raw_name = pair.split_once('=').map_or(pair, |(name, _)| name);
            let Some((name, value)) = form_urlencoded::parse(pair.as_bytes()).next() else {
                return pair.to_string();
            };
            let file_param = canonical_param(&name).is_some_and(|n| PG_FILE_PARAMS.contains(&n));
            if !file_param || value.is_empty() || is_inline_pem(&value) {
                return pair.to_string();
            }
            let path = Path::new(&*value);
            if path.is_absolute() {
                return pair.to_string();
            }
            let joined = base.join(path);
            let joined = joined.to_string_lossy();
            let encoded = utf8_percent_encode(&joined, QUERY_VALUE);
            format!("{raw_name}={encoded}")
        })
        .collect();
    format!("{head}?{}", pairs.join("&"))
}

/// Check the files a Postgres URL names, relative paths joined to `base` (see
/// [`resolve_postgres_files`]): `sslrootcert` must be a readable file of PEM certificates,
/// `sslcert` too, `sslkey` a readable file. A URL that is not Postgres passes.
pub fn check_postgres_files(url: &str, base: &Path) -> Result<(), String> {
    if kind(url) != Ok(Kind::Postgres) {
        return Ok(());
    }
    for (name, value) in pg_params(url) {
        if !PG_FILE_PARAMS.contains(&name) {
            continue;
        }
        let what = match name {
            "sslrootcert" => "the CA certificates to trust",
            "sslcert" => "the client certificate",
            _ => "the client certificate's private key",
        };
        if value.is_empty() {
            return Err(format!(
                "`{}`: {name} is empty (it names {what})",
                redact_url(url)
            ));
        }
        if is_inline_pem(&value) {
            if name != "sslkey" {
                pem_certificates(value.as_bytes())
                    .map_err(|e| format!("`{}`: {name} (inline PEM): {e}", redact_url(url)))?;
            }
            continue;
        }
        let path = base.join(&value);
        let unreadable = |e: std::io::Error| {
            format!(
                "`{}`: {name} names {what}, but {} cannot be read: {e}{}",
                redact_url(url),
                path.display(),
                if Path::new(&value).is_relative() {
                    " (a relative path is relative to this file's directory)"
                } else {
                    ""
                }
            )
        };
        let meta = std::fs::metadata(&path).map_err(unreadable)?;
        if !meta.is_file() {
            return Err(format!(
                "`{}`: {name} names {what}, but {} is not a file",
                redact_url(url),
                path.display()
            ));
        }
        if name == "sslkey" {
            std::fs::File::open(&path).map_err(unreadable)?;
            continue;
        }
        if meta.len() > MAX_PEM_BYTES {
            return Err(format!(
                "`{}`: {name}: {} is larger than {MAX_PEM_BYTES} bytes; it should hold PEM certificates",
                redact_url(url),
                path.display()
            ));
        }
        let bytes = std::fs::read(&path).map_err(unreadable)?;
        pem_certificates(&bytes).map_err(|e| {
            format!(
                "`{}`: {name}: {} does not hold {what}: {e}",
                redact_url(url),
                path.display()
            )
        })?;
    }
    Ok(())
}

/// How many PEM certificates `bytes` holds, parsed as the store's TLS client parses them;
/// an error when it holds none or one does not parse.
fn pem_certificates(bytes: &[u8]) -> Result<usize, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut n = 0;
    for cert in CertificateDer::pem_slice_iter(bytes) {
        cert.map_err(|e| format!("a certificate does not parse ({e})"))?;
        n += 1;
    }
    if n == 0 {
        return Err("no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into());
    }
    Ok(n)
}

/// What a resolved path keeps unescaped in a query value: unreserved characters and `/`.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

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
