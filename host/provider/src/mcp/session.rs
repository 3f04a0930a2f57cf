//! One upstream's MCP session: opened on first use, shared, bounded, reopened after it
//! closes, with a backoff while the upstream is down.

use super::pin::{PinState, tool_digest};
use super::{MAX_MESSAGE_BYTES, McpTransportConfig, McpUpstreamConfig};
use crate::events::RuntimeEvent;
use crate::runtime::Sink;
use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam, Tool,
};
use rmcp::service::{ClientServiceExt, NotificationContext, Peer, RunningService};
use rmcp::{ClientHandler, RoleClient};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::Semaphore;

const LOG: &str = "capgate::mcp_upstream";
/// The first backoff after a failed open; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The longest line of a stdio upstream's stderr copied to the log.
const MAX_LOG_LINE: usize = 2_000;
/// The longest progress message passed on.
const MAX_PROGRESS_MESSAGE: usize = 1_000;
/// The most tools one listing may hold.
const MAX_TOOLS: usize = 10_000;

/// Why an upstream could not be used. Carries what an operator needs (names, the reason),
/// never a secret's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpUpstreamError {
    /// A header or environment value's source is unset or unreadable.
    #[error("{what} is not set")]
    SecretUnset {
        /// Which variable or file.
        what: String,
    },
    /// A header name or value cannot be sent.
    #[error("header `{name}` is not a valid HTTP header")]
    InvalidHeader {
        /// The header.
        name: String,
    },
    /// The URL is not an `http(s)://` URL.
    #[error("url `{url}` is not an http:// or https:// URL")]
    InvalidUrl {
        /// The URL as written.
        url: String,
    },
    /// The stdio command is empty.
    #[error("command must name a program")]
    EmptyCommand,
    /// The HTTP client (TLS roots) could not be built.
    #[error("the HTTP client could not be built: {reason}")]
    Client {
        /// Why.
        reason: String,
    },
    /// The command could not be started.
    #[error("`{program}` could not be started: {reason}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        reason: String,
    },
    /// The session could not be opened (connect, initialize, or their timeout).
    #[error("the MCP session could not be opened: {reason}")]
    Connect {
        /// Why.
        reason: String,
    },
    /// The upstream failed recently; calls fail at once until the backoff passes.
    #[error("the upstream is down ({reason}); next attempt in {retry_in_ms} ms")]
    Down {
        /// The last failure.
        reason: String,
        /// When the next open is tried.
        retry_in_ms: u64,
    },
    /// `tools/list` failed.
    #[error("tools/list failed: {reason}")]
    List {
        /// Why.
        reason: String,
    },
}

/// The tools an upstream listed, with their pins' digests.
#[derive(Debug, Clone, Default)]
pub struct ToolListing {
    /// Each tool by name.
    pub tools: BTreeMap<String, Tool>,
    /// Each tool's [`tool_digest`].
    pub digests: BTreeMap<String, String>,
}

impl ToolListing {
    fn of(tools: Vec<Tool>) -> Self {
        let mut listing = ToolListing::default();
        for t in tools.into_iter().take(MAX_TOOLS) {
            let name = t.name.to_string();
            listing.digests.insert(name.clone(), tool_digest(&t));
            listing.tools.insert(name, t);
        }
        listing
    }
}

/// Where progress notifications go: the sink of the call whose request carries the token.
#[derive(Default)]
pub(crate) struct ProgressRoutes(Mutex<HashMap<String, Sink<RuntimeEvent>>>);

impl ProgressRoutes {
    fn key(token: &rmcp::model::ProgressToken) -> String {
        serde_json::to_string(token).unwrap_or_default()
    }

    pub(crate) fn insert(&self, token: &rmcp::model::ProgressToken, sink: Sink<RuntimeEvent>) {
        if let Ok(mut m) = self.0.lock() {
            m.insert(Self::key(token), sink);
        }
    }

    pub(crate) fn remove(&self, token: &rmcp::model::ProgressToken) {
        if let Ok(mut m) = self.0.lock() {
            m.remove(&Self::key(token));
        }
    }

    fn deliver(&self, p: ProgressNotificationParam) {
        let sink = self
            .0
            .lock()
            .ok()
            .and_then(|m| m.get(&Self::key(&p.progress_token)).cloned());
        // Progress for no call of ours (late, or made up) is dropped.
        let Some(sink) = sink else { return };
        let message = p
            .message
            .map(|m| m.chars().take(MAX_PROGRESS_MESSAGE).collect::<String>());
        let mut value = json!({ "progress": p.progress });
        if let Some(total) = p.total {
            value["total"] = json!(total);
        }
        if let Some(message) = message {
            value["message"] = json!(message);
        }
        let _ = sink.progress(value);
    }
}

/// The client side of the session: announces capgate, routes progress, and hears the
/// upstream say its tools changed.
#[derive(Clone)]
struct Handler {
    routes: Arc<ProgressRoutes>,
    /// The upstream's latest listing: forgotten when the upstream says its tools changed.
    listing: Arc<RwLock<Option<ToolListing>>>,
    /// Wakes whoever relists (the pin watch) when the upstream says its tools changed.
    changed: Arc<tokio::sync::Notify>,
}

impl ClientHandler for Handler {
    /// `notifications/tools/list_changed`: the listing the pins were checked against is
    /// stale, so it is forgotten at once (every pinned tool is unverified, its calls refused
    /// and its capability concealed) and the pin watch relists now rather than at its next
    /// interval. A drifted tool is never called in between.
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        if let Ok(mut l) = self.listing.write() {
            *l = None;
        }
        self.changed.notify_one();
        std::future::ready(())
    }

    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.routes.deliver(params);
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        // The tasks extension: an upstream may answer a long tool with a task, which the
        // tool provider polls within the capability's deadline (`tool.rs`).
        ClientConfig::new(
            ClientCapabilities::builder().enable_tasks().build(),
            Implementation::new("capgate", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// How a session starts: the 2026-07-28 revision's `server/discover` first (an upstream of
/// that revision may answer a long tool with a task, the tasks extension being declared),
/// falling back to the `initialize` handshake for an upstream that does not know it.
fn lifecycle() -> rmcp::service::ClientLifecycleMode {
    rmcp::service::ClientLifecycleMode::Auto {
        preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    }
}

struct Slot {
    service: Option<RunningService<RoleClient, Handler>>,
    retry_at: Option<tokio::time::Instant>,
    backoff: Duration,
    last_error: Option<String>,
}

/// One `[upstreams.mcp.NAME]`: its session, its bound on calls in flight, and its latest
/// tool listing. Nothing is started until first used ([`McpUpstream::peer`] or
/// [`McpUpstream::list`]), so `capgate check` builds one without touching the upstream.
pub struct McpUpstream {
    config: McpUpstreamConfig,
    slot: tokio::sync::Mutex<Slot>,
    permits: Arc<Semaphore>,
    listing: Arc<RwLock<Option<ToolListing>>>,
    changed: Arc<tokio::sync::Notify>,
    routes: Arc<ProgressRoutes>,
    up: AtomicBool,
}

impl std::fmt::Debug for McpUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpUpstream")
            .field("name", &self.config.name)
            .field("up", &self.is_up())
            .finish()
    }
}

impl McpUpstream {
    /// Check a configuration (URL, header names, command) without connecting.
    pub fn new(config: McpUpstreamConfig) -> Result<Self, McpUpstreamError> {
        match &config.transport {
            McpTransportConfig::Stdio { program, .. } if program.is_empty() => {
                return Err(McpUpstreamError::EmptyCommand);
            }
            McpTransportConfig::Http { url, headers, .. } => {
                let parsed = reqwest::Url::parse(url)
                    .map_err(|_| McpUpstreamError::InvalidUrl { url: url.clone() })?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(McpUpstreamError::InvalidUrl { url: url.clone() });
                }
                for name in headers.keys() {
                    reqwest::header::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| McpUpstreamError::InvalidHeader { name: name.clone() })?;
                }
            }
            McpTransportConfig::Stdio { .. } => {}
        }
        Ok(McpUpstream {
            permits: Arc::new(Semaphore::new(config.max_concurrent_calls.max(1))),
            config,
            slot: tokio::sync::Mutex::new(Slot {
                service: None,
                retry_at: None,
                backoff: MIN_BACKOFF,
                last_error: None,
            }),
            listing: Arc::new(RwLock::new(None)),
            changed: Arc::new(tokio::sync::Notify::new()),
            routes: Arc::default(),
            up: AtomicBool::new(false),
        })
    }

    /// The name capabilities refer to it by.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Its configuration.
    pub fn config(&self) -> &McpUpstreamConfig {
        &self.config
    }

    /// Whether the last attempt to use the session succeeded (`/readyz`).
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::SeqCst)
    }

    pub(crate) fn permits(&self) -> &Arc<Semaphore> {
        &self.permits
    }

    pub(crate) fn routes(&self) -> &Arc<ProgressRoutes> {
        &self.routes
    }

    /// Wait until the upstream says its tools changed (`notifications/tools/list_changed`):
    /// its listing is already forgotten then, and whoever watches the pins should relist.
    pub async fn list_changed(&self) {
        self.changed.notified().await;
    }

    /// The latest listing, if any succeeded.
    pub fn listing(&self) -> Option<ToolListing> {
        self.listing.read().ok().and_then(|l| l.clone())
    }

    /// Where the tool pinned to `pin` stands against the latest listing.
    pub fn pin_state(&self, tool: &str, pin: &str) -> PinState {
        let Ok(listing) = self.listing.read() else {
            return PinState::Unverified;
        };
        match listing.as_ref() {
            None => PinState::Unverified,
            Some(l) => match l.digests.get(tool) {
                None => PinState::Missing,
                Some(d) if d.eq_ignore_ascii_case(pin) => PinState::Matches,
                Some(d) => PinState::Drifted {
                    observed: d.clone(),
                },
            },
        }
    }

    /// The session's peer, opening the session (and listing the tools) when there is none
    /// or it closed. While down, fails at once until the backoff passes.
    pub async fn peer(&self) -> Result<Peer<RoleClient>, McpUpstreamError> {
        let mut slot = self.slot.lock().await;
        if let Some(s) = &slot.service {
            if !s.is_closed() && !s.peer().is_transport_closed() {
                return Ok(s.peer().clone());
            }
            tracing::warn!(target: LOG, upstream = %self.config.name, "the MCP session closed; opening it again");
            slot.service = None;
        }
        let now = tokio::time::Instant::now();
        if let Some(at) = slot.retry_at
            && now < at
        {
            return Err(McpUpstreamError::Down {
                reason: slot.last_error.clone().unwrap_or_default(),
                retry_in_ms: u64::try_from((at - now).as_millis()).unwrap_or(u64::MAX),
            });
        }
        let opened = tokio::time::timeout(self.config.connect_timeout, self.open()).await;
        let opened = match opened {
            Ok(Ok(service)) => {
                let listed = tokio::time::timeout(
                    self.config.connect_timeout,
                    service.peer().list_all_tools(),
                )
                .await;
                match listed {
                    Ok(Ok(tools)) => {
                        self.store_listing(tools);
                        Ok(service)
                    }
                    Ok(Err(e)) => Err(McpUpstreamError::List {
                        reason: e.to_string(),
                    }),
                    Err(_) => Err(McpUpstreamError::List {
                        reason: "timed out".into(),
                    }),
                }
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(McpUpstreamError::Connect {
                reason: format!(
                    "timed out after {} ms",
                    self.config.connect_timeout.as_millis()
                ),
            }),
        };
        match opened {
            Ok(service) => {
                let peer = service.peer().clone();
                self.watch_list_changes(&peer);
                slot.service = Some(service);
                slot.retry_at = None;
                slot.backoff = MIN_BACKOFF;
                slot.last_error = None;
                self.up.store(true, Ordering::SeqCst);
                tracing::info!(target: LOG, upstream = %self.config.name, "MCP session opened");
                Ok(peer)
            }
            Err(e) => {
                slot.retry_at = Some(now + slot.backoff);
                slot.backoff = (slot.backoff * 2).min(MAX_BACKOFF);
                slot.last_error = Some(e.to_string());
                self.up.store(false, Ordering::SeqCst);
                crate::mcp::tool::count_failure(&self.config.name, "connect");
                tracing::warn!(target: LOG, upstream = %self.config.name, error = %e, "the MCP upstream could not be reached");
                Err(e)
            }
        }
    }

    /// On the 2026-07-28 revision a server sends `notifications/tools/list_changed` only to
    /// a `subscriptions/listen` request: open one, so a changed tool is concealed at once
    /// as on a handshake session ([`Handler::on_tool_list_changed`]). A server that refuses
    /// it is still relisted every `relist_interval`.
    fn watch_list_changes(&self, peer: &Peer<RoleClient>) {
        let modern = peer
            .peer_info()
            .is_some_and(|i| i.protocol_version >= rmcp::model::ProtocolVersion::V_2026_07_28);
        if !modern {
            return;
        }
        let (peer, listing, changed, name) = (
            peer.clone(),
            self.listing.clone(),
            self.changed.clone(),
            self.config.name.clone(),
        );
        tokio::spawn(async move {
            let filter = rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build();
            let mut subscription = match peer.listen(filter).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::info!(target: LOG, upstream = %name, error = %e, "the MCP upstream takes no subscription; its tools are relisted on the interval");
                    return;
                }
            };
            while let Ok(Some(notification)) = subscription.next().await {
                if matches!(
                    notification,
                    rmcp::model::ServerNotification::ToolListChangedNotification(_)
                ) {
                    if let Ok(mut l) = listing.write() {
                        *l = None;
                    }
                    changed.notify_one();
                }
            }
        });
    }

    /// Record that a call found the session broken: the next use opens it again.
    pub(crate) async fn broken(&self, reason: &str) {
        let mut slot = self.slot.lock().await;
        if let Some(s) = slot.service.take() {
            drop(s);
        }
        slot.last_error = Some(reason.to_string());
        self.up.store(false, Ordering::SeqCst);
    }

    /// List the tools again (opening the session if needed) and keep the listing: what the
    /// pins are checked against.
    pub async fn list(&self) -> Result<ToolListing, McpUpstreamError> {
        let peer = self.peer().await?;
        let tools = tokio::time::timeout(self.config.connect_timeout, peer.list_all_tools()).await;
        match tools {
            Ok(Ok(tools)) => Ok(self.store_listing(tools)),
            Ok(Err(e)) => {
                let reason = e.to_string();
                if peer.is_transport_closed() {
                    self.broken(&reason).await;
                }
                Err(McpUpstreamError::List { reason })
            }
            Err(_) => Err(McpUpstreamError::List {
                reason: "timed out".into(),
            }),
        }
    }

    fn store_listing(&self, tools: Vec<Tool>) -> ToolListing {
        let listing = ToolListing::of(tools);
        if let Ok(mut l) = self.listing.write() {
            *l = Some(listing.clone());
        }
        listing
    }

    /// Close the session (a stdio child is stopped).
    pub async fn close(&self) {
        let service = self.slot.lock().await.service.take();
        if let Some(s) = service {
            let _ = s.cancel().await;
        }
        self.up.store(false, Ordering::SeqCst);
    }

    async fn open(&self) -> Result<RunningService<RoleClient, Handler>, McpUpstreamError> {
        let handler = Handler {
            routes: self.routes.clone(),
            listing: self.listing.clone(),
            changed: self.changed.clone(),
        };
        let connect = |e: rmcp::service::ClientInitializeError| McpUpstreamError::Connect {
            reason: e.to_string(),
        };
        match &self.config.transport {
            McpTransportConfig::Stdio {
                program,
                args,
                env,
                inherit,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(args).env_clear().kill_on_drop(true);
                for name in inherit {
                    if let Some(v) = std::env::var_os(name) {
                        cmd.env(name, v);
                    }
                }
                for (name, value) in env {
                    cmd.env(name, value.resolve()?);
                }
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                cmd.stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped());
                let spawn_failed = |reason: String| McpUpstreamError::Spawn {
                    program: program.clone(),
                    reason,
                };
                let mut child = cmd.spawn().map_err(|e| spawn_failed(e.to_string()))?;
                let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                    return Err(spawn_failed("its stdin and stdout are not pipes".into()));
                };
                if let Some(stderr) = child.stderr.take() {
                    tokio::spawn(copy_stderr(self.config.name.clone(), stderr));
                }
                // The child lives as long as the session reads it, and a message longer
                // than the bound ends the session (and the child) at once: the call waiting
                // for it fails then, instead of waiting out its deadline for a line the
                // transport dropped.
                let reader = BoundedStdout {
                    stdout,
                    _child: child,
                    run: 0,
                    limit: MAX_STDIO_LINE,
                };
                handler
                    .serve_with_lifecycle((reader, stdin), lifecycle())
                    .await
                    .map_err(connect)
            }
            McpTransportConfig::Http {
                url,
                headers,
                ca_file,
            } => {
                use rmcp::transport::StreamableHttpClientTransport;
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let speaks_tls = url.starts_with("https://");
                let builder = reqwest::Client::builder()
                    .connect_timeout(self.config.connect_timeout)
                    .redirect(reqwest::redirect::Policy::none());
                let client = crate::http::with_roots(builder, ca_file.as_deref(), speaks_tls)
                    .map_err(|e| McpUpstreamError::Client {
                        reason: e.to_string(),
                    })?
                    .build()
                    .map_err(|e| McpUpstreamError::Client {
                        reason: e.to_string(),
                    })?;
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                for (name, value) in headers {
                    let invalid = || McpUpstreamError::InvalidHeader { name: name.clone() };
                    let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| invalid())?;
                    let mut v = reqwest::header::HeaderValue::from_str(&value.resolve()?)
                        .map_err(|_| invalid())?;
                    v.set_sensitive(true);
                    config.custom_headers.insert(header, v);
                }
                config.max_json_response_size = MAX_MESSAGE_BYTES;
                config.max_sse_event_size = MAX_MESSAGE_BYTES;
                let transport = StreamableHttpClientTransport::with_client(client, config);
                handler
                    .serve_with_lifecycle(transport, lifecycle())
                    .await
                    .map_err(connect)
            }
        }
    }
}

/// The longest line a stdio upstream may write on stdout: below the MCP transport's own
/// bound (which drops a longer line and reads on, leaving its call waiting), so
/// [`BoundedStdout`] ends the session first.
const MAX_STDIO_LINE: usize = MAX_MESSAGE_BYTES - 16;

/// A stdio upstream's stdout that owns its process: a line longer than `limit` bytes is a
/// read error (the session ends and its calls fail at once), and dropping it, with the
/// session, stops the process (`kill_on_drop`).
struct BoundedStdout {
    stdout: tokio::process::ChildStdout,
    /// Kept to be dropped (and so stopped) with the session.
    _child: tokio::process::Child,
    /// Bytes since the last newline.
    run: usize,
    limit: usize,
}

impl tokio::io::AsyncRead for BoundedStdout {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match std::pin::Pin::new(&mut this.stdout).poll_read(cx, buf) {
            std::task::Poll::Ready(Ok(())) => {}
            other => return other,
        }
        for &b in &buf.filled()[before..] {
            if b == b'\n' {
                this.run = 0;
            } else {
                this.run += 1;
                if this.run > this.limit {
                    return std::task::Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "the upstream wrote a message longer than {} bytes",
                            this.limit
                        ),
                    )));
                }
            }
        }
        std::task::Poll::Ready(Ok(()))
    }
}

/// A stdio upstream's stderr, line by line into the log, so its own diagnostics are not
/// lost and never reach a caller. A line is cut at [`MAX_LOG_LINE`] bytes as it is read:
/// the rest of it is skipped without being buffered, so a child writing one endless line
/// holds no more memory than that.
async fn copy_stderr(name: String, stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::new(stderr);
    let mut line: Vec<u8> = Vec::new();
    let mut cut = false;
    let log = |line: &[u8], cut: bool| {
        let text = String::from_utf8_lossy(line);
        let more = if cut { " …" } else { "" };
        tracing::info!(target: LOG, upstream = %name, "stderr: {text}{more}");
    };
    loop {
        let buf = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buf) => buf,
        };
        let newline = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..newline.unwrap_or(buf.len())];
        let room = MAX_LOG_LINE.saturating_sub(line.len());
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        cut |= chunk.len() > room;
        let consumed = newline.map_or(buf.len(), |i| i + 1);
        reader.consume(consumed);
        if newline.is_some() {
            log(&line, cut);
            line.clear();
            cut = false;
        }
    }
    if !line.is_empty() {
        log(&line, cut);
    }
}
