//! One call to an upstream, as a [`Provider`]: capgate's envelope POSTed (a plain or an
//! NDJSON-streamed answer) or the service's own request (the `request` mapping), the
//! answer's status mapped to the procedure's outcome, the body read within its bound.

use super::request::RequestPlan;
use super::{HttpUpstream, MAX_RESPONSE_BYTES, NDJSON_CONTENT_TYPE, with_causes};
use crate::events::RuntimeEvent;
use crate::health::ProviderProber;
use crate::provider::{ExecutionOutcome, Provider, ProviderIdentity, ProviderRun, TokenUsage};
use crate::runtime::Sink;
use async_trait::async_trait;
use capgate_core::procedure::{AgentInvocationInfo, ProcedureError};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tracing::Instrument;

impl HttpUpstream {
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

pub(super) async fn read_body(resp: &mut reqwest::Response) -> Result<Vec<u8>, ProcedureError> {
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
