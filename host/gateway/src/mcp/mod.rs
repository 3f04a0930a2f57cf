//! The MCP server: a thin adapter over a [`Runtime`](capgate_core::runtime::Runtime), with the runtime as the only
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
//! - A held call, to a client that declared the `io.modelcontextprotocol/tasks` extension,
//!   is answered with a task it polls with `tasks/get` until a human decided and the call
//!   ran ([`tasks`]).
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

//!
//! The shape of every door: `options` ([`McpOptions`]), `router` (streamable HTTP at
//! [`PREFIX`]), `handlers` (the MCP server itself, [`CapgateMcp`]), plus `stdio` (one session
//! over a byte stream), and `oauth` (OAuth protected-resource metadata, so MCP clients
//! find the identity provider themselves).

mod handlers;
pub mod oauth;
mod options;
mod router;
mod stdio;
pub mod tasks;

pub use handlers::{CapgateMcp, McpIdentity, RESUME_TOOL};
pub use options::{DEFAULT_MAX_SESSIONS_PER_PRINCIPAL, McpOptions};
pub use router::{
    McpSessions, PREFIX, SharedMcpSession, SharedMcpSessions, streamable_http_router,
    streamable_http_router_with,
};
pub use stdio::{McpServeError, serve_io, serve_stdio};
pub use tasks::{
    InMemoryMcpTaskStore, McpTaskStore, McpTasks, StoredTask, TaskState, TaskStoreError,
};
