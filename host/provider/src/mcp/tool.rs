//! One MCP tool as a capability's procedure: `tools/call` at stage 11, the answer mapped onto
//! an output or a governed failure.

use super::session::McpUpstream;
use crate::events::RuntimeEvent;
use crate::provider::{ExecutionOutcome, Provider, ProviderIdentity, ProviderRun};
use async_trait::async_trait;
use capgate_core::procedure::ProcedureError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelTaskParams,
    CancelledNotification, CancelledNotificationParam, ClientNotification, ClientRequest,
    ContentBlock, CreateTaskResult, GetTaskParams, ProgressToken, RequestId, ServerResult,
    TaskPayload,
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
/// The longest task id an upstream may hand out (a hostile one is refused, not echoed).
const MAX_TASK_ID: usize = 256;
/// The bounds put on an upstream task's `pollIntervalMs` (absent: the lower one doubled).
const POLL_MIN: std::time::Duration = std::time::Duration::from_millis(50);
const POLL_MAX: std::time::Duration = std::time::Duration::from_secs(5);
/// The longest status message of an upstream task passed on as progress.
const MAX_STATUS_MESSAGE: usize = 512;

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
            // The upstream answered with a task (the MCP tasks extension): polled within
            // the capability's deadline, cancelled with `tasks/cancel` when the call is.
            Ok(ServerResult::CreateTaskResult(created)) => {
                self.await_task(&peer, created, run).await
            }
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

    /// Poll an upstream task (`tasks/get`, at its `pollIntervalMs` within
    /// [`POLL_MIN`]..[`POLL_MAX`]) until it ends; its status messages become progress. The
    /// capability's deadline and the caller's cancellation end the wait and send
    /// `tasks/cancel`. A task that asks for input is cancelled and fails the call: capgate
    /// has nobody to ask (a human decides in capgate's console, never through a tool).
    async fn await_task(
        &self,
        peer: &Peer<RoleClient>,
        created: CreateTaskResult,
        run: &ProviderRun,
    ) -> Result<ExecutionOutcome, ProcedureError> {
        let name = self.upstream.name().to_string();
        let task_id = created.task.task_id;
        if task_id.is_empty()
            || task_id.len() > MAX_TASK_ID
            || task_id.chars().any(char::is_control)
        {
            count_failure(&name, "rpc");
            return Err(ProcedureError::internal(format!(
                "MCP upstream `{name}`: a task id that is empty, too long or has control characters"
            )));
        }
        let mut cancel_task = CancelTaskOnDrop {
            peer: Some(peer.clone()),
            task_id: task_id.clone(),
        };
        let mut interval = poll_interval(created.task.poll_interval_ms);
        let mut said: Option<String> = None;
        loop {
            tokio::select! {
                biased;
                _ = run.cancel.cancelled() => {
                    // Dropping `cancel_task` sends `tasks/cancel`.
                    return Err(ProcedureError::internal("upstream task cancelled"));
                }
                () = tokio::time::sleep(interval) => {}
            }
            let got = tokio::select! {
                biased;
                _ = run.cancel.cancelled() => {
                    return Err(ProcedureError::internal("upstream task cancelled"));
                }
                r = peer.get_task(GetTaskParams::new(task_id.clone())) => r,
            };
            let got = got.map_err(|e| {
                count_failure(&name, "rpc");
                ProcedureError::internal(format!("MCP upstream `{name}`: tasks/get: {e}"))
            })?;
            let task = got.task;
            if task.task.task_id != task_id {
                count_failure(&name, "rpc");
                return Err(ProcedureError::internal(format!(
                    "MCP upstream `{name}`: tasks/get answered for another task"
                )));
            }
            interval = poll_interval(task.task.poll_interval_ms);
            let message = task
                .task
                .status_message
                .map(|m| m.chars().take(MAX_STATUS_MESSAGE).collect::<String>());
            if message.is_some() && message != said {
                let _ = run
                    .events
                    .emit(RuntimeEvent::progress(json!({ "message": message })));
                said = message;
            }
            match task.payload {
                TaskPayload::Working => {}
                TaskPayload::Completed { result } => {
                    cancel_task.disarm();
                    let result: CallToolResult = serde_json::from_value(Value::Object(result))
                        .map_err(|e| {
                            count_failure(&name, "rpc");
                            ProcedureError::internal(format!(
                                "MCP upstream `{name}`: a completed task's result is not a tool result: {e}"
                            ))
                        })?;
                    return self.outcome(result);
                }
                TaskPayload::Failed { error } => {
                    cancel_task.disarm();
                    count_failure(&name, "rpc");
                    let message: String = error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("no message")
                        .chars()
                        .take(MAX_PRIVATE_TEXT)
                        .collect();
                    return Err(ProcedureError::internal(format!(
                        "MCP upstream `{name}`: the task failed: {message}"
                    )));
                }
                TaskPayload::Cancelled => {
                    cancel_task.disarm();
                    count_failure(&name, "rpc");
                    return Err(ProcedureError::internal(format!(
                        "MCP upstream `{name}`: the upstream cancelled the task"
                    )));
                }
                TaskPayload::InputRequired { .. } => {
                    count_failure(&name, "rpc");
                    return Err(ProcedureError::internal(format!(
                        "MCP upstream `{name}`: the task asks for input capgate has nobody to ask for"
                    )));
                }
                _ => {}
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

/// An upstream task's `pollIntervalMs`, bounded so a hostile upstream can neither make
/// capgate spin nor stall it past its deadline's usefulness.
fn poll_interval(ms: Option<u64>) -> std::time::Duration {
    ms.map_or(POLL_MIN * 2, std::time::Duration::from_millis)
        .clamp(POLL_MIN, POLL_MAX)
}

/// Sends `tasks/cancel` for an upstream task still working when it is dropped (the call's
/// deadline, the caller's cancellation, or a task capgate cannot finish), best effort and
/// bounded by [`CANCEL_SEND_TIMEOUT`], on a task of its own, as [`CancelOnDrop`] does.
struct CancelTaskOnDrop {
    peer: Option<Peer<RoleClient>>,
    task_id: String,
}

impl CancelTaskOnDrop {
    /// The task ended: nothing to cancel.
    fn disarm(&mut self) {
        self.peer = None;
    }
}

impl Drop for CancelTaskOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let params = CancelTaskParams::new(std::mem::take(&mut self.task_id));
        rt.spawn(async move {
            let _ = tokio::time::timeout(CANCEL_SEND_TIMEOUT, peer.cancel_task(params)).await;
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
