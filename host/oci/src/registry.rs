//! A small client for the OCI distribution API (registry v2): the six requests capgate
//! needs (GET a manifest, GET/HEAD a blob, a monolithic blob upload, PUT a manifest), each
//! answer read with a size bound, and the registry's login flows (Basic, and the Bearer
//! token `WWW-Authenticate` points at).
//!
//! Plain HTTP is spoken only to loopback registries and to hosts the configuration lists as
//! insecure; every other registry (and token service) is HTTPS or refused.

use super::OciError;
use super::auth::Credentials;
use base64::Engine;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, LOCATION, WWW_AUTHENTICATE};
use reqwest::{StatusCode, Url};
use std::sync::Mutex;
use std::time::Duration;

/// The largest token-service answer read.
const MAX_TOKEN_BYTES: u64 = 64 << 10;
/// The largest error body quoted in a message.
const MAX_ERROR_BYTES: u64 = 4 << 10;

/// Whether `host` (`name[:port]`, `[v6]:port`) is this machine.
pub fn is_loopback(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// One registry, reached as `host` (`name[:port]`).
pub struct Registry {
    http: reqwest::Client,
    host: String,
    base: Url,
    insecure: Vec<String>,
    credentials: Option<Credentials>,
    /// The `Authorization` value that worked last (a token is reused until refused).
    auth: Mutex<Option<String>>,
}

impl Registry {
    /// A client for `host`: plain HTTP when it is loopback or listed in `insecure`, HTTPS
    /// otherwise.
    pub fn new(
        host: &str,
        insecure: &[String],
        credentials: Option<Credentials>,
    ) -> Result<Registry, OciError> {
        let plain = is_loopback(host) || insecure.iter().any(|h| h == host);
        let scheme = if plain { "http" } else { "https" };
        let base = Url::parse(&format!("{scheme}://{host}/")).map_err(|e| OciError::Reference {
            reference: host.to_string(),
            reason: format!("`{host}` is not a registry host: {e}"),
        })?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(300))
            .redirect(reqwest::redirect::Policy::limited(5))
            .user_agent(concat!("capgate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| OciError::Registry {
                host: host.to_string(),
                message: format!("cannot build the HTTP client: {}", chain(&e)),
            })?;
        Ok(Registry {
            http,
            host: host.to_string(),
            base,
            insecure: insecure.to_vec(),
            credentials,
            auth: Mutex::new(None),
        })
    }

    fn url(&self, path: &str) -> Result<Url, OciError> {
        self.base
            .join(path)
            .map_err(|e| self.error(format!("bad URL {path}: {e}")))
    }

    fn error(&self, message: impl Into<String>) -> OciError {
        OciError::Registry {
            host: self.host.clone(),
            message: message.into(),
        }
    }

    /// A manifest by tag or digest, at most `limit` bytes; `None` when the registry has no
    /// such manifest.
    pub async fn manifest(
        &self,
        repo: &str,
        reference: &str,
        accept: &str,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, OciError> {
        let url = self.url(&format!("v2/{repo}/manifests/{reference}"))?;
        let r = self
            .send(|c| c.get(url.clone()).header("accept", accept))
            .await?;
        if r.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let r = self.expect(r, &[StatusCode::OK], "GET", &url).await?;
        bounded(r, limit, &format!("the manifest {repo}:{reference}"))
            .await
            .map(Some)
    }

    /// The referrers of `digest` (an OCI image index, at most `limit` bytes), or `None`
    /// when the registry has no referrers API (it answers 404, 400, 405 or 501 there; the
    /// caller falls back to the referrers tag).
    pub async fn referrers(
        &self,
        repo: &str,
        digest: &str,
        limit: u64,
    ) -> Result<Option<Vec<u8>>, OciError> {
        let url = self.url(&format!("v2/{repo}/referrers/{digest}"))?;
        let r = self
            .send(|c| {
                c.get(url.clone())
                    .header("accept", "application/vnd.oci.image.index.v1+json")
            })
            .await?;
        if matches!(
            r.status(),
            StatusCode::NOT_FOUND
                | StatusCode::BAD_REQUEST
                | StatusCode::METHOD_NOT_ALLOWED
                | StatusCode::NOT_IMPLEMENTED
        ) {
            return Ok(None);
        }
        let r = self.expect(r, &[StatusCode::OK], "GET", &url).await?;
        bounded(r, limit, &format!("the referrers of {repo}@{digest}"))
            .await
            .map(Some)
    }

    /// A blob, at most `limit` bytes (not yet verified: the caller checks its digest).
    pub async fn blob(&self, repo: &str, digest: &str, limit: u64) -> Result<Vec<u8>, OciError> {
        let url = self.url(&format!("v2/{repo}/blobs/{digest}"))?;
        let r = self.send(|c| c.get(url.clone())).await?;
        if r.status() == StatusCode::NOT_FOUND {
            return Err(self.error(format!("{repo} has no blob {digest} (404)")));
        }
        let r = self.expect(r, &[StatusCode::OK], "GET", &url).await?;
        bounded(r, limit, &format!("the blob {digest}")).await
    }

    /// Whether the repository already holds a blob.
    pub async fn has_blob(&self, repo: &str, digest: &str) -> Result<bool, OciError> {
        let url = self.url(&format!("v2/{repo}/blobs/{digest}"))?;
        let r = self.send(|c| c.head(url.clone())).await?;
        Ok(r.status().is_success())
    }

    /// Upload each of `blobs` the repository does not hold yet (by its SHA-256).
    pub async fn upload_missing(&self, repo: &str, blobs: &[&[u8]]) -> Result<(), OciError> {
        for blob in blobs {
            let d = format!("sha256:{}", super::sha256_hex(blob));
            if !self.has_blob(repo, &d).await? {
                self.upload_blob(repo, &d, blob).await?;
            }
        }
        Ok(())
    }

    /// Upload a blob in one request (POST an upload, PUT its bytes with the digest).
    pub async fn upload_blob(
        &self,
        repo: &str,
        digest: &str,
        bytes: &[u8],
    ) -> Result<(), OciError> {
        let start = self.url(&format!("v2/{repo}/blobs/uploads/"))?;
        let r = self.send(|c| c.post(start.clone())).await?;
        let r = self
            .expect(r, &[StatusCode::ACCEPTED], "POST", &start)
            .await?;
        let location = r
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| self.error("the upload answer has no Location header"))?;
        let mut put = start
            .join(location)
            .map_err(|e| self.error(format!("bad upload Location `{location}`: {e}")))?;
        put.query_pairs_mut().append_pair("digest", digest);
        let r = self
            .send(|c| {
                c.put(put.clone())
                    .header(CONTENT_TYPE, "application/octet-stream")
                    .body(bytes.to_vec())
            })
            .await?;
        self.expect(r, &[StatusCode::CREATED], "PUT", &put).await?;
        Ok(())
    }

    /// Store a manifest under a tag or its digest.
    pub async fn put_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: &[u8],
    ) -> Result<(), OciError> {
        let url = self.url(&format!("v2/{repo}/manifests/{reference}"))?;
        let r = self
            .send(|c| {
                c.put(url.clone())
                    .header(CONTENT_TYPE, media_type)
                    .body(bytes.to_vec())
            })
            .await?;
        self.expect(r, &[StatusCode::CREATED, StatusCode::OK], "PUT", &url)
            .await?;
        Ok(())
    }

    /// The answer when its status is one of `ok`, else an error quoting the registry.
    async fn expect(
        &self,
        r: reqwest::Response,
        ok: &[StatusCode],
        method: &str,
        url: &Url,
    ) -> Result<reqwest::Response, OciError> {
        if ok.contains(&r.status()) {
            return Ok(r);
        }
        let status = r.status();
        let body = bounded(r, MAX_ERROR_BYTES, "the error")
            .await
            .map(|b| String::from_utf8_lossy(&b).trim().to_string())
            .unwrap_or_default();
        Err(self.error(format!(
            "{method} {} answered {status}{}",
            url.path(),
            if body.is_empty() {
                String::new()
            } else {
                format!(": {body}")
            }
        )))
    }

    /// Send a request (built by `make`, which may be called twice), logging in once when
    /// the registry answers 401.
    async fn send(
        &self,
        make: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, OciError> {
        let current = self.auth.lock().ok().and_then(|a| a.clone());
        let mut req = make(&self.http);
        if let Some(a) = &current {
            req = req.header(AUTHORIZATION, a);
        }
        let r = req.send().await.map_err(|e| self.unreachable(&e))?;
        if r.status() != StatusCode::UNAUTHORIZED {
            return Ok(r);
        }
        let challenge = r
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let header = self.login(&challenge).await?;
        if let Ok(mut a) = self.auth.lock() {
            *a = Some(header.clone());
        }
        let r = make(&self.http)
            .header(AUTHORIZATION, header)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        if r.status() == StatusCode::UNAUTHORIZED {
            return Err(self.error(
                "the registry refused the credentials (401 after logging in); check CAPGATE_REGISTRY_USERNAME/CAPGATE_REGISTRY_PASSWORD, or the docker config's credential helper or `auths` entry",
            ));
        }
        Ok(r)
    }

    fn unreachable(&self, e: &reqwest::Error) -> OciError {
        self.error(format!("cannot reach the registry: {}", chain(e)))
    }

    /// The `Authorization` value for a `WWW-Authenticate` challenge.
    async fn login(&self, challenge: &str) -> Result<String, OciError> {
        let (scheme, params) = parse_challenge(challenge);
        let basic = self.credentials.as_ref().map(|c| {
            base64::engine::general_purpose::STANDARD
                .encode(format!("{}:{}", c.username, c.password))
        });
        if scheme.eq_ignore_ascii_case("basic") {
            return basic.map(|b| format!("Basic {b}")).ok_or_else(|| {
                self.error(
                    "the registry asks for a login and no credentials are configured: set CAPGATE_REGISTRY_USERNAME and CAPGATE_REGISTRY_PASSWORD, or `docker login` (the docker config's credential helper or `auths`)",
                )
            });
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(self.error(format!(
                "the registry answered 401 with an authentication scheme capgate does not speak: `{challenge}`"
            )));
        }
        let realm = params
            .iter()
            .find(|(k, _)| k == "realm")
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| self.error("the Bearer challenge names no realm"))?;
        let mut url = Url::parse(realm)
            .map_err(|e| self.error(format!("the token realm `{realm}` is not a URL: {e}")))?;
        let realm_host = match (url.host_str(), url.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_string(),
            _ => String::new(),
        };
        let plain_ok = is_loopback(&realm_host) || self.insecure.contains(&realm_host);
        if url.scheme() != "https" && !(url.scheme() == "http" && plain_ok) {
            return Err(self.error(format!(
                "the token realm `{realm}` is not HTTPS; capgate sends credentials over plain HTTP only to loopback or `insecureRegistries` hosts"
            )));
        }
        for key in ["service", "scope"] {
            if let Some((_, v)) = params.iter().find(|(k, _)| k == key) {
                url.query_pairs_mut().append_pair(key, v);
            }
        }
        let mut req = self.http.get(url.clone());
        if let Some(b) = &basic {
            req = req.header(AUTHORIZATION, format!("Basic {b}"));
        }
        let r = req.send().await.map_err(|e| self.unreachable(&e))?;
        let r = self.expect(r, &[StatusCode::OK], "GET", &url).await?;
        let body = bounded(r, MAX_TOKEN_BYTES, "the token answer").await?;
        let v: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| self.error(format!("the token answer is not JSON: {e}")))?;
        let token = v
            .get("token")
            .or_else(|| v.get("access_token"))
            .and_then(|t| t.as_str())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| self.error("the token answer holds no token"))?;
        Ok(format!("Bearer {token}"))
    }
}

/// `Bearer realm="…",service="…",scope="repository:a/b:pull,push"` → scheme and params
/// (quoted values may hold commas).
fn parse_challenge(header: &str) -> (String, Vec<(String, String)>) {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    let mut params = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            value = chars.by_ref().take_while(|c| *c != ',').collect();
        }
        params.push((key.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    (scheme.to_string(), params)
}

/// The body, refusing more than `limit` bytes (announced or streamed).
async fn bounded(mut r: reqwest::Response, limit: u64, what: &str) -> Result<Vec<u8>, OciError> {
    let too_large = || OciError::TooLarge {
        what: what.to_string(),
        limit,
    };
    if r.content_length().is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let mut buf = Vec::new();
    while let Some(chunk) = r.chunk().await.map_err(|e| OciError::Registry {
        host: r.url().host_str().unwrap_or_default().to_string(),
        message: format!("reading {what}: {}", chain(&e)),
    })? {
        if (buf.len() + chunk.len()) as u64 > limit {
            return Err(too_large());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf)
}

/// An error and its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_challenge_keeps_the_commas_inside_its_quoted_scope() {
        let (scheme, params) = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(scheme, "Bearer");
        assert_eq!(
            params,
            [
                (
                    "realm".to_string(),
                    "https://auth.example/token".to_string()
                ),
                ("service".to_string(), "registry.example".to_string()),
                ("scope".to_string(), "repository:a/b:pull,push".to_string()),
            ]
        );
    }

    #[test]
    fn only_this_machine_counts_as_loopback() {
        for h in [
            "127.0.0.1:5000",
            "localhost:5000",
            "[::1]:5000",
            "127.1.2.3",
        ] {
            assert!(is_loopback(h), "{h}");
        }
        for h in [
            "registry.example:5000",
            "10.0.0.1:5000",
            "[::2]:5000",
            "localhost.evil",
        ] {
            assert!(!is_loopback(h), "{h}");
        }
    }
}
