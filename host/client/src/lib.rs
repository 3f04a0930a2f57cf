//! capgate's HTTP client for agent hosts: the gateway's wire types ([`wire`], the same
//! types the gateway serves) and a small async client of the capability gateway (the contract of docs/gateway.md). Light on
//! purpose: serde, reqwest and capgate-core's vocabulary (error codes, risk, scope), no
//! Wasm engine and no database driver, so an agent host can depend on it alone.
//!
//! ```no_run
//! use capgate_client::{CapabilityClient, InvocationOptions};
//! use serde_json::json;
//!
//! # async fn demo() -> Result<(), capgate_client::ClientError> {
//! let client = CapabilityClient::new("http://127.0.0.1:8080/capgate").bearer("key");
//! let tools = client.describe(None).await?;
//! let outcome = client
//!     .invoke("orders.refund", json!({"orderId": "ord_1", "amount": 20}),
//!             InvocationOptions::new("run-7/step-2/call-1"))
//!     .await?;
//! println!("{} tools; {}", tools.len(), outcome.status());
//! # Ok(()) }
//! ```
//!
//! The invocation id is the caller's durable identity of the call: persist it before
//! dispatch and reuse it on retry. `invoke` and `resume_approval` turn a lost or
//! unrecognizable response (a broken connection after sending, a timeout, a `5xx`, an
//! undecodable body) into `outcome-unknown`: reconcile with
//! [`CapabilityClient::get_invocation`] before doing anything else. Refusals that prove
//! nothing ran (`4xx` with a gateway error body, a connection that never opened) are
//! [`ClientError`]s. Dropping a call's future cancels it (the gateway cancels the run).
//!
//! The contract's descriptors come from `capgate-contract` (re-exported in [`wire`]): a
//! host that ships the contract it was built against can compare it with
//! [`CapabilityClient::contract`] at start-up through `capgate_contract::check`.

pub mod wire;

use crate::wire::{
    CapabilityOutcome, DescribeBody, GatewayError, GatewayErrorBody, GetApprovalBody,
    GetInvocationBody, InvocationReceipt, InvokeBody, MAX_SCOPE_ENTRIES, PortableApproval,
    PortableCapabilityDescriptor, ResumeApprovalBody,
};
use capgate_core::id::BoundedId;
use capgate_core::runtime::Scope;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Duration;

/// Produces the headers of each request (e.g. a freshly refreshed bearer token).
pub type HeaderSource = Arc<dyn Fn() -> HeaderMap + Send + Sync>;

/// Why a call did not produce a result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The request is invalid before sending (e.g. an id over 256 characters).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The gateway refused the request (HTTP status and its error body).
    #[error("gateway refused the request ({status}): {} {}", .error.code, .error.message)]
    Gateway {
        /// The HTTP status.
        status: u16,
        /// The gateway error.
        error: GatewayError,
    },
    /// The gateway could not be reached, or its answer was lost (lookups only; `invoke`
    /// and `resume_approval` answer `outcome-unknown` instead once the request was sent).
    #[error("transport failure: {0}")]
    Transport(#[source] reqwest::Error),
    /// The answer was not what the protocol defines (the decoder's error, or what is
    /// missing).
    #[error("unrecognized response: {0}")]
    Decode(#[source] capgate_core::error::BoxError),
}

/// Identity and options of one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvocationOptions {
    /// Required: stable across retries of the same logical call.
    pub invocation_id: String,
    /// Optional correlation id (e.g. the agent run).
    pub correlation_id: Option<String>,
    /// Optional contract digest the caller was built against (`CONTRACT_MISMATCH` when
    /// stale).
    pub contract_digest: Option<String>,
}

impl InvocationOptions {
    /// Options with only the invocation id.
    pub fn new(invocation_id: impl Into<String>) -> Self {
        InvocationOptions {
            invocation_id: invocation_id.into(),
            correlation_id: None,
            contract_digest: None,
        }
    }
    /// Set the correlation id.
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.correlation_id = Some(id.into());
        self
    }
    /// Set the contract digest.
    pub fn contract_digest(mut self, digest: impl Into<String>) -> Self {
        self.contract_digest = Some(digest.into());
        self
    }
}

/// The gateway's five operations (plus the contract) over HTTP.
#[derive(Clone)]
pub struct CapabilityClient {
    http: reqwest::Client,
    base: String,
    headers: Option<HeaderSource>,
}

impl std::fmt::Debug for CapabilityClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapabilityClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// `value` as the [`BoundedId`] the wire body holds; refused before anything is sent.
fn id(field: &str, value: &str) -> Result<BoundedId, ClientError> {
    BoundedId::new(value).map_err(|e| ClientError::InvalidRequest(format!("`{field}` {e}")))
}

/// An optional id of the wire body.
fn optional_id(field: &str, value: Option<&str>) -> Result<Option<BoundedId>, ClientError> {
    value.map(|v| id(field, v)).transpose()
}

/// Whether a response that should carry a result lost it.
enum Failure {
    /// Provably nothing ran.
    Refused(ClientError),
    /// The request may have been processed.
    Lost(ClientError),
}

impl CapabilityClient {
    /// A client of the gateway mounted at `base_url` (e.g. `https://api.example.com/capgate`).
    pub fn new(base_url: impl Into<String>) -> Self {
        CapabilityClient {
            http: reqwest::Client::new(),
            base: base_url.into().trim_end_matches('/').to_string(),
            headers: None,
        }
    }

    /// Use this HTTP client (timeouts, proxies, TLS).
    pub fn with_http_client(mut self, http: reqwest::Client) -> Self {
        self.http = http;
        self
    }

    /// Use an HTTP client with this overall request timeout.
    pub fn with_timeout(self, timeout: Duration) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| ClientError::InvalidRequest(e.to_string()))?;
        Ok(self.with_http_client(http))
    }

    /// Send `Authorization: Bearer <token>` with every request.
    pub fn bearer(self, token: impl Into<String>) -> Self {
        let value = HeaderValue::from_str(&format!("Bearer {}", token.into())).ok();
        self.headers(move || {
            let mut h = HeaderMap::new();
            if let Some(v) = &value {
                h.insert(AUTHORIZATION, v.clone());
            }
            h
        })
    }

    /// Compute the headers of every request (call it again for each, so a refreshed
    /// credential is used on resumed requests).
    pub fn headers(mut self, source: impl Fn() -> HeaderMap + Send + Sync + 'static) -> Self {
        self.headers = Some(Arc::new(source));
        self
    }

    /// The capabilities this caller may see (its discovery policies applied). Never cache
    /// the result across actors.
    pub async fn describe(
        &self,
        scope: Option<Scope>,
    ) -> Result<Vec<PortableCapabilityDescriptor>, ClientError> {
        if let Some(s) = &scope
            && s.tags.len() + s.ids.len() > MAX_SCOPE_ENTRIES
        {
            return Err(ClientError::InvalidRequest(format!(
                "a scope holds at most {MAX_SCOPE_ENTRIES} entries"
            )));
        }
        self.lookup("describe", &DescribeBody { scope }).await
    }

    /// One governed call under a stable invocation id.
    pub async fn invoke(
        &self,
        capability_id: &str,
        input: serde_json::Value,
        options: InvocationOptions,
    ) -> Result<CapabilityOutcome, ClientError> {
        let body = InvokeBody {
            capability_id: id("capabilityId", capability_id)?,
            input,
            invocation_id: id("invocationId", &options.invocation_id)?,
            correlation_id: optional_id("correlationId", options.correlation_id.as_deref())?,
            contract_digest: optional_id("contractDigest", options.contract_digest.as_deref())?,
        };
        self.outcome("invoke", &body, &options.invocation_id).await
    }

    /// The receipt of one of this caller's invocations, or `None`.
    pub async fn get_invocation(
        &self,
        invocation_id: &str,
    ) -> Result<Option<InvocationReceipt>, ClientError> {
        let body = GetInvocationBody {
            invocation_id: id("invocationId", invocation_id)?,
        };
        self.lookup("getInvocation", &body).await
    }

    /// One of this caller's approvals, or `None`.
    pub async fn get_approval(
        &self,
        approval_id: &str,
    ) -> Result<Option<PortableApproval>, ClientError> {
        let body = GetApprovalBody {
            approval_id: id("approvalId", approval_id)?,
        };
        self.lookup("getApproval", &body).await
    }

    /// Continue a call after a human approved it, under its ORIGINAL invocation id.
    pub async fn resume_approval(
        &self,
        approval_id: &str,
        options: InvocationOptions,
    ) -> Result<CapabilityOutcome, ClientError> {
        let body = ResumeApprovalBody {
            approval_id: id("approvalId", approval_id)?,
            invocation_id: id("invocationId", &options.invocation_id)?,
            correlation_id: optional_id("correlationId", options.correlation_id.as_deref())?,
            contract_digest: optional_id("contractDigest", options.contract_digest.as_deref())?,
        };
        self.outcome("resumeApproval", &body, &options.invocation_id)
            .await
    }

    /// The portable contract of the gateway's surface.
    pub async fn contract(&self) -> Result<Vec<PortableCapabilityDescriptor>, ClientError> {
        let mut req = self.http.get(format!("{}/contract", self.base));
        if let Some(h) = &self.headers {
            req = req.headers(h());
        }
        match Self::answer(req.send().await).await {
            Ok(v) => Ok(v),
            Err(Failure::Refused(e) | Failure::Lost(e)) => Err(e),
        }
    }

    async fn lookup<B: Serialize, T: DeserializeOwned>(
        &self,
        operation: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        match Self::answer(self.post(operation, body).await).await {
            Ok(v) => Ok(v),
            Err(Failure::Refused(e) | Failure::Lost(e)) => Err(e),
        }
    }

    async fn outcome<B: Serialize>(
        &self,
        operation: &str,
        body: &B,
        invocation_id: &str,
    ) -> Result<CapabilityOutcome, ClientError> {
        match Self::answer::<CapabilityOutcome>(self.post(operation, body).await).await {
            Ok(o) if o.invocation_id() == invocation_id => Ok(o),
            Ok(_) => Ok(CapabilityOutcome::OutcomeUnknown {
                invocation_id: invocation_id.to_string(),
            }),
            Err(Failure::Refused(e)) => Err(e),
            Err(Failure::Lost(_)) => Ok(CapabilityOutcome::OutcomeUnknown {
                invocation_id: invocation_id.to_string(),
            }),
        }
    }

    async fn post<B: Serialize>(
        &self,
        operation: &str,
        body: &B,
    ) -> Result<reqwest::Response, reqwest::Error> {
        let mut req = self
            .http
            .post(format!("{}/{operation}", self.base))
            .json(body);
        if let Some(h) = &self.headers {
            req = req.headers(h());
        }
        req.send().await
    }

    async fn answer<T: DeserializeOwned>(
        sent: Result<reqwest::Response, reqwest::Error>,
    ) -> Result<T, Failure> {
        let response = match sent {
            Ok(r) => r,
            Err(e) if e.is_connect() || e.is_builder() => {
                return Err(Failure::Refused(ClientError::Transport(e)));
            }
            Err(e) => return Err(Failure::Lost(ClientError::Transport(e))),
        };
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| Failure::Lost(ClientError::Transport(e)))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes)
                .map_err(|e| Failure::Lost(ClientError::Decode(e.into())));
        }
        let error = serde_json::from_slice::<GatewayErrorBody>(&bytes).ok();
        match error {
            Some(body) if status.is_client_error() => Err(Failure::Refused(ClientError::Gateway {
                status: status.as_u16(),
                error: body.error,
            })),
            Some(body) => Err(Failure::Lost(ClientError::Gateway {
                status: status.as_u16(),
                error: body.error,
            })),
            None => Err(Failure::Lost(ClientError::Decode(
                format!("HTTP {status} without a gateway error body").into(),
            ))),
        }
    }
}
