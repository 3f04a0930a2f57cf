//! The file's sections resolved into the settings of the crates that run them: paths
//! against the configuration file, defaults filled in, the schema layer's own types mapped
//! to the provider's and the gateway's. `capgate-config` knows none of these crates; this is
//! where the two meet.

use capgate_config::{
    Config, HttpProcedureSection, McpTransport, McpUpstreamSection, SecretSetting, SecretSource,
};
use capgate_provider::mcp::{McpTransportConfig, McpUpstreamConfig, SecretValue};
use capgate_provider::{HttpRequestMapping, HttpUpstreamConfig};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod export;
pub mod inventory;
pub mod telemetry;

pub use export::{ExportSettings, ExportSpec, ExportTarget};
pub use telemetry::{TelemetrySettings, TraceSettings};

/// The directory the file's relative paths are read against (the config file's own).
#[derive(Debug, Clone)]
pub(crate) struct Base {
    dir: PathBuf,
}

impl Base {
    pub(crate) fn of(cfg: &Config) -> Base {
        Base {
            dir: cfg.dir().to_path_buf(),
        }
    }

    pub(crate) fn relative(&self, p: impl AsRef<Path>) -> PathBuf {
        self.dir.join(p)
    }
}

/// `procedure.http` as the provider's upstream: `caFile` relative to the config file, like
/// every other path in it.
pub fn http_upstream(cfg: &Config, h: &HttpProcedureSection) -> HttpUpstreamConfig {
    HttpUpstreamConfig {
        target: h.target.clone(),
        url: h.url.clone(),
        health_url: h.health_url.clone(),
        headers: h
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.0.clone()))
            .collect(),
        connect_timeout_ms: h.connect_timeout_ms,
        ca_file: h.ca_file.as_ref().map(|p| cfg.relative(p)),
        request: h.request.as_ref().map(|r| HttpRequestMapping {
            method: r.method.0.clone(),
            path: r.path.clone(),
            query: r.query.clone(),
            headers: r.headers.clone(),
            body: r.body.clone(),
        }),
        errors: h.errors.0.clone(),
    }
}

/// Every `[upstreams.mcp.NAME]` as the provider's configuration. Call after the file was
/// checked (a program named): an entry without one is left out.
pub fn mcp_upstreams(cfg: &Config) -> BTreeMap<String, McpUpstreamConfig> {
    cfg.upstreams
        .mcp
        .iter()
        .filter_map(|(name, u)| Some((name.clone(), mcp_upstream(cfg, name, u)?)))
        .collect()
}

fn mcp_upstream(cfg: &Config, name: &str, u: &McpUpstreamSection) -> Option<McpUpstreamConfig> {
    let base = Base::of(cfg);
    let secrets = |m: &BTreeMap<String, SecretSetting>| {
        m.iter()
            .map(|(k, v)| (k.clone(), secret_value(&base, v)))
            .collect::<BTreeMap<_, _>>()
    };
    let transport = match &u.transport {
        McpTransport::Http {
            url,
            headers,
            ca_file,
        } => McpTransportConfig::Http {
            url: url.clone(),
            headers: secrets(headers),
            ca_file: ca_file.as_ref().map(|p| cfg.relative(p)),
        },
        McpTransport::Stdio {
            command,
            env,
            inherit_env,
            cwd,
        } => {
            // The file's checks refuse an empty command; such an entry is left out.
            let (program, args) = command.split_first()?;
            McpTransportConfig::Stdio {
                program: program.clone(),
                args: args.to_vec(),
                env: secrets(env),
                inherit: inherit_env.clone(),
                cwd: cwd.as_ref().map(|p| cfg.relative(p)),
            }
        }
    };
    let mut config = McpUpstreamConfig::new(name, transport);
    if let Some(ms) = u.connect_timeout_ms {
        config.connect_timeout = Duration::from_millis(ms);
    }
    if let Some(n) = u.max_concurrent_calls {
        config.max_concurrent_calls = usize::try_from(n).unwrap_or(usize::MAX);
    }
    if let Some(ms) = u.relist_interval_ms {
        config.relist_interval = Duration::from_millis(ms);
    }
    Some(config)
}

/// A header or environment value as the provider resolves it (at each use): paths against
/// the config file.
pub(crate) fn secret_value(base: &Base, v: &SecretSetting) -> SecretValue {
    match v {
        SecretSetting::Literal(s) => SecretValue::Literal(s.clone()),
        SecretSetting::From(SecretSource::Env { name, prefix }) => SecretValue::Env {
            name: name.clone(),
            prefix: prefix.clone(),
        },
        SecretSetting::From(SecretSource::File { path, prefix }) => SecretValue::File {
            path: base.relative(path),
            prefix: prefix.clone(),
        },
    }
}

/// The invocation journal's settings, resolved once from `[gateway]`: what `serve`'s store,
/// its housekeeping and the console's sessions read (every namespace's storage budget is
/// shared by its receipts, approvals and console sessions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalSettings {
    budget: capgate_core::journal::JournalBudget,
    replay_horizon: Duration,
    pending_horizon: Option<Duration>,
}

impl JournalSettings {
    /// `[gateway]`'s journal keys (`journalMax*PerNamespace`, `replayHorizonHours`,
    /// `pendingHorizonHours`).
    pub fn of(cfg: &Config) -> JournalSettings {
        let hours = |h: u64| Duration::from_secs(h.saturating_mul(3600));
        JournalSettings {
            budget: capgate_core::journal::JournalBudget {
                max_rows: cfg.gateway.journal_max_rows_per_namespace,
                max_bytes: cfg.gateway.journal_max_bytes_per_namespace,
            },
            replay_horizon: hours(cfg.gateway.replay_horizon_hours),
            pending_horizon: cfg.gateway.pending_horizon_hours.map(hours),
        }
    }

    /// One namespace's storage budget: its receipts, approvals and console sessions together.
    pub fn budget(&self) -> capgate_core::journal::JournalBudget {
        self.budget
    }

    /// How long a settled receipt (with its input) is kept and its invocation id replayed.
    pub fn replay_horizon(&self) -> Duration {
        self.replay_horizon
    }

    /// How long a pending receipt is kept before the purge takes it (absent: never).
    pub fn pending_horizon(&self) -> Option<Duration> {
        self.pending_horizon
    }
}

/// One capability route: where it is mounted and the surface it is fixed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The mount path (`/agent`).
    pub path: String,
    /// The fixed surface (never a client input).
    pub surface: capgate_core::actor::Surface,
}

/// `[gateway]`'s doors and stop times, resolved once: what `serve` mounts and announces and
/// how it stops (the console's options in the gateway's own type).
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    listen: String,
    routes: Vec<Route>,
    console: Option<capgate_gateway::console::ConsoleOptions>,
    admin_reload: bool,
    unready_delay: Duration,
    drain: Duration,
    rate_limit_scope: Option<capgate_config::RateLimitScope>,
}

impl GatewaySettings {
    /// `[gateway]`'s listener, routes, console, admin API and shutdown keys.
    pub fn of(cfg: &Config) -> GatewaySettings {
        let g = &cfg.gateway;
        GatewaySettings {
            listen: g.listen.clone(),
            routes: g
                .routes
                .iter()
                .map(|r| Route {
                    path: r.path.clone(),
                    surface: r.surface,
                })
                .collect(),
            console: g.console.enabled.then(|| console_options(&g.console)),
            admin_reload: g.admin.reload,
            unready_delay: Duration::from_millis(g.shutdown_unready_delay_ms),
            drain: Duration::from_millis(g.shutdown_drain_ms),
            rate_limit_scope: g.rate_limit.scope,
        }
    }

    /// Where the doors' rate-limit buckets live, as configured (absent: by the store).
    pub fn rate_limit_scope(&self) -> Option<capgate_config::RateLimitScope> {
        self.rate_limit_scope
    }

    /// The address the gateway listens on (`--listen` overrides it).
    pub fn listen(&self) -> &str {
        &self.listen
    }

    /// The capability routes, in the file's order.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// The console's options (without its sign-on, which `validate` builds), when it is on.
    pub fn console(&self) -> Option<&capgate_gateway::console::ConsoleOptions> {
        self.console.as_ref()
    }

    /// Whether `POST /admin/reload` is mounted.
    pub fn admin_reload(&self) -> bool {
        self.admin_reload
    }

    /// How long `/readyz` says draining while the listener still serves.
    pub fn unready_delay(&self) -> Duration {
        self.unready_delay
    }

    /// How long calls in flight get to finish once the listener closed.
    pub fn drain(&self) -> Duration {
        self.drain
    }
}

/// `[gateway.console]` as the console's options.
fn console_options(c: &capgate_config::ConsoleSection) -> capgate_gateway::console::ConsoleOptions {
    use capgate_gateway::console::{ConsoleOptions, SecureCookie};
    use capgate_gateway::throttle::PerMinute;
    ConsoleOptions {
        prefix: c.path.clone(),
        session_ttl: Duration::from_secs(c.session_minutes.saturating_mul(60)),
        secure_cookie: match c.secure_cookie.0 {
            capgate_config::SecureCookie::Auto => SecureCookie::Auto,
            capgate_config::SecureCookie::Always => SecureCookie::Always,
            capgate_config::SecureCookie::Never => SecureCookie::Never,
        },
        max_sessions_per_principal: c.max_sessions_per_principal,
        sign_in_per_principal: PerMinute::new(c.sign_in_per_minute, c.sign_in_burst),
        sign_in_per_address: PerMinute::new(
            c.sign_in_per_address_per_minute,
            c.sign_in_per_address_burst,
        ),
        ..ConsoleOptions::default()
    }
}

/// `[telemetry.metrics]` when it is on, resolved once: where the exposition is served and
/// who may read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSettings {
    path: String,
    listen: Option<String>,
    bearer_token_sha256: Option<String>,
}

impl MetricsSettings {
    /// The table, when metrics are on.
    pub fn of(cfg: &Config) -> Option<MetricsSettings> {
        let m = cfg.telemetry.metrics.as_ref().filter(|m| m.enabled)?;
        Some(MetricsSettings {
            path: m.path.clone(),
            listen: m.listen.clone(),
            bearer_token_sha256: m.bearer_token_sha256.clone(),
        })
    }

    /// The exposition's path (`/metrics`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Its own listener, if not the gateway's (`--metrics-listen` overrides it).
    pub fn listen(&self) -> Option<&str> {
        self.listen.as_deref()
    }

    /// The SHA-256 of the bearer token a scraper presents, if one is asked for.
    pub fn bearer_token_sha256(&self) -> Option<&str> {
        self.bearer_token_sha256.as_deref()
    }
}

/// `[audit]` resolved once: how strictly calls are recorded, the signed checkpoints, the
/// JSON-lines copy, retention and the export sinks' names.
#[derive(Clone)]
pub struct AuditSettings {
    strict: bool,
    verbose: bool,
    checkpoint_key: Option<String>,
    checkpoint_events: u64,
    jsonl: Option<std::path::PathBuf>,
    retain_days: Option<u64>,
    export_sinks: Vec<String>,
}

/// The most committed events a checkpoint may leave unsigned when `checkpointEvents` is
/// absent.
pub const DEFAULT_CHECKPOINT_EVENTS: u64 = 1000;

impl AuditSettings {
    /// `[audit]`, paths against the config file.
    pub fn of(cfg: &Config) -> AuditSettings {
        let a = &cfg.audit;
        AuditSettings {
            strict: a.strict,
            verbose: a.verbose,
            checkpoint_key: a.checkpoint_key.clone(),
            checkpoint_events: a.checkpoint_events.unwrap_or(DEFAULT_CHECKPOINT_EVENTS),
            jsonl: a.jsonl.as_ref().map(|p| cfg.relative(p)),
            retain_days: a.retain_days,
            export_sinks: a.export.keys().cloned().collect(),
        }
    }

    /// Strict: a call whose `capability.started` cannot be recorded does not run.
    pub fn strict(&self) -> bool {
        self.strict
    }

    /// Capability ids in `capabilities.discovered`.
    pub fn verbose(&self) -> bool {
        self.verbose
    }

    /// The signer of checkpoints and purge records (`checkpointKey`), if one is set.
    pub fn checkpoint_signer(
        &self,
    ) -> Result<Option<capgate_store::CheckpointSigner>, capgate_store::CheckpointKeyError> {
        self.checkpoint_key
            .as_deref()
            .map(|pem| capgate_store::CheckpointSigner::from_pkcs8_pem(pem, self.checkpoint_events))
            .transpose()
    }

    /// `[audit] jsonl`, resolved against the config file.
    pub fn jsonl(&self) -> Option<&std::path::Path> {
        self.jsonl.as_deref()
    }

    /// `retainDays`, if the trail is purged.
    pub fn retain_days(&self) -> Option<u64> {
        self.retain_days
    }

    /// The names of `[audit.export.NAME]` (the purge keeps what they have not delivered).
    pub fn export_sinks(&self) -> &[String] {
        &self.export_sinks
    }
}

impl std::fmt::Debug for AuditSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The checkpoint key is a secret: say whether it is set, never what it is.
        f.debug_struct("AuditSettings")
            .field("strict", &self.strict)
            .field("verbose", &self.verbose)
            .field(
                "checkpoint_key",
                &self.checkpoint_key.as_ref().map(|_| "(set)"),
            )
            .field("checkpoint_events", &self.checkpoint_events)
            .field("jsonl", &self.jsonl)
            .field("retain_days", &self.retain_days)
            .field("export_sinks", &self.export_sinks)
            .finish()
    }
}

/// `[store]` resolved: where the store is (a relative SQLite path against
/// `runtime.stateDir`, certificate files against the config file) and its pool options.
#[derive(Clone)]
pub struct StoreSettings {
    url: String,
    file: PathBuf,
    state_dir: PathBuf,
    options: capgate_store::StoreOptions,
}

impl StoreSettings {
    /// `[store]` and `runtime.stateDir`.
    pub fn of(cfg: &Config) -> StoreSettings {
        let mut options = capgate_store::StoreOptions::default();
        if let Some(ms) = cfg.store.acquire_timeout_ms {
            options.acquire_timeout = Duration::from_millis(ms);
        }
        StoreSettings {
            url: cfg.store.url.clone(),
            file: cfg.path.clone(),
            state_dir: cfg.state_dir(),
            options,
        }
    }

    /// `store.url` as written (a secret: it may carry a password).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The configuration file (a Postgres URL's certificate files are relative to it).
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// `runtime.stateDir`, or the file's directory: a relative SQLite path is relative to it.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The pool's options (what `[store]` leaves out is the store's default).
    pub fn options(&self) -> capgate_store::StoreOptions {
        self.options.clone()
    }
}

impl std::fmt::Debug for StoreSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `store.url` is a secret key (a Postgres URL may carry the password).
        f.debug_struct("StoreSettings")
            .field("file", &self.file)
            .field("state_dir", &self.state_dir)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// `[approvals] escalateAfterMs` and `escalateTo`: when a pending approval is escalated, and
/// to which role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalation {
    after: Duration,
    to: Option<String>,
}

impl Escalation {
    /// `[approvals]`'s escalation, if it sets one.
    pub fn of(cfg: &Config) -> Option<Escalation> {
        cfg.approvals.escalate_after_ms.map(|ms| Escalation {
            after: Duration::from_millis(ms),
            to: cfg.approvals.escalate_to.clone(),
        })
    }

    /// How long an approval stays pending before it is escalated.
    pub fn after(&self) -> Duration {
        self.after
    }

    /// The role it is escalated to (carried in the event and the notification).
    pub fn to(&self) -> Option<&str> {
        self.to.as_deref()
    }
}

/// Who an API key authenticates as, on which doors: what `capgate replay` maps a recorded
/// call's journal scope back to. Never the key's hash.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyIdentity {
    /// The actor.
    pub actor: capgate_core::actor::Actor,
    /// Its namespace.
    pub namespace: String,
    /// The doors it opens.
    pub surfaces: Vec<capgate_core::actor::Surface>,
    /// The context its calls carry.
    pub context: serde_json::Value,
}

impl KeyIdentity {
    /// Every `[[gateway.apiKeys]]`, in file order.
    pub fn all(cfg: &Config) -> Vec<KeyIdentity> {
        cfg.gateway
            .api_keys
            .iter()
            .map(|k| KeyIdentity {
                actor: k.actor.to_actor(),
                namespace: k.namespace.clone(),
                surfaces: k.surfaces.clone(),
                context: k.context.clone(),
            })
            .collect()
    }
}

/// A capability's `procedure.mcp` pin: the tool of which upstream, and the SHA-256 of its
/// definition (lower case) that the pin watch compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpPin {
    /// `[upstreams.mcp.NAME]`.
    pub upstream: String,
    /// The capability that calls it.
    pub capability: String,
    /// The upstream's tool name.
    pub tool: String,
    /// `toolSha256`, lower case.
    pub sha256: String,
    /// The capability's description (what `capgate import mcp --diff` compares).
    pub description: String,
    /// Its input schema when written inline.
    pub input_schema: Option<serde_json::Value>,
    /// Its output schema when written inline.
    pub output_schema: Option<serde_json::Value>,
}

/// A schema written inline in the file (a `$ref` to a file is not compared).
fn inline(s: &Option<capgate_config::SchemaRef>) -> Option<serde_json::Value> {
    match s {
        Some(capgate_config::SchemaRef::Inline(m)) => Some(serde_json::Value::Object(m.clone())),
        _ => None,
    }
}

impl McpPin {
    /// Every capability's MCP pin, in file order.
    pub fn all(cfg: &Config) -> Vec<McpPin> {
        cfg.capabilities
            .iter()
            .filter_map(|c| {
                let m = c.procedure.mcp()?;
                Some(McpPin {
                    upstream: m.upstream.clone(),
                    capability: c.id.clone(),
                    tool: m.tool.clone(),
                    sha256: m.tool_sha256.to_ascii_lowercase(),
                    description: c.description.clone(),
                    input_schema: inline(&c.input_schema),
                    output_schema: inline(&c.output_schema),
                })
            })
            .collect()
    }
}
