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

use crate::events::RuntimeEvent;
use crate::health::{ProbeError, ProbeOutcome, ProbeStatus, ProbeTarget, ProviderProber};
use crate::provider::{ExecutionOutcome, Provider, ProviderIdentity, ProviderRun, TokenUsage};
use crate::runtime::Sink;
use async_trait::async_trait;
use capgate_core::procedure::{AgentInvocationInfo, ProcedureError};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, StatusCode, Url};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

mod request;
use request::RequestPlan;
pub use request::{HttpRequestMapping, METHODS};

/// The adapter name of HTTP upstreams.
pub const HTTP_ADAPTER: &str = "http";
/// The streamed-response content type.
pub const NDJSON_CONTENT_TYPE: &str = "application/x-ndjson";
/// The largest response body (or single NDJSON line) accepted.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// The default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;

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

    /// A declared error status as the provider's defined failure: the model is shown the
    /// declared code and a message naming only it and the status, never the service's body.
    fn declared(&self, status: StatusCode) -> Option<ProcedureError> {
        let code = self.errors.get(&status.as_u16())?;
        Some(ProcedureError::Defined {
            code: code.clone(),
            message: format!("{code} (the service answered HTTP {})", status.as_u16()),
            data: Some(serde_json::json!({ "status": status.as_u16() })),
            retryable: false,
        })
    }

    /// One call as the service's own clients make it (the `request` mapping): a 2xx JSON
    /// body (an empty one is `null`) is the output; a declared status is its defined error;
    /// every other answer is an internal failure (the body is never read into a message).
    async fn exchange_mapped(
        &self,
        plan: &RequestPlan,
        run: &ProviderRun,
    ) -> Result<ExecutionOutcome, ProcedureError> {
        let req = &run.request;
        let planned = plan.plan(&self.url, &req.input)?;
        let span = crate::trace_context::upstream_span(plan.method.as_str(), &planned.url);
        let mut builder = self
            .client
            .request(plan.method.clone(), planned.url)
            .headers(crate::trace_context::headers_for(&span))
            .header(ACCEPT, "application/json");
        // The input's headers first, the static ones last: construction refused any overlap,
        // and the static headers (credentials) are what the request ends with regardless.
        for (name, value) in planned.headers {
            builder = builder.header(name, value);
        }
        builder = builder.headers(self.headers.clone());
        if let Some(body) = &planned.body {
            builder = builder.json(body);
        }
        let mut resp = send(builder, run, &span).await?;
        let status = resp.status();
        if !status.is_success() {
            if let Some(declared) = self.declared(status) {
                return Err(declared);
            }
            return Err(ProcedureError::internal(if status.is_redirection() {
                format!("upstream answered HTTP {status}; redirects are not followed")
            } else {
                format!("upstream answered HTTP {status}")
            }));
        }
        let bytes = read_body(&mut resp).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(ExecutionOutcome::new(serde_json::Value::Null));
        }
        let output = serde_json::from_slice(&bytes)
            .map_err(|e| ProcedureError::internal(format!("upstream answer is not JSON: {e}")))?;
        Ok(ExecutionOutcome::new(output))
    }

    async fn exchange(&self, run: &ProviderRun) -> Result<ExecutionOutcome, ProcedureError> {
        if let Some(plan) = &self.plan {
            return self.exchange_mapped(plan, run).await;
        }
        let req = &run.request;
        let body = UpstreamRequest {
            run_id: &req.run_id,
            attempt: req.attempt,
            input: &req.input,
            context: &req.context,
            agent: req.agent.as_deref(),
        };
        let span = crate::trace_context::upstream_span("POST", &self.url);
        let builder = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .headers(crate::trace_context::headers_for(&span))
            .header(ACCEPT, "application/x-ndjson, application/json")
            .json(&body);
        let mut resp = send(builder, run, &span).await?;
        let status = resp.status();
        if !status.is_success() {
            if let Some(declared) = self.declared(status) {
                return Err(declared);
            }
            let bytes = read_body(&mut resp).await.unwrap_or_default();
            let defined = serde_json::from_slice::<ErrorEnvelope>(&bytes).ok();
            return Err(match status {
                StatusCode::UNAUTHORIZED => ProcedureError::Unauthorized(
                    defined.map_or_else(|| status.to_string(), |d| d.error.message),
                ),
                StatusCode::FORBIDDEN => ProcedureError::Forbidden(
                    defined.map_or_else(|| status.to_string(), |d| d.error.message),
                ),
                s if s.is_client_error() => match defined {
                    Some(d) => d.error.into_procedure_error(),
                    None => ProcedureError::internal(format!("upstream answered HTTP {s}")),
                },
                s if s.is_redirection() => ProcedureError::internal(format!(
                    "upstream answered HTTP {s}; redirects are not followed"
                )),
                s => ProcedureError::internal(format!("upstream answered HTTP {s}")),
            });
        }
        let streamed = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.trim_start().starts_with(NDJSON_CONTENT_TYPE));
        if !streamed {
            let bytes = read_body(&mut resp).await?;
            let output = serde_json::from_slice(&bytes).map_err(|e| {
                ProcedureError::internal(format!("upstream answer is not JSON: {e}"))
            })?;
            return Ok(ExecutionOutcome::new(output));
        }
        read_stream(&mut resp, &run.events).await
    }
}

/// Send one attempt's request, whatever its format: the call's idempotency key, the `start`
/// event, the span's status; a request that fails to send is an internal failure.
async fn send(
    mut builder: reqwest::RequestBuilder,
    run: &ProviderRun,
    span: &tracing::Span,
) -> Result<reqwest::Response, ProcedureError> {
    if let Some(agent) = &run.request.agent
        && let Ok(v) = HeaderValue::from_str(&agent.idempotency_key)
    {
        builder = builder.header("idempotency-key", v);
    }
    let _ = run.events.emit(RuntimeEvent::start());
    let sent = builder.send().instrument(span.clone()).await;
    crate::trace_context::record_status(span, sent.as_ref().ok().map(|r| r.status().as_u16()));
    sent.map_err(|e| {
        let message = format!("upstream request failed: {}", with_causes(&e));
        // No connection was made, or the request could not be built: nothing reached the
        // upstream, so the call failed rather than leaving its effect unknown.
        if e.is_connect() || e.is_builder() {
            ProcedureError::not_sent(message)
        } else {
            ProcedureError::internal(message)
        }
    })
}

#[serde_with::skip_serializing_none]
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UpstreamRequest<'a> {
    run_id: &'a str,
    attempt: u32,
    input: &'a serde_json::Value,
    context: &'a serde_json::Value,
    agent: Option<&'a AgentInvocationInfo>,
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: UpstreamError,
}

#[derive(Deserialize)]
struct UpstreamError {
    code: String,
    message: String,
    #[serde(default)]
    data: Option<serde_json::Value>,
    #[serde(default)]
    retryable: bool,
}

impl UpstreamError {
    fn into_procedure_error(self) -> ProcedureError {
        ProcedureError::Defined {
            code: self.code,
            message: self.message,
            data: self.data,
            retryable: self.retryable,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum UpstreamLine {
    Progress(serde_json::Value),
    Usage(TokenUsage),
    Result(serde_json::Value),
    Error(UpstreamError),
}

async fn read_body(resp: &mut reqwest::Response) -> Result<Vec<u8>, ProcedureError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| ProcedureError::internal(format!("upstream body broke: {e}")))?
    {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(ProcedureError::internal("upstream body too large"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Handle one NDJSON line; `Some` ends the call.
fn handle_line(
    line: &[u8],
    events: &Sink<RuntimeEvent>,
    usage: &mut Option<TokenUsage>,
) -> Result<Option<ExecutionOutcome>, ProcedureError> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let parsed: UpstreamLine = serde_json::from_slice(line)
        .map_err(|e| ProcedureError::internal(format!("upstream sent an undecodable line: {e}")))?;
    match parsed {
        UpstreamLine::Progress(v) => {
            let _ = events.emit(RuntimeEvent::progress(v));
            Ok(None)
        }
        UpstreamLine::Usage(u) => {
            usage.get_or_insert_with(TokenUsage::default).accumulate(&u);
            let _ = events.emit(RuntimeEvent::usage(u));
            Ok(None)
        }
        UpstreamLine::Result(output) => Ok(Some(ExecutionOutcome {
            output,
            usage: *usage,
        })),
        UpstreamLine::Error(e) => Err(e.into_procedure_error()),
    }
}

async fn read_stream(
    resp: &mut reqwest::Response,
    events: &Sink<RuntimeEvent>,
) -> Result<ExecutionOutcome, ProcedureError> {
    let mut buf: Vec<u8> = Vec::new();
    let mut usage = None;
    loop {
        let chunk = resp
            .chunk()
            .await
            .map_err(|e| ProcedureError::internal(format!("upstream stream broke: {e}")))?;
        let Some(chunk) = chunk else { break };
        buf.extend_from_slice(&chunk);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            if let Some(done) = handle_line(&line, events, &mut usage)? {
                return Ok(done);
            }
        }
        if buf.len() > MAX_RESPONSE_BYTES {
            return Err(ProcedureError::internal("upstream line too long"));
        }
    }
    if let Some(done) = handle_line(&buf, events, &mut usage)? {
        return Ok(done);
    }
    Err(ProcedureError::internal(
        "upstream stream ended without a result",
    ))
}

#[async_trait]
impl Provider for HttpUpstream {
    fn identity(&self) -> &ProviderIdentity {
        &self.identity
    }

    async fn execute(&self, run: ProviderRun) -> Result<ExecutionOutcome, ProcedureError> {
        let cancel = run.cancel.clone();
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(ProcedureError::internal("upstream call cancelled")),
            r = self.exchange(&run) => r,
        }
    }

    fn prober(&self) -> Option<Arc<dyn ProviderProber>> {
        self.prober.clone().map(|p| p as Arc<dyn ProviderProber>)
    }
}

/// The exact-target prober of an HTTP upstream's health endpoint.
pub struct HttpHealthProber {
    client: Client,
    url: Url,
    identity: ProviderIdentity,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthBody {
    status: String,
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    instance_key: Option<String>,
}

impl HttpHealthProber {
    async fn ask(&self) -> Result<HealthBody, ProbeError> {
        let mut resp = self
            .client
            .get(self.url.clone())
            .header(ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| ProbeError::Network(with_causes(&e)))?;
        // A 3xx too: redirects are not followed.
        if !resp.status().is_success() {
            return Err(ProbeError::HttpStatus(resp.status().as_u16()));
        }
        let bytes = read_body(&mut resp)
            .await
            .map_err(|e| ProbeError::Network(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| ProbeError::Decode(e.to_string()))
    }
}

#[async_trait]
impl ProviderProber for HttpHealthProber {
    async fn probe(&self, target: &ProbeTarget, cancel: CancellationToken) -> ProbeOutcome {
        // This prober can only speak for its own target.
        let own = ProbeTarget {
            adapter: self.identity.adapter.clone(),
            target: self.identity.target.clone(),
            instance_key: None,
        };
        if target.adapter != own.adapter || target.target != own.target {
            return ProbeOutcome::status(&own, ProbeStatus::Unknown);
        }
        let answer = tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(ProbeError::Timeout),
            a = self.ask() => a,
        };
        match answer {
            Err(e) => ProbeOutcome::error(&own, e),
            Ok(body) => ProbeOutcome {
                adapter: own.adapter,
                target: body.target.unwrap_or(own.target),
                instance_key: body.instance_key,
                status: match body.status.as_str() {
                    "available" => ProbeStatus::Available,
                    "unavailable" => ProbeStatus::Unavailable,
                    _ => ProbeStatus::Unknown,
                },
                error: None,
            },
        }
    }
}
