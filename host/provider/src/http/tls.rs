//! The trusted roots of an upstream's client: the system's, plus the PEM bundle of its
//! `caFile` when a URL is `https://`; and the check of a `caFile` on its own.

use super::HttpUpstreamError;
#[cfg(feature = "tls")]
use super::with_causes;
#[cfg(feature = "tls")]
use reqwest::Client;
use std::path::Path;

// What the docs link to.
#[cfg(doc)]
use super::HttpUpstream;

/// Check a `caFile`: readable, a PEM bundle holding at least one certificate, each usable as
/// a trusted root. Returns how many certificates it holds. [`HttpUpstream::new`] makes the
/// same checks; this lets a configuration checker report a bad file at its place.
pub fn check_ca_file(path: &Path) -> Result<usize, HttpUpstreamError> {
    read_ca_file(path).map(|certs| certs.len())
}

#[cfg(feature = "tls")]
fn read_ca_file(path: &Path) -> Result<Vec<reqwest::Certificate>, HttpUpstreamError> {
    let invalid = |reason: String| HttpUpstreamError::CaFileInvalid {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| HttpUpstreamError::CaFileUnreadable {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let certs = reqwest::Certificate::from_pem_bundle(&bytes).map_err(|e| {
        invalid(format!(
            "is not a PEM certificate bundle: {}",
            with_causes(&e)
        ))
    })?;
    if certs.is_empty() {
        return Err(invalid(
            "holds no certificate (expected PEM `-----BEGIN CERTIFICATE-----` blocks)".into(),
        ));
    }
    // Every certificate must parse as a trust anchor: the check the client makes, here
    // against these roots alone (so the system's roots are not loaded for it).
    Client::builder()
        .tls_certs_only(certs.clone())
        .build()
        .map_err(|e| {
            invalid(format!(
                "holds a certificate that cannot be a trusted root: {}",
                with_causes(&e)
            ))
        })?;
    Ok(certs)
}

#[cfg(not(feature = "tls"))]
fn read_ca_file(_path: &Path) -> Result<Vec<()>, HttpUpstreamError> {
    Err(HttpUpstreamError::TlsUnavailable { field: "caFile" })
}

/// The client's trusted roots: the system's plus the `caFile`'s when a URL is `https://`.
#[cfg(feature = "tls")]
pub(crate) fn with_roots(
    builder: reqwest::ClientBuilder,
    ca_file: Option<&Path>,
    speaks_tls: bool,
) -> Result<reqwest::ClientBuilder, HttpUpstreamError> {
    let extra = ca_file.map(read_ca_file).transpose()?.unwrap_or_default();
    Ok(if speaks_tls {
        builder.tls_certs_merge(extra)
    } else {
        // Plain HTTP only: no handshake ever happens, so the system's roots are not loaded
        // (a host without any, e.g. a minimal container, still reaches http:// upstreams).
        builder.tls_certs_only(extra)
    })
}

#[cfg(not(feature = "tls"))]
pub(crate) fn with_roots(
    builder: reqwest::ClientBuilder,
    ca_file: Option<&Path>,
    _speaks_tls: bool,
) -> Result<reqwest::ClientBuilder, HttpUpstreamError> {
    match ca_file {
        Some(path) => read_ca_file(path).map(|_| builder),
        None => Ok(builder),
    }
}
