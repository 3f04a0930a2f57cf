//! MCP upstreams: a capability's procedure is one tool of an MCP server the team already
//! runs, reached over stdio (a command capgate starts and restarts) or streamable HTTP.
//!
//! The pipeline runs in full before the server is called; at stage 11 [`McpToolProvider`]
//! sends `tools/call` with the validated input and maps the answer:
//!
//! - `structuredContent` is the output; without it, the text blocks joined are the output
//!   `{"text": "…"}` (other content blocks are dropped);
//! - `isError: true` is a defined failure `TOOL_ERROR` whose public message is fixed ("The
//!   tool reported an error."): the upstream's own text stays in the private details;
//! - a JSON-RPC error, a closed transport, an unexpected answer are internal failures (hidden,
//!   "The operation failed.", SI-9);
//! - upstream `notifications/progress` for the call reach the caller as progress (through
//!   the provider runtime, so the stall watchdog and the output redactor see them);
//! - on the stage-10 deadline or a caller abort, `notifications/cancelled` names the request.
//!
//! # Connections
//!
//! One MCP session per upstream, shared by every capability that names it (MCP multiplexes
//! requests on a session). At most `maxConcurrentCalls` calls are in flight; more wait for a
//! slot until their own deadline. A session that closes (the child exited, the HTTP session
//! ended) is opened again on the next use; a failed open keeps the upstream *down* for a
//! doubling backoff (0.5 s to 30 s) during which calls fail at once instead of waiting on a
//! connect. [`McpUpstream::is_up`] feeds `/readyz`.
//!
//! # Pinning
//!
//! Each governed tool is pinned to the SHA-256 of its definition as reviewed
//! ([`tool_digest`]: name, description, input and output schemas, annotations). Every listing
//! (at each connect and every `relistIntervalMs`) is compared with the pins; [`PinPolicy`]
//! hides a tool whose definition no longer matches (so it answers as unknown and leaves every
//! tool list), and [`McpToolProvider`] re-checks right before `tools/call`, so a definition
//! that changed between listings is never called.

mod pin;
mod session;
mod tool;
pub mod watch;

pub use pin::{PinPolicy, PinState, tool_definition, tool_digest};
pub use session::{McpUpstream, McpUpstreamError, ToolListing};
pub use tool::McpToolProvider;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The adapter name of MCP tools (the provider identity is `mcp:<capability id>`).
pub const MCP_ADAPTER: &str = "mcp";
pub use capgate_core::defaults::mcp_upstream::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONCURRENT_CALLS, DEFAULT_RELIST_INTERVAL,
};
/// The largest JSON message accepted from an upstream (HTTP response or SSE event).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// A header or environment value: written in the file, or read (at each connect) from the
/// environment or a file, so a credential need not be in the configuration. Its `Debug`
/// never shows a literal value.
#[derive(Clone, PartialEq, Eq)]
pub enum SecretValue {
    /// The value as written.
    Literal(String),
    /// The value of this environment variable of the capgate process.
    Env {
        /// The variable's name.
        name: String,
        /// Put before the value (e.g. `Bearer `).
        prefix: String,
    },
    /// The contents of this file (one trailing newline removed).
    File {
        /// The file (absolute, or relative to the working directory).
        path: PathBuf,
        /// Put before the value.
        prefix: String,
    },
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretValue::Literal(_) => f.write_str("Literal(<redacted>)"),
            SecretValue::Env { name, prefix } => f
                .debug_struct("Env")
                .field("name", name)
                .field("prefix", prefix)
                .finish(),
            SecretValue::File { path, prefix } => f
                .debug_struct("File")
                .field("path", path)
                .field("prefix", prefix)
                .finish(),
        }
    }
}

impl SecretValue {
    /// The value now: an unset variable or unreadable file is an error naming it, never an
    /// empty value.
    pub fn resolve(&self) -> Result<String, McpUpstreamError> {
        match self {
            SecretValue::Literal(v) => Ok(v.clone()),
            SecretValue::Env { name, prefix } => std::env::var(name)
                .map(|v| format!("{prefix}{v}"))
                .map_err(|_| McpUpstreamError::SecretUnset {
                    what: format!("environment variable `{name}`"),
                }),
            SecretValue::File { path, prefix } => {
                let text =
                    std::fs::read_to_string(path).map_err(|e| McpUpstreamError::SecretUnset {
                        what: format!("file `{}` ({e})", path.display()),
                    })?;
                let text = text.strip_suffix('\n').unwrap_or(&text);
                let text = text.strip_suffix('\r').unwrap_or(text);
                Ok(format!("{prefix}{text}"))
            }
        }
    }
}

/// How an upstream is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransportConfig {
    /// A command capgate starts with piped stdin/stdout. Its environment is exactly `env`
    /// plus the `inherit` variables of capgate's own environment: nothing else is inherited.
    Stdio {
        /// The program (looked up on the `PATH` given in `env`, or capgate's own `PATH`
        /// when `PATH` is inherited or unset).
        program: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables set for it.
        env: BTreeMap<String, SecretValue>,
        /// Variables passed through from capgate's environment.
        inherit: Vec<String>,
        /// Its working directory.
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP.
    Http {
        /// The MCP endpoint.
        url: String,
        /// Headers sent with every request (e.g. a credential from the environment).
        headers: BTreeMap<String, SecretValue>,
        /// Extra trusted roots for `https://` (a private CA).
        ca_file: Option<PathBuf>,
    },
}

/// One `[upstreams.mcp.NAME]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpUpstreamConfig {
    /// The name capabilities refer to.
    pub name: String,
    /// How it is reached.
    pub transport: McpTransportConfig,
    /// Connect and initialize timeout.
    pub connect_timeout: Duration,
    /// At most this many calls in flight.
    pub max_concurrent_calls: usize,
    /// How often the tools are listed again (pins re-checked).
    pub relist_interval: Duration,
}

impl McpUpstreamConfig {
    /// A configuration with the defaults for everything but the transport.
    pub fn new(name: impl Into<String>, transport: McpTransportConfig) -> Self {
        McpUpstreamConfig {
            name: name.into(),
            transport,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_concurrent_calls: DEFAULT_MAX_CONCURRENT_CALLS,
            relist_interval: DEFAULT_RELIST_INTERVAL,
        }
    }
}
