//! The HTTP upstream adapter: a capability's procedure is the application's existing
//! backend, reached over HTTP as a [`Provider`] (so it runs under the stall watchdog and
//! the health probe), with an exact-target health endpoint.
//!
//! # Wire format (version 1)
//!
//! **Request.** `POST <url>` with `Content-Type: application/json`,
//! `Accept: application/x-ndjson, application/json`, `Idempotency-Key: <idempotencyKey>`,
//! any configured static headers, and the body
//!
//! ```json
//! { "runId": "exe_…", "attempt": 1,
//!   "input": { … validated input … },
//!   "context": { … application context … },
//!   "agent": { "executionId": "exe_…", "capabilityId": "orders.refund", "surface": "aiSdk",
//!              "actor": { "id": "u_dana", "kind": "user", "attributes": { … } },
//!              "approval": { "id": "apr_…", "approver": { "id": "u_priya", "kind": "user" } },
//!              "correlationId": "…", "idempotencyKey": "idk_…" } }
//! ```
//!
//! (`approval` and `correlationId` only when present.)
//!
//! **Plain response.** A 2xx with any content type but NDJSON: the body is the procedure's
//! JSON output.
//!
//! **Streamed response.** A 2xx with `Content-Type: application/x-ndjson`: one JSON object per
//! line, each with exactly one key:
//!
//! - `{"progress": <any>}` — progress: resets the stall watchdog and reaches the caller as a
//!   progress notification (`null` / `""` count as empty and reset nothing);
//! - `{"usage": {"inputTokens": n, "outputTokens": n, "totalTokens": n}}` — token usage
//!   (observation data; it also counts as progress);
//! - `{"result": <any>}` — the output; ends the call;
//! - `{"error": {"code": "…", "message": "…", "data": <any>?, "retryable": bool?}}` — a
//!   defined error; ends the call.
//!
//! Blank lines are ignored (they are not progress). A stream that ends, breaks, or sends an
//! undecodable line before `result`/`error` is an internal failure.
//!
//! **Errors.** 401 → `Unauthorized` (UNAUTHENTICATED); 403 → `Forbidden` (FORBIDDEN); any
//! other 4xx whose body is `{"error": {"code", "message", …}}` → `Defined`
//! (EXECUTION_FAILED shown to the model with that message); every other status, an
//! undecodable body, a refused or lost connection, a failed TLS handshake (e.g. a server
//! certificate from an untrusted issuer) → `Internal` (hidden, "The operation failed.").
//! Cancellation (the stage-10 deadline or the caller) drops the request at once.
//!
//! **Declared errors.** An upstream's `errors` table maps an HTTP status to an error code
//! (`errors = { "404" = "PET_NOT_FOUND" }`): that status is the provider's `Defined`
//! failure with that code (EXECUTION_FAILED shown to the model with the message
//! `PET_NOT_FOUND (the service answered HTTP 404)`; the service's body is never read into
//! it). Declared statuses are checked before the rules above.
//!
//! # Request mapping (a service's own API)
//!
//! With a `request` table the upstream does not speak the envelope above: the call is made
//! as the service's own clients make it, e.g. for an operation `capgate import openapi`
//! imported:
//!
//! ```toml
//! http = { target = "petstore.getPet", url = "http://127.0.0.1:8080/v1",
//!          request = { method = "GET", path = "/pets/{petId}", query = ["verbose"],
//!                      headers = { "X-Tenant" = "tenant" }, body = "body" },
//!          errors = { "404" = "PET_NOT_FOUND" } }
//! ```
//!
//! - `method`: GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS.
//! - `path`: a template appended to `url`'s path. Each `{name}` is filled from the input
//!   field `name` (a string, number or boolean), percent-encoded as data inside one segment:
//!   a value can never add a segment, a `..`, a query or a fragment (`a/b` is sent as
//!   `a%2Fb`). A missing, empty or non-scalar value, or one that would make a `.`/`..`
//!   segment, fails the call closed (internal, hidden) before any request is sent.
//! - `query`: input fields sent as query parameters after any `url` already has: a scalar as
//!   `name=value`, an array as the name repeated, an absent or null field left out.
//! - `headers`: header name → input field; a scalar value is sent in that header, an absent
//!   field sends nothing. Framing and hop-by-hop headers, the ones capgate sets
//!   (`Content-Type`, `Accept`, `Idempotency-Key`, `traceparent`) and every static header of
//!   the upstream cannot be mapped (refused at construction).
//! - `body`: the input field whose value is the JSON body (`Content-Type: application/json`);
//!   absent or null: no body.
//!
//! Still as above: the static `headers`, `Idempotency-Key`, `Accept: application/json`, no
//! redirect followed, the response size bound, cancellation dropping the request. A 2xx
//! answer's body is the output as JSON (an empty body is `null`; NDJSON is not read
//! specially). A declared status is its declared error; **every other non-2xx answer**
//! (401 and 403 included: the service refused capgate's request, not the caller) is
//! `Internal`. The mapping is validated when the upstream is built
//! ([`HttpUpstreamError::setting`] locates each problem: an unknown method, a malformed
//! template, a reserved header, an `errors` key that is not 400–599, a code that is not
//! `UPPER_SNAKE_CASE`).
//!
//! **Redirects are never followed.** A 3xx answer is an upstream failure like any other
//! non-2xx status (`Internal`, hidden from the model); the `Location` is not requested, so
//! neither the input nor the configured static headers (credentials) ever reach a host
//! other than the configured `url`. The health endpoint is the same: a 3xx is a probe error.
//!
//! **Health.** `GET <healthUrl>` answering 2xx with
//! `{"status": "available" | "unavailable", "target": "…"?, "instanceKey": "…"?}`. A non-2xx
//! (3xx included), a network failure or an undecodable body is a probe *error*
//! (→ `health_unknown`), never "unavailable"; a `target` other than the configured one, or
//! an instance other than the pinned one, is an identity mismatch.
//!
//! **TLS.** Plain `http://` always works. `https://` (with the `tls` feature, on by default)
//! uses rustls and trusts the system's root certificates plus the PEM bundle of an
//! upstream's `caFile`, if any (for a private CA). A build without the feature refuses
//! `https://` URLs and `caFile` up front with [`HttpUpstreamError::TlsUnavailable`].

use crate::provider::ProviderIdentity;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, Url};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

// What the docs link to.
#[cfg(doc)]
use crate::provider::Provider;

// By job: this file is the configuration, its errors and the building of an upstream;
// `exchange` one call (the envelope or the mapped request, the answer, the NDJSON stream)
// and the `Provider`; `health` the health endpoint's prober; `request` the request mapping;
// `tls` the trusted roots and the `caFile`.
mod exchange;
mod health;
mod request;
mod tls;
pub use health::HttpHealthProber;
use request::RequestPlan;
pub use request::{HttpRequestMapping, METHODS};
pub use tls::check_ca_file;
pub(crate) use tls::with_roots;

/// The adapter name of HTTP upstreams.
pub const HTTP_ADAPTER: &str = "http";
/// The streamed-response content type.
pub const NDJSON_CONTENT_TYPE: &str = "application/x-ndjson";
/// The largest response body (or single NDJSON line) accepted.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// The default connect timeout.
pub use capgate_core::defaults::http_upstream::DEFAULT_CONNECT_TIMEOUT_MS;

/// How to reach one application backend.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpUpstreamConfig {
    /// The exact target name (the provider identity is `http:<target>`).
    pub target: String,
    /// Where calls are POSTed; with a `request` mapping, the service's base URL that the
    /// mapping's path is appended to.
    pub url: String,
    /// The health endpoint; without one, probes fail closed to `health_unknown`.
    pub health_url: Option<String>,
    /// Static headers sent with every call (e.g. a service credential).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Connect timeout (default [`DEFAULT_CONNECT_TIMEOUT_MS`]).
    pub connect_timeout_ms: Option<u64>,
    /// A PEM bundle of extra trusted root certificates for `https://` (e.g. a private CA),
    /// trusted in addition to the system's roots. A relative path is opened from the
    /// working directory; the `capgate` binary resolves it against the config file first.
    pub ca_file: Option<PathBuf>,
    /// Call the service as its own clients do (method, path template, query, headers,
    /// JSON body from the input) instead of POSTing capgate's envelope to `url`.
    pub request: Option<HttpRequestMapping>,
    /// Declared error statuses: HTTP status (`"404"`) → the error code the model is shown
    /// (`PET_NOT_FOUND`). Any other non-2xx answer stays a hidden internal failure.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, String>,
}

/// Why an upstream configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpUpstreamError {
    /// The target name is empty.
    #[error("target: must not be empty")]
    EmptyTarget,
    /// A URL does not parse.
    #[error("{field}: invalid URL `{url}`: {reason}")]
    InvalidUrl {
        /// `url` or `healthUrl`.
        field: &'static str,
        /// The URL as configured.
        url: String,
        /// Why it is not a usable URL.
        reason: String,
    },
    /// A URL's scheme is neither `http` nor `https`.
    #[error("{field}: scheme `{scheme}` is not supported (use http:// or https://)")]
    UnsupportedScheme {
        /// `url` or `healthUrl`.
        field: &'static str,
        /// The scheme the URL uses.
        scheme: String,
    },
    /// `https://` or a `caFile` in a build without TLS (the `tls` feature is off).
    #[error(
        "{field}: this build has no TLS (capgate-provider's `tls` feature is off); use http:// or a build with TLS"
    )]
    TlsUnavailable {
        /// `url`, `healthUrl` or `caFile`.
        field: &'static str,
    },
    /// The `caFile` cannot be read.
    #[error("cannot read the CA file {}: {reason}", path.display())]
    CaFileUnreadable {
        /// The file, as opened.
        path: PathBuf,
        /// Why it could not be read or parsed.
        reason: String,
    },
    /// The `caFile` holds no certificate, or one that is not usable as a trusted root.
    #[error("the CA file {} {reason}", path.display())]
    CaFileInvalid {
        /// The file, as opened.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A header name or value is invalid (the value is not echoed).
    #[error("headers: `{0}` is not a valid header")]
    InvalidHeader(String),
    /// The HTTP client could not be built.
    #[error("HTTP client: {0}")]
    Client(String),
    /// `request.method` is not one of [`request::METHODS`].
    #[error(
        "request.method: `{0}` is not a method a mapping may use (one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS)"
    )]
    UnknownMethod(String),
    /// `request.path` is not a usable path template.
    #[error("request.path: `{template}` {reason}")]
    InvalidPathTemplate {
        /// The template as configured.
        template: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A `request.headers` name is not a valid header name.
    #[error("request.headers: `{0}` is not a valid header name")]
    InvalidMappedHeader(String),
    /// A `request.headers` name is one an input field may not set (framing, hop-by-hop,
    /// capgate's own, or a configured static header such as a credential).
    #[error(
        "request.headers: `{0}` cannot be set from the input (a framing header, one capgate sets, or a static header)"
    )]
    ReservedMappedHeader(String),
    /// An input field name of the mapping is empty.
    #[error("{}: the input field name must not be empty", setting.join("."))]
    EmptyField {
        /// Where: `["request", "query", "0"]`, `["request", "body"]`…
        setting: Vec<String>,
    },
    /// An `errors` key is not an HTTP error status (400–599).
    #[error("errors: `{0}` is not an HTTP error status (400–599)")]
    InvalidErrorStatus(String),
    /// An `errors` code is not an error code (`UPPER_SNAKE_CASE`, at most 64 characters).
    #[error(
        "errors.{status}: `{code}` is not an error code (A–Z, 0–9 and `_`, starting with a letter, at most 64 characters)"
    )]
    InvalidErrorCode {
        /// The status it is declared for.
        status: String,
        /// The code as configured.
        code: String,
    },
}

impl HttpUpstreamError {
    /// The setting at fault, as the path of keys inside the upstream's settings
    /// (`["headers", "x-api-key"]`), so a configuration check locates the problem without
    /// reading the message; `None` when no one setting is (the HTTP client itself).
    pub fn setting(&self) -> Option<Vec<&str>> {
        match self {
            HttpUpstreamError::EmptyTarget => Some(vec!["target"]),
            HttpUpstreamError::InvalidUrl { field, .. }
            | HttpUpstreamError::UnsupportedScheme { field, .. }
            | HttpUpstreamError::TlsUnavailable { field } => Some(vec![field]),
            HttpUpstreamError::CaFileUnreadable { .. }
            | HttpUpstreamError::CaFileInvalid { .. } => Some(vec!["caFile"]),
            HttpUpstreamError::InvalidHeader(h) => Some(vec!["headers", h.as_str()]),
            HttpUpstreamError::Client(_) => None,
            HttpUpstreamError::UnknownMethod(_) => Some(vec!["request", "method"]),
            HttpUpstreamError::InvalidPathTemplate { .. } => Some(vec!["request", "path"]),
            HttpUpstreamError::InvalidMappedHeader(h)
            | HttpUpstreamError::ReservedMappedHeader(h) => {
                Some(vec!["request", "headers", h.as_str()])
            }
            HttpUpstreamError::EmptyField { setting } => {
                Some(setting.iter().map(String::as_str).collect())
            }
            HttpUpstreamError::InvalidErrorStatus(s)
            | HttpUpstreamError::InvalidErrorCode { status: s, .. } => {
                Some(vec!["errors", s.as_str()])
            }
        }
    }
}

fn parse_url(field: &'static str, url: &str) -> Result<Url, HttpUpstreamError> {
    let parsed = Url::parse(url).map_err(|e| HttpUpstreamError::InvalidUrl {
        field,
        url: url.to_string(),
        reason: e.to_string(),
    })?;
    match parsed.scheme() {
        "http" => Ok(parsed),
        "https" if cfg!(feature = "tls") => Ok(parsed),
        "https" => Err(HttpUpstreamError::TlsUnavailable { field }),
        other => Err(HttpUpstreamError::UnsupportedScheme {
            field,
            scheme: other.to_string(),
        }),
    }
}

/// An error with its chain of causes, e.g. `error sending request …: client error (Connect):
/// invalid peer certificate: UnknownIssuer`, for operators (never shown to the model).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// An application backend as a provider.
pub struct HttpUpstream {
    identity: ProviderIdentity,
    url: Url,
    client: Client,
    headers: HeaderMap,
    prober: Option<Arc<HttpHealthProber>>,
    plan: Option<RequestPlan>,
    errors: BTreeMap<u16, String>,
}

/// Check the `errors` table: each key an HTTP error status, each code UPPER_SNAKE_CASE.
fn declared_errors(
    errors: &BTreeMap<String, String>,
) -> Result<BTreeMap<u16, String>, HttpUpstreamError> {
    let mut out = BTreeMap::new();
    for (status, code) in errors {
        let n = status
            .parse::<u16>()
            .ok()
            .filter(|n| (400..=599).contains(n) && status.len() == 3)
            .ok_or_else(|| HttpUpstreamError::InvalidErrorStatus(status.clone()))?;
        let well_formed = code.len() <= 64
            && code.starts_with(|c: char| c.is_ascii_uppercase())
            && code
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if !well_formed {
            return Err(HttpUpstreamError::InvalidErrorCode {
                status: status.clone(),
                code: code.clone(),
            });
        }
        out.insert(n, code.clone());
    }
    Ok(out)
}

impl HttpUpstream {
    /// Validate a configuration and build the client.
    pub fn new(config: HttpUpstreamConfig) -> Result<Self, HttpUpstreamError> {
        if config.target.is_empty() {
            return Err(HttpUpstreamError::EmptyTarget);
        }
        let url = parse_url("url", &config.url)?;
        let plan = config
            .request
            .as_ref()
            .map(|m| RequestPlan::new(m, &config.headers))
            .transpose()?;
        let errors = declared_errors(&config.errors)?;
        let health_url = config
            .health_url
            .as_deref()
            .map(|u| parse_url("healthUrl", u))
            .transpose()?;
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| HttpUpstreamError::InvalidHeader(name.clone()))?;
            let mut v = HeaderValue::from_str(value)
                .map_err(|_| HttpUpstreamError::InvalidHeader(name.clone()))?;
            v.set_sensitive(true);
            headers.insert(n, v);
        }
        let speaks_tls =
            url.scheme() == "https" || health_url.as_ref().is_some_and(|u| u.scheme() == "https");
        let builder = Client::builder()
            .connect_timeout(Duration::from_millis(
                config
                    .connect_timeout_ms
                    .unwrap_or(DEFAULT_CONNECT_TIMEOUT_MS),
            ))
            // Never follow a redirect: it would re-send the input and the static headers
            // (credentials) to whatever host the `Location` names. A 3xx is a failure.
            .redirect(reqwest::redirect::Policy::none());
        let client = with_roots(builder, config.ca_file.as_deref(), speaks_tls)?
            .build()
            .map_err(|e| HttpUpstreamError::Client(with_causes(&e)))?;
        let identity = ProviderIdentity::new(HTTP_ADAPTER, config.target);
        let prober = health_url.map(|url| {
            Arc::new(HttpHealthProber {
                client: client.clone(),
                url,
                identity: identity.clone(),
            })
        });
        Ok(HttpUpstream {
            identity,
            url,
            client,
            headers,
            prober,
            plan,
            errors,
        })
    }
}
