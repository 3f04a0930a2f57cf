//! One MCP session over a byte stream (stdio for `capgate mcp --stdio`), as a fixed
//! service actor.

use super::{CapgateMcp, McpIdentity, McpOptions};
use capgate_core::actor::Actor;
use capgate_core::authz::Authorizer;
use capgate_core::runtime::Runtime;
use rmcp::ServiceExt;
use std::sync::Arc;

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
