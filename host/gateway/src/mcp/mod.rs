//! The MCP server: a thin adapter over a [`Runtime`], with the runtime as the only
//! authority (docs/gateway.md, "MCP").
//!
//! - `tools/list` is `describe(mcp)` for the caller's actor: one tool per capability, named
//!   by the registry's MCP tool name (`orders.refund` → `orders_refund`, or the configured
//!   name), with its input schema and annotations derived from the meta (`readOnlyHint` for
//!   `none`/`read`, `destructiveHint` for `destructive`, `idempotentHint` from `idempotent`).
//! - `tools/call` is `invoke(mcp)`: the envelope comes back as JSON text content and as
//!   `structuredContent`; failures and cancellations set `isError` and carry only the
//!   model-safe error; `approval-required` carries the approval id, its expiry and, when
//!   configured, the approval console URL. INPUT_INVALID is a tool result, never a protocol
//!   error.
//! - `notifications/cancelled` (or, on the sessionless protocol, the client dropping the
//!   request) cancels the running invocation: the runtime answers CANCELLED.
//! - Procedure progress becomes `notifications/progress` when the client sent a
//!   `progressToken`.
//! - No MCP request can decide an approval. The optional `approvals_resume` tool resumes an
//!   approved call with the session actor and the `mcp` surface as guards.
//!
//! Identity: [`streamable_http_router`] passes every HTTP request through the `mcp` door of
//! the deployment's [`Doorkeeper`](crate::door::Doorkeeper) (so an expired token, or a
//! credential not bound to `mcp`, is refused mid-session) and the handler reads the
//! principal of *that* request, asking the same authorizer for every list, call and resume; a session holds no authority of its own, which is also why
//! any replica can serve any request once the MCP session itself is reconstructible (see
//! [`McpOptions::session_store`] and [`McpOptions::stateful_sessions`]). [`serve_stdio`] runs
//! one session as a configured service actor.

mod handler;
mod http;

pub use handler::{CapgateMcp, McpIdentity, RESUME_TOOL};
pub use http::{McpSessions, streamable_http_router, streamable_http_router_with};

use capgate_core::actor::Actor;
use capgate_core::authz::Authorizer;
use capgate_core::runtime::Runtime;
use rmcp::ServiceExt;
use rmcp::transport::streamable_http_server::session::SessionStore;
use std::sync::Arc;
use std::time::Duration;

/// How the MCP server presents itself and which optional behaviour it enables.
#[derive(Clone)]
pub struct McpOptions {
    /// `serverInfo.name` (default `capgate`).
    pub server_name: String,
    /// `serverInfo.version` (default: this crate's version).
    pub server_version: String,
    /// Optional instructions sent to the client at initialization.
    pub instructions: Option<String>,
    /// The human approval console. An `approval-required` result carries
    /// `url` = this with `{id}` replaced by the approval id (or, without `{id}`, this with
    /// `/<id>` appended).
    pub approval_url: Option<String>,
    /// Offer the `approvals_resume` tool. Default false: the resume tool stays absent
    /// unless the deployment opts in (an approved call is otherwise resumed by
    /// the application, not by the model).
    pub resume_tool: bool,
    /// How long an answer waits for the call's audit events to be written (default 5 s),
    /// so a client reading the audit right after its answer finds them.
    pub audit_drain_timeout: Duration,
    /// Streamable HTTP only: keep MCP sessions (the handshake-era protocol) in memory, so
    /// `notifications/cancelled` reaches the running call (default true). Without sessions
    /// every request is served on its own and cancellation is the client dropping the
    /// request. Either way authority is per request.
    pub stateful_sessions: bool,
    /// Streamable HTTP only: where session handshakes are persisted so that a replica that
    /// never saw a session can restore it (no sticky sessions needed). `None`: sessions live
    /// in this process only.
    pub session_store: Option<Arc<dyn SessionStore>>,
    /// Streamable HTTP only: accepted `Host` header values (DNS-rebinding protection).
    /// `None` keeps rmcp's default (loopback names only); an empty list accepts any host.
    pub allowed_hosts: Option<Vec<String>>,
}

impl Default for McpOptions {
    fn default() -> Self {
        McpOptions {
            server_name: "capgate".into(),
            server_version: env!("CARGO_PKG_VERSION").into(),
            instructions: None,
            approval_url: None,
            resume_tool: false,
            audit_drain_timeout: Duration::from_secs(5),
            stateful_sessions: true,
            session_store: None,
            allowed_hosts: None,
        }
    }
}

crate::debug::debug_fields! {
    McpOptions { server_name, server_version, approval_url, resume_tool, stateful_sessions,
        session_store: Option::is_some, allowed_hosts }
}

impl McpOptions {
    /// The console URL of one approval, when a console is configured.
    pub fn approval_url_for(&self, approval_id: &str) -> Option<String> {
        self.approval_url.as_ref().map(|base| {
            if base.contains("{id}") {
                base.replace("{id}", approval_id)
            } else {
                format!("{}/{approval_id}", base.trim_end_matches('/'))
            }
        })
    }
}

/// Why the stdio server stopped abnormally.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpServeError {
    /// The actor cannot run capabilities (anonymous, malformed id, empty namespace).
    #[error("invalid service actor: {0}")]
    InvalidActor(String),
    /// The MCP handshake failed (the MCP library's error).
    #[error("MCP initialization failed: {0}")]
    Initialize(#[source] capgate_core::error::BoxError),
    /// The session task failed (its join error).
    #[error("MCP session failed: {0}")]
    Session(#[source] capgate_core::error::BoxError),
}

/// Serve one MCP session over stdin/stdout as a fixed service actor (`capgate mcp --stdio`).
/// Returns when the client closes the session.
pub async fn serve_stdio(
    runtime: Runtime,
    actor: Actor,
    namespace: String,
    context: serde_json::Value,
    authorizer: Arc<dyn Authorizer>,
    options: McpOptions,
) -> Result<(), McpServeError> {
    serve_io(
        runtime,
        actor,
        namespace,
        context,
        authorizer,
        options,
        rmcp::transport::stdio(),
    )
    .await
}

/// Serve one MCP session over any byte stream pair (stdio, a socket, an in-memory duplex) as
/// a fixed actor.
pub async fn serve_io<R, W>(
    runtime: Runtime,
    actor: Actor,
    namespace: String,
    context: serde_json::Value,
    authorizer: Arc<dyn Authorizer>,
    options: McpOptions,
    io: (R, W),
) -> Result<(), McpServeError>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let identity = McpIdentity::fixed(actor, namespace, context)?;
    let server = CapgateMcp::new(runtime, identity, authorizer, options);
    let running = server
        .serve(io)
        .await
        .map_err(|e| McpServeError::Initialize(e.into()))?;
    running
        .waiting()
        .await
        .map_err(|e| McpServeError::Session(e.into()))?;
    Ok(())
}
