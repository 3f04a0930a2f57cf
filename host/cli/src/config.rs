//! The deployment file (`capgate.toml`): typed sections, read with every problem located
//! (`file:line:column: key: message`) and reported together before anything starts.

use crate::located::{Located, Problem, seg};
use capgate_core::actor::{ActorKind, Surface};
use capgate_core::meta::{AdapterNames, ApprovalConfig, Expose, RetryConfig, Risk, SideEffect};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The whole file.
#[derive(Debug, Default)]
pub struct Config {
    /// The file, for relative paths.
    pub path: PathBuf,
    /// Changes whenever handler or policy meaning changes (part of the contract digest).
    pub revision: String,
    /// Runtime defaults.
    pub runtime: RuntimeSection,
    /// The store.
    pub store: StoreSection,
    /// Audit.
    pub audit: AuditSection,
    /// Plugin files.
    pub plugins: BTreeMap<String, PluginSection>,
    /// Named policy bindings.
    pub policies: BTreeMap<String, BindingSection>,
    /// Named redactor bindings.
    pub redactors: BTreeMap<String, BindingSection>,
    /// Capabilities in declaration order.
    pub capabilities: Vec<CapabilitySection>,
    /// The HTTP gateway.
    pub gateway: GatewaySection,
    /// The stdio MCP server.
    pub mcp: McpSection,
    /// `[approvals]`
    pub approvals: ApprovalsSection,
    /// `[telemetry]`: metrics and traces.
    pub telemetry: crate::telemetry::TelemetrySection,
}

/// `[telemetry.metrics]`: the Prometheus exposition.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MetricsSection {
    /// On unless `false` (the table's presence turns metrics on).
    pub enabled: bool,
    /// Serve on this address of its own (e.g. `127.0.0.1:9464`) rather than on the
    /// gateway's listener, so scrapes never share a port with agents.
    pub listen: Option<String>,
    /// The path (default `/metrics`).
    pub path: String,
    /// Hex SHA-256 of a bearer token scrapes must send (`capgate keys hash` prints it, the
    /// token on standard input); absent: no authentication (bind `listen` to a private address).
    pub bearer_token_sha256: Option<String>,
}

impl Default for MetricsSection {
    fn default() -> Self {
        MetricsSection {
            enabled: true,
            listen: None,
            path: "/metrics".into(),
            bearer_token_sha256: None,
        }
    }
}

/// `[runtime]`
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RuntimeSection {
    /// Per-attempt timeout default.
    pub timeout_ms: u64,
    /// Shared policy batch deadline.
    pub policy_timeout_ms: u64,
    /// Approval expiry default.
    pub approval_expires_in_ms: u64,
    /// SI-4.
    pub reject_self_approval: bool,
    /// Approval types a requester may confirm themselves.
    pub self_confirmable_types: Vec<String>,
    /// Runtime-level policies, by binding name, in order.
    pub policies: Vec<String>,
    /// The directory plugin files are opened from (relative to the config file); no
    /// plugin path may escape it.
    pub plugin_dir: String,
    /// Where compiled plugin code is cached, keyed by digest and engine (relative to the
    /// config file), so a restart does not recompile.
    pub compile_cache: String,
    /// `[runtime.oci]`: plugins from an OCI registry (cache, plain-HTTP registries,
    /// signature policy).
    pub oci: crate::oci::OciSection,
}

impl Default for RuntimeSection {
    fn default() -> Self {
        let d = capgate_core::runtime::Defaults::default();
        RuntimeSection {
            timeout_ms: d.timeout_ms,
            policy_timeout_ms: d.policy_timeout_ms,
            approval_expires_in_ms: d.approval_expires_in_ms,
            reject_self_approval: true,
            self_confirmable_types: Vec::new(),
            policies: Vec::new(),
            plugin_dir: ".".into(),
            compile_cache: ".capgate-cache".into(),
            oci: crate::oci::OciSection::default(),
        }
    }
}

/// `[store]`
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct StoreSection {
    /// `sqlite://capgate.db` (relative to the config file) or `postgres://…`.
    pub url: String,
    /// How long a statement waits for a pooled connection (on Postgres, that includes
    /// connecting while the server is away) before the request fails with a `503`. Bounds
    /// how long a call can wait on a database that is down. Default 10 000.
    pub acquire_timeout_ms: u64,
}

impl Default for StoreSection {
    fn default() -> Self {
        StoreSection {
            url: "sqlite://capgate.db".into(),
            acquire_timeout_ms: millis(capgate_store::StoreOptions::default().acquire_timeout),
        }
    }
}

impl StoreSection {
    /// The store's pool options this section sets.
    pub fn options(&self) -> capgate_store::StoreOptions {
        capgate_store::StoreOptions {
            acquire_timeout: std::time::Duration::from_millis(self.acquire_timeout_ms),
            ..capgate_store::StoreOptions::default()
        }
    }
}

/// `[audit]`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AuditSection {
    /// No `capability.started` record, no execution.
    pub strict: bool,
    /// Capability ids in `capabilities.discovered`.
    pub verbose: bool,
    /// Also write JSON lines to this file (relative to the config file).
    pub jsonl: Option<String>,
}

/// `[plugins.NAME]`
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSection {
    /// File name inside the plugin directory, or `oci://REGISTRY/REPO@sha256:MANIFEST` (a
    /// registry artifact pinned by its manifest digest; see [`crate::oci`]).
    pub path: String,
    /// Pinned SHA-256 (hex) of the Wasm bytes: required for a file, optional for an
    /// `oci://` path (whose digest already pins them; when given, it must agree).
    pub sha256: Option<String>,
    /// Fuel per call.
    pub fuel: Option<u64>,
    /// Memory cap in MiB.
    pub memory_mb: Option<u64>,
    /// Per-call deadline.
    pub timeout_ms: Option<u64>,
    /// `fresh` (default) or `pooled`.
    pub isolation: Option<String>,
    /// Fresh isolation: ready instances kept instantiated ahead of calls (default 8; 0 turns
    /// the reserve off).
    pub reserve: Option<u32>,
    /// Refill the reserve when this many or fewer are left (default: half of `reserve`).
    pub reserve_refill_at: Option<u32>,
}

/// `[policies.NAME]` / `[redactors.NAME]`
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BindingSection {
    /// The plugin.
    pub plugin: String,
    /// Phases (policies only).
    pub phases: Option<Vec<capgate_core::policy::Phase>>,
    /// `enforce` (the default) or `shadow` (policies only): a shadow policy is evaluated
    /// like an enforcing one, but its stance never changes the outcome; where it would
    /// have, the call records a `capgate.policy.shadow_divergence` event.
    #[serde(default)]
    pub mode: PolicyMode,
    /// Handed to the plugin on every call.
    #[serde(default)]
    pub config: serde_json::Value,
}

/// How a policy binding takes effect (`[policies.NAME] mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyMode {
    /// Its stance counts (the default).
    #[default]
    Enforce,
    /// Evaluated and compared, never enforced: a rollout step before `enforce`.
    Shadow,
}

/// A JSON Schema inline or by relative path.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SchemaRef {
    /// A path relative to the config file.
    Path(String),
    /// Inline.
    Inline(serde_json::Map<String, serde_json::Value>),
}

/// How a capability's operation is reached.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcedureSection {
    /// A Wasm procedure plugin.
    pub plugin: Option<String>,
    /// An HTTP upstream.
    pub http: Option<capgate_provider::HttpUpstreamConfig>,
    /// Handed to the plugin.
    #[serde(default)]
    pub config: serde_json::Value,
    /// Stall timeout of the provider runtime (0 = default 300000).
    #[serde(default)]
    pub response_stall_timeout_ms: i64,
}

/// `[[capabilities]]`
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapabilitySection {
    /// Canonical id.
    pub id: String,
    /// For the model.
    pub description: String,
    /// Exposure.
    pub expose: Expose,
    /// Side effect.
    pub side_effect: SideEffect,
    /// Risk.
    pub risk: Risk,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Timeout.
    pub timeout_ms: Option<u64>,
    /// Retries.
    pub retry: Option<RetryConfig>,
    /// Idempotency.
    #[serde(default)]
    pub idempotent: bool,
    /// Static approval.
    pub approval: Option<ApprovalConfig>,
    /// Tool names.
    pub adapters: Option<AdapterNames>,
    /// `discoverable` (default: listed to models) or `contextual` (left out of model tool
    /// lists, presented by a UI; callable where exposed).
    #[serde(default)]
    pub discovery: capgate_core::meta::Discovery,
    /// Input schema.
    pub input_schema: Option<SchemaRef>,
    /// Output schema.
    pub output_schema: Option<SchemaRef>,
    /// Policy bindings, in order.
    #[serde(default)]
    pub policies: Vec<String>,
    /// Redactor bindings, in order.
    #[serde(default)]
    pub redactors: Vec<String>,
    /// The procedure.
    pub procedure: ProcedureSection,
}

/// `[gateway]`
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GatewaySection {
    /// Listen address.
    pub listen: String,
    /// Routes, each with its fixed surface.
    pub routes: Vec<RouteSection>,
    /// `"authenticated"` (explicit opt-in) or `{ plugin = "name", config = {...} }`.
    pub authorize: Option<serde_json::Value>,
    /// Total request ceiling.
    pub request_timeout_ms: u64,
    /// Reserved for draining audit inside the ceiling.
    pub audit_drain_timeout_ms: u64,
    /// Body size cap.
    pub max_body_bytes: usize,
    /// API keys (hashed).
    pub api_keys: Vec<ApiKeySection>,
    /// JWT verification.
    pub jwt: Option<JwtSection>,
    /// Approval console URL handed to models with approval-required results.
    pub approval_console_url: Option<String>,
    /// Keep invocation receipts this long.
    pub replay_horizon_hours: u64,
    /// The most invocation receipts one namespace may hold (`journalMaxRowsPerNamespace`,
    /// default 100 000); a claim past it is refused `507 STORAGE_QUOTA_EXCEEDED`.
    pub journal_max_rows_per_namespace: u64,
    /// The most bytes of stored input and outcome JSON one namespace's receipts may hold
    /// (`journalMaxBytesPerNamespace`, default 256 MiB).
    pub journal_max_bytes_per_namespace: u64,
    /// At SIGTERM or Ctrl-C, how long `/readyz` answers 503 (`shutdown: draining`) while
    /// the listener still serves, so a load balancer stops sending before connections are
    /// refused (`shutdownUnreadyDelayMs`, default 1000; 0 stops accepting at once).
    pub shutdown_unready_delay_ms: u64,
    /// At SIGTERM or Ctrl-C, how long calls in flight get to finish once the listener is
    /// closed (`shutdownDrainMs`, default 30000); a call still running then is left with a
    /// pending receipt for `capgate invocations reconcile`.
    pub shutdown_drain_ms: u64,
    /// Rate limits of every door.
    pub rate_limit: RateLimitSection,
    /// The approval console web page.
    pub console: ConsoleSection,
    /// The operator API.
    pub admin: AdminSection,
    /// `[[gateway.operatorKeys]]`: operators' API keys (hashed), outside every tenant
    /// namespace: they open the operator API (`POST /admin/reload`) and no other door.
    pub operator_keys: Vec<OperatorKeySection>,
    /// Addresses of the reverse proxies in front of the gateway: only from these peers is
    /// `X-Forwarded-For` believed, to tell which client address a request comes from (the
    /// unauthenticated and sign-in throttles). Empty: the connection's peer is the client.
    pub trusted_proxies: Vec<String>,
}

/// `[[gateway.operatorKeys]]`: an operator's key, outside every tenant namespace.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OperatorKeySection {
    /// SHA-256 hex of the key (`capgate keys hash` prints it).
    pub sha256: String,
    /// The operator (recorded in logs and handed to the authorizer).
    pub actor: ActorSection,
}

/// `[gateway.admin]`: the operator API (README "Reloading without a restart").
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AdminSection {
    /// Serve `POST /admin/reload` to operator principals (`[[gateway.operatorKeys]]`), as
    /// the authorizer allows (default off; SIGHUP reloads either way).
    pub reload: bool,
}

/// `[gateway.console]`: the approval console, a web page for approvers on the approvals
/// API (README "The approval console").
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ConsoleSection {
    /// Serve it (default on; it is only a page over the approvals API, which is always on).
    pub enabled: bool,
    /// Where: a plain path such as `/console`.
    pub path: String,
    /// How long a sign-in lasts, in minutes (capped by the credential's own expiry).
    pub session_minutes: u64,
    /// `"auto"` (Secure except on a loopback host), `true` or `false`.
    pub secure_cookie: SecureCookieSetting,
    /// The most live sessions one principal keeps (a new sign-in evicts its oldest).
    pub max_sessions_per_principal: u32,
    /// Sign-ins per principal per minute (0 with `signInBurst` 0: not throttled).
    pub sign_in_per_minute: u32,
    /// Burst of sign-ins per principal.
    pub sign_in_burst: u32,
    /// Sign-ins per client address per minute, successful or not.
    pub sign_in_per_address_per_minute: u32,
    /// Burst of sign-ins per client address.
    pub sign_in_per_address_burst: u32,
}

impl Default for ConsoleSection {
    fn default() -> Self {
        use capgate_gateway::console::*;
        ConsoleSection {
            enabled: true,
            path: "/console".into(),
            session_minutes: 480,
            secure_cookie: SecureCookieSetting::Word("auto".into()),
            max_sessions_per_principal: DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
            sign_in_per_minute: DEFAULT_SIGN_IN_PER_PRINCIPAL.0,
            sign_in_burst: DEFAULT_SIGN_IN_PER_PRINCIPAL.1,
            sign_in_per_address_per_minute: DEFAULT_SIGN_IN_PER_ADDRESS.0,
            sign_in_per_address_burst: DEFAULT_SIGN_IN_PER_ADDRESS.1,
        }
    }
}

/// `secureCookie`: `"auto"` or a boolean.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum SecureCookieSetting {
    /// `true` or `false`.
    Flag(bool),
    /// `"auto"` (anything else is a located problem).
    Word(String),
}

impl SecureCookieSetting {
    /// The gateway's setting; `None` for a word other than `auto`.
    pub fn resolve(&self) -> Option<capgate_gateway::console::SecureCookie> {
        use capgate_gateway::console::SecureCookie;
        match self {
            SecureCookieSetting::Flag(true) => Some(SecureCookie::Always),
            SecureCookieSetting::Flag(false) => Some(SecureCookie::Never),
            SecureCookieSetting::Word(w) if w == "auto" => Some(SecureCookie::Auto),
            SecureCookieSetting::Word(_) => None,
        }
    }
}

impl Default for GatewaySection {
    fn default() -> Self {
        GatewaySection {
            listen: "127.0.0.1:8080".into(),
            routes: Vec::new(),
            authorize: None,
            request_timeout_ms: millis(capgate_gateway::gateway::DEFAULT_REQUEST_TIMEOUT),
            audit_drain_timeout_ms: millis(capgate_gateway::gateway::DEFAULT_AUDIT_DRAIN_TIMEOUT),
            max_body_bytes: 1 << 20,
            api_keys: Vec::new(),
            jwt: None,
            approval_console_url: None,
            replay_horizon_hours: 24 * 7,
            journal_max_rows_per_namespace: capgate_core::journal::JournalBudget::DEFAULT.max_rows,
            journal_max_bytes_per_namespace: capgate_core::journal::JournalBudget::DEFAULT
                .max_bytes,
            shutdown_unready_delay_ms: 1000,
            shutdown_drain_ms: 30_000,
            rate_limit: RateLimitSection::default(),
            console: ConsoleSection::default(),
            admin: AdminSection::default(),
            operator_keys: Vec::new(),
            trusted_proxies: Vec::new(),
        }
    }
}

/// A duration as whole milliseconds (saturating).
fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `[[gateway.routes]]`
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteSection {
    /// Mount path, e.g. `/agent`.
    pub path: String,
    /// The fixed surface (never a client input).
    pub surface: Surface,
}

/// An actor as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActorSection {
    /// Id.
    pub id: String,
    /// Kind.
    pub kind: ActorKind,
    /// Attributes.
    #[serde(default)]
    pub attributes: serde_json::Value,
}

/// `[[gateway.apiKeys]]`
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiKeySection {
    /// SHA-256 hex of the key (`capgate keys hash`, the key on standard input, prints it).
    pub sha256: String,
    /// The actor.
    pub actor: ActorSection,
    /// Namespace.
    pub namespace: String,
    /// Roles (`approver` for the approvals API).
    #[serde(default)]
    pub roles: Vec<String>,
    /// The model surfaces (doors) the key may use: `aiSdk` (`/agent`), `workflow`
    /// (`/workflow`), `mcp` (`/mcp`). None listed: no model surface (an approver's key).
    #[serde(default)]
    pub surfaces: Vec<Surface>,
    /// Context for the runtime.
    #[serde(default)]
    pub context: serde_json::Value,
    /// Whether the key opens the requester door of the approvals API and the console (its
    /// holder confirms her own self-confirmable calls). Default: exactly when it opens no
    /// model door (`surfaces` empty): an agent's key never confirms the agent's own calls
    /// unless this says `true` for it (and `capgate check` warns).
    pub requester_door: Option<bool>,
}

impl ApiKeySection {
    /// Whether the key opens the requester door (see [`ApiKeySection::requester_door`]).
    pub fn opens_requester_door(&self) -> bool {
        self.requester_door.unwrap_or(self.surfaces.is_empty())
    }
}

/// `[gateway.jwt]`
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JwtSection {
    /// HS256 secret, read from this environment variable.
    pub hs256_secret_env: Option<String>,
    /// RS256 public key PEM file.
    pub rs256_public_key: Option<String>,
    /// JWKS file.
    pub jwks: Option<String>,
    /// Required issuer (`iss`); required unless `allowMissingIssuer = true`.
    pub issuer: Option<String>,
    /// Required audience (`aud`); required unless `allowMissingAudience = true`.
    pub audience: Option<String>,
    /// Accept tokens for any audience (no `audience`): the explicit opt-out.
    #[serde(default)]
    pub allow_missing_audience: bool,
    /// Accept tokens from any issuer the key signs for (no `issuer`): the explicit opt-out.
    #[serde(default)]
    pub allow_missing_issuer: bool,
    /// Boolean claim saying whether a token opens the requester door (default
    /// `requesterDoor`; absent: exactly when the token names no model surface).
    pub requester_door_claim: Option<String>,
    /// Namespace claim (default `org`).
    pub namespace_claim: Option<String>,
    /// Claim listing the surfaces a token may use (default `surfaces`); a token without it
    /// gets no model surface.
    pub surfaces_claim: Option<String>,
}

/// `[gateway.rateLimit]`: token buckets per principal and per namespace, every door
/// together (0 switches one off).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RateLimitSection {
    /// Sustained requests per second per principal.
    pub principal_per_second: u32,
    /// Burst per principal.
    pub principal_burst: u32,
    /// Sustained requests per second per namespace.
    pub namespace_per_second: u32,
    /// Burst per namespace.
    pub namespace_burst: u32,
    /// Unauthenticated requests per client address per minute, every door together
    /// (0 with `unauthenticatedBurst` 0: not throttled). Past it: `429`, credential untried.
    pub unauthenticated_per_minute: u32,
    /// Burst of unauthenticated requests per client address.
    pub unauthenticated_burst: u32,
}

impl Default for RateLimitSection {
    fn default() -> Self {
        use capgate_gateway::door::*;
        RateLimitSection {
            principal_per_second: DEFAULT_PRINCIPAL_RATE,
            principal_burst: DEFAULT_PRINCIPAL_BURST,
            namespace_per_second: DEFAULT_NAMESPACE_RATE,
            namespace_burst: DEFAULT_NAMESPACE_BURST,
            unauthenticated_per_minute:
                capgate_gateway::throttle::DEFAULT_UNAUTHENTICATED_PER_MINUTE,
            unauthenticated_burst: capgate_gateway::throttle::DEFAULT_UNAUTHENTICATED_BURST,
        }
    }
}

/// `[approvals]`: who may decide which approval types.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ApprovalsSection {
    /// `[approvals.types.NAME] roles = [...]`: an approval of type NAME can only be
    /// approved by a holder of one of these roles.
    pub types: BTreeMap<String, ApprovalTypeSection>,
}

/// `[approvals.types.NAME]`
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalTypeSection {
    /// Roles, any one of which may decide this type.
    pub roles: Vec<String>,
}

/// `[mcp]`: the MCP server, at `/mcp` under `serve` and over stdio under `capgate mcp`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct McpSection {
    /// The service actor of `capgate mcp --stdio`.
    pub stdio_actor: Option<ActorSection>,
    /// Its namespace.
    pub stdio_namespace: Option<String>,
    /// The application context its calls carry.
    pub stdio_context: serde_json::Value,
    /// Offer the `approvals_resume` tool (default false: the deployment opts in).
    pub resume_tool: bool,
    /// Accepted `Host` header values at `/mcp` (DNS-rebinding protection). Absent: loopback
    /// names only; an empty list accepts any host.
    pub allowed_hosts: Option<Vec<String>>,
}

/// The largest `reserve` one plugin may ask for (each ready instance holds a pool slot).
const MAX_RESERVE: u32 = 64;

const TOP_KEYS: &[&str] = &[
    "revision",
    "runtime",
    "store",
    "audit",
    "plugins",
    "policies",
    "redactors",
    "capabilities",
    "gateway",
    "mcp",
    "approvals",
    "telemetry",
];

/// Deserialize one part of a located document, locating the error inside it (the
/// configuration here, and `capgate test`'s scenario files).
pub(crate) fn part<T: DeserializeOwned>(
    doc: &Located,
    pointer: &str,
    problems: &mut Vec<Problem>,
) -> Option<T> {
    let value = doc.json.pointer(pointer).cloned()?;
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(v) => Some(v),
        Err(e) => {
            let mut at = pointer.to_string();
            for s in e.path().iter() {
                use serde_path_to_error::Segment as S;
                match s {
                    S::Map { key } => at.push_str(&format!("/{}", seg(key))),
                    S::Seq { index } => at.push_str(&format!("/{index}")),
                    _ => {}
                }
            }
            if doc.is_overflow(&at) {
                // Already one located problem of its own (`Located::overflow_problems`).
                return None;
            }
            let msg = e.inner().to_string();
            // serde reports an unknown field at its parent; point at the field itself.
            if let Some(field) = msg
                .strip_prefix("unknown field `")
                .and_then(|r| r.split('`').next())
            {
                let last = format!("/{}", seg(field));
                if !at.ends_with(&last) {
                    at.push_str(&last);
                }
            }
            problems.push(doc.problem(&at, msg));
            None
        }
    }
}

impl Config {
    /// Read and check a configuration file (syntax, types, references, value ranges):
    /// every problem, located, or the config with its located document (for the checks of
    /// [`crate::validate`], which locate their problems in it too).
    pub fn load(path: &Path) -> Result<(Config, Located), Vec<Problem>> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            vec![Problem {
                file: path.to_path_buf(),
                line: 1,
                column: 1,
                key: String::new(),
                message: format!("cannot read the configuration file: {e}"),
            }]
        })?;
        Config::parse(path, text)
    }

    /// Check a configuration's text as [`Config::load`] does its file (`path` only names
    /// it in the problems and anchors relative paths; nothing is read): the fuzz target of
    /// the configuration loader drives this.
    pub fn parse(path: &Path, text: String) -> Result<(Config, Located), Vec<Problem>> {
        let doc = Located::parse(path, text).map_err(|p| vec![p])?;
        let mut problems = doc.overflow_problems();
        let mut cfg = Config {
            path: path.to_path_buf(),
            ..Default::default()
        };
        let Some(root) = doc.json.as_object() else {
            return Err(vec![doc.problem("", "the file must be a TOML table")]);
        };
        for k in root.keys() {
            if !TOP_KEYS.contains(&k.as_str()) {
                problems.push(doc.problem(
                    &format!("/{}", seg(k)),
                    format!(
                        "unknown section `{k}` (expected one of {})",
                        TOP_KEYS.join(", ")
                    ),
                ));
            }
        }
        cfg.revision = part(&doc, "/revision", &mut problems).unwrap_or_default();
        cfg.runtime = part(&doc, "/runtime", &mut problems).unwrap_or_default();
        cfg.store = part(&doc, "/store", &mut problems).unwrap_or_default();
        cfg.audit = part(&doc, "/audit", &mut problems).unwrap_or_default();
        cfg.gateway = part(&doc, "/gateway", &mut problems).unwrap_or_default();
        cfg.mcp = part(&doc, "/mcp", &mut problems).unwrap_or_default();
        cfg.approvals = part(&doc, "/approvals", &mut problems).unwrap_or_default();
        cfg.telemetry = part(&doc, "/telemetry", &mut problems).unwrap_or_default();
        crate::telemetry::check(&cfg.telemetry, &doc, &mut problems);
        let names = |section: &str| -> Vec<String> {
            doc.json
                .get(section)
                .and_then(|v| v.as_object())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        };
        for name in names("plugins") {
            if let Some(p) = part(&doc, &format!("/plugins/{}", seg(&name)), &mut problems) {
                cfg.plugins.insert(name, p);
            }
        }
        for name in names("policies") {
            if let Some(p) = part(&doc, &format!("/policies/{}", seg(&name)), &mut problems) {
                cfg.policies.insert(name, p);
            }
        }
        for name in names("redactors") {
            if let Some(p) = part(&doc, &format!("/redactors/{}", seg(&name)), &mut problems) {
                cfg.redactors.insert(name, p);
            }
        }
        let caps = doc
            .json
            .get("capabilities")
            .and_then(|v| v.as_array())
            .map_or(0, Vec::len);
        if doc.json.get("capabilities").is_some_and(|v| !v.is_array()) {
            problems.push(doc.problem(
                "/capabilities",
                "must be an array of tables: write each capability as [[capabilities]]",
            ));
        }
        for i in 0..caps {
            let ptr = format!("/capabilities/{i}");
            if let Some(c) = part::<CapabilitySection>(&doc, &ptr, &mut problems) {
                cfg.capabilities.push(c);
            }
        }
        cfg.check_references(&doc, &mut problems);
        cfg.check_values(&doc, &mut problems);
        if problems.is_empty() {
            Ok((cfg, doc))
        } else {
            Err(problems)
        }
    }

    fn check_references(&self, doc: &Located, problems: &mut Vec<Problem>) {
        for (i, k) in self.gateway.api_keys.iter().enumerate() {
            for (j, s) in k.surfaces.iter().enumerate() {
                if !matches!(s, Surface::AiSdk | Surface::Mcp | Surface::Workflow) {
                    problems.push(doc.problem(
                        &format!("/gateway/apiKeys/{i}/surfaces/{j}"),
                        format!(
                            "`{}` is not a door a key can use (expected aiSdk, workflow or mcp)",
                            s.as_str()
                        ),
                    ));
                }
            }
        }
        for (i, t) in self.runtime.self_confirmable_types.iter().enumerate() {
            if self.approvals.types.contains_key(t) {
                problems.push(doc.problem(
                    &format!("/runtime/selfConfirmableTypes/{i}"),
                    format!(
                        "`{t}` is both self-confirmable and mapped to roles ([approvals.types.{t}]): choose one — the requester confirms it herself, or a holder of one of its roles decides it"
                    ),
                ));
            }
        }
        for (i, p) in self.gateway.trusted_proxies.iter().enumerate() {
            if p.parse::<std::net::IpAddr>().is_err() {
                problems.push(doc.problem(
                    &format!("/gateway/trustedProxies/{i}"),
                    format!(
                        "`{p}` is not an IP address (list each proxy's address, e.g. \"10.0.0.5\")"
                    ),
                ));
            }
        }
        if let Some(j) = &self.gateway.jwt {
            for (key, set, opt_out, what) in [
                (
                    "audience",
                    j.audience.is_some(),
                    j.allow_missing_audience,
                    "allowMissingAudience",
                ),
                (
                    "issuer",
                    j.issuer.is_some(),
                    j.allow_missing_issuer,
                    "allowMissingIssuer",
                ),
            ] {
                if !set && !opt_out {
                    problems.push(doc.problem(
                        &format!("/gateway/jwt/{key}"),
                        format!(
                            "required: the `{key}` your tokens carry (a token minted for another service must not open this gateway); to accept any, say so with `{what} = true`"
                        ),
                    ));
                }
            }
        }
        for (i, k) in self.gateway.operator_keys.iter().enumerate() {
            if k.sha256.len() != 64 || !k.sha256.chars().all(|c| c.is_ascii_hexdigit()) {
                problems.push(doc.problem(
                    &format!("/gateway/operatorKeys/{i}/sha256"),
                    "must be the SHA-256 hex of the key (`capgate keys hash`); keys are never stored in clear",
                ));
            }
            if k.actor.kind == ActorKind::Anonymous {
                problems.push(doc.problem(
                    &format!("/gateway/operatorKeys/{i}/actor/kind"),
                    "anonymous actors are rejected",
                ));
            }
            if self
                .gateway
                .api_keys
                .iter()
                .any(|t| t.sha256.eq_ignore_ascii_case(&k.sha256))
            {
                problems.push(doc.problem(
                    &format!("/gateway/operatorKeys/{i}/sha256"),
                    "this key is also a tenant's ([[gateway.apiKeys]]): an operator's key must be its own",
                ));
            }
        }
        if let Some(m) = self.telemetry.metrics.as_ref().filter(|m| m.enabled)
            && m.bearer_token_sha256.is_none()
        {
            let (addr, key) = match &m.listen {
                Some(l) => (l.as_str(), "/telemetry/metrics/listen"),
                None => (self.gateway.listen.as_str(), "/gateway/listen"),
            };
            if !crate::values::is_loopback_listen(addr) {
                problems.push(doc.problem(
                    "/telemetry/metrics/bearerTokenSha256",
                    format!(
                        "required: the metrics would be served unauthenticated on `{addr}` ({key}), which is not a loopback address, and they name every tenant's namespace; set bearerTokenSha256 (`capgate keys hash` prints it) or listen on 127.0.0.1"
                    ),
                ));
            }
        }
        for (name, t) in &self.approvals.types {
            if t.roles.is_empty() || t.roles.iter().any(|r| r.trim().is_empty()) {
                problems.push(doc.problem(
                    &format!("/approvals/types/{}/roles", seg(name)),
                    "must list at least one non-empty role (who may decide this type)",
                ));
            }
        }
        for (i, name) in self.runtime.policies.iter().enumerate() {
            if !self.policies.contains_key(name) {
                problems.push(doc.problem(
                    &format!("/runtime/policies/{i}"),
                    format!("no policy binding named `{name}` (declare it as [policies.{name}])"),
                ));
            }
        }
        for (name, r) in &self.redactors {
            for (field, set) in [
                ("phases", r.phases.is_some()),
                ("mode", r.mode != PolicyMode::Enforce),
            ] {
                if set {
                    problems.push(doc.problem(
                        &format!("/redactors/{}/{field}", seg(name)),
                        format!("`{field}` applies to policies only; remove it from this redactor"),
                    ));
                }
            }
        }
        for (section, map) in [("policies", &self.policies), ("redactors", &self.redactors)] {
            for (name, b) in map {
                if !self.plugins.contains_key(&b.plugin) {
                    problems.push(doc.problem(
                        &format!("/{section}/{}/plugin", seg(name)),
                        format!(
                            "no plugin named `{}` (declare it as [plugins.{}])",
                            b.plugin, b.plugin
                        ),
                    ));
                }
            }
        }
        for (name, p) in &self.plugins {
            let path = Path::new(&p.path);
            if crate::oci::is_oci(&p.path) {
                if let Err(e) = crate::oci::plugin_reference(&p.path) {
                    problems.push(doc.problem(&format!("/plugins/{}/path", seg(name)), e));
                }
            } else if path.is_absolute()
                || path
                    .components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                problems.push(doc.problem(
                    &format!("/plugins/{}/path", seg(name)),
                    "must be a plain path inside runtime.pluginDir (no `..`, no absolute paths), or oci://REGISTRY/REPO@sha256:DIGEST",
                ));
            }
            match &p.sha256 {
                Some(s) if s.len() == 64 && s.chars().all(|c| c.is_ascii_hexdigit()) => {}
                None if crate::oci::is_oci(&p.path) => {}
                _ => problems.push(doc.problem(
                    &format!("/plugins/{}/sha256", seg(name)),
                    "must be the 64-hex-digit SHA-256 of the plugin file (`sha256sum FILE`)",
                )),
            }
            if let Some(iso) = &p.isolation
                && iso != "fresh"
                && iso != "pooled"
            {
                problems.push(doc.problem(
                    &format!("/plugins/{}/isolation", seg(name)),
                    format!("`{iso}` is not an isolation mode (expected `fresh` or `pooled`)"),
                ));
            }
            if p.reserve.is_some_and(|r| r > MAX_RESERVE) {
                problems.push(doc.problem(
                    &format!("/plugins/{}/reserve", seg(name)),
                    format!("at most {MAX_RESERVE} ready instances per plugin"),
                ));
            }
            if p.isolation.as_deref() == Some("pooled")
                && (p.reserve.is_some() || p.reserve_refill_at.is_some())
            {
                problems.push(doc.problem(
                    &format!("/plugins/{}/reserve", seg(name)),
                    "a reserve applies to fresh isolation only (pooled instances are reused); remove `reserve` or use `isolation = \"fresh\"`",
                ));
            }
            if let Some(at) = p.reserve_refill_at {
                let size = p
                    .reserve
                    .unwrap_or(capgate_wasm::ReserveOptions::default().size);
                if at >= size {
                    problems.push(doc.problem(
                        &format!("/plugins/{}/reserveRefillAt", seg(name)),
                        format!("must be below `reserve` ({size}): the reserve refills when it falls to this many"),
                    ));
                }
            }
        }
        // References and schemas are checked on the raw entries, so a capability with a
        // type error elsewhere still gets its reference mistakes reported in the same run.
        let raw_caps = doc
            .json
            .get("capabilities")
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default();
        for (n, c) in raw_caps.iter().enumerate() {
            let ptr = format!("/capabilities/{n}");
            let names = |key: &str| -> Vec<(usize, String)> {
                c.get(key)
                    .and_then(|v| v.as_array())
                    .map(|a| {
                        a.iter()
                            .enumerate()
                            .filter_map(|(i, v)| v.as_str().map(|s| (i, s.to_string())))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            for (i, name) in names("policies") {
                if !self.policies.contains_key(&name) {
                    problems.push(doc.problem(
                        &format!("{ptr}/policies/{i}"),
                        format!(
                            "no policy binding named `{name}` (declare it as [policies.{name}])"
                        ),
                    ));
                }
            }
            for (i, name) in names("redactors") {
                if !self.redactors.contains_key(&name) {
                    problems.push(doc.problem(
                        &format!("{ptr}/redactors/{i}"),
                        format!(
                            "no redactor binding named `{name}` (declare it as [redactors.{name}])"
                        ),
                    ));
                }
            }
            if let Some(proc_) = c.get("procedure") {
                match (proc_.get("plugin"), proc_.get("http")) {
                    (Some(_), Some(_)) | (None, None) => problems.push(doc.problem(
                        &format!("{ptr}/procedure"),
                        "set exactly one of `plugin` or `http`",
                    )),
                    (Some(p), None) => {
                        if let Some(p) = p.as_str()
                            && !self.plugins.contains_key(p)
                        {
                            problems.push(doc.problem(
                                &format!("{ptr}/procedure/plugin"),
                                format!("no plugin named `{p}` (declare it as [plugins.{p}])"),
                            ));
                        }
                    }
                    (None, Some(http)) => {
                        // The extra trusted roots must be there and hold a certificate now,
                        // not at the first call.
                        if let Some(ca) = http.get("caFile").and_then(|v| v.as_str())
                            && let Err(e) =
                                capgate_provider::http::check_ca_file(&self.relative(ca))
                        {
                            problems.push(
                                doc.problem(&format!("{ptr}/procedure/http/caFile"), e.to_string()),
                            );
                        }
                    }
                }
            }
            for field in ["inputSchema", "outputSchema"] {
                let Some(raw) = c.get(field) else { continue };
                let Ok(schema) = serde_json::from_value::<SchemaRef>(raw.clone()) else {
                    continue;
                };
                match self.resolve_schema(&schema) {
                    Err(e) => problems.push(doc.problem(&format!("{ptr}/{field}"), e)),
                    Ok(v) => {
                        if let Err(e) = capgate_core::schema::Schema::compile(v) {
                            problems.push(doc.problem(&format!("{ptr}/{field}"), e.to_string()));
                        }
                    }
                }
            }
        }
        for (i, r) in self.gateway.routes.iter().enumerate() {
            if !r.path.starts_with('/') || r.path.len() < 2 || r.path.ends_with('/') {
                problems.push(doc.problem(
                    &format!("/gateway/routes/{i}/path"),
                    "must start with `/`, be more than `/`, and not end with `/` (e.g. `/agent`)",
                ));
            }
            if !matches!(r.surface, Surface::AiSdk | Surface::Mcp | Surface::Workflow) {
                problems.push(doc.problem(
                    &format!("/gateway/routes/{i}/surface"),
                    "a gateway route serves `aiSdk`, `mcp` or `workflow`",
                ));
            }
        }
        if self.store.acquire_timeout_ms == 0 {
            problems.push(doc.problem(
                "/store/acquireTimeoutMs",
                "must be at least 1 (milliseconds a statement waits for a connection)",
            ));
        }
        if self.gateway.audit_drain_timeout_ms >= self.gateway.request_timeout_ms {
            problems.push(doc.problem(
                "/gateway/auditDrainTimeoutMs",
                "must be smaller than requestTimeoutMs (drain time is reserved inside the request ceiling)",
            ));
        }
        match &self.gateway.authorize {
            None => {}
            Some(serde_json::Value::String(s)) if s == "authenticated" => {}
            Some(v) => match v.get("plugin").and_then(|p| p.as_str()) {
                Some(p) if self.plugins.contains_key(p) => {}
                Some(p) => problems.push(doc.problem(
                    "/gateway/authorize/plugin",
                    format!("no plugin named `{p}`"),
                )),
                None => problems.push(doc.problem(
                    "/gateway/authorize",
                    "must be \"authenticated\" (explicit opt-in) or { plugin = \"NAME\" }",
                )),
            },
        }
        for (i, k) in self.gateway.api_keys.iter().enumerate() {
            if k.sha256.len() != 64 || !k.sha256.chars().all(|c| c.is_ascii_hexdigit()) {
                problems.push(doc.problem(
                    &format!("/gateway/apiKeys/{i}/sha256"),
                    "must be the SHA-256 hex of the key (`printf '%s' KEY | capgate keys hash`); keys are never stored in clear",
                ));
            }
            if k.actor.kind == ActorKind::Anonymous {
                problems.push(doc.problem(
                    &format!("/gateway/apiKeys/{i}/actor/kind"),
                    "anonymous actors are rejected",
                ));
            }
            if k.namespace.trim().is_empty() {
                problems.push(doc.problem(
                    &format!("/gateway/apiKeys/{i}/namespace"),
                    "must not be empty",
                ));
            }
            if k.namespace == capgate_gateway::auth::OPERATOR_NAMESPACE {
                problems.push(doc.problem(
                    &format!("/gateway/apiKeys/{i}/namespace"),
                    format!(
                        "`{}` is reserved for operators ([[gateway.operatorKeys]])",
                        capgate_gateway::auth::OPERATOR_NAMESPACE
                    ),
                ));
            }
        }
    }

    /// What `capgate check` and `serve` warn about without refusing the file: settings that
    /// are allowed but widen a boundary, located like problems.
    pub fn warnings(&self, doc: &Located) -> Vec<Problem> {
        let mut out = Vec::new();
        for (i, k) in self.gateway.api_keys.iter().enumerate() {
            if k.requester_door == Some(true) && !k.surfaces.is_empty() {
                out.push(doc.problem(
                    &format!("/gateway/apiKeys/{i}/requesterDoor"),
                    "this key opens model doors and the requester door: whatever holds it (an agent host) can confirm its own held calls with no human step; give the human a console credential of her own instead",
                ));
            }
            if k.roles
                .iter()
                .any(|r| r == capgate_gateway::admin::OPERATOR_ROLE)
            {
                out.push(doc.problem(
                    &format!("/gateway/apiKeys/{i}/roles"),
                    "the `operator` role of a tenant's key opens nothing: the operator API takes an operator's key ([[gateway.operatorKeys]])",
                ));
            }
        }
        if self.gateway.admin.reload && self.gateway.operator_keys.is_empty() {
            out.push(doc.problem(
                "/gateway/admin/reload",
                "no [[gateway.operatorKeys]]: POST /admin/reload refuses every caller (SIGHUP still reloads)",
            ));
        }
        out
    }

    /// A path relative to the config file's directory (an absolute path stays as it is).
    pub fn relative(&self, p: impl AsRef<Path>) -> PathBuf {
        let base = self.path.parent().unwrap_or(Path::new("."));
        base.join(p)
    }

    /// The plugin directory.
    pub fn plugin_dir(&self) -> PathBuf {
        self.relative(&self.runtime.plugin_dir)
    }

    /// The schema JSON of a [`SchemaRef`].
    pub fn resolve_schema(&self, s: &SchemaRef) -> Result<serde_json::Value, String> {
        match s {
            SchemaRef::Inline(m) => Ok(serde_json::Value::Object(m.clone())),
            SchemaRef::Path(p) => {
                let full = self.relative(p);
                let text = std::fs::read_to_string(&full)
                    .map_err(|e| format!("cannot read schema file {}: {e}", full.display()))?;
                serde_json::from_str(&text)
                    .map_err(|e| format!("schema file {} is not JSON: {e}", full.display()))
            }
        }
    }
}
