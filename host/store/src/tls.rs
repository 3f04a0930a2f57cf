//! TLS to Postgres: the URL's `sslmode` and `sslrootcert` as the store applies them, and a
//! failed handshake told apart from every other connect error ([`StoreError::Tls`]).
//!
//! The TLS client is rustls (through sqlx, on the aws-lc-rs provider the rest of capgate
//! uses). Under `verify-ca` and `verify-full` it trusts the Mozilla root set built into
//! the binary (webpki-roots) plus the certificates of `sslrootcert`, when given.

use crate::db::StoreError;
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use std::fmt;

/// Why the TLS handshake with a Postgres server failed, for [`StoreError::Tls`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The server's certificate is not signed by a CA the store trusts (`verify-ca`,
    /// `verify-full`).
    UntrustedCertificate,
    /// The certificate does not name the host the URL connects to (`verify-full`).
    HostNameMismatch,
    /// The certificate has expired or is not valid yet.
    CertificateNotCurrent,
    /// The server does not offer TLS and `sslmode` requires it.
    NotOffered,
    /// Any other failure of the handshake or of the TLS settings; the source says which.
    Other,
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsFailure::UntrustedCertificate => {
                "the server's certificate is not signed by a trusted CA"
            }
            TlsFailure::HostNameMismatch => {
                "the server's certificate does not name the host connected to"
            }
            TlsFailure::CertificateNotCurrent => {
                "the server's certificate has expired or is not valid yet"
            }
            TlsFailure::NotOffered => "the server does not offer TLS",
            TlsFailure::Other => "the handshake failed",
        })
    }
}

/// The TLS settings of one Postgres URL, kept for the message of a failed handshake.
#[derive(Debug, Clone)]
pub(crate) struct PgTls {
    /// `host:port`.
    server: String,
    mode: PgSslMode,
    /// The CA file (or `PGSSLROOTCERT`), when one is given.
    root_cert: Option<String>,
}

impl PgTls {
    /// Apply libpq's rule sqlx leaves out: `sslmode=require` with a CA file is `verify-ca`
    /// (the certificate is checked against the CA), so naming a CA is never ignored.
    pub(crate) fn apply(url: &str, connect: PgConnectOptions) -> (PgConnectOptions, PgTls) {
        let root_cert = url_param(url, &["sslrootcert", "ssl-root-cert", "ssl-ca"])
            .or_else(|| std::env::var("PGSSLROOTCERT").ok())
            .filter(|v| !v.is_empty());
        let connect = if matches!(connect.get_ssl_mode(), PgSslMode::Require) && root_cert.is_some()
        {
            connect.ssl_mode(PgSslMode::VerifyCa)
        } else {
            connect
        };
        let tls = PgTls {
            server: format!("{}:{}", connect.get_host(), connect.get_port()),
            mode: connect.get_ssl_mode(),
            root_cert,
        };
        (connect, tls)
    }

    /// `error` as [`StoreError::Tls`] when it is a TLS failure, else
    /// [`StoreError::Connect`].
    pub(crate) fn connect_error(&self, error: sqlx::Error) -> StoreError {
        let Some(failure) = tls_failure(&error) else {
            return StoreError::Connect(error);
        };
        StoreError::Tls {
            server: self.server.clone(),
            sslmode: mode_name(self.mode).to_string(),
            trust: self.trust(),
            failure,
            source: error,
        }
    }

    /// What the certificate was checked against, in words.
    fn trust(&self) -> String {
        let verifies = matches!(self.mode, PgSslMode::VerifyCa | PgSslMode::VerifyFull);
        match (&self.root_cert, verifies) {
            (_, false) => "the certificate is not checked in this mode".to_string(),
            (Some(file), true) if is_inline_pem(file) => {
                "trusted: the PEM of sslrootcert and the built-in WebPKI roots".to_string()
            }
            (Some(file), true) => {
                format!("trusted: the CA file {file} (sslrootcert) and the built-in WebPKI roots")
            }
            (None, true) => "trusted: the built-in WebPKI roots only; set sslrootcert to the \
                             CA file of a private CA"
                .to_string(),
        }
    }
}

/// The libpq name of a mode.
fn mode_name(mode: PgSslMode) -> &'static str {
    match mode {
        PgSslMode::Disable => "disable",
        PgSslMode::Allow => "allow",
        PgSslMode::Prefer => "prefer",
        PgSslMode::Require => "require",
        PgSslMode::VerifyCa => "verify-ca",
        PgSslMode::VerifyFull => "verify-full",
    }
}

/// Which TLS failure `error` is, or `None` when it is not one. rustls reports a refused
/// certificate as an I/O error wrapping its own error; sqlx reports its TLS settings and a
/// server without TLS as [`sqlx::Error::Tls`].
fn tls_failure(error: &sqlx::Error) -> Option<TlsFailure> {
    match error {
        sqlx::Error::Tls(inner) => Some(match inner.downcast_ref::<rustls::Error>() {
            Some(e) => rustls_failure(e),
            None if inner.to_string().contains("does not support TLS") => TlsFailure::NotOffered,
            None => TlsFailure::Other,
        }),
        sqlx::Error::Io(io) => {
            let e = io.get_ref()?.downcast_ref::<rustls::Error>()?;
            Some(rustls_failure(e))
        }
        _ => None,
    }
}

/// Which failure a rustls error is.
fn rustls_failure(error: &rustls::Error) -> TlsFailure {
    use rustls::CertificateError as C;
    match error {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer | C::BadSignature | C::UnhandledCriticalExtension => {
                TlsFailure::UntrustedCertificate
            }
            C::NotValidForName | C::NotValidForNameContext { .. } => TlsFailure::HostNameMismatch,
            C::Expired
            | C::ExpiredContext { .. }
            | C::NotValidYet
            | C::NotValidYetContext { .. } => TlsFailure::CertificateNotCurrent,
            _ => TlsFailure::Other,
        },
        _ => TlsFailure::Other,
    }
}

/// Is this `sslrootcert` value a PEM text rather than a path? (sqlx's rule.)
fn is_inline_pem(value: &str) -> bool {
    let t = value.trim();
    t.starts_with("-----BEGIN") && t.ends_with("-----")
}

/// The first value of any of `names` in the URL's query, decoded as sqlx decodes it
/// (`application/x-www-form-urlencoded`).
fn url_param(url: &str, names: &[&str]) -> Option<String> {
    let (_, query) = url.split_once('?')?;
    form_urlencoded::parse(query.as_bytes())
        .find(|(name, _)| names.contains(&name.as_ref()))
        .map(|(_, value)| value.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn require_with_a_ca_file_verifies_the_ca_as_libpq_does() {
        let url = "postgres://u:p@db.internal/x?sslmode=require&sslrootcert=%2Fetc%2Fca.pem";
        let connect = PgConnectOptions::from_str(url).expect("url");
        let (connect, tls) = PgTls::apply(url, connect);
        assert!(matches!(connect.get_ssl_mode(), PgSslMode::VerifyCa));
        assert_eq!(tls.root_cert.as_deref(), Some("/etc/ca.pem"));
        assert_eq!(tls.server, "db.internal:5432");
    }

    #[test]
    fn a_refused_certificate_is_a_tls_failure_and_a_refused_connection_is_not() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert_eq!(
            tls_failure(&sqlx::Error::Io(io)),
            Some(TlsFailure::UntrustedCertificate)
        );
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(tls_failure(&sqlx::Error::Io(refused)), None);
        assert_eq!(
            tls_failure(&sqlx::Error::Tls("server does not support TLS".into())),
            Some(TlsFailure::NotOffered)
        );
    }
}
