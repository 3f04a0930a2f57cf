//! One MCP tool as a capability's procedure: `tools/call` at stage 11, the answer mapped onto
//! an output or a governed failure.

use super::session::McpUpstream;
use crate::events::RuntimeEvent;
use crate::provider::{ExecutionOutcome, Provider, ProviderIdentity, ProviderRun};
use async_trait::async_trait;
use capgate_core::procedure::ProcedureError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientNotification, ClientRequest, ContentBlock, ProgressToken,
    RequestId, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use rmcp::service::{Peer, RoleClient};
use serde_json::{Value, json};
use std::sync::Arc;

/// Calls that failed at an upstream, by upstream and kind (`connect`, `transport`, `rpc`,
/// `tool`, `pin`).
pub const MCP_UPSTREAM_FAILURES: &str = "capgate_mcp_upstream_failures_total";
/// The public message of a tool's own error (`isError: true`); its text stays private.
pub const TOOL_ERROR_MESSAGE: &str = "The tool reported an error.";
/// The defined error code of a tool's own error.
pub const TOOL_ERROR_CODE: &str = "TOOL_ERROR";
/// How long a `notifications/cancelled` may take to send.
const CANCEL_SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// The most private detail kept of a tool error's text.
const MAX_PRIVATE_TEXT: usize = 4_096;

pub(crate) fn count_failure(upstream: &str, kind: &'static str) {
    metrics::counter!(MCP_UPSTREAM_FAILURES, "upstream" => upstream.to_string(), "kind" => kind)
        .increment(1);
}

/// A capability's procedure: `tool` on `upstream`, pinned to `pin`.
pub struct McpToolProvider {
    identity: ProviderIdentity,
    upstream: Arc<McpUpstream>,
    tool: String,
    pin: String,
}

impl McpToolProvider {
    /// The procedure of capability `capability`: identity `mcp:<capability>`.
    pub fn new(
        capability: impl Into<String>,
        upstream: Arc<McpUpstream>,
        tool: impl Into<String>,
        pin: impl Into<String>,
    ) -> Self {
        McpToolProvider {
            identity: ProviderIdentity::new(super::MCP_ADAPTER, capability.into()),
            upstream,
            tool: tool.into(),
            pin: pin.into(),
        }
    }

    async fn call(&self, run: &ProviderRun) -> Result<ExecutionOutcome, ProcedureError> {
        let name = self.upstream.name().to_string();
        let arguments = match &run.request.input {
            Value::Object(m) => Some(m.clone()),
            Value::Null => None,
            _ => {
                return Err(ProcedureError::not_sent(
                    "an MCP tool's input must be a JSON object",
                ));
            }
        };
        // Waiting for a slot or the session: a cancellation here means nothing was sent.
        let cancelled = || ProcedureError::not_sent("upstream call cancelled before it was sent");
        let permits = self.upstream.permits().clone();
        let _permit = tokio::select! {
            biased;
            _ = run.cancel.cancelled() => return Err(cancelled()),
            p = permits.acquire_owned() => {
                p.map_err(|_| ProcedureError::not_sent("the upstream is closed"))?
            }
        };
        let peer = tokio::select! {
            biased;
            _ = run.cancel.cancelled() => return Err(cancelled()),
            p = self.upstream.peer() => p.map_err(|e| {
                ProcedureError::not_sent(format!("MCP upstream `{name}`: {e}"))
            })?,
        };
        // The listing made when the session opened (or the latest one) must still show the
        // reviewed definition: a tool that changed since is never called.
        let state = self.upstream.pin_state(&self.tool, &self.pin);
        if !matches!(state, super::PinState::Matches) {
            count_failure(&name, "pin");
            return Err(ProcedureError::not_sent(format!(
                "MCP upstream `{name}`: tool `{}` does not match its pin ({state:?})",
                self.tool
            )));
        }
        let mut params = CallToolRequestParams::new(self.tool.clone());
        params.arguments = arguments;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let _ = run.events.emit(RuntimeEvent::start());
        let handle = peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| {
                count_failure(&name, "transport");
                ProcedureError::internal(format!("MCP upstream `{name}`: {e}"))
            })?;
        let routes = self.upstream.routes().clone();
        let token = handle.progress_token.clone();
        routes.insert(&token, run.events.clone());
        // Armed until the answer arrives: the deadline or the caller's abort may end this
        // call by cancelling it or by dropping (aborting) this future, and either way the
        // progress route goes and the upstream is told to stop, from a task of its own that
        // the abort cannot reach.
        let mut cancel_upstream = CancelOnDrop {
            peer: Some(peer.clone()),
            id: handle.id.clone(),
            routes,
            token,
        };
        let answer = tokio::select! {
            biased;
            _ = run.cancel.cancelled() => None,
            r = handle.await_response() => Some(r),
        };
        let Some(answer) = answer else {
            // Dropping `cancel_upstream` sends `notifications/cancelled`.
            return Err(ProcedureError::internal("upstream call cancelled"));
        };
        cancel_upstream.disarm();
        match answer {
            Ok(ServerResult::CallToolResult(result)) => self.outcome(result),
            Ok(_) => {
                count_failure(&name, "rpc");
                Err(ProcedureError::internal(format!(
                    "MCP upstream `{name}`: unexpected answer to tools/call"
                )))
            }
            Err(e) => {
                let reason = e.to_string();
                if peer.is_transport_closed() {
                    count_failure(&name, "transport");
                    self.upstream.broken(&reason).await;
                } else {
                    count_failure(&name, "rpc");
                }
                Err(ProcedureError::internal(format!(
                    "MCP upstream `{name}`: {reason}"
                )))
            }
        }
    }

    fn outcome(&self, result: CallToolResult) -> Result<ExecutionOutcome, ProcedureError> {
        let text = || {
            result
                .content
                .iter()
                .filter_map(|c| match c {
                    ContentBlock::Text(t) => Some(t.text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        if result.is_error == Some(true) {
            count_failure(self.upstream.name(), "tool");
            let private: String = text().chars().take(MAX_PRIVATE_TEXT).collect();
            return Err(ProcedureError::Defined {
                code: TOOL_ERROR_CODE.into(),
                message: TOOL_ERROR_MESSAGE.into(),
                data: Some(json!({ "upstream": self.upstream.name(), "text": private })),
                retryable: false,
            });
        }
        let output = match result.structured_content {
            Some(v) => v,
            None => json!({ "text": text() }),
        };
        Ok(ExecutionOutcome::new(output))
    }
}

/// Sends `notifications/cancelled` for a `tools/call` still in flight when it is dropped
/// (best effort, bounded by [`CANCEL_SEND_TIMEOUT`]), on a spawned task: the provider
/// runtime aborts the procedure's task when the deadline passes or the caller goes, so a
/// notification sent inline after the cancellation was seen would never leave.
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
    routes: Arc<super::session::ProgressRoutes>,
    token: ProgressToken,
}

impl CancelOnDrop {
    /// The call was answered: nothing to cancel.
    fn disarm(&mut self) {
        self.peer = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.routes.remove(&self.token);
        let Some(peer) = self.peer.take() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let cancelled = CancelledNotification::new(CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some("cancelled by capgate (deadline or caller)".into()),
        ));
        rt.spawn(async move {
            let _ = tokio::time::timeout(
                CANCEL_SEND_TIMEOUT,
                peer.send_notification(ClientNotification::CancelledNotification(cancelled)),
            )
            .await;
        });
    }
}

#[async_trait]
impl Provider for McpToolProvider {
    fn identity(&self) -> &ProviderIdentity {
        &self.identity
    }

    /// Cancellation is watched inside the call, so an abandoned `tools/call` is followed by
    /// `notifications/cancelled`.
    async fn execute(&self, run: ProviderRun) -> Result<ExecutionOutcome, ProcedureError> {
        self.call(&run).await
    }
}
