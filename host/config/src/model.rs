//! The deployment file's model (`capgate.toml`): one typed section per table, as written.
//! Reading it with every problem located is [`crate::load`]; its cross-references are
//! checked in `references.rs`; a number's range is declared on its field
//! (`#[key(range = …)]`) and checked with the other values in [`crate::values`].

use crate::keys::Keys;
use crate::load::MAX_RESERVE;
use crate::values::{
    MAX_CONSOLE_SESSION_MINUTES, MAX_MEMORY_MB, MAX_MS, MAX_REPLAY_HORIZON_HOURS, MAX_STORAGE,
};
use capgate_core::actor::{ActorKind, Surface};
use capgate_core::meta::{AdapterNames, ApprovalConfig, Expose, RetryConfig, Risk, SideEffect};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The whole file. Every top-level key may be left out (`#[key(default)]`: [`Config::parse`]
/// reads each section on its own, a missing one as its `Default`).
#[derive(Keys, Debug, Default)]
#[key(live, default)]
pub struct Config {
    /// The file, for relative paths.
    #[key(skip)]
    pub path: PathBuf,
    /// Changes whenever handler or policy meaning changes (part of the contract digest).
    pub revision: String,
    /// `[runtime]`: the defaults every call runs with (timeouts, approval expiry) and
    /// where plugins come from.
    #[key(table)]
    pub runtime: RuntimeSection,
    /// `[store]`: the database approvals, the invocation journal and the audit trail
    /// are kept in.
    #[key(restart = "the store is opened at start", table)]
    pub store: StoreSection,
    /// `[audit]`: how strictly and how verbosely every step is recorded, and an optional
    /// JSON-lines copy.
    #[key(table)]
    pub audit: AuditSection,
    /// `[plugins.NAME]`: the Wasm components the deployment loads, each pinned by digest.
    #[key(tables)]
    pub plugins: BTreeMap<String, PluginSection>,
    /// `[policies.NAME]`: a policy plugin bound to its configuration, named for the
    /// capabilities that use it.
    #[key(tables)]
    pub policies: BTreeMap<String, BindingSection>,
    /// `[redactors.NAME]`: an output redactor plugin bound to its configuration.
    #[key(tables)]
    pub redactors: BTreeMap<String, BindingSection>,
    /// `[[capabilities]]`: what agents may call, in declaration order.
    #[key(tables)]
    pub capabilities: Vec<CapabilitySection>,
    /// `[gateway]`: the HTTP listener, its doors and who may open them.
    #[key(table)]
    pub gateway: GatewaySection,
    /// `[mcp]`: the MCP server (`/mcp`, and `capgate mcp --stdio`).
    #[key(table)]
    pub mcp: McpSection,
    /// `[upstreams]`: the servers capabilities' procedures call (`[upstreams.mcp.NAME]`).
    #[key(table)]
    pub upstreams: UpstreamsSection,
    /// `[approvals]`: who may decide which approval types.
    #[key(table)]
    pub approvals: ApprovalsSection,
    /// `[telemetry]`: metrics and traces.
    #[key(restart = "metrics and traces are set up at start", table)]
    pub telemetry: crate::telemetry::TelemetrySection,
}

/// `[telemetry.metrics]`: the Prometheus exposition.
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
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
    #[key(secret)]
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
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RuntimeSection {
    /// Per-attempt timeout default.
    #[key(range = 1..=MAX_MS, unit = "milliseconds")]
    pub timeout_ms: u64,
    /// Shared policy batch deadline.
    #[key(range = 1..=MAX_MS, unit = "milliseconds")]
    pub policy_timeout_ms: u64,
    /// Approval expiry default.
    #[key(range = 1..=MAX_MS, unit = "milliseconds")]
    pub approval_expires_in_ms: u64,
    /// Refuse an approval decided by the requester themselves (SI-4).
    pub reject_self_approval: bool,
    /// Approval types a requester may confirm themselves.
    pub self_confirmable_types: Vec<String>,
    /// Runtime-level policies, by binding name, in order.
    pub policies: Vec<String>,
    /// The directory plugin files are opened from (relative to the config file); no
    /// plugin path may escape it.
    pub plugin_dir: String,
    /// Where compiled plugin code is cached, keyed by digest and engine (relative to
    /// `stateDir`), so a restart does not recompile.
    pub compile_cache: String,
    /// The directory capgate writes to: the compile cache and a relative SQLite
    /// `store.url` are taken relative to it (itself relative to the config file). Absent:
    /// the config file's directory. Set it (e.g. `/var/lib/capgate`) to keep the config
    /// directory read-only.
    #[key(restart = "the store and the compile cache are opened at start")]
    pub state_dir: Option<String>,
    /// `[runtime.oci]`: plugins from an OCI registry (cache, plain-HTTP registries,
    /// signature policy).
    #[key(table)]
    pub oci: OciSection,
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
            state_dir: None,
            oci: OciSection::default(),
        }
    }
}

/// `[store]`
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct StoreSection {
    /// `sqlite://capgate.db` (relative to `runtime.stateDir`, by default the config file's
    /// directory) or `postgres://…`.
    #[key(secret)]
    pub url: String,
    /// How long a statement waits for a pooled connection (on Postgres, that includes
    /// connecting while the server is away) before the request fails with a `503`. Bounds
    /// how long a call can wait on a database that is down. Absent: the store's default
    /// (10 000).
    #[key(range = 1..=MAX_MS, unit = "milliseconds")]
    pub acquire_timeout_ms: Option<u64>,
}

impl Default for StoreSection {
    fn default() -> Self {
        StoreSection {
            url: "sqlite://capgate.db".into(),
            acquire_timeout_ms: None,
        }
    }
}

/// `[audit]`
#[derive(Keys, Debug, Clone, Default, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AuditSection {
    /// No `capability.started` record, no execution.
    pub strict: bool,
    /// Capability ids in `capabilities.discovered`.
    pub verbose: bool,
    /// Also write JSON lines to this file (relative to the config file).
    #[key(restart = "the audit file is opened at start")]
    pub jsonl: Option<String>,
    /// Ed25519 private key (PKCS#8 PEM, `openssl genpkey -algorithm ed25519`) that signs
    /// each writer's start record and the chained checkpoints of its audit chain, so
    /// `capgate audit verify --public-key` detects a forged, rewritten or truncated chain
    /// (`jsonl` and `otlp` export sinks ship the signed records off the box for
    /// `verify --checkpoints`); `{ file = "audit-key.pem" }` or `{ env = "VAR" }`. Absent:
    /// no signed records, and verify can only check the hashes.
    #[key(secret, restart = "the audit writer starts with its key")]
    pub checkpoint_key: Option<String>,
    /// The most committed events a checkpoint may leave unsigned: one is signed once this
    /// many went without one, and also when the writer idles, at every flush and at a
    /// clean stop (each restarts the count); `verify` treats a longer run as a finding.
    /// Default 1000.
    #[key(range = 1..=1_000_000, unit = "events", restart = "the audit writer starts with it")]
    pub checkpoint_events: Option<u64>,
    /// Days audit events are kept: a background purge deletes older ones, each chain up to
    /// its last checkpoint signed before the cutoff and never past what an export sink has
    /// not delivered, and leaves a signed purge record so `capgate audit verify` still
    /// passes. Needs `checkpointKey`. Absent: events are kept forever.
    #[key(range = 1..=36_500, unit = "days", restart = "the purge starts with the server")]
    pub retain_days: Option<u64>,
    /// `[audit.export.NAME]`: sinks the trail is exported to from the store (the outbox),
    /// at least once and in order, resumed after restarts and sink outages.
    #[key(restart = "exporters start with the server", tables)]
    pub export: BTreeMap<String, ExportSection>,
}

/// Where an export sink delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExportTo {
    /// OpenTelemetry logs over OTLP/HTTP (protobuf), to a collector.
    Otlp,
    /// JSON-lines files in a directory, rotated by size.
    Jsonl,
    /// Approval notifications (requested, approved, rejected) POSTed to a URL, signed as
    /// Standard Webhooks (HMAC-SHA256).
    Webhook,
}

/// How a `webhook` sink writes its notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum WebhookFormat {
    /// capgate's JSON notification (README "Approvals that reach people").
    #[default]
    Json,
    /// A Slack-compatible message (`{"text": …}`), for an incoming-webhook URL.
    Slack,
}

impl WebhookFormat {
    /// Every format, for the file's schema.
    pub const ALL: [WebhookFormat; 2] = [WebhookFormat::Json, WebhookFormat::Slack];

    /// The spelling in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookFormat::Json => "json",
            WebhookFormat::Slack => "slack",
        }
    }
}

impl ExportTo {
    /// Every kind, for the file's schema.
    pub const ALL: [ExportTo; 3] = [ExportTo::Otlp, ExportTo::Jsonl, ExportTo::Webhook];

    /// The spelling in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            ExportTo::Otlp => "otlp",
            ExportTo::Jsonl => "jsonl",
            ExportTo::Webhook => "webhook",
        }
    }
}

/// `[audit.export.NAME]`: one export sink. The name keys its cursor in the store: renaming a
/// sink starts it again from the beginning of the trail.
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportSection {
    /// `otlp` (OpenTelemetry logs over OTLP/HTTP protobuf), `jsonl` (rotated JSON-lines
    /// files) or `webhook` (approval notifications POSTed to `endpoint`).
    pub to: ExportTo,
    /// `webhook`: the URL notifications are POSTed to (required). `otlp`: the collector, a
    /// base URL (`http://collector:4318`, capgate adds `/v1/logs`)
    /// or a full URL. Default `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`, then the traces'
    /// collector (`[telemetry.traces] endpoint` with `/v1/logs`), then
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/logs`, then `http://localhost:4318/v1/logs`.
    pub endpoint: Option<String>,
    /// `webhook`: the Standard Webhooks signing secret (`whsec_` and base64, or any text),
    /// `{ env = "VAR" }` or `{ file = "path" }`; required for `format = "json"`.
    pub secret: Option<SecretSetting>,
    /// `webhook`: `json` (capgate's notification, the default) or `slack` (a Slack
    /// incoming-webhook message).
    pub format: Option<WebhookFormat>,
    /// `webhook`: which notifications it sends, of `approval.requested`, `approval.decided`,
    /// `approval.expired` and `approval.escalated` (default: all four). A second role's
    /// channel takes `["approval.escalated"]`.
    pub events: Option<Vec<String>>,
    /// `webhook`: the approval console's public URL (`https://capgate.example.com/console`);
    /// each notification links to `CONSOLEURL/approvals/ID`.
    pub console_url: Option<String>,
    /// `webhook`: only approvals of these namespaces (the requester's tenant), e.g. one
    /// tenant's channel takes `["org_1"]` (default: every namespace). Every notification
    /// carries its `namespace`.
    pub namespaces: Option<Vec<String>>,
    /// `otlp`, `webhook`: headers sent with every export (`authorization = { env = "OTLP_TOKEN",
    /// prefix = "Bearer " }`); values as written, `{ env = "VAR" }` or `{ file = "path" }`.
    #[serde(default)]
    pub headers: BTreeMap<String, SecretSetting>,
    /// `otlp`, `webhook`: a PEM file of CA certificates trusted besides the system's, for an
    /// `https://` receiver.
    pub ca_file: Option<String>,
    /// `jsonl`: the directory the files are written in (relative to the config file;
    /// created if missing). Files are named `audit-TIME.jsonl` and never rewritten.
    pub directory: Option<String>,
    /// `jsonl`: start a new file once the current one reaches this size. Default 64 MiB.
    #[key(range = 4096..=MAX_EXPORT_FILE_BYTES, unit = "bytes")]
    pub rotate_bytes: Option<u64>,
    /// Most events in one delivery (one OTLP request, one write and fsync). Default 512.
    #[key(range = 1..=10_000, unit = "events")]
    pub batch_events: Option<u64>,
    /// The bound on one delivery. Default 10000.
    #[key(range = 1..=MAX_MS, unit = "milliseconds")]
    pub timeout_ms: Option<u64>,
    /// `/readyz`'s `export:NAME` check fails while this sink's deliveries fail and the
    /// oldest event it has not delivered is older than this (a sink that delivers stays
    /// ready, however far behind). Default 600.
    #[key(range = 1..=604_800, unit = "seconds")]
    pub max_lag_seconds: Option<u64>,
}

/// The largest `rotateBytes` (1 TiB).
pub const MAX_EXPORT_FILE_BYTES: u64 = 1 << 40;

/// `[plugins.NAME]`
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSection {
    /// File name inside the plugin directory, or `oci://REGISTRY/REPO@sha256:MANIFEST` (a
    /// registry artifact pinned by its manifest digest; see `capgate_oci`).
    pub path: String,
    /// Pinned SHA-256 (hex) of the Wasm bytes: required for a file, optional for an
    /// `oci://` path (whose digest already pins them; when given, it must agree).
    pub sha256: Option<String>,
    /// Fuel per call.
    pub fuel: Option<u64>,
    /// Memory cap in MiB.
    #[key(range = 1..=MAX_MEMORY_MB, unit = "MiB")]
    pub memory_mb: Option<u64>,
    /// Per-call deadline.
    #[key(range = 1..=MAX_MS, unit = "milliseconds")]
    pub timeout_ms: Option<u64>,
    /// `fresh` (default) or `pooled`.
    pub isolation: Option<IsolationMode>,
    /// Fresh isolation: ready instances kept instantiated ahead of calls (default 8; 0 turns
    /// the reserve off).
    #[key(range = 0..=MAX_RESERVE, unit = "ready instances")]
    pub reserve: Option<u32>,
    /// Refill the reserve when this many or fewer are left (default: half of `reserve`).
    pub reserve_refill_at: Option<u32>,
}

impl PluginSection {
    /// Whether the path names a registry artifact (`oci://…`) rather than a file in the
    /// plugin directory.
    pub fn is_oci(&self) -> bool {
        self.path.starts_with("oci://")
    }
}

/// `[policies.NAME]` / `[redactors.NAME]`
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BindingSection {
    /// The plugin: the name of a `[plugins.NAME]`, or of a plugin that ships with capgate
    /// (`cel`, a policy of CEL rules in `config.rules`; `cedar`, a policy of a Cedar policy
    /// set in `config.policies` or `config.policiesFile`; `redact`, a redactor of JSON
    /// pointers in `config.drop` / `config.mask`; README "Policies without a plugin").
    pub plugin: String,
    /// Phases (policies only). Absent: `["invocation"]`, except that a shipped `cel` or
    /// `cedar` policy with a hide rule (a rule with `stance = "hide"`, a forbid with
    /// `@stance("hide")`) runs in `["discovery", "invocation"]`, so what it hides is left out
    /// of `describe` and `tools/list` as well as not found when called. In discovery those
    /// components try only what can hide; `capgate check` warns at a hide rule that reads the
    /// input, which discovery does not have.
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyMode {
    /// Its stance counts (the default).
    #[default]
    Enforce,
    /// Evaluated and compared, never enforced: a rollout step before `enforce`.
    Shadow,
}

impl PolicyMode {
    /// Every mode, for the file's schema.
    pub const ALL: [PolicyMode; 2] = [PolicyMode::Enforce, PolicyMode::Shadow];

    /// The spelling in the file (serde's `rename_all = "lowercase"`).
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyMode::Enforce => "enforce",
            PolicyMode::Shadow => "shadow",
        }
    }
}

/// A JSON Schema inline or by relative path.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SchemaRef {
    /// A path relative to the config file.
    Path(String),
    /// A schema written inline.
    Inline(serde_json::Map<String, serde_json::Value>),
}

/// How a capability's operation is reached.
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcedureSection {
    /// A Wasm procedure plugin.
    pub plugin: Option<String>,
    /// An HTTP upstream.
    #[key(table)]
    pub http: Option<HttpProcedureSection>,
    /// A tool of an MCP upstream (`[upstreams.mcp.NAME]`), pinned to its reviewed definition.
    #[key(table)]
    pub mcp: Option<McpProcedureSection>,
    /// Handed to the plugin.
    #[serde(default)]
    pub config: serde_json::Value,
    /// Stall timeout of the provider runtime (0 = default 300000).
    #[serde(default)]
    pub response_stall_timeout_ms: i64,
}

/// `procedure.mcp`: one tool of an MCP upstream, pinned (README "MCP servers behind capgate").
#[derive(Keys, Debug, Clone, Serialize, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpProcedureSection {
    /// The `[upstreams.mcp.NAME]` entry.
    pub upstream: String,
    /// The tool's name on that upstream.
    pub tool: String,
    /// SHA-256 of the tool's definition as reviewed (`capgate import mcp` prints it): while
    /// the upstream's definition differs, the capability is concealed.
    pub tool_sha256: String,
}

/// `procedure.http`: how to reach one application backend (the server builds the
/// provider's upstream from it).
#[derive(Keys, Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpProcedureSection {
    /// The exact target name (the provider identity is `http:<target>`).
    pub target: String,
    /// Where calls are POSTed; with `request`, the service's base URL the mapping's path
    /// is appended to.
    pub url: String,
    /// The health endpoint; without one, probes fail closed to `health_unknown`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_url: Option<String>,
    /// Static headers sent with every call (e.g. a service credential); a value may be
    /// `{ env = "VAR" }` or `{ file = "path" }`, with an optional `prefix`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, SecretString>,
    /// Connect timeout (default 10000).
    #[key(range = 1..=MAX_MS, unit = "milliseconds")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_timeout_ms: Option<u64>,
    /// A PEM bundle of extra trusted root certificates for `https://` (relative to the
    /// config file), trusted beside the system's roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// Call the service as its own clients do (method, path template, query, headers, JSON
    /// body from the input) instead of POSTing capgate's envelope to `url`.
    #[key(table)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<HttpRequestSection>,
    /// Declared error statuses: HTTP status (`"404"`) → the error code shown to the model
    /// (`PET_NOT_FOUND`); any other non-2xx answer is a hidden failure.
    #[serde(default, skip_serializing_if = "ErrorStatuses::is_empty")]
    pub errors: ErrorStatuses,
}

/// `procedure.http.request`: the backend's own request shape, filled from the input.
#[derive(Keys, Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpRequestSection {
    /// The HTTP method.
    pub method: HttpMethod,
    /// Path template appended to `url`: `/pets/{petId}`; each `{name}` is the input field
    /// `name`, percent-encoded inside one segment.
    #[serde(default)]
    pub path: String,
    /// Input fields sent as query parameters (an array repeats the name; absent fields are
    /// left out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query: Vec<String>,
    /// Header name → the input field whose value is sent in it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The input field whose value is the JSON request body (absent: no body).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// A string the file may give as `{ env = "VAR" }` or `{ file = "path" }` inside a map whose
/// values are secrets ([`crate::load::SECRET_MAP_VALUES`]): resolved before it is read, so
/// here it is the value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SecretString(pub String);

/// `request.method`: one of [`capgate_core::defaults::http_upstream::METHODS`] (checked
/// with the file's values).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HttpMethod(pub String);

/// `errors`: HTTP status → the public error code it becomes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ErrorStatuses(pub BTreeMap<String, String>);

impl ErrorStatuses {
    /// No status declared.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// `[upstreams]`: the servers behind capabilities.
#[derive(Keys, Debug, Clone, Default, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct UpstreamsSection {
    /// `[upstreams.mcp.NAME]`: MCP servers, over stdio or streamable HTTP.
    #[key(tables)]
    pub mcp: BTreeMap<String, McpUpstreamSection>,
}

/// A header or environment value: as written, or read at each connect from the environment
/// (`{ env = "VAR" }`) or a file (`{ file = "path" }`), with an optional `prefix`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SecretSetting {
    /// The value as written.
    Literal(String),
    /// From the environment or a file.
    From(SecretSource),
}

/// `{ env = "VAR" }` or `{ file = "path" }`, with an optional `prefix` (e.g. `"Bearer "`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretSource {
    /// An environment variable of the capgate process.
    pub env: Option<String>,
    /// A file (relative to the config file).
    pub file: Option<String>,
    /// Put before the value.
    #[serde(default)]
    pub prefix: String,
}

/// `[upstreams.mcp.NAME]`: one MCP server. Set `url` (streamable HTTP) or `command` (stdio).
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpUpstreamSection {
    /// The streamable HTTP endpoint (`http://` or `https://`).
    pub url: Option<String>,
    /// Headers sent with every HTTP request; values as written, `{ env = "VAR" }` or
    /// `{ file = "path" }`.
    #[serde(default)]
    pub headers: BTreeMap<String, SecretSetting>,
    /// Extra trusted roots for an `https://` URL (relative to the config file).
    pub ca_file: Option<String>,
    /// The program and its arguments, started with piped stdio and restarted when it exits.
    pub command: Option<Vec<String>>,
    /// The program's environment: nothing of capgate's is inherited but `inheritEnv`.
    #[serde(default)]
    pub env: BTreeMap<String, SecretSetting>,
    /// Variables passed through from capgate's environment (e.g. `["PATH", "HOME"]`).
    #[serde(default)]
    pub inherit_env: Vec<String>,
    /// The program's working directory (relative to the config file).
    pub cwd: Option<String>,
    /// Connect and initialize timeout (default 10000).
    #[key(range = 1..=MAX_MS, unit = "milliseconds")]
    pub connect_timeout_ms: Option<u64>,
    /// At most this many calls in flight on the upstream (default 16).
    #[key(range = 1..=4096)]
    pub max_concurrent_calls: Option<u64>,
    /// How often the tools are listed again and checked against their pins (default 60000).
    #[key(range = 100..=MAX_MS, unit = "milliseconds")]
    pub relist_interval_ms: Option<u64>,
}

/// `[[capabilities]]`
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapabilitySection {
    /// Canonical id.
    pub id: String,
    /// For the model.
    pub description: String,
    /// The surfaces the capability is offered on (hidden everywhere else, SI-1).
    pub expose: Expose,
    /// Side effect.
    pub side_effect: SideEffect,
    /// How much harm a wrong call can do; policies and the console read it.
    pub risk: Risk,
    /// Free labels for discovery and policies.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The per-attempt timeout of this capability (default: `runtime.timeoutMs`).
    #[key(range = 1..=MAX_MS, unit = "milliseconds")]
    pub timeout_ms: Option<u64>,
    /// Which failures are retried and how often (SI-11: idempotent calls only).
    pub retry: Option<RetryConfig>,
    /// Whether repeating the call has the effect of one call (required for retries).
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
    #[key(table)]
    pub procedure: ProcedureSection,
}

/// `[gateway]`
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GatewaySection {
    /// Listen address.
    #[key(restart = "the listener is bound at start")]
    pub listen: String,
    /// Routes, each with its fixed surface.
    #[key(tables)]
    pub routes: Vec<RouteSection>,
    /// `"authenticated"` (explicit opt-in) or `{ plugin = "name", config = {...} }`.
    pub authorize: Option<AuthorizeSetting>,
    /// Total request ceiling.
    #[key(range = 1..=MAX_MS, unit = "milliseconds")]
    pub request_timeout_ms: u64,
    /// Reserved for draining audit inside the ceiling.
    #[key(range = 0..=MAX_MS, unit = "milliseconds")]
    pub audit_drain_timeout_ms: u64,
    /// The largest request body a door reads, in bytes.
    #[key(range = 1..)]
    pub max_body_bytes: usize,
    /// API keys (hashed).
    #[key(tables)]
    pub api_keys: Vec<ApiKeySection>,
    /// JWT verification.
    #[key(table)]
    pub jwt: Option<JwtSection>,
    /// Approval console URL handed to models with approval-required results.
    pub approval_console_url: Option<String>,
    /// Keep invocation receipts this long.
    #[key(restart = "the invocation journal and its purge are set up at start")]
    #[key(range = 1..=MAX_REPLAY_HORIZON_HOURS, unit = "hours")]
    pub replay_horizon_hours: u64,
    /// Settle a receipt still pending this long after its claim as `outcome-unknown`
    /// (audited as `capgate.invocation.abandoned`), so an unreconciled call stops holding
    /// its namespace's budget once the replay horizon purges it. Absent: pending receipts
    /// wait for an operator's `capgate invocations reconcile` forever.
    #[key(restart = "the invocation journal and its purge are set up at start")]
    #[key(range = 1..=MAX_REPLAY_HORIZON_HOURS, unit = "hours")]
    pub pending_horizon_hours: Option<u64>,
    /// The most invocation receipts one namespace may hold (`journalMaxRowsPerNamespace`,
    /// default 100 000), approval records and console sessions counted with them; a claim
    /// past it is refused `507 STORAGE_QUOTA_EXCEEDED`.
    #[key(restart = "the journal, the approvals and the console's sessions take it at start")]
    #[key(range = 1..=MAX_STORAGE)]
    pub journal_max_rows_per_namespace: u64,
    /// The most bytes of stored input and outcome JSON one namespace's receipts may hold
    /// (`journalMaxBytesPerNamespace`, default 256 MiB), approvals' inputs and console
    /// sessions counted with them.
    #[key(restart = "the journal, the approvals and the console's sessions take it at start")]
    #[key(range = 1..=MAX_STORAGE, unit = "bytes")]
    pub journal_max_bytes_per_namespace: u64,
    /// At SIGTERM or Ctrl-C, how long `/readyz` answers 503 (`shutdown: draining`) while
    /// the listener still serves, so a load balancer stops sending before connections are
    /// refused (`shutdownUnreadyDelayMs`, default 1000; 0 stops accepting at once).
    #[key(restart = "the shutdown sequence is set up at start")]
    #[key(range = 0..=MAX_MS, unit = "milliseconds")]
    pub shutdown_unready_delay_ms: u64,
    /// At SIGTERM or Ctrl-C, how long calls in flight get to finish once the listener is
    /// closed (`shutdownDrainMs`, default 30000); a call still running then is left with a
    /// pending receipt for `capgate invocations reconcile`.
    #[key(restart = "the shutdown sequence is set up at start")]
    #[key(range = 1..=MAX_MS, unit = "milliseconds")]
    pub shutdown_drain_ms: u64,
    /// Rate limits of every door.
    #[key(table)]
    pub rate_limit: RateLimitSection,
    /// The approval console web page.
    #[key(table)]
    pub console: ConsoleSection,
    /// The operator API.
    #[key(table)]
    pub admin: AdminSection,
    /// `[[gateway.operatorKeys]]`: operators' API keys (hashed), outside every tenant
    /// namespace: they open the operator API (`POST /admin/reload`) and no other door.
    #[key(tables)]
    pub operator_keys: Vec<OperatorKeySection>,
    /// Addresses of the reverse proxies in front of the gateway: only from these peers is
    /// `X-Forwarded-For` believed, to tell which client address a request comes from (the
    /// unauthenticated and sign-in throttles). Empty: the connection's peer is the client.
    pub trusted_proxies: Vec<String>,
}

/// `[[gateway.operatorKeys]]`: an operator's key, outside every tenant namespace.
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OperatorKeySection {
    /// SHA-256 hex of the key (`capgate keys hash` prints it).
    #[key(secret)]
    pub sha256: String,
    /// The operator (recorded in logs and handed to the authorizer).
    #[key(table)]
    pub actor: ActorSection,
}

/// `[gateway.admin]`: the operator API (README "Reloading without a restart").
#[derive(Keys, Debug, Clone, Default, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AdminSection {
    /// Serve `POST /admin/reload` to operator principals (`[[gateway.operatorKeys]]`), as
    /// the authorizer allows (default off; SIGHUP reloads either way).
    pub reload: bool,
}

/// `[gateway.console]`: the approval console, a web page for approvers on the approvals
/// API (README "The approval console").
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ConsoleSection {
    /// Serve it (default on; it is only a page over the approvals API, which is always on).
    pub enabled: bool,
    /// Where: a plain path such as `/console`.
    pub path: String,
    /// How long a sign-in lasts, in minutes (capped by the credential's own expiry).
    #[key(range = 1..=MAX_CONSOLE_SESSION_MINUTES, unit = "minutes")]
    pub session_minutes: u64,
    /// `"auto"` (Secure except on a loopback host), `true` or `false`.
    pub secure_cookie: SecureCookieSetting,
    /// The most live sessions one principal keeps (a new sign-in evicts its oldest).
    pub max_sessions_per_principal: u32,
    /// Sign-ins per principal per minute (0 with `signInBurst` 0: not throttled).
    pub sign_in_per_minute: u32,
    /// Burst of sign-ins per principal.
    pub sign_in_burst: u32,
    /// Refused sign-ins per client address per minute (a valid sign-in is never refused by
    /// it; past it, refusals answer `429`).
    pub sign_in_per_address_per_minute: u32,
    /// Burst of sign-ins per client address.
    pub sign_in_per_address_burst: u32,
    /// Single sign-on with the identity provider.
    #[key(table)]
    pub oidc: Option<ConsoleOidcSection>,
}

impl Default for ConsoleSection {
    fn default() -> Self {
        use capgate_core::defaults::console::*;
        ConsoleSection {
            enabled: true,
            path: "/console".into(),
            session_minutes: 480,
            secure_cookie: SecureCookieSetting::default(),
            max_sessions_per_principal: DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
            sign_in_per_minute: DEFAULT_SIGN_IN_PER_PRINCIPAL.0,
            sign_in_burst: DEFAULT_SIGN_IN_PER_PRINCIPAL.1,
            sign_in_per_address_per_minute: DEFAULT_SIGN_IN_PER_ADDRESS.0,
            sign_in_per_address_burst: DEFAULT_SIGN_IN_PER_ADDRESS.1,
            oidc: None,
        }
    }
}

/// `secureCookie`: `"auto"`, `true` or `false`, read into the console's own setting (any
/// other value is a located problem at the key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(try_from = "serde_json::Value")]
pub struct SecureCookieSetting(pub SecureCookie);

/// `secureCookie` as written: when the console's session cookie carries `Secure` (the
/// server maps it to the console's own setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecureCookie {
    /// `"auto"`: always, except on a loopback host.
    #[default]
    Auto,
    /// `true`: always (the console is reached over HTTPS).
    Always,
    /// `false`: never (plain HTTP on a trusted network; not recommended).
    Never,
}

/// Written as it is read (`"auto"`, `true`, `false`): the reference shows the default so.
impl Serialize for SecureCookieSetting {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            SecureCookie::Auto => s.serialize_str("auto"),
            SecureCookie::Always => s.serialize_bool(true),
            SecureCookie::Never => s.serialize_bool(false),
        }
    }
}

impl TryFrom<serde_json::Value> for SecureCookieSetting {
    type Error = &'static str;

    fn try_from(v: serde_json::Value) -> Result<Self, Self::Error> {
        match v {
            serde_json::Value::Bool(true) => Ok(SecureCookieSetting(SecureCookie::Always)),
            serde_json::Value::Bool(false) => Ok(SecureCookieSetting(SecureCookie::Never)),
            serde_json::Value::String(w) if w == "auto" => {
                Ok(SecureCookieSetting(SecureCookie::Auto))
            }
            _ => Err("must be \"auto\" (Secure except on a loopback host), true or false"),
        }
    }
}

/// A plugin's `isolation`: how its instances are kept between calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IsolationMode {
    /// A fresh instance per call (the default): nothing survives between calls.
    #[default]
    Fresh,
    /// Instances reused across calls of one namespace, reset by the plugin's own contract.
    Pooled,
}

impl IsolationMode {
    /// Every mode, for the file's schema.
    pub const ALL: [IsolationMode; 2] = [IsolationMode::Fresh, IsolationMode::Pooled];

    /// The spelling in the file (serde's `rename_all = "lowercase"`).
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationMode::Fresh => "fresh",
            IsolationMode::Pooled => "pooled",
        }
    }
}

/// `[gateway] authorize`: who may use which operation of the gateway, stated explicitly
/// (the gateway never runs without an authorizer).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "serde_json::Value")]
pub enum AuthorizeSetting {
    /// `"authenticated"`: any authenticated caller may use every operation.
    Authenticated,
    /// `{ plugin = "NAME", config = {...} }`: a Wasm authorizer plugin decides per operation.
    Plugin(AuthorizePlugin),
}

/// Written as it is read: `"authenticated"` or the plugin's table.
impl Serialize for AuthorizeSetting {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            AuthorizeSetting::Authenticated => s.serialize_str("authenticated"),
            AuthorizeSetting::Plugin(p) => p.serialize(s),
        }
    }
}

/// `authorize = { plugin = "NAME", config = {...} }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizePlugin {
    /// The `[plugins.NAME]` entry bound as the authorizer.
    pub plugin: String,
    /// The binding's `config` JSON (default `null`).
    #[serde(default)]
    pub config: serde_json::Value,
}

impl TryFrom<serde_json::Value> for AuthorizeSetting {
    type Error = String;

    fn try_from(v: serde_json::Value) -> Result<Self, Self::Error> {
        const EXPECTED: &str =
            "must be \"authenticated\" (explicit opt-in) or { plugin = \"NAME\" }";
        match v {
            serde_json::Value::String(w) if w == "authenticated" => {
                Ok(AuthorizeSetting::Authenticated)
            }
            v @ serde_json::Value::Object(_) => serde_json::from_value(v)
                .map(AuthorizeSetting::Plugin)
                .map_err(|e| format!("{EXPECTED}: {e}")),
            _ => Err(EXPECTED.to_string()),
        }
    }
}

impl Default for GatewaySection {
    fn default() -> Self {
        GatewaySection {
            listen: "127.0.0.1:8080".into(),
            routes: Vec::new(),
            authorize: None,
            request_timeout_ms: millis(capgate_core::defaults::gateway::DEFAULT_REQUEST_TIMEOUT),
            audit_drain_timeout_ms: millis(
                capgate_core::defaults::gateway::DEFAULT_AUDIT_DRAIN_TIMEOUT,
            ),
            max_body_bytes: capgate_core::defaults::gateway::DEFAULT_MAX_BODY_BYTES,
            api_keys: Vec::new(),
            jwt: None,
            approval_console_url: None,
            replay_horizon_hours: 24 * 7,
            pending_horizon_hours: None,
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
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteSection {
    /// Mount path, e.g. `/agent`.
    pub path: String,
    /// The fixed surface (never a client input).
    pub surface: Surface,
}

/// An actor as written in the file.
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActorSection {
    /// The actor's id, as the audit trail and policies see it.
    pub id: String,
    /// The actor's kind (`user`, `service`, …).
    pub kind: ActorKind,
    /// Attributes policies may read (e.g. `orgId`).
    #[serde(default)]
    pub attributes: serde_json::Value,
}

impl ActorSection {
    /// The actor a door authenticates as this section (no attributes: an empty object):
    /// the one conversion the API keys, `capgate mcp --stdio` and `capgate replay` share.
    pub fn to_actor(&self) -> capgate_core::actor::Actor {
        capgate_core::actor::Actor {
            id: self.id.clone(),
            kind: self.kind,
            attributes: if self.attributes.is_null() {
                serde_json::json!({})
            } else {
                self.attributes.clone()
            },
        }
    }
}

/// `[[gateway.apiKeys]]`
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiKeySection {
    /// SHA-256 hex of the key (`capgate keys hash`, the key on standard input, prints it).
    #[key(secret)]
    pub sha256: String,
    /// The actor.
    #[key(table)]
    pub actor: ActorSection,
    /// The tenant namespace the key's calls and approvals belong to.
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

/// `[gateway.jwt]`: bearer JWTs, verified with a key given here or with the identity
/// provider's published keys (`discovery` or `jwksUrl`), their claims mapped by
/// `[gateway.jwt.claims]`.
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JwtSection {
    /// HS256 secret, read from this environment variable.
    pub hs256_secret_env: Option<String>,
    /// RS256 public key PEM file.
    pub rs256_public_key: Option<String>,
    /// JWKS file (relative to the config file).
    pub jwks: Option<String>,
    /// The identity provider's JWKS URL (`https://`; `http://` only on loopback), fetched at
    /// start and kept fresh.
    pub jwks_url: Option<String>,
    /// Find the JWKS (and, for the console's sign-in, the endpoints) in the issuer's
    /// OpenID configuration (`<issuer>/.well-known/openid-configuration`) at start.
    #[serde(default)]
    pub discovery: bool,
    /// Required issuer (`iss`); required unless `allowMissingIssuer = true`.
    pub issuer: Option<String>,
    /// Required audience (`aud`), or a list of which a token must name one; required unless
    /// `allowMissingAudience = true`.
    pub audience: Option<StringOrList>,
    /// Accept tokens for any audience (no `audience`): the explicit opt-out.
    #[serde(default)]
    pub allow_missing_audience: bool,
    /// Accept tokens from any issuer the key signs for (no `issuer`): the explicit opt-out.
    #[serde(default)]
    pub allow_missing_issuer: bool,
    /// Algorithms accepted with JWKS keys (default all four: `RS256`, `PS256`, `ES256`,
    /// `EdDSA`); a key verifies only the algorithms of its type.
    pub algorithms: Option<Vec<JwtAlgorithm>>,
    /// How often the provider's keys are fetched again, in seconds.
    #[serde(default = "default_jwks_refresh_seconds")]
    #[key(range = 1..=86_400, unit = "seconds")]
    pub refresh_seconds: u64,
    /// The least time between two fetches of the provider's keys, in seconds, whatever asks
    /// (a token with an unknown `kid`): a flood of forged `kid`s costs the provider at most
    /// one request per this.
    #[serde(default = "default_jwks_min_refresh_seconds")]
    #[key(range = 1..=3_600, unit = "seconds")]
    pub min_refresh_seconds: u64,
    /// Which claims give the principal.
    #[key(table)]
    #[serde(default)]
    pub claims: ClaimsSection,
}

fn default_jwks_refresh_seconds() -> u64 {
    600
}

fn default_jwks_min_refresh_seconds() -> u64 {
    30
}

/// `[gateway.jwt.claims]`: where each part of the principal is read in a token's claims,
/// as a JSON pointer (`/realm_access/roles`; `~1` stands for `/` in a claim name,
/// `/https:~1~1corp.example~1tenant`).
#[derive(Keys, Debug, Clone, PartialEq, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ClaimsSection {
    /// The actor id.
    pub actor_id: String,
    /// The actor kind (`user`, `service` or `agent`); absent, or the claim absent:
    /// `defaultKind`.
    pub actor_kind: Option<String>,
    /// The kind of an actor whose token says none.
    pub default_kind: ActorKind,
    /// The tenant namespace. A token without it is refused.
    pub namespace: String,
    /// Roles: a list of strings, or one space-separated string.
    pub roles: String,
    /// The surfaces the token may use (`aiSdk`, `workflow`, `mcp`); a token without them
    /// gets no model surface.
    pub surfaces: String,
    /// The actor's attributes: a pointer to an object, or a table of attribute name →
    /// pointer (`{ email = "/email", department = "/org/dept" }`).
    pub attributes: AttributesSetting,
    /// Whether the token opens the requester door (a boolean; absent: exactly when it names
    /// no model surface).
    pub requester_door: String,
}

impl Default for ClaimsSection {
    fn default() -> Self {
        ClaimsSection {
            actor_id: "/sub".into(),
            actor_kind: None,
            default_kind: ActorKind::User,
            namespace: "/org".into(),
            roles: "/roles".into(),
            surfaces: "/surfaces".into(),
            attributes: AttributesSetting::Object("/attributes".into()),
            requester_door: "/requesterDoor".into(),
        }
    }
}

/// `gateway.jwt.claims.attributes`: one pointer to an object, or one pointer per attribute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AttributesSetting {
    /// The object at this pointer is the attributes.
    Object(String),
    /// Each attribute from its own pointer.
    Each(BTreeMap<String, String>),
}

/// A string, or a list of strings (`audience`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StringOrList {
    /// One.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl StringOrList {
    /// The strings.
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            StringOrList::One(s) => vec![s.clone()],
            StringOrList::Many(v) => v.clone(),
        }
    }
}

/// `gateway.jwt.algorithms`: the JWS algorithms capgate verifies with JWKS keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JwtAlgorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    RS256,
    /// RSASSA-PSS with SHA-256.
    PS256,
    /// ECDSA on P-256 with SHA-256.
    ES256,
    /// Ed25519.
    EdDSA,
}

impl JwtAlgorithm {
    /// Every algorithm, for the file's schema.
    pub const ALL: [JwtAlgorithm; 4] = [
        JwtAlgorithm::RS256,
        JwtAlgorithm::PS256,
        JwtAlgorithm::ES256,
        JwtAlgorithm::EdDSA,
    ];

    /// The spelling in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            JwtAlgorithm::RS256 => "RS256",
            JwtAlgorithm::PS256 => "PS256",
            JwtAlgorithm::ES256 => "ES256",
            JwtAlgorithm::EdDSA => "EdDSA",
        }
    }
}

/// `[gateway.console.oidc]`: "Sign in with …" on the console, the authorization-code flow
/// with PKCE against `[gateway.jwt]`'s issuer (which needs `discovery = true`).
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConsoleOidcSection {
    /// The client id registered at the identity provider.
    pub client_id: String,
    /// The client secret (a confidential client); absent: a public client, PKCE only.
    #[key(secret)]
    pub client_secret: Option<String>,
    /// The redirect URL registered at the provider: this console's `…/oidc/callback`, as
    /// the browser reaches it (`https://capgate.example.com/console/oidc/callback`).
    pub redirect_url: String,
    /// The name on the button ("Sign in with Acme SSO"; default `your identity provider`).
    pub display_name: Option<String>,
    /// Scopes asked for besides `openid` (e.g. `["profile", "email"]`).
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// `[gateway.rateLimit]`: token buckets per principal and per namespace, every door
/// together (0 switches one off).
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
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
    /// (0 with `unauthenticatedBurst` 0: not throttled). Counts failures only, after the
    /// credential is tried; failures past it answer `429`. A valid credential is never
    /// refused by it.
    pub unauthenticated_per_minute: u32,
    /// Burst of unauthenticated requests per client address.
    pub unauthenticated_burst: u32,
    /// Where the per-principal and per-namespace buckets live: `store` (the default on a
    /// Postgres store) keeps them in the store, shared by every replica, so N replicas
    /// together admit the quota above (one conditional write per limit per request);
    /// `replica` (the default on SQLite) keeps them in each process's memory, so N replicas
    /// admit N times it. The unauthenticated throttle is always per replica.
    pub scope: Option<RateLimitScope>,
}

/// `gateway.rateLimit.scope`: where rate-limit buckets live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RateLimitScope {
    /// In each replica's memory: every replica admits the whole quota.
    Replica,
    /// In the store, shared by every replica: the deployment admits the quota once.
    Store,
}

impl RateLimitScope {
    /// Every scope, for the file's schema.
    pub const ALL: [RateLimitScope; 2] = [RateLimitScope::Replica, RateLimitScope::Store];

    /// The spelling in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            RateLimitScope::Replica => "replica",
            RateLimitScope::Store => "store",
        }
    }
}

impl Default for RateLimitSection {
    fn default() -> Self {
        use capgate_core::defaults::door::*;
        RateLimitSection {
            principal_per_second: DEFAULT_PRINCIPAL_RATE,
            principal_burst: DEFAULT_PRINCIPAL_BURST,
            namespace_per_second: DEFAULT_NAMESPACE_RATE,
            namespace_burst: DEFAULT_NAMESPACE_BURST,
            unauthenticated_per_minute: DEFAULT_UNAUTHENTICATED_PER_MINUTE,
            unauthenticated_burst: DEFAULT_UNAUTHENTICATED_BURST,
            scope: None,
        }
    }
}

/// `[approvals]`: who may decide which approval types.
#[derive(Keys, Debug, Clone, Default, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ApprovalsSection {
    /// `[approvals.types.NAME] roles = [...]`: an approval of type NAME can only be
    /// approved by a holder of one of these roles.
    #[key(tables)]
    pub types: BTreeMap<String, ApprovalTypeSection>,
    /// Escalate an approval still pending this long after it was requested: once per
    /// approval, a `capgate.approval.escalated` event (and an `approval.escalated` webhook
    /// notification) naming `escalateTo`. Absent: no escalation.
    #[key(range = 1..=MAX_MS, unit = "milliseconds")]
    pub escalate_after_ms: Option<u64>,
    /// The role escalations are for (carried in the event and the notification; route it
    /// with a webhook sink whose `events` is `["approval.escalated"]`).
    pub escalate_to: Option<String>,
}

/// `[approvals.types.NAME]`
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalTypeSection {
    /// Roles, any one of which may decide this type.
    pub roles: Vec<String>,
}

/// `[mcp]`: the MCP server, at `/mcp` under `serve` and over stdio under `capgate mcp`.
#[derive(Keys, Debug, Clone, Default, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct McpSection {
    /// The service actor of `capgate mcp --stdio`.
    #[key(table)]
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
    /// The public URL of `/mcp` (`https://capgate.example.com/mcp`): with it, `/mcp` is an
    /// OAuth protected resource whose metadata names `[gateway.jwt]`'s issuer, so MCP
    /// clients find the identity provider themselves (RFC 9728). Tokens must be issued for
    /// it: list it in `gateway.jwt.audience`.
    pub resource: Option<String>,
    /// Scopes published in that metadata and asked for in a `401`'s challenge.
    pub scopes: Vec<String>,
    /// The most MCP sessions one principal holds open at `/mcp` in one process (default
    /// 32). A handshake past it is refused `429` and its session closed at once; a session
    /// ends with the client's `DELETE` or after 5 minutes unused.
    #[key(range = 1..=100_000, unit = "sessions")]
    pub max_sessions_per_principal: Option<u32>,
}

/// `[runtime.oci]`: where registry plugins are cached, which registries may be spoken to
/// over plain HTTP, and the signature policy.
#[derive(Keys, Debug, Clone, Default, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct OciSection {
    /// The cache directory (relative to the config file); default: `oci` inside
    /// `runtime.compileCache`.
    pub cache: Option<String>,
    /// Registries (`host:port`) reached over plain HTTP although they are not loopback.
    /// Loopback registries always are.
    pub insecure_registries: Vec<String>,
    /// Ed25519 public keys (PEM files, relative to the config file) whose signatures are
    /// accepted.
    pub public_keys: Vec<String>,
    /// Refuse every plugin without a valid signature by one of `publicKeys` (local plugin
    /// files included: they cannot carry one). Registry plugins need a valid signature
    /// whenever `publicKeys` lists a key, with or without this.
    pub require_signature: bool,
}

/// The directory of a file: `.` for a bare file name, whose parent is the empty path
/// (which nothing can make absolute).
pub fn file_dir(file: &Path) -> &Path {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

impl Config {
    /// The config file's directory: `.` for a bare file name (`--config capgate.toml`,
    /// whose parent is the empty path, which nothing can resolve).
    pub fn dir(&self) -> &Path {
        file_dir(&self.path)
    }

    /// A path relative to the config file's directory (an absolute path stays as it is).
    pub fn relative(&self, p: impl AsRef<Path>) -> PathBuf {
        self.dir().join(p)
    }

    /// `runtime.stateDir` (relative to the config file), or the config file's directory.
    pub fn state_dir(&self) -> PathBuf {
        match &self.runtime.state_dir {
            Some(dir) => self.relative(dir),
            None => self.dir().to_path_buf(),
        }
    }

    /// A path relative to [`Config::state_dir`] (an absolute path stays as it is): where
    /// what capgate writes goes.
    pub fn state_path(&self, p: impl AsRef<Path>) -> PathBuf {
        self.state_dir().join(p)
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
