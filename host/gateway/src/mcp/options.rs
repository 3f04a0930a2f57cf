//! How the MCP server presents itself and which optional behaviour it enables.

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
    /// Streamable HTTP only: `/mcp` as an OAuth protected resource (its metadata served,
    /// and named in every `401`'s `WWW-Authenticate`). `None`: a plain `401`.
    pub protected_resource: Option<super::oauth::ProtectedResource>,
    /// Streamable HTTP only: the most MCP sessions one principal holds open in this process
    /// (each keeps a worker and its buffers until it ends or idles out). A handshake past
    /// it is refused `429`, its session closed at once, so one key cannot exhaust the
    /// memory every tenant shares. Default [`DEFAULT_MAX_SESSIONS_PER_PRINCIPAL`].
    pub max_sessions_per_principal: usize,
    /// Held calls as MCP tasks for clients that declare the `io.modelcontextprotocol/tasks`
    /// extension (docs/gateway.md, "MCP tasks"). Default: on, kept in this process;
    /// `capgate serve` keeps them in its store. `None`: every held call is answered with
    /// the approval-required result, as to a client without the extension.
    pub tasks: Option<super::tasks::McpTasks>,
}

/// The default [`McpOptions::max_sessions_per_principal`].
pub const DEFAULT_MAX_SESSIONS_PER_PRINCIPAL: usize = 32;

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
            protected_resource: None,
            max_sessions_per_principal: DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
            tasks: Some(super::tasks::McpTasks::default()),
        }
    }
}

crate::debug::debug_fields! {
    McpOptions { server_name, server_version, approval_url, resume_tool, stateful_sessions,
        session_store: Option::is_some, allowed_hosts, protected_resource,
        max_sessions_per_principal, tasks }
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
