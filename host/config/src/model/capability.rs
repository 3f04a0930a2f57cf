//! What a deployment offers: `[plugins.NAME]`, the bindings of policies and redactors,
//! `[[capabilities]]` with their procedures (a plugin, an HTTP upstream, an MCP tool), and
//! `[upstreams.mcp.NAME]`.

use crate::keys::Keys;
use crate::load::MAX_RESERVE;
use crate::values::{MAX_MEMORY_MB, MAX_MS};
use capgate_core::meta::{AdapterNames, ApprovalConfig, Expose, RetryConfig, Risk, SideEffect};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    /// pointers in `config.drop` / `config.mask`; docs/guides/policies-without-a-plugin.md).
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

/// How a capability's operation is reached: one kind of procedure, and what every kind
/// takes. Read from [`ProcedureFile`], the table as written, whose conversion is the one
/// place that says "exactly one of".
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(file = "ProcedureFile")]
#[serde(try_from = "ProcedureFile")]
pub struct ProcedureSection {
    /// The kind, with its own settings.
    pub kind: Procedure,
    /// Handed to the plugin.
    pub config: serde_json::Value,
    /// Stall timeout of the provider runtime (0 = default 300000).
    pub response_stall_timeout_ms: i64,
}

/// A procedure kind. Adding one is a variant here, its key in [`ProcedureFile`] and an arm
/// in each conversion (the compiler names the rest: every `match` on it).
#[derive(Debug, Clone)]
pub enum Procedure {
    /// `plugin = "NAME"`: a Wasm procedure plugin (`[plugins.NAME]`).
    Plugin(String),
    /// `http = { … }`: an HTTP upstream.
    Http(Box<HttpProcedureSection>),
    /// `mcp = { … }`: a tool of an MCP upstream, pinned to its reviewed definition.
    Mcp(McpProcedureSection),
}

impl ProcedureSection {
    /// The MCP tool, when the procedure is one.
    pub fn mcp(&self) -> Option<&McpProcedureSection> {
        match &self.kind {
            Procedure::Mcp(m) => Some(m),
            _ => None,
        }
    }

    /// The HTTP upstream, when the procedure is one.
    pub fn http(&self) -> Option<&HttpProcedureSection> {
        match &self.kind {
            Procedure::Http(h) => Some(h),
            _ => None,
        }
    }
}

impl Procedure {
    /// The key that chose it, for messages and pointers (`plugin`, `http`, `mcp`).
    pub fn key(&self) -> &'static str {
        match self {
            Procedure::Plugin(_) => "plugin",
            Procedure::Http(_) => "http",
            Procedure::Mcp(_) => "mcp",
        }
    }
}

impl TryFrom<ProcedureFile> for ProcedureSection {
    type Error = &'static str;

    fn try_from(f: ProcedureFile) -> Result<Self, Self::Error> {
        let kind = match (f.plugin, f.http, f.mcp) {
            (Some(p), None, None) => Procedure::Plugin(p),
            (None, Some(h), None) => Procedure::Http(Box::new(h)),
            (None, None, Some(m)) => Procedure::Mcp(m),
            _ => return Err("set exactly one of `plugin`, `http` or `mcp`"),
        };
        Ok(ProcedureSection {
            kind,
            config: f.config,
            response_stall_timeout_ms: f.response_stall_timeout_ms,
        })
    }
}

impl From<&ProcedureSection> for ProcedureFile {
    fn from(s: &ProcedureSection) -> Self {
        let mut f = ProcedureFile {
            plugin: None,
            http: None,
            mcp: None,
            config: s.config.clone(),
            response_stall_timeout_ms: s.response_stall_timeout_ms,
        };
        match &s.kind {
            Procedure::Plugin(p) => f.plugin = Some(p.clone()),
            Procedure::Http(h) => f.http = Some((**h).clone()),
            Procedure::Mcp(m) => f.mcp = Some(m.clone()),
        }
        f
    }
}

/// `procedure` as the file writes it: its keys, ranges and schema (the reference lists
/// these); [`ProcedureSection`] is what everything reads.
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcedureFile {
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

/// `procedure.mcp`: one tool of an MCP upstream, pinned (docs/guides/upstreams.md, "MCP servers behind capgate").
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, try_from = "serde_json::Value")]
pub enum SecretSetting {
    /// The value as written.
    Literal(String),
    /// From the environment or a file.
    From(SecretSource),
}

/// Where a secret is read at each use, with what is put before it (e.g. `"Bearer "`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(into = "SecretSourceFile")]
pub enum SecretSource {
    /// `{ env = "VAR" }`: an environment variable of the capgate process.
    Env {
        /// The variable.
        name: String,
        /// Put before the value.
        prefix: String,
    },
    /// `{ file = "path" }`: a file (relative to the config file).
    File {
        /// The file.
        path: String,
        /// Put before the value.
        prefix: String,
    },
}

/// `{ env = "VAR" }` or `{ file = "path" }`, with an optional `prefix`, as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretSourceFile {
    /// An environment variable of the capgate process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// A file (relative to the config file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Put before the value.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
}

impl TryFrom<serde_json::Value> for SecretSetting {
    type Error = String;

    fn try_from(v: serde_json::Value) -> Result<Self, Self::Error> {
        match v {
            serde_json::Value::String(s) => Ok(SecretSetting::Literal(s)),
            v @ serde_json::Value::Object(_) => {
                let f: SecretSourceFile =
                    serde_json::from_value(v).map_err(|e| e.to_string())?;
                let source = match (f.env, f.file) {
                    (Some(name), None) => SecretSource::Env {
                        name,
                        prefix: f.prefix,
                    },
                    (None, Some(path)) => SecretSource::File {
                        path,
                        prefix: f.prefix,
                    },
                    _ => return Err("set exactly one of `env` or `file`".into()),
                };
                Ok(SecretSetting::From(source))
            }
            _ => Err(
                "a string, `{ env = \"VAR\" }` or `{ file = \"path\" }` (with an optional `prefix`)"
                    .into(),
            ),
        }
    }
}

impl From<SecretSource> for SecretSourceFile {
    fn from(s: SecretSource) -> Self {
        match s {
            SecretSource::Env { name, prefix } => SecretSourceFile {
                env: Some(name),
                file: None,
                prefix,
            },
            SecretSource::File { path, prefix } => SecretSourceFile {
                env: None,
                file: Some(path),
                prefix,
            },
        }
    }
}

/// `[upstreams.mcp.NAME]`: one MCP server, over streamable HTTP or stdio, and what either
/// takes. Read from [`McpUpstreamFile`], the table as written; its conversion is the one
/// place that says which keys go with which transport.
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(file = "McpUpstreamFile")]
#[serde(try_from = "McpUpstreamFile")]
pub struct McpUpstreamSection {
    /// How capgate reaches it.
    pub transport: McpTransport,
    /// Connect and initialize timeout (absent: the provider's default).
    pub connect_timeout_ms: Option<u64>,
    /// At most this many calls in flight on the upstream (absent: the provider's default).
    pub max_concurrent_calls: Option<u64>,
    /// How often the tools are listed again (absent: the provider's default).
    pub relist_interval_ms: Option<u64>,
}

/// An MCP upstream's transport.
#[derive(Debug, Clone)]
pub enum McpTransport {
    /// `url = "…"`: streamable HTTP.
    Http {
        /// The endpoint.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, SecretSetting>,
        /// Extra trusted roots for an `https://` URL (relative to the config file).
        ca_file: Option<String>,
    },
    /// `command = [...]`: a program started with piped stdio.
    Stdio {
        /// The program and its arguments.
        command: Vec<String>,
        /// The program's environment.
        env: BTreeMap<String, SecretSetting>,
        /// Variables passed through from capgate's environment.
        inherit_env: Vec<String>,
        /// The program's working directory (relative to the config file).
        cwd: Option<String>,
    },
}

impl TryFrom<McpUpstreamFile> for McpUpstreamSection {
    type Error = &'static str;

    fn try_from(f: McpUpstreamFile) -> Result<Self, Self::Error> {
        let transport = match (f.url, f.command) {
            (Some(url), None) => {
                if !f.env.is_empty() || !f.inherit_env.is_empty() || f.cwd.is_some() {
                    return Err(
                        "`env`, `inheritEnv` and `cwd` apply to a `command` (stdio) upstream only",
                    );
                }
                McpTransport::Http {
                    url,
                    headers: f.headers,
                    ca_file: f.ca_file,
                }
            }
            (None, Some(command)) => {
                if !f.headers.is_empty() || f.ca_file.is_some() {
                    return Err(
                        "`headers` and `caFile` apply to a `url` (streamable HTTP) upstream only",
                    );
                }
                McpTransport::Stdio {
                    command,
                    env: f.env,
                    inherit_env: f.inherit_env,
                    cwd: f.cwd,
                }
            }
            _ => return Err("set exactly one of `url` (streamable HTTP) or `command` (stdio)"),
        };
        Ok(McpUpstreamSection {
            transport,
            connect_timeout_ms: f.connect_timeout_ms,
            max_concurrent_calls: f.max_concurrent_calls,
            relist_interval_ms: f.relist_interval_ms,
        })
    }
}

impl From<&McpUpstreamSection> for McpUpstreamFile {
    fn from(s: &McpUpstreamSection) -> Self {
        let mut f = McpUpstreamFile {
            url: None,
            headers: BTreeMap::new(),
            ca_file: None,
            command: None,
            env: BTreeMap::new(),
            inherit_env: Vec::new(),
            cwd: None,
            connect_timeout_ms: s.connect_timeout_ms,
            max_concurrent_calls: s.max_concurrent_calls,
            relist_interval_ms: s.relist_interval_ms,
        };
        match &s.transport {
            McpTransport::Http {
                url,
                headers,
                ca_file,
            } => {
                f.url = Some(url.clone());
                f.headers = headers.clone();
                f.ca_file = ca_file.clone();
            }
            McpTransport::Stdio {
                command,
                env,
                inherit_env,
                cwd,
            } => {
                f.command = Some(command.clone());
                f.env = env.clone();
                f.inherit_env = inherit_env.clone();
                f.cwd = cwd.clone();
            }
        }
        f
    }
}

/// `[upstreams.mcp.NAME]` as the file writes it: its keys, ranges and schema (the reference
/// lists these); set `url` (streamable HTTP) or `command` (stdio).
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpUpstreamFile {
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
    #[key(table, declared = "super::declared::ExposeKeys")]
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
    #[key(table, declared = "super::declared::RetryKeys")]
    pub retry: Option<RetryConfig>,
    /// Whether repeating the call has the effect of one call (required for retries).
    #[serde(default)]
    pub idempotent: bool,
    /// Static approval.
    #[key(table, declared = "super::declared::ApprovalKeys")]
    pub approval: Option<ApprovalConfig>,
    /// Tool names.
    #[key(table, declared = "super::declared::AdapterKeys")]
    pub adapters: Option<AdapterNames>,
    /// `discoverable` (default: listed to models) or `contextual` (left out of model tool
    /// lists, presented by a UI; callable where exposed).
    #[serde(default)]
    pub discovery: capgate_core::meta::Discovery,
    /// On `/mcp`: a call still running this long after it started is answered, to a client
    /// of the MCP tasks extension, with a task it polls (progress in the task's status),
    /// so a slow procedure no longer holds the request; its timeout and cancellation are
    /// unchanged. Absent: calls hold the request until they end.
    #[key(range = 1..=MAX_MS, unit = "milliseconds")]
    pub task_after_ms: Option<u64>,
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
