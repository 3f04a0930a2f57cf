//! The HTTP capability gateway (spec: "Backend gateway", digest §2.11): five JSON
//! operations over one [`Runtime`], on one fixed surface, with an [`InvocationJournal`]
//! that admits every caller-chosen invocation id at most once.
//!
//! | route | operation |
//! |---|---|
//! | `POST /describe` | actor-filtered portable descriptors |
//! | `POST /invoke` | a governed call under a stable invocation id |
//! | `POST /getInvocation` | the caller's receipt, or `null` |
//! | `POST /getApproval` | the caller's approval, or `null` |
//! | `POST /resumeApproval` | continue an approved call under its original invocation id |
//! | `GET /contract` | the portable contract of this surface |
//! | `GET /tools?format=ai-sdk\|openai` | the caller's tool list in an agent framework's shape |
//!
//! Every request is authenticated ([`Authenticator`] + [`check_principal`]: no anonymous
//! actor, no empty namespace, no expired credential; `401` otherwise) and every operation
//! authorized ([`Authorizer`]; `403` on denial). Receipt and approval lookups hand the
//! authorizer the *stored* capability and input; a record that does not exist in the
//! caller's scope (namespace + actor + surface) answers `null` exactly like a missing one.
//! A malformed body (bad JSON, unknown field, an id over 256 characters, a scope over 1000
//! entries) is `400`; a body over the limit is `413`; all with a [`GatewayErrorBody`].
//!
//! `invoke` claims the invocation in the journal first: a new id is admitted and run with
//! the journal's idempotency key; a settled identical call is replayed (after fresh
//! authorization) without running again; a pending one answers `outcome-unknown`; the same
//! id with another capability or input is `INVOCATION_CONFLICT`, and a stale
//! `contractDigest` is `CONTRACT_MISMATCH` (both preflight failures, empty execution id). A
//! failure or cancellation after the procedure was entered leaves the receipt pending and
//! answers `outcome-unknown`: the effect may have happened.
//!
//! Timing: the execution gets `request_timeout − audit_drain_timeout`; then its
//! cancellation token fires (it also fires when the client goes away), and the audit is
//! drained in the time that is left. The execution itself runs on its own task, so a
//! dropped request still settles (or deliberately leaves pending) its receipt.
//!
//! Nothing here decides approvals: that is [`crate::approvals_api`], for humans.

use crate::auth::{Authenticated, Authenticator, check_principal};
use crate::contract::{ContractError, try_export_contract};
use crate::tools::{ToolFormat, export_tools};
use crate::wire::{
    CapabilityOutcome, DescribeBody, GatewayError, GatewayErrorBody, GetApprovalBody,
    GetInvocationBody, InvocationReceipt, InvokeBody, MAX_ID_LEN, MAX_SCOPE_ENTRIES, OutcomeError,
    PortableCapabilityDescriptor, ResumeApprovalBody, gateway_codes, public,
};
use async_trait::async_trait;
use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use capgate_core::actor::Surface;
use capgate_core::approval::ApprovalStatus;
use capgate_core::authz::{Authorizer, Operation};
use capgate_core::error::{CapabilityError, ErrorCode, PublicError};
use capgate_core::journal::{
    ClaimOutcome, ClaimRequest, InvocationJournal, InvocationRecord, InvocationState, JournalError,
    ResumeClaim, Settlement, scope_hash,
};
use capgate_core::result::ExecutionResult;
use capgate_core::runtime::{
    CapabilityDescriptor, DescribeOptions, InvokeRequest, ResumeOptions, Runtime, Scope,
};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Default ceiling of one gateway request (25 000 ms).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_millis(25_000);
/// Default time reserved for draining audit at the end of a request (5 000 ms).
pub const DEFAULT_AUDIT_DRAIN_TIMEOUT: Duration = Duration::from_millis(5_000);
/// Default request body limit (1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

const LOG: &str = "capgate::gateway";

/// Everything one gateway route needs. Shared pieces (runtime, journal, authenticator,
/// authorizer) are cheap handles; build one config per route/surface.
#[derive(Clone)]
pub struct GatewayConfig {
    /// The surface of this route: fixed here, never a client input (`aiSdk`, `mcp` or
    /// `workflow`).
    pub surface: Surface,
    /// The deployment contract revision (part of every contract digest).
    pub revision: String,
    /// The governed runtime.
    pub runtime: Runtime,
    /// The invocation journal (shared by every replica).
    pub journal: Arc<dyn InvocationJournal>,
    /// Authenticates every request.
    pub authenticator: Arc<dyn Authenticator>,
    /// Authorizes every operation (must deny by returning `Err`).
    pub authorizer: Arc<dyn Authorizer>,
    /// Ceiling of one request, audit drain included.
    pub request_timeout: Duration,
    /// Time reserved at the end of a request for draining audit; smaller than
    /// `request_timeout`.
    pub audit_drain_timeout: Duration,
    /// Largest accepted request body.
    pub max_body_bytes: usize,
}

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("surface", &self.surface)
            .field("revision", &self.revision)
            .field("request_timeout", &self.request_timeout)
            .field("audit_drain_timeout", &self.audit_drain_timeout)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

impl GatewayConfig {
    /// A configuration with the default timeouts and body limit.
    pub fn new(
        surface: Surface,
        revision: impl Into<String>,
        runtime: Runtime,
        journal: Arc<dyn InvocationJournal>,
        authenticator: Arc<dyn Authenticator>,
        authorizer: Arc<dyn Authorizer>,
    ) -> Self {
        GatewayConfig {
            surface,
            revision: revision.into(),
            runtime,
            journal,
            authenticator,
            authorizer,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            audit_drain_timeout: DEFAULT_AUDIT_DRAIN_TIMEOUT,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }

    /// Set both timeouts; the audit drain time must be smaller than the request ceiling.
    pub fn with_timeouts(
        mut self,
        request_timeout: Duration,
        audit_drain_timeout: Duration,
    ) -> Result<Self, GatewayConfigError> {
        self.request_timeout = request_timeout;
        self.audit_drain_timeout = audit_drain_timeout;
        self.validate()?;
        Ok(self)
    }

    /// Set the body limit (must be positive).
    pub fn with_max_body_bytes(
        mut self,
        max_body_bytes: usize,
    ) -> Result<Self, GatewayConfigError> {
        self.max_body_bytes = max_body_bytes;
        self.validate()?;
        Ok(self)
    }

    /// Check the configuration ([`capability_router`] does too).
    pub fn validate(&self) -> Result<(), GatewayConfigError> {
        if !matches!(
            self.surface,
            Surface::AiSdk | Surface::Mcp | Surface::Workflow
        ) {
            return Err(GatewayConfigError::Surface(self.surface));
        }
        if self.revision.trim().is_empty() {
            return Err(GatewayConfigError::EmptyRevision);
        }
        if self.request_timeout.is_zero() {
            return Err(GatewayConfigError::ZeroRequestTimeout);
        }
        if self.audit_drain_timeout >= self.request_timeout {
            return Err(GatewayConfigError::DrainNotBelowRequestTimeout {
                audit_drain_timeout: self.audit_drain_timeout,
                request_timeout: self.request_timeout,
            });
        }
        if self.max_body_bytes == 0 {
            return Err(GatewayConfigError::ZeroBodyLimit);
        }
        Ok(())
    }
}

/// Why a gateway could not be built. Returned before anything is served, so a bad route
/// never takes the application's other routes down with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GatewayConfigError {
    /// Only model/workflow surfaces are served over HTTP.
    #[error("surface `{0}` cannot be served by a capability gateway (use aiSdk, mcp or workflow)")]
    Surface(Surface),
    /// The revision is empty.
    #[error("the contract revision is empty")]
    EmptyRevision,
    /// The request timeout is zero.
    #[error("the request timeout must be positive")]
    ZeroRequestTimeout,
    /// The audit drain time does not fit inside the request ceiling.
    #[error(
        "the audit drain timeout ({audit_drain_timeout:?}) must be smaller than the request timeout ({request_timeout:?})"
    )]
    DrainNotBelowRequestTimeout {
        /// The configured drain time.
        audit_drain_timeout: Duration,
        /// The configured request ceiling.
        request_timeout: Duration,
    },
    /// The body limit is zero.
    #[error("the body limit must be positive")]
    ZeroBodyLimit,
    /// The contract cannot be exported.
    #[error(transparent)]
    Contract(#[from] ContractError),
}

/// The gateway as an axum router (mount it with `Router::nest`). Fails when the
/// configuration is invalid or the contract cannot be computed.
pub fn capability_router(config: GatewayConfig) -> Result<Router, GatewayConfigError> {
    config.validate()?;
    let contract = try_export_contract(&config.runtime, config.surface, &config.revision)?;
    let by_id = contract
        .iter()
        .enumerate()
        .map(|(i, d)| (d.id.clone(), i))
        .collect();
    let gateway = Gateway {
        surface: config.surface,
        runtime: config.runtime,
        journal: config.journal,
        authenticator: config.authenticator,
        authorizer: config.authorizer,
        request_timeout: config.request_timeout,
        audit_drain_timeout: config.audit_drain_timeout,
        max_body_bytes: config.max_body_bytes,
        contract,
        by_id,
    };
    Ok(Router::new()
        .route("/describe", post(describe))
        .route("/invoke", post(invoke))
        .route("/getInvocation", post(get_invocation))
        .route("/getApproval", post(get_approval))
        .route("/resumeApproval", post(resume_approval))
        .route("/contract", get(get_contract))
        .route("/tools", get(tools))
        .with_state(Arc::new(gateway)))
}

// ---------------------------------------------------------------------------------------
// Health.

/// What `/readyz` asks: can the gateway reach its store?
#[async_trait]
pub trait ReadinessProbe: Send + Sync + 'static {
    /// `Ok` when ready; the error is logged, never sent.
    async fn ready(&self) -> Result<(), String>;
}

#[async_trait]
impl ReadinessProbe for capgate_store::Store {
    /// Ready when the database answers and every embedded migration is applied.
    async fn ready(&self) -> Result<(), String> {
        let status = self.migration_status().await.map_err(|e| e.to_string())?;
        match status.iter().find(|m| !m.applied) {
            Some(m) => Err(format!(
                "migration {} ({}) is not applied",
                m.version, m.description
            )),
            None => Ok(()),
        }
    }
}

/// A readiness probe that reads one (absent) record from an invocation journal.
pub struct JournalProbe(pub Arc<dyn InvocationJournal>);

#[async_trait]
impl ReadinessProbe for JournalProbe {
    async fn ready(&self) -> Result<(), String> {
        self.0
            .get("capgate.readyz", "capgate.readyz")
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// How long `/readyz` waits for its probe.
pub const READINESS_TIMEOUT: Duration = Duration::from_secs(2);

/// `GET /healthz` (always `200`: the process serves) and `GET /readyz` (`200` when the
/// probe succeeds within [`READINESS_TIMEOUT`], `503` otherwise).
pub fn health_router(probe: impl ReadinessProbe) -> Router {
    let probe: Arc<dyn ReadinessProbe> = Arc::new(probe);
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(serde_json::json!({ "status": "ok" })) }),
        )
        .route(
            "/readyz",
            get(move || {
                let probe = probe.clone();
                async move {
                    match tokio::time::timeout(READINESS_TIMEOUT, probe.ready()).await {
                        Ok(Ok(())) => (
                            StatusCode::OK,
                            Json(serde_json::json!({ "status": "ready" })),
                        ),
                        Ok(Err(e)) => {
                            tracing::warn!(target: LOG, error = %e, "not ready");
                            unavailable()
                        }
                        Err(_) => {
                            tracing::warn!(target: LOG, "readiness probe timed out");
                            unavailable()
                        }
                    }
                }
            }),
        )
}

fn unavailable() -> (StatusCode, Json<Value>) {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(serde_json::json!({ "status": "unavailable" })),
    )
}

// ---------------------------------------------------------------------------------------
// Errors of the gateway itself.

/// A gateway-level refusal: an HTTP status plus a [`GatewayErrorBody`].
#[derive(Debug)]
pub(crate) struct Reject {
    status: StatusCode,
    code: &'static str,
    message: String,
    retryable: bool,
}

impl Reject {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Reject {
            status,
            code,
            message: message.into(),
            retryable: false,
        }
    }
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Reject::new(StatusCode::BAD_REQUEST, "BAD_REQUEST", message)
    }
    pub(crate) fn unauthenticated() -> Self {
        Reject::new(
            StatusCode::UNAUTHORIZED,
            "UNAUTHENTICATED",
            "Authentication is required.",
        )
    }
    pub(crate) fn forbidden() -> Self {
        Reject::new(
            StatusCode::FORBIDDEN,
            "FORBIDDEN",
            "The operation is not authorized.",
        )
    }
    fn too_large(limit: usize) -> Self {
        Reject::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PAYLOAD_TOO_LARGE",
            format!("The request body is larger than {limit} bytes."),
        )
    }
    fn timeout() -> Self {
        Reject {
            retryable: true,
            ..Reject::new(
                StatusCode::GATEWAY_TIMEOUT,
                "TIMEOUT",
                "The request ran out of time.",
            )
        }
    }
    pub(crate) fn unavailable(what: &str) -> Self {
        Reject {
            retryable: true,
            ..Reject::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "INTERNAL_ERROR",
                format!("The {what} is unavailable."),
            )
        }
    }
    pub(crate) fn internal() -> Self {
        Reject::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_ERROR",
            capgate_core::error::OPERATION_FAILED,
        )
    }

    fn journal(e: JournalError) -> Self {
        match e {
            JournalError::Invalid(m) => Reject::bad_request(m),
            other => {
                tracing::error!(target: LOG, error = %other, "invocation journal failed");
                match other {
                    JournalError::Malformed { .. } => Reject::internal(),
                    _ => Reject::unavailable("invocation journal"),
                }
            }
        }
    }
}

impl IntoResponse for Reject {
    fn into_response(self) -> Response {
        let body = GatewayErrorBody {
            error: GatewayError {
                code: self.code.to_string(),
                message: self.message,
                retryable: self.retryable,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Read a body of at most `limit` bytes (`413` beyond, checked before reading when the
/// client declares a length).
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, Reject> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(Reject::too_large(limit));
    }
    let mut stream = body.into_data_stream();
    let mut buf = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| Reject::bad_request(format!("The request body could not be read: {e}")))?;
        if buf.len().saturating_add(chunk.len()) > limit {
            return Err(Reject::too_large(limit));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(buf))
}

/// Parse a JSON request body; an empty body is `{}`. Errors name the field and position.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8], operation: &str) -> Result<T, Reject> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(bytes)
        .map_err(|e| Reject::bad_request(format!("Invalid {operation} request: {e}.")))
}

/// A bounded id: non-empty, at most [`MAX_ID_LEN`] characters, no control characters.
pub(crate) fn check_id(field: &str, value: &str) -> Result<(), Reject> {
    if value.is_empty() {
        return Err(Reject::bad_request(format!("`{field}` must not be empty.")));
    }
    if value.chars().count() > MAX_ID_LEN {
        return Err(Reject::bad_request(format!(
            "`{field}` is longer than {MAX_ID_LEN} characters."
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(Reject::bad_request(format!(
            "`{field}` contains control characters."
        )));
    }
    Ok(())
}

fn check_scope(scope: &Scope) -> Result<(), Reject> {
    let entries = scope.tags.len().saturating_add(scope.ids.len());
    if entries > MAX_SCOPE_ENTRIES {
        return Err(Reject::bad_request(format!(
            "`scope` has {entries} entries; at most {MAX_SCOPE_ENTRIES} tags and ids are accepted."
        )));
    }
    for (i, t) in scope.tags.iter().enumerate() {
        check_id(&format!("scope.tags[{i}]"), t)?;
    }
    for (i, id) in scope.ids.iter().enumerate() {
        check_id(&format!("scope.ids[{i}]"), id)?;
    }
    Ok(())
}

/// Authenticate a request and check what every principal must satisfy.
pub(crate) async fn authenticate(
    authenticator: &dyn Authenticator,
    runtime: &Runtime,
    headers: &HeaderMap,
) -> Result<Authenticated, Reject> {
    let who = authenticator.authenticate(headers).await.map_err(|e| {
        tracing::info!(target: LOG, reason = %e, "request not authenticated");
        Reject::unauthenticated()
    })?;
    check_principal(&who, runtime.now()).map_err(|e| {
        tracing::info!(target: LOG, reason = %e, "principal refused");
        Reject::unauthenticated()
    })?;
    Ok(who)
}

// ---------------------------------------------------------------------------------------
// The gateway.

struct Gateway {
    surface: Surface,
    runtime: Runtime,
    journal: Arc<dyn InvocationJournal>,
    authenticator: Arc<dyn Authenticator>,
    authorizer: Arc<dyn Authorizer>,
    request_timeout: Duration,
    audit_drain_timeout: Duration,
    max_body_bytes: usize,
    contract: Vec<PortableCapabilityDescriptor>,
    by_id: HashMap<String, usize>,
}

/// How a request that passed its preflight goes on.
enum Admission {
    /// Answer without executing (preflight failure, replay, unknown).
    Answer(CapabilityOutcome),
    /// This request owns the claim: execute, then settle.
    Run(Box<Run>),
}

struct Run {
    who: Authenticated,
    scope: String,
    invocation_id: String,
    claim_token: String,
    idempotency_key: String,
    call: Call,
}

enum Call {
    Invoke {
        capability_id: String,
        input: Value,
        correlation_id: Option<String>,
    },
    Resume {
        approval_id: String,
        /// The approval-required outcome recorded before the resume claim reopened it.
        previous_outcome: Option<Value>,
    },
}

impl Gateway {
    /// Time the work of a request may take before the audit drain.
    fn work_budget(&self) -> Duration {
        self.request_timeout
            .saturating_sub(self.audit_drain_timeout)
    }

    async fn authenticate(&self, headers: &HeaderMap) -> Result<Authenticated, Reject> {
        authenticate(self.authenticator.as_ref(), &self.runtime, headers).await
    }

    async fn authorize(
        &self,
        who: &Authenticated,
        operation: Operation,
        capability_id: Option<&str>,
        input: Option<&Value>,
    ) -> Result<(), Reject> {
        self.authorizer
            .authorize(&who.principal, operation, capability_id, input)
            .await
            .map_err(|e| {
                tracing::info!(
                    target: LOG,
                    operation = operation.as_str(),
                    actor = %who.principal.actor.id,
                    reason = %e,
                    "operation denied"
                );
                Reject::forbidden()
            })
    }

    fn scope(&self, who: &Authenticated) -> Result<String, Reject> {
        scope_hash(
            &who.principal.namespace,
            &who.principal.actor.reference(),
            self.surface,
        )
        .map_err(|e| {
            tracing::info!(target: LOG, reason = %e, "principal has no journal scope");
            Reject::unauthenticated()
        })
    }

    fn descriptor(&self, capability_id: &str) -> Option<&PortableCapabilityDescriptor> {
        self.by_id
            .get(capability_id)
            .and_then(|i| self.contract.get(*i))
    }

    fn digest_of(&self, capability_id: &str) -> Option<&str> {
        self.descriptor(capability_id)
            .map(|d| d.contract_digest.as_str())
    }

    /// Flush audit sinks within the drain reservation (and never past the ceiling).
    async fn drain(&self, started: Instant) {
        let ceiling = started + self.request_timeout;
        let deadline = (Instant::now() + self.audit_drain_timeout).min(ceiling);
        match tokio::time::timeout_at(deadline, self.runtime.drain_audit()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(target: LOG, error = %e, "audit drain failed"),
            Err(_) => tracing::error!(target: LOG, "audit drain timed out"),
        }
    }

    /// Run a non-executing operation within the work budget.
    async fn bounded<F>(&self, work: F) -> Response
    where
        F: Future<Output = Result<Response, Reject>>,
    {
        match tokio::time::timeout(self.work_budget(), work).await {
            Ok(Ok(r)) => r,
            Ok(Err(reject)) => reject.into_response(),
            Err(_) => Reject::timeout().into_response(),
        }
    }

    /// Replay what the journal holds: the settled outcome, or unknown.
    fn replay(&self, record: &InvocationRecord) -> CapabilityOutcome {
        if record.state == InvocationState::Settled
            && let Some(outcome) = stored_outcome(record)
        {
            return outcome;
        }
        CapabilityOutcome::OutcomeUnknown {
            invocation_id: record.invocation_id.clone(),
        }
    }

    async fn describe_for(
        &self,
        who: &Authenticated,
        scope: Option<Scope>,
    ) -> Result<Vec<CapabilityDescriptor>, Reject> {
        let options = DescribeOptions {
            actor: who.principal.actor.clone(),
            context: who.context.clone(),
            scope,
        };
        self.runtime
            .describe(self.surface, options)
            .await
            .map_err(|e| describe_error(&e))
    }

    // -- invoke ---------------------------------------------------------------------

    async fn admit_invoke(&self, headers: &HeaderMap, body: Body) -> Result<Admission, Reject> {
        let bytes = read_body(headers, body, self.max_body_bytes).await?;
        let who = self.authenticate(headers).await?;
        let req: InvokeBody = parse(&bytes, "invoke")?;
        check_id("capabilityId", &req.capability_id)?;
        check_id("invocationId", &req.invocation_id)?;
        if let Some(c) = &req.correlation_id {
            check_id("correlationId", c)?;
        }
        if let Some(d) = &req.contract_digest {
            check_id("contractDigest", d)?;
        }
        self.authorize(
            &who,
            Operation::Invoke,
            Some(&req.capability_id),
            Some(&req.input),
        )
        .await?;

        // A capability outside this surface's contract has no digest to compare: the
        // runtime answers it as CAPABILITY_NOT_FOUND like any unknown id.
        let current = self.digest_of(&req.capability_id).map(str::to_string);
        if let (Some(given), Some(current)) = (&req.contract_digest, &current)
            && given != current
        {
            return Ok(Admission::Answer(CapabilityOutcome::preflight(
                &req.invocation_id,
                OutcomeError::gateway(
                    gateway_codes::CONTRACT_MISMATCH,
                    "The contract digest does not match this deployment; fetch the current contract.",
                ),
            )));
        }

        let scope = self.scope(&who)?;
        let mut claim = ClaimRequest::new(
            scope.clone(),
            req.invocation_id.clone(),
            req.capability_id.clone(),
            req.input.clone(),
        )
        .map_err(Reject::journal)?;
        if let Some(c) = &req.correlation_id {
            claim = claim.correlation_id(c.clone()).map_err(Reject::journal)?;
        }
        if let Some(d) = &current {
            claim = claim.contract_digest(d.clone()).map_err(Reject::journal)?;
        }
        let claimed = self
            .journal
            .claim(claim, self.runtime.now())
            .await
            .map_err(Reject::journal)?;
        Ok(match claimed {
            ClaimOutcome::Conflict => Admission::Answer(CapabilityOutcome::preflight(
                &req.invocation_id,
                OutcomeError::gateway(
                    gateway_codes::INVOCATION_CONFLICT,
                    "This invocation id is already bound to a different capability or input.",
                ),
            )),
            ClaimOutcome::Existing(record) => Admission::Answer(self.replay(&record)),
            ClaimOutcome::Admitted {
                claim_token,
                record,
            } => Admission::Run(Box::new(Run {
                who,
                scope,
                invocation_id: record.invocation_id,
                claim_token,
                idempotency_key: record.idempotency_key,
                call: Call::Invoke {
                    capability_id: req.capability_id,
                    input: req.input,
                    correlation_id: req.correlation_id,
                },
            })),
        })
    }

    // -- resumeApproval -------------------------------------------------------------

    async fn admit_resume(&self, headers: &HeaderMap, body: Body) -> Result<Admission, Reject> {
        let bytes = read_body(headers, body, self.max_body_bytes).await?;
        let who = self.authenticate(headers).await?;
        let req: ResumeApprovalBody = parse(&bytes, "resumeApproval")?;
        check_id("approvalId", &req.approval_id)?;
        check_id("invocationId", &req.invocation_id)?;
        if let Some(c) = &req.correlation_id {
            check_id("correlationId", c)?;
        }
        let scope = self.scope(&who)?;
        // Unknown, someone else's, or bound to another invocation: one concealed answer,
        // serialized like the runtime's unknown approval id.
        let concealed = || {
            Admission::Answer(CapabilityOutcome::preflight(
                &req.invocation_id,
                PublicError::internal(),
            ))
        };
        let found = self
            .journal
            .find_approval(&scope, &req.approval_id)
            .await
            .map_err(Reject::journal)?
            .filter(|r| r.invocation_id == req.invocation_id);
        let Some(record) = found else {
            self.authorize(&who, Operation::ResumeApproval, None, None)
                .await?;
            return Ok(concealed());
        };
        self.authorize(
            &who,
            Operation::ResumeApproval,
            Some(&record.capability_id),
            Some(&record.input),
        )
        .await?;
        if !record.awaiting_approval {
            // Already resumed: its result (or unknown while that run is in flight).
            return Ok(Admission::Answer(self.replay(&record)));
        }
        // The current contract must still be the one the call was admitted under.
        if let (Some(recorded), Some(current)) = (
            record.contract_digest.as_deref(),
            self.digest_of(&record.capability_id),
        ) && recorded != current
        {
            return Ok(Admission::Answer(CapabilityOutcome::preflight(
                &req.invocation_id,
                OutcomeError::gateway(
                    gateway_codes::CONTRACT_MISMATCH,
                    "The deployment's contract changed since this call asked for approval.",
                ),
            )));
        }
        // Not decided yet: say so without reopening the claim.
        if let Ok(Some(approval)) = self.runtime.approvals().get(&req.approval_id).await
            && approval.effective_status(self.runtime.now()) == ApprovalStatus::Pending
        {
            return Ok(Admission::Answer(CapabilityOutcome::preflight(
                &req.invocation_id,
                public(ErrorCode::ApprovalPending),
            )));
        }
        let reopened = self
            .journal
            .claim_resume(
                &scope,
                &record.invocation_id,
                &req.approval_id,
                self.runtime.now(),
            )
            .await
            .map_err(Reject::journal)?;
        Ok(match reopened {
            ResumeClaim::Admitted {
                claim_token,
                record: reopened,
            } => Admission::Run(Box::new(Run {
                who,
                scope,
                invocation_id: reopened.invocation_id,
                claim_token,
                idempotency_key: reopened.idempotency_key,
                call: Call::Resume {
                    approval_id: req.approval_id.clone(),
                    previous_outcome: record.outcome.clone(),
                },
            })),
            ResumeClaim::NotResumable(current) => Admission::Answer(self.replay(&current)),
            ResumeClaim::NotFound => concealed(),
        })
    }

    // -- execution ------------------------------------------------------------------

    /// Execute an admitted run on its own task, cancelled when the work budget runs out
    /// or the request is dropped; answer unknown when it does not finish in time.
    async fn execute(self: &Arc<Self>, run: Box<Run>, started: Instant) -> CapabilityOutcome {
        let invocation_id = run.invocation_id.clone();
        let cancel = CancellationToken::new();
        // Fires if this request future is dropped (client gone) before the run ends.
        let on_drop = cancel.clone().drop_guard();
        let gateway = self.clone();
        let token = cancel.clone();
        let mut task = tokio::spawn(async move { gateway.execute_and_settle(*run, token).await });
        let work_deadline = started + self.work_budget();
        let joined = tokio::select! {
            joined = &mut task => Some(joined),
            _ = tokio::time::sleep_until(work_deadline) => {
                cancel.cancel();
                // Give a cooperative procedure part of the drain reservation to wind down.
                let grace = work_deadline + self.audit_drain_timeout / 2;
                tokio::time::timeout_at(grace, &mut task).await.ok()
            }
        };
        let _ = on_drop.disarm();
        match joined {
            Some(Ok(outcome)) => outcome,
            Some(Err(e)) => {
                tracing::error!(target: LOG, invocation = %invocation_id, error = %e, "execution task failed");
                CapabilityOutcome::OutcomeUnknown { invocation_id }
            }
            None => {
                tracing::warn!(target: LOG, invocation = %invocation_id, "execution did not stop in time; outcome unknown");
                CapabilityOutcome::OutcomeUnknown { invocation_id }
            }
        }
    }

    async fn execute_and_settle(&self, run: Run, cancel: CancellationToken) -> CapabilityOutcome {
        let actor = run.who.principal.actor.clone();
        let result = match &run.call {
            Call::Invoke {
                capability_id,
                input,
                correlation_id,
            } => {
                let mut request =
                    InvokeRequest::new(self.surface, capability_id.clone(), input.clone(), actor)
                        .context(run.who.context.clone())
                        .cancel(cancel)
                        .idempotency_key(run.idempotency_key.clone());
                if let Some(c) = correlation_id {
                    request = request.correlation_id(c.clone());
                }
                self.runtime.invoke(request).await
            }
            Call::Resume { approval_id, .. } => {
                let options = ResumeOptions {
                    context: run.who.context.clone(),
                    cancel: Some(cancel),
                    expected_actor: Some(actor.reference()),
                    expected_surface: Some(self.surface),
                    idempotency_key: Some(run.idempotency_key.clone()),
                    progress: None,
                };
                self.runtime.resume(approval_id, options).await
            }
        };
        let unknown = CapabilityOutcome::OutcomeUnknown {
            invocation_id: run.invocation_id.clone(),
        };
        if result.effect_unknown() {
            // The procedure was entered: a late or partial effect may still commit. The
            // claim stays pending; only an operator's reconcile may settle it.
            tracing::warn!(
                target: LOG,
                invocation = %run.invocation_id,
                execution = %result.execution_id(),
                "effect status unknown; receipt left pending"
            );
            return unknown;
        }
        let outcome = outcome_of(&run.invocation_id, result.clone());
        let Ok(value) = serde_json::to_value(&outcome) else {
            tracing::error!(target: LOG, invocation = %run.invocation_id, "outcome could not be serialized; receipt left pending");
            return unknown;
        };
        let settlement = match (&result, &run.call) {
            (ExecutionResult::ApprovalRequired { approval, .. }, _) => {
                Settlement::approval_required(approval.id.clone(), value)
            }
            // The resume found the approval still undecided (a decision raced the
            // pre-check): nothing ran, so the call keeps waiting for that approval.
            (
                ExecutionResult::Failed { error, .. },
                Call::Resume {
                    approval_id,
                    previous_outcome: Some(previous),
                },
            ) if error.code() == ErrorCode::ApprovalPending => {
                Settlement::approval_required(approval_id.clone(), previous.clone())
            }
            _ => Settlement::final_outcome(value),
        };
        if let Err(e) = self
            .journal
            .settle(
                &run.scope,
                &run.invocation_id,
                &run.claim_token,
                settlement,
                self.runtime.now(),
            )
            .await
        {
            // The result is real; the receipt stays pending until reconciled.
            tracing::error!(target: LOG, invocation = %run.invocation_id, error = %e, "settling the receipt failed");
        }
        outcome
    }
}

/// The wire outcome of a runtime result (effect-unknown results are handled before).
fn outcome_of(invocation_id: &str, result: ExecutionResult) -> CapabilityOutcome {
    let invocation_id = invocation_id.to_string();
    match result {
        ExecutionResult::Completed {
            execution_id,
            output,
        } => CapabilityOutcome::Completed {
            invocation_id,
            execution_id,
            output,
        },
        ExecutionResult::ApprovalRequired {
            execution_id,
            approval,
        } => CapabilityOutcome::ApprovalRequired {
            invocation_id,
            execution_id,
            approval,
        },
        ExecutionResult::Failed {
            execution_id,
            error,
            ..
        } => CapabilityOutcome::Failed {
            invocation_id,
            execution_id,
            error: error.to_public().into(),
        },
        ExecutionResult::Cancelled {
            execution_id,
            error,
            ..
        } => CapabilityOutcome::Cancelled {
            invocation_id,
            execution_id,
            error: error.to_public().into(),
        },
    }
}

/// The settled outcome of a record, if it reads back as one for this invocation.
fn stored_outcome(record: &InvocationRecord) -> Option<CapabilityOutcome> {
    let value = record.outcome.clone()?;
    match serde_json::from_value::<CapabilityOutcome>(value) {
        Ok(o) if o.invocation_id() == record.invocation_id => Some(o),
        Ok(_) | Err(_) => {
            tracing::error!(target: LOG, invocation = %record.invocation_id, "stored outcome is malformed; treated as unknown");
            None
        }
    }
}

fn iso(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The public receipt of a record.
fn receipt(record: &InvocationRecord) -> InvocationReceipt {
    InvocationReceipt {
        invocation_id: record.invocation_id.clone(),
        capability_id: record.capability_id.clone(),
        contract_digest: record.contract_digest.clone().unwrap_or_default(),
        correlation_id: record.correlation_id.clone(),
        approval_id: record.approval_id.clone(),
        state: record.state.as_str().to_string(),
        outcome: match record.state {
            InvocationState::Settled => stored_outcome(record),
            InvocationState::Pending => None,
        },
        created_at: iso(record.created_at),
        updated_at: iso(record.updated_at),
    }
}

fn describe_error(e: &CapabilityError) -> Reject {
    let p = e.to_public();
    let status = if p.code == ErrorCode::Timeout {
        StatusCode::GATEWAY_TIMEOUT
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    Reject {
        status,
        code: p.code.as_str(),
        message: p.message,
        retryable: p.retryable,
    }
}

// ---------------------------------------------------------------------------------------
// Handlers.

async fn describe(State(gw): State<Arc<Gateway>>, headers: HeaderMap, body: Body) -> Response {
    let started = Instant::now();
    let response = gw
        .bounded(async {
            let bytes = read_body(&headers, body, gw.max_body_bytes).await?;
            let who = gw.authenticate(&headers).await?;
            let req: DescribeBody = parse(&bytes, "describe")?;
            if let Some(s) = &req.scope {
                check_scope(s)?;
            }
            gw.authorize(&who, Operation::Describe, None, None).await?;
            let descriptors = gw.describe_for(&who, req.scope).await?;
            let portable: Vec<PortableCapabilityDescriptor> = descriptors
                .iter()
                .filter_map(|d| {
                    let mut p = gw.descriptor(&d.id)?.clone();
                    p.requires_approval = d.requires_approval.unwrap_or(p.requires_approval);
                    Some(p)
                })
                .collect();
            Ok(Json(portable).into_response())
        })
        .await;
    gw.drain(started).await;
    response
}

async fn invoke(State(gw): State<Arc<Gateway>>, headers: HeaderMap, body: Body) -> Response {
    let started = Instant::now();
    let admission = gw.admit_invoke(&headers, body);
    answer_admitted(&gw, started, admission).await
}

async fn resume_approval(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let admission = gw.admit_resume(&headers, body);
    answer_admitted(&gw, started, admission).await
}

/// The tail shared by `invoke` and `resumeApproval`: admission within the work budget, then
/// either the recorded answer or the governed run (and the audit drain after it).
async fn answer_admitted(
    gw: &Arc<Gateway>,
    started: Instant,
    admission: impl std::future::Future<Output = Result<Admission, Reject>>,
) -> Response {
    let outcome = match tokio::time::timeout(gw.work_budget(), admission).await {
        Err(_) => return Reject::timeout().into_response(),
        Ok(Err(reject)) => return reject.into_response(),
        Ok(Ok(Admission::Answer(outcome))) => outcome,
        Ok(Ok(Admission::Run(run))) => {
            let outcome = gw.execute(run, started).await;
            gw.drain(started).await;
            outcome
        }
    };
    Json(outcome).into_response()
}

async fn get_invocation(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    gw.bounded(async {
        let bytes = read_body(&headers, body, gw.max_body_bytes).await?;
        let who = gw.authenticate(&headers).await?;
        let req: GetInvocationBody = parse(&bytes, "getInvocation")?;
        check_id("invocationId", &req.invocation_id)?;
        let scope = gw.scope(&who)?;
        let record = gw
            .journal
            .get(&scope, &req.invocation_id)
            .await
            .map_err(Reject::journal)?;
        match record {
            None => {
                gw.authorize(&who, Operation::GetInvocation, None, None)
                    .await?;
                Ok(Json(Value::Null).into_response())
            }
            Some(r) => {
                gw.authorize(
                    &who,
                    Operation::GetInvocation,
                    Some(&r.capability_id),
                    Some(&r.input),
                )
                .await?;
                Ok(Json(receipt(&r)).into_response())
            }
        }
    })
    .await
}

async fn get_approval(State(gw): State<Arc<Gateway>>, headers: HeaderMap, body: Body) -> Response {
    gw.bounded(async {
        let bytes = read_body(&headers, body, gw.max_body_bytes).await?;
        let who = gw.authenticate(&headers).await?;
        let req: GetApprovalBody = parse(&bytes, "getApproval")?;
        check_id("approvalId", &req.approval_id)?;
        let scope = gw.scope(&who)?;
        let record = gw
            .journal
            .find_approval(&scope, &req.approval_id)
            .await
            .map_err(Reject::journal)?;
        let Some(record) = record else {
            gw.authorize(&who, Operation::GetApproval, None, None)
                .await?;
            return Ok(Json(Value::Null).into_response());
        };
        gw.authorize(
            &who,
            Operation::GetApproval,
            Some(&record.capability_id),
            Some(&record.input),
        )
        .await?;
        let approval = gw
            .runtime
            .approvals()
            .get(&req.approval_id)
            .await
            .map_err(|e| {
                tracing::error!(target: LOG, error = %e, "approval lookup failed");
                Reject::unavailable("approval store")
            })?;
        // The journal scope already binds the requester; the record must agree.
        let me = &who.principal.actor;
        let summary = approval
            .filter(|a| {
                a.request.actor.id == me.id
                    && a.request.actor.kind == me.kind
                    && a.request.surface == gw.surface
            })
            .map(|a| a.summary(gw.runtime.now()));
        Ok(Json(summary).into_response())
    })
    .await
}

async fn get_contract(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    gw.bounded(async {
        let who = gw.authenticate(&headers).await?;
        gw.authorize(&who, Operation::Describe, None, None).await?;
        Ok(Json(&gw.contract).into_response())
    })
    .await
}

async fn tools(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let started = Instant::now();
    let response = gw
        .bounded(async {
            let who = gw.authenticate(&headers).await?;
            let Query(query) =
                query.map_err(|e| Reject::bad_request(format!("Invalid query: {e}.")))?;
            if let Some(unknown) = query.keys().find(|k| k.as_str() != "format") {
                return Err(Reject::bad_request(format!(
                    "Unknown query parameter `{unknown}` (expected `format`)."
                )));
            }
            let format = match query.get("format") {
                None => ToolFormat::AiSdk,
                Some(f) => f
                    .parse::<ToolFormat>()
                    .map_err(|e| Reject::bad_request(format!("{e}.")))?,
            };
            gw.authorize(&who, Operation::Describe, None, None).await?;
            let descriptors = gw.describe_for(&who, None).await?;
            Ok(Json(export_tools(&descriptors, gw.runtime.registry(), format)).into_response())
        })
        .await;
    gw.drain(started).await;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_bounded_and_clean() {
        assert!(check_id("invocationId", "inv_1").is_ok());
        assert!(check_id("invocationId", &"x".repeat(256)).is_ok());
        let long = check_id("invocationId", &"x".repeat(257)).err();
        assert_eq!(long.map(|r| r.status), Some(StatusCode::BAD_REQUEST));
        assert!(check_id("invocationId", "").is_err());
        assert!(check_id("invocationId", "a\nb").is_err());
    }

    #[test]
    fn scopes_are_bounded() {
        let ok = Scope {
            tags: vec!["t".into(); 500],
            ids: vec!["i".into(); 500],
        };
        assert!(check_scope(&ok).is_ok());
        let too_many = Scope {
            tags: vec!["t".into(); 1001],
            ids: vec![],
        };
        assert!(check_scope(&too_many).is_err());
    }

    #[tokio::test]
    async fn bodies_are_capped_with_or_without_a_declared_length() {
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            (0..10).map(|_| Ok(Bytes::from(vec![b'x'; 1024]))).collect();
        let streamed = Body::from_stream(futures::stream::iter(chunks));
        let r = read_body(&HeaderMap::new(), streamed, 4096).await.err();
        assert_eq!(r.map(|r| r.status), Some(StatusCode::PAYLOAD_TOO_LARGE));

        let mut declared = HeaderMap::new();
        declared.insert(header::CONTENT_LENGTH, HeaderValue::from_static("5000"));
        let r = read_body(&declared, Body::empty(), 4096).await.err();
        assert_eq!(r.map(|r| r.status), Some(StatusCode::PAYLOAD_TOO_LARGE));

        let fits = read_body(&HeaderMap::new(), Body::from("{}"), 4096)
            .await
            .ok();
        assert_eq!(fits.as_deref(), Some(&b"{}"[..]));
    }

    #[test]
    fn parse_names_unknown_fields_and_treats_empty_as_an_empty_object() {
        let e = parse::<InvokeBody>(
            br#"{"capabilityId":"a","invocationId":"b","actor":"x"}"#,
            "invoke",
        )
        .err();
        assert!(e.is_some_and(|r| r.message.contains("unknown field `actor`")));
        assert!(parse::<DescribeBody>(b"", "describe").is_ok());
    }
}
