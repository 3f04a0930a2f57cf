//! The rmcp [`ServerHandler`]: tools/list = describe, tools/call = invoke (or resume), and
//! `tasks/*` for held calls ([`task_calls`]).

mod task_calls;

use super::McpOptions;
use super::McpServeError;
use crate::auth::{Authenticated, check_principal};
use capgate_core::actor::{Actor, ActorKind, Surface};
use capgate_core::authz::{AuthorizeRequest, Authorizer, Operation, Principal};
use capgate_core::error::{CapabilityError, ErrorCode, Issue};
use capgate_core::id::BoundedId;
use capgate_core::meta::{Discovery, SideEffect};
use capgate_core::procedure::ProgressFn;
use capgate_core::result::ExecutionResult;
use capgate_core::runtime::{
    CapabilityDescriptor, DescribeOptions, InvokeRequest, ResumeOptions, Runtime,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    GetTaskParams, GetTaskResult, Implementation, JsonObject, ListToolsResult, MetaObject,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// Name of the optional tool that resumes an approved call.
pub const RESUME_TOOL: &str = "approvals_resume";

/// Longest tool name an unknown-tool refusal records as it was sent (longer ones are cut,
/// so a hostile name cannot bloat the audit).
const MAX_RECORDED_TOOL_NAME_LEN: usize = 256;

/// `name` cut to at most [`MAX_RECORDED_TOOL_NAME_LEN`] bytes, on a character boundary.
fn bounded_name(name: &str) -> String {
    let mut end = name.len().min(MAX_RECORDED_TOOL_NAME_LEN);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// Where the caller's identity comes from.
#[derive(Debug, Clone)]
pub enum McpIdentity {
    /// One configured actor for the whole connection (stdio).
    Fixed {
        /// The actor every call runs as.
        actor: Actor,
        /// The tenant partition every call runs in.
        namespace: String,
        /// The application context handed to the runtime.
        context: Value,
    },
    /// The principal that [`super::streamable_http_router`] authenticated for the HTTP
    /// request carrying each MCP message.
    PerRequest,
}

impl McpIdentity {
    /// A fixed identity, checked like an authenticated one (no anonymous actor, no empty
    /// namespace, a well-formed id).
    pub fn fixed(
        actor: Actor,
        namespace: String,
        context: Value,
    ) -> Result<McpIdentity, McpServeError> {
        if actor.kind == ActorKind::Anonymous {
            return Err(McpServeError::InvalidActor(
                "anonymous actors are rejected".into(),
            ));
        }
        if !actor.is_well_formed() {
            return Err(McpServeError::InvalidActor("malformed actor id".into()));
        }
        if namespace.trim().is_empty() {
            return Err(McpServeError::InvalidActor("empty namespace".into()));
        }
        Ok(McpIdentity::Fixed {
            actor,
            namespace,
            context,
        })
    }
}

/// The caller of one MCP request.
#[derive(Clone)]
pub(super) struct Caller {
    pub(super) principal: Principal,
    pub(super) context: Value,
}

/// The MCP server over one runtime. Cheap to clone; holds no per-session authority.
#[derive(Clone)]
pub struct CapgateMcp {
    runtime: Runtime,
    identity: Arc<McpIdentity>,
    authorizer: Arc<dyn Authorizer>,
    options: Arc<McpOptions>,
}

impl CapgateMcp {
    /// A server over `runtime` whose callers are identified by `identity`, and whose every
    /// list, call and resume is asked of `authorizer` (told the `mcp` surface), as on
    /// every other door.
    pub fn new(
        runtime: Runtime,
        identity: McpIdentity,
        authorizer: Arc<dyn Authorizer>,
        options: McpOptions,
    ) -> Self {
        CapgateMcp {
            runtime,
            identity: Arc::new(identity),
            authorizer,
            options: Arc::new(options),
        }
    }

    /// Ask the authorizer; a refusal is a protocol error that says only that.
    async fn authorize(
        &self,
        caller: &Caller,
        operation: Operation,
        capability_id: Option<&str>,
        input: Option<&Value>,
    ) -> Result<(), ErrorData> {
        let request = AuthorizeRequest {
            principal: &caller.principal,
            operation,
            surface: Some(Surface::Mcp),
            capability_id,
            input,
        };
        self.authorizer.authorize(&request).await.map_err(|e| {
            tracing::info!(target: "capgate::mcp", operation = operation.as_str(), actor = %caller.principal.actor.id, reason = %e, "MCP operation denied");
            ErrorData::invalid_request("The operation is not authorized.", None)
        })
    }

    /// Whether `caller` may learn that `capability_id` exists: the authorizer lets it list
    /// tools and discovery shows it this one. A refusal for anything else is answered as
    /// the concealed not-found (SI-8).
    async fn may_learn(&self, caller: &Caller, capability_id: &str) -> Result<bool, ErrorData> {
        if self
            .authorize(caller, Operation::Describe, None, None)
            .await
            .is_err()
        {
            return Ok(false);
        }
        self.discoverable(caller, capability_id).await
    }

    /// Whether `caller` can discover `capability_id` on the `mcp` surface.
    async fn discoverable(&self, caller: &Caller, capability_id: &str) -> Result<bool, ErrorData> {
        let found = describe_mcp(
            self.runtime.clone(),
            false,
            DescribeOptions {
                namespace: caller.principal.namespace.clone(),
                actor: caller.principal.actor.clone(),
                context: caller.context.clone(),
                scope: Some(capgate_core::runtime::Scope {
                    tags: vec![],
                    ids: vec![capability_id.to_string()],
                }),
            },
        )
        .await
        .map_err(|e| ErrorData::internal_error(e.to_public().message, None))?;
        Ok(!found.is_empty())
    }

    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        match self.identity.as_ref() {
            McpIdentity::Fixed {
                actor,
                namespace,
                context,
            } => Ok(Caller {
                principal: Principal {
                    actor: actor.clone(),
                    namespace: namespace.clone(),
                },
                context: context.clone(),
            }),
            McpIdentity::PerRequest => {
                let authenticated = context
                    .extensions
                    .get::<axum::http::request::Parts>()
                    .and_then(|parts| parts.extensions.get::<Authenticated>())
                    .ok_or_else(|| {
                        ErrorData::invalid_request("Authentication is required.", None)
                    })?;
                // The HTTP layer already checked this request; checking again here keeps the
                // handler safe however it is mounted.
                check_principal(authenticated, self.runtime.now()).map_err(|e| {
                    tracing::info!(target: "capgate::mcp", error = %e, "MCP request refused");
                    ErrorData::invalid_request("Authentication is required.", None)
                })?;
                Ok(Caller {
                    principal: authenticated.principal.clone(),
                    context: authenticated.context.clone(),
                })
            }
        }
    }

    /// Whether the resume tool is offered (and no capability claims its name).
    fn resume_tool_enabled(&self) -> bool {
        self.options.resume_tool
            && self
                .runtime
                .registry()
                .by_tool_name(Surface::Mcp, RESUME_TOOL)
                .is_none()
    }

    /// The MCP tool of a described capability; `None` for a contextual one (a UI presents
    /// it in context; it stays callable by name).
    fn tool_for(&self, d: &CapabilityDescriptor) -> Option<Tool> {
        if d.discovery == Discovery::Contextual {
            return None;
        }
        let cap = self.runtime.registry().get(&d.id)?;
        let requires_approval = d.requires_approval.unwrap_or(false);
        let mut description = d.description.clone();
        if requires_approval {
            description.push_str(" Requires approval.");
        }
        let read_only = d.side_effect.is_read_only();
        let mut annotations = ToolAnnotations::new()
            .read_only(read_only)
            .idempotent(cap.meta.idempotent)
            .open_world(d.side_effect == SideEffect::External);
        if !read_only {
            annotations = annotations.destructive(d.side_effect == SideEffect::Destructive);
        }
        let mut meta = MetaObject::new();
        meta.insert("capgate/capabilityId".into(), json!(d.id));
        meta.insert("capgate/sideEffect".into(), json!(d.side_effect));
        meta.insert("capgate/risk".into(), json!(d.risk));
        meta.insert("capgate/requiresApproval".into(), json!(requires_approval));
        Some(
            Tool::new(
                cap.tool_name(Surface::Mcp).to_string(),
                description,
                Arc::new(object_schema(&d.input_schema)),
            )
            .with_annotations(annotations)
            .with_meta(meta),
        )
    }

    fn resume_tool(&self) -> Tool {
        let schema = json!({
            "type": "object",
            "properties": {
                "approvalId": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": BoundedId::MAX_CHARS,
                    "description": "The id of an approval a human has approved (apr_…)."
                }
            },
            "required": ["approvalId"],
            "additionalProperties": false
        });
        Tool::new(
            RESUME_TOOL,
            "Run a call that was held for human approval, once a human has approved it. \
             Only the caller who asked can resume it; nothing here can approve.",
            Arc::new(object_schema(&schema)),
        )
        .with_annotations(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(false)
                .idempotent(false)
                .open_world(false),
        )
    }

    async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = self.caller(&context)?;
        let held_by = caller.clone();
        let input = Value::Object(request.arguments.unwrap_or_default());
        let cap = self
            .runtime
            .registry()
            .by_tool_name(Surface::Mcp, &request.name)
            .cloned();
        let resume = cap.is_none() && request.name == RESUME_TOOL && self.resume_tool_enabled();
        if resume {
            return self.resume(caller, &input, context).await.map(Into::into);
        }
        // The one admission order (docs/gateway.md, "Invocation semantics"): every call is
        // authorized (seed 004), a tool this surface has with its capability id and input, a
        // name it does not have with that name; a refusal is answered as the authorizer's
        // only where this caller may learn the tool exists (it may describe, and discovery
        // shows it), else as the concealed not-found, identical to a name that does not
        // exist. The caller learns nothing a describe would not tell it (SI-8).
        let exposed = cap.as_ref().filter(|c| c.meta.expose.allows(Surface::Mcp));
        let asked_for = exposed.map_or_else(|| bounded_name(&request.name), |c| c.id.clone());
        let asked = self
            .authorize(&caller, Operation::Invoke, Some(&asked_for), Some(&input))
            .await;
        if let Err(refused) = asked {
            if exposed.is_some() && self.may_learn(&caller, &asked_for).await? {
                return Err(refused);
            }
            let invoke =
                InvokeRequest::new(Surface::Mcp, asked_for, Value::Null, caller.principal.actor)
                    .namespace(caller.principal.namespace);
            let result = match exposed {
                Some(_) => self.runtime.conceal(invoke).await,
                None => self.runtime.refuse_unknown(invoke).await,
            };
            self.drain_audit().await;
            return Ok(self.tool_result(&result).into());
        }
        // A capability declared to run as a task past a duration, for a client that takes
        // tasks: the call runs off the request (task_calls::invoke_as_task).
        if let Some(cap) = &cap
            && let Some(after) = cap.meta.task_after_ms
            && self.options.tasks.is_some()
            && task_calls::client_wants_tasks(&context)
        {
            let mut invoke =
                InvokeRequest::new(Surface::Mcp, cap.id.clone(), input, caller.principal.actor)
                    .namespace(caller.principal.namespace)
                    .context(caller.context);
            if let Ok(d) = capgate_contract::descriptor_digest(&self.runtime, cap) {
                invoke = invoke.descriptor_digest(d);
            }
            return self
                .invoke_as_task(
                    &held_by,
                    &cap.id,
                    invoke,
                    Duration::from_millis(after),
                    &context,
                )
                .await;
        }
        let (progress, forwarder) = progress_channel(&context);
        let result = match cap {
            Some(cap) => {
                let mut invoke =
                    InvokeRequest::new(Surface::Mcp, cap.id.clone(), input, caller.principal.actor)
                        .namespace(caller.principal.namespace)
                        .context(caller.context)
                        .cancel(context.ct.clone());
                if let Ok(d) = capgate_contract::descriptor_digest(&self.runtime, &cap) {
                    invoke = invoke.descriptor_digest(d);
                }
                if let Some(p) = progress {
                    invoke = invoke.progress(p);
                }
                self.runtime.invoke(invoke).await
            }
            // An unknown tool still opens an execution (stage 2), so it is audited and
            // answered exactly like an unexposed or hidden one (SI-8).
            None => {
                let name = bounded_name(&request.name);
                let invoke =
                    InvokeRequest::new(Surface::Mcp, name, Value::Null, caller.principal.actor)
                        .namespace(caller.principal.namespace);
                self.runtime.refuse_unknown(invoke).await
            }
        };
        finish_progress(forwarder).await;
        self.drain_audit().await;
        if let Some(capability) = result.approval().map(|a| a.capability_id.clone())
            && let Some(task) = self
                .open_task(&held_by, &capability, &result, &context)
                .await
        {
            return Ok(CallToolResponse::Task(task));
        }
        Ok(self.tool_result(&result).into())
    }

    /// Answer after the call's audit events are written, as the HTTP gateway does, so a
    /// client that reads the audit right after its answer finds them. Bounded by
    /// [`McpOptions::audit_drain_timeout`]; a sink that cannot keep up is logged, not
    /// waited for.
    async fn drain_audit(&self) {
        let bound = self.options.audit_drain_timeout;
        match tokio::time::timeout(bound, self.runtime.drain_audit()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(target: "capgate::mcp", error = %e, "audit drain failed"),
            Err(_) => tracing::error!(target: "capgate::mcp", "audit drain timed out"),
        }
    }

    /// The `approvals_resume` tool: guarded by the caller's namespace, actor and the `mcp`
    /// surface; authorized against the stored capability and input; the runtime re-checks
    /// the current policies before consuming the approval.
    async fn resume(
        &self,
        caller: Caller,
        input: &Value,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let approval_id = match approval_id_of(input) {
            Ok(id) => id,
            Err(e) => return Ok(error_result(&e)),
        };
        let (progress, forwarder) = progress_channel(&context);
        let resumed = self
            .resume_approved(caller, &approval_id, context.ct.clone(), progress)
            .await;
        finish_progress(forwarder).await;
        Ok(match resumed? {
            Resumed::Ran(result) => self.tool_result(&result),
            Resumed::ContractChanged => contract_mismatch_result(),
        })
    }

    /// Resume `approval_id` as `caller` on the `mcp` surface, as every MCP door does (the
    /// resume tool, a task's run): authorized against the stored capability and input, the
    /// capability's contract still the one the approval was asked for, then the runtime's
    /// resume (re-check, types, input digest, one consumption). Audited and drained.
    pub(super) async fn resume_approved(
        &self,
        caller: Caller,
        approval_id: &BoundedId,
        cancel: tokio_util::sync::CancellationToken,
        progress: Option<ProgressFn>,
    ) -> Result<Resumed, ErrorData> {
        let me = &caller.principal;
        let stored = self
            .runtime
            .approvals()
            .get_for_requester(approval_id, &me.namespace, &me.actor.reference())
            .await
            .ok()
            .flatten();
        self.authorize(
            &caller,
            Operation::ResumeApproval,
            stored.as_ref().map(|r| r.request.capability_id.as_str()),
            stored.as_ref().map(|r| &r.request.input),
        )
        .await?;
        let options = ResumeOptions {
            context: caller.context,
            cancel: Some(cancel),
            expected_actor: Some(me.actor.reference()),
            expected_surface: Some(Surface::Mcp),
            expected_namespace: Some(me.namespace.clone()),
            actor: Some(me.actor.clone()),
            idempotency_key: None,
            progress,
            correlation_id: None,
        };
        // The contract check the HTTP door makes: the capability must still be the one the
        // call asked approval for (its own digest, without the deployment revision, as
        // recorded on the approval). Refused before anything is consumed, and audited.
        if let Some(recorded) = stored
            .as_ref()
            .and_then(|r| r.request.descriptor_digest.as_deref())
        {
            let current = stored
                .as_ref()
                .and_then(|r| self.runtime.registry().get(&r.request.capability_id))
                .and_then(|cap| capgate_contract::descriptor_digest(&self.runtime, cap).ok());
            if current.as_deref() != Some(recorded) {
                let recorded_error = CapabilityError::new(ErrorCode::AdapterError).with_cause(
                    "the capability's contract changed since the approval was asked for",
                );
                self.runtime
                    .refuse_resume(approval_id, options, recorded_error)
                    .await;
                self.drain_audit().await;
                return Ok(Resumed::ContractChanged);
            }
        }
        let result = self.runtime.resume(approval_id, options).await;
        self.drain_audit().await;
        Ok(Resumed::Ran(result))
    }
}

/// How a resume through an MCP door ended.
pub(super) enum Resumed {
    /// The runtime ran (or refused) it: its result.
    Ran(ExecutionResult),
    /// The capability's contract changed since the approval was asked for: refused before
    /// anything was consumed (`CONTRACT_MISMATCH`).
    ContractChanged,
}

/// Progress reported before the result goes out first; a procedure that kept its progress
/// handle past its end does not hold the answer up for long.
async fn finish_progress(forwarder: Option<tokio::task::JoinHandle<()>>) {
    if let Some(f) = forwarder {
        let _ = tokio::time::timeout(Duration::from_secs(1), f).await;
    }
}

impl CapgateMcp {
    fn tool_result(&self, result: &ExecutionResult) -> CallToolResult {
        let mut envelope = match serde_json::to_value(result) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(target: "capgate::mcp", error = %e, "envelope serialization failed");
                return error_result(&CapabilityError::new(ErrorCode::InternalError));
            }
        };
        if let (Some(approval), Value::Object(map)) = (result.approval(), &mut envelope) {
            map.insert("approvalId".into(), json!(approval.id));
            map.insert("expiresAt".into(), json!(approval.expires_at));
            let reasons = if approval.reasons.is_empty() {
                "a human must approve this call".to_string()
            } else {
                approval.reasons.join("; ")
            };
            map.insert(
                "message".into(),
                json!(format!("Awaiting approval: {reasons}")),
            );
            if let Some(url) = self.options.approval_url_for(&approval.id) {
                map.insert("url".into(), json!(url));
            }
        }
        let is_error = matches!(
            result,
            ExecutionResult::Failed { .. } | ExecutionResult::Cancelled { .. }
        );
        envelope_result(envelope, is_error)
    }
}

impl ServerHandler for CapgateMcp {
    fn get_info(&self) -> ServerConfig {
        let capabilities = if self.options.tasks.is_some() {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build()
        } else {
            ServerCapabilities::builder().enable_tools().build()
        };
        let mut info = ServerConfig::new(capabilities).with_server_info(Implementation::new(
            self.options.server_name.clone(),
            self.options.server_version.clone(),
        ));
        if let Some(i) = &self.options.instructions {
            info = info.with_instructions(i.clone());
        }
        info
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let parts = context.extensions.get::<axum::http::request::Parts>();
        if parts.is_some_and(|p| crate::trace_context::is_unsampled(&p.extensions)) {
            return crate::trace_context::unsampled(self.list(request, context)).await;
        }
        let parent = parts.map_or_else(tracing::Span::current, |p| {
            crate::trace_context::request_span(&p.extensions)
        });
        let span = mcp_span(&parent, "tools/list", None, &context);
        let answer = self.list(request, context).instrument(span.clone()).await;
        if let Err(e) = &answer {
            span.record("error.type", e.code.0.to_string());
        }
        answer
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // rmcp runs this on a task of its own: continue the HTTP request's trace, or its
        // head decision to leave it out.
        let parts = context.extensions.get::<axum::http::request::Parts>();
        if parts.is_some_and(|p| crate::trace_context::is_unsampled(&p.extensions)) {
            return crate::trace_context::unsampled(self.call(request, context)).await;
        }
        let parent = parts.map_or_else(tracing::Span::current, |p| {
            crate::trace_context::request_span(&p.extensions)
        });
        let span = mcp_span(&parent, "tools/call", Some(&request.name), &context);
        let answer = self.call(request, context).instrument(span.clone()).await;
        match &answer {
            // The conventions' value for a tool that answered with `isError`.
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
                span.record("error.type", "tool_error");
            }
            Ok(_) => {}
            Err(e) => {
                span.record("error.type", e.code.0.to_string());
            }
        }
        answer
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.task_get(&request.task_id, context).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let keys = request.input_responses.into_keys().collect();
        self.task_update(&request.task_id, keys, context).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task_cancel(&request.task_id, context).await
    }
}

/// The server span of one MCP request in OpenTelemetry's MCP semantic conventions, which
/// tracing backends key MCP dashboards on: named `tools/call TOOL`, with `mcp.method.name`,
/// `gen_ai.tool.name` and `gen_ai.operation.name` (`execute_tool`) for a call,
/// `jsonrpc.request.id`, `mcp.protocol.version`, `network.transport` and `error.type`.
/// The session id is a bearer of the session, so only its digest is recorded
/// (`mcp.session.id` = `sha256:` and 16 hex digits): calls of one session still group.
fn mcp_span(
    parent: &tracing::Span,
    method: &'static str,
    tool: Option<&str>,
    context: &RequestContext<RoleServer>,
) -> tracing::Span {
    let headers = context
        .extensions
        .get::<axum::http::request::Parts>()
        .map(|p| &p.headers);
    let header = |name: &str| {
        headers
            .and_then(|h| h.get(name))
            .and_then(|v| v.to_str().ok())
    };
    let session = header("mcp-session-id").map(|id| {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(id.as_bytes());
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("sha256:{hex}")
    });
    let version = header("mcp-protocol-version")
        .filter(|v| v.len() <= 32)
        .map(str::to_owned);
    let tool = tool.map(bounded_name);
    let name = match &tool {
        Some(t) => format!("{method} {t}"),
        None => method.to_owned(),
    };
    tracing::info_span!(
        parent: parent,
        "mcp.server",
        otel.name = %name,
        otel.kind = "server",
        mcp.method.name = method,
        gen_ai.tool.name = tool.as_deref(),
        gen_ai.operation.name = tool.as_ref().map(|_| "execute_tool"),
        jsonrpc.request.id = %context.id,
        mcp.session.id = session.as_deref(),
        mcp.protocol.version = version.as_deref(),
        network.transport = if headers.is_some() { "tcp" } else { "pipe" },
        error.r#type = tracing::field::Empty,
    )
}

impl CapgateMcp {
    /// `tools/list`: the discovery pipeline on the `mcp` surface, for this caller.
    async fn list(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = self.caller(&context)?;
        self.authorize(&caller, Operation::Describe, None, None)
            .await?;
        let descriptors = describe_mcp(
            self.runtime.clone(),
            true,
            DescribeOptions {
                namespace: caller.principal.namespace,
                actor: caller.principal.actor,
                context: caller.context,
                scope: None,
            },
        )
        .await
        .map_err(|e| ErrorData::internal_error(e.to_public().message, None))?;
        let mut tools: Vec<Tool> = descriptors
            .iter()
            .filter_map(|d| self.tool_for(d))
            .collect();
        if self.resume_tool_enabled() {
            tools.push(self.resume_tool());
        }
        Ok(ListToolsResult::with_all_items(tools))
    }
}

/// `describe(mcp)`, driven on a blocking thread.
///
/// Workaround: the compiler cannot prove the discovery pipeline's future `Send` (a
/// higher-ranked lifetime in its candidate filter closure, held across an await), and rmcp
/// handlers must be `Send`. `Handle::block_on` needs no `Send` future. Remove once
/// `capgate_core`'s discovery collects its candidates before awaiting.
/// The discovery pipeline on the `mcp` surface; `announce`: a `tools/list` the caller made
/// (recorded as `capabilities.discovered`), else the door's own check (not recorded).
async fn describe_mcp(
    runtime: Runtime,
    announce: bool,
    options: DescribeOptions,
) -> Result<Vec<CapabilityDescriptor>, CapabilityError> {
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        handle.block_on(async {
            if announce {
                runtime.describe(Surface::Mcp, options).await
            } else {
                runtime.discoverable(Surface::Mcp, options).await
            }
        })
    })
    .await
    .unwrap_or_else(|e| {
        tracing::error!(target: "capgate::mcp", error = %e, "describe task failed");
        Err(CapabilityError::new(ErrorCode::InternalError))
    })
}

/// An MCP input schema is always an object schema (see [`capgate_contract::tools::object_schema`]).
fn object_schema(schema: &Value) -> JsonObject {
    match capgate_contract::tools::object_schema(schema) {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

fn approval_id_of(input: &Value) -> Result<BoundedId, CapabilityError> {
    let issue = |message: String| {
        CapabilityError::input_invalid(vec![Issue {
            path: "/approvalId".into(),
            message,
        }])
    };
    match input.get("approvalId") {
        Some(Value::String(s)) if s.trim().is_empty() => Err(issue("is blank".into())),
        Some(Value::String(s)) => BoundedId::new(s.as_str()).map_err(|e| issue(e.to_string())),
        Some(_) => Err(issue("must be a string".into())),
        None => Err(issue("is required".into())),
    }
}

fn envelope_result(envelope: Value, is_error: bool) -> CallToolResult {
    let text = envelope.to_string();
    let mut r = if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    r.structured_content = Some(envelope);
    r
}

/// A resume refused because the capability's contract changed since the approval was
/// asked for: `CONTRACT_MISMATCH`, as the HTTP door answers it.
fn contract_mismatch_result() -> CallToolResult {
    let envelope = json!({
        "status": "failed",
        "error": {
            "code": "CONTRACT_MISMATCH",
            "message": "The deployment's contract changed since this call asked for approval.",
            "retryable": false,
        },
    });
    envelope_result(envelope, true)
}

/// A failure that never reached an execution (an unknown tool, a malformed resume request).
fn error_result(error: &CapabilityError) -> CallToolResult {
    let envelope = json!({ "status": "failed", "error": error.to_public() });
    envelope_result(envelope, true)
}

/// When the client asked for progress, a [`ProgressFn`] for the runtime and the task that
/// forwards its reports, in order, as `notifications/progress`. The runtime has already
/// sent each report through the capability's output redactors; the buffer here is bounded
/// and coalescing ([`capgate_core::progress`]), so a client that reads slowly costs a
/// bounded amount of memory.
fn progress_channel(
    context: &RequestContext<RoleServer>,
) -> (Option<ProgressFn>, Option<tokio::task::JoinHandle<()>>) {
    let Some(token) = context.meta.get_progress_token() else {
        return (None, None);
    };
    let (progress, rx) = capgate_core::progress::bounded();
    let forwarder = tokio::spawn(forward_progress(context.peer.clone(), token, rx));
    (Some(progress), Some(forwarder))
}

async fn forward_progress(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    mut rx: capgate_core::progress::ProgressReceiver,
) {
    let mut last = 0.0_f64;
    while let Some(value) = rx.next().await {
        let (progress, total, message) = progress_fields(&value, last);
        last = progress;
        let mut param = ProgressNotificationParam::new(token.clone(), progress);
        param.total = total;
        param.message = message;
        if let Err(e) = peer.notify_progress(param).await {
            tracing::debug!(target: "capgate::mcp", error = %e, "progress notification not delivered");
            return;
        }
    }
}

/// Map a procedure's progress report onto MCP's fields, keeping `progress` increasing:
/// `{progress, total?, message?}` objects are taken as they are; a bare number is the
/// progress; a string is a message; anything else counts one step.
fn progress_fields(value: &Value, last: f64) -> (f64, Option<f64>, Option<String>) {
    let step = |p: Option<f64>| match p {
        Some(p) if p.is_finite() && p > last => p,
        _ => last + 1.0,
    };
    match value {
        Value::Number(n) => (step(n.as_f64()), None, None),
        Value::String(s) => (step(None), None, Some(s.clone())),
        Value::Object(map) => (
            step(map.get("progress").and_then(Value::as_f64)),
            map.get("total").and_then(Value::as_f64),
            map.get("message")
                .and_then(Value::as_str)
                .map(str::to_string),
        ),
        _ => (step(None), None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_stays_increasing_whatever_the_procedure_reports() {
        assert_eq!(progress_fields(&json!(5), 0.0), (5.0, None, None));
        assert_eq!(progress_fields(&json!(3), 5.0).0, 6.0);
        assert_eq!(
            progress_fields(&json!({"progress": 7, "total": 10, "message": "m"}), 6.0),
            (7.0, Some(10.0), Some("m".into()))
        );
        assert_eq!(
            progress_fields(&json!("half"), 7.0),
            (8.0, None, Some("half".into()))
        );
    }

    #[test]
    fn non_object_schemas_become_the_open_object_schema() {
        assert_eq!(
            Value::Object(object_schema(&json!(true))),
            json!({"type": "object"})
        );
        assert_eq!(
            Value::Object(object_schema(&json!({"properties": {}}))),
            json!({"type": "object", "properties": {}})
        );
    }

    #[test]
    fn resume_requires_a_bounded_string_approval_id() {
        assert!(approval_id_of(&json!({"approvalId": "apr_1"})).is_ok());
        for bad in [
            json!({}),
            json!({"approvalId": 3}),
            json!({"approvalId": " "}),
            json!({"approvalId": "x".repeat(257)}),
            json!({"approvalId": "apr_1\nforged"}),
        ] {
            let e = approval_id_of(&bad).err();
            assert_eq!(e.map(|e| e.code()), Some(ErrorCode::InputInvalid));
        }
    }
}
