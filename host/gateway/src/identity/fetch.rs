//! Talking to the identity provider: OIDC discovery (`/.well-known/openid-configuration`)
//! and JWKS documents, each answer bounded in size and time, each URL plain HTTP only on
//! loopback (keys fetched in the clear could be swapped by anyone on the path).

use std::sync::Arc;
use std::time::Duration;

/// The largest discovery or JWKS document capgate reads (an IdP's is a few KB).
pub const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

/// How long one request to the identity provider may take, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the identity provider's answer could not be used. Messages name the URL, never a
/// credential.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum IdpError {
    /// The URL is not `https://` (plain `http://` is allowed only on loopback).
    #[error(
        "{url}: the identity provider must be reached over https:// (http:// only on loopback)"
    )]
    Insecure {
        /// The URL.
        url: String,
    },
    /// The request failed (connection refused, DNS, TLS, time-out).
    #[error("{url}: the identity provider is unreachable: {source}")]
    Unreachable {
        /// The URL.
        url: String,
        /// The HTTP client's error.
        #[source]
        source: Arc<reqwest::Error>,
    },
    /// The answer was not `200`.
    #[error("{url}: the identity provider answered HTTP {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// The answer is larger than [`MAX_DOCUMENT_BYTES`].
    #[error("{url}: the answer is larger than {limit} bytes")]
    TooLarge {
        /// The URL.
        url: String,
        /// The limit.
        limit: usize,
    },
    /// The answer is not the JSON document expected.
    #[error("{url}: not a valid {what}: {message}")]
    Malformed {
        /// The URL.
        url: String,
        /// What was expected (`OpenID configuration`, `JWKS`).
        what: &'static str,
        /// The parser's message.
        message: String,
    },
    /// The discovery document names another issuer (OpenID Connect Discovery §4.3).
    #[error("{url}: the document's issuer `{found}` is not the configured issuer `{expected}`")]
    IssuerMismatch {
        /// The discovery URL.
        url: String,
        /// The configured issuer.
        expected: String,
        /// The document's.
        found: String,
    },
    /// The JWKS holds no key capgate can verify with.
    #[error(
        "{url}: the JWKS holds no usable signing key (RS256, PS256, ES256 on P-256, EdDSA on Ed25519)"
    )]
    NoUsableKey {
        /// The JWKS URL.
        url: String,
    },
}

/// Whether `url` may be fetched: `https://`, or `http://` to a loopback host.
pub fn check_url(url: &str) -> Result<(), IdpError> {
    let insecure = || IdpError::Insecure {
        url: url.to_owned(),
    };
    let parsed = reqwest::Url::parse(url).map_err(|_| insecure())?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" => {
            let loopback = match parsed.host() {
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
                None => false,
            };
            if loopback { Ok(()) } else { Err(insecure()) }
        }
        _ => Err(insecure()),
    }
}

/// The HTTP client capgate talks to an identity provider with: a time-out per request,
/// no redirects (the configured URL is the one trusted), and no idle connections kept (the
/// few requests it makes may run on different runtimes).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(REQUEST_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(0)
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// GET a JSON document, at most [`MAX_DOCUMENT_BYTES`].
pub(crate) async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
    what: &'static str,
) -> Result<T, IdpError> {
    check_url(url)?;
    let unreachable = |e| IdpError::Unreachable {
        url: url.to_owned(),
        source: Arc::new(e),
    };
    let mut response = http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(unreachable)?;
    if response.status() != reqwest::StatusCode::OK {
        return Err(IdpError::Status {
            url: url.to_owned(),
            status: response.status().as_u16(),
        });
    }
    read_json(&mut response, url, what).await
}

/// Read a response body as JSON, at most [`MAX_DOCUMENT_BYTES`].
pub(crate) async fn read_json<T: serde::de::DeserializeOwned>(
    response: &mut reqwest::Response,
    url: &str,
    what: &'static str,
) -> Result<T, IdpError> {
    let too_large = || IdpError::TooLarge {
        url: url.to_owned(),
        limit: MAX_DOCUMENT_BYTES,
    };
    if response
        .content_length()
        .is_some_and(|n| n > MAX_DOCUMENT_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| IdpError::Unreachable {
        url: url.to_owned(),
        source: Arc::new(e),
    })? {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| IdpError::Malformed {
        url: url.to_owned(),
        what,
        message: e.to_string(),
    })
}

/// What capgate reads of an OpenID Provider's configuration document.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct ProviderMetadata {
    /// The issuer (equal to the configured one).
    pub issuer: String,
    /// Where its signing keys are published.
    pub jwks_uri: String,
    /// Where a browser is sent to sign in (the console's sign-in).
    #[serde(default)]
    pub authorization_endpoint: Option<String>,
    /// Where an authorization code is exchanged for tokens.
    #[serde(default)]
    pub token_endpoint: Option<String>,
    /// Where a browser is sent to end the provider's session too (RP-initiated logout).
    #[serde(default)]
    pub end_session_endpoint: Option<String>,
    /// PKCE methods the provider says it supports.
    #[serde(default)]
    pub code_challenge_methods_supported: Vec<String>,
}

/// The discovery URL of an issuer.
pub fn discovery_url(issuer: &str) -> String {
    format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    )
}

/// Fetch and check an issuer's OpenID configuration.
pub async fn discover(http: &reqwest::Client, issuer: &str) -> Result<ProviderMetadata, IdpError> {
    let url = discovery_url(issuer);
    let meta: ProviderMetadata = get_json(http, &url, "OpenID configuration").await?;
    if meta.issuer != issuer {
        return Err(IdpError::IssuerMismatch {
            url,
            expected: issuer.to_owned(),
            found: meta.issuer,
        });
    }
    for endpoint in [
        Some(&meta.jwks_uri),
        meta.authorization_endpoint.as_ref(),
        meta.token_endpoint.as_ref(),
    ]
    .into_iter()
    .flatten()
    {
        check_url(endpoint)?;
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_or_loopback_http_is_fetched() {
        assert!(check_url("https://idp.example.com/keys").is_ok());
        assert!(check_url("http://127.0.0.1:8080/keys").is_ok());
        assert!(check_url("http://localhost/keys").is_ok());
        assert!(check_url("http://[::1]/keys").is_ok());
        assert!(check_url("http://idp.example.com/keys").is_err());
        assert!(check_url("http://10.0.0.1/keys").is_err());
        assert!(check_url("file:///etc/passwd").is_err());
        assert!(check_url("not a url").is_err());
    }
}
