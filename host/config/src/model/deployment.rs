//! The deployment-wide sections: `[runtime]`, `[store]`, `[audit]` and its exports,
//! `[approvals]`, `[mcp]`, `[oci]` and `[telemetry.metrics]`.

use super::*;
use crate::keys::Keys;
use crate::values::MAX_MS;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    /// capgate's JSON notification (docs/guides/approvals.md, "Approvals that reach people").
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

/// `[audit.export.NAME]`: one export sink, of one kind, and what every kind takes. The name
/// keys its cursor in the store: renaming a sink starts it again from the beginning of the
/// trail. Read from [`ExportFile`], the table as written; its conversion is the one place
/// that says which keys each kind needs and takes.
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(file = "ExportFile")]
#[serde(try_from = "ExportFile")]
pub struct ExportSection {
    /// The kind, with its own settings.
    pub kind: ExportKind,
    /// Most events in one delivery (absent: 512).
    pub batch_events: Option<u64>,
    /// The bound on one delivery in milliseconds (absent: 10000).
    pub timeout_ms: Option<u64>,
    /// The lag past which a failing sink fails `/readyz` (absent: 600 seconds).
    pub max_lag_seconds: Option<u64>,
}

/// An export sink's kind. Adding one is a variant, its `to` spelling ([`ExportTo`]) and an
/// arm in each conversion.
#[derive(Debug, Clone)]
pub enum ExportKind {
    /// `to = "otlp"`: OpenTelemetry logs over OTLP/HTTP.
    Otlp {
        /// The collector (absent: the environment's, then the traces' collector).
        endpoint: Option<String>,
        /// Headers sent with every export.
        headers: BTreeMap<String, SecretSetting>,
        /// Extra trusted roots (relative to the config file).
        ca_file: Option<String>,
    },
    /// `to = "jsonl"`: rotated JSON-lines files.
    Jsonl {
        /// Where the files are written (relative to the config file).
        directory: String,
        /// The size at which a new file starts (absent: 64 MiB).
        rotate_bytes: Option<u64>,
    },
    /// `to = "webhook"`: approval notifications POSTed to a URL.
    Webhook(WebhookExport),
}

/// A `webhook` sink's settings.
#[derive(Debug, Clone)]
pub struct WebhookExport {
    /// The URL notifications are POSTed to.
    pub endpoint: String,
    /// The Standard Webhooks signing secret (absent only for `format = "slack"`).
    pub secret: Option<SecretSetting>,
    /// capgate's JSON or a Slack message.
    pub format: WebhookFormat,
    /// Which notifications it sends (absent: all).
    pub events: Option<Vec<String>>,
    /// The approval console's public URL each notification links to.
    pub console_url: Option<String>,
    /// Only approvals of these namespaces (absent: every namespace).
    pub namespaces: Option<Vec<String>>,
    /// Headers sent with every notification.
    pub headers: BTreeMap<String, SecretSetting>,
    /// Extra trusted roots (relative to the config file).
    pub ca_file: Option<String>,
}

impl ExportKind {
    /// `to`'s spelling of this kind.
    pub fn to(&self) -> ExportTo {
        match self {
            ExportKind::Otlp { .. } => ExportTo::Otlp,
            ExportKind::Jsonl { .. } => ExportTo::Jsonl,
            ExportKind::Webhook(_) => ExportTo::Webhook,
        }
    }
}

impl TryFrom<ExportFile> for ExportSection {
    type Error = String;

    fn try_from(f: ExportFile) -> Result<Self, Self::Error> {
        let mut wrong = Vec::new();
        let mut only = |key: &str, set: bool, kinds: &str| {
            if set {
                wrong.push(format!("`{key}` is for {kinds} sinks"));
            }
        };
        let to = f.to;
        if to != ExportTo::Jsonl {
            only("directory", f.directory.is_some(), "`jsonl`");
            only("rotateBytes", f.rotate_bytes.is_some(), "`jsonl`");
        } else {
            only("endpoint", f.endpoint.is_some(), "`otlp` and `webhook`");
            only("headers", !f.headers.is_empty(), "`otlp` and `webhook`");
            only("caFile", f.ca_file.is_some(), "`otlp` and `webhook`");
        }
        if to != ExportTo::Webhook {
            only("events", f.events.is_some(), "`webhook`");
            only("secret", f.secret.is_some(), "`webhook`");
            only("format", f.format.is_some(), "`webhook`");
            only("consoleUrl", f.console_url.is_some(), "`webhook`");
            only("namespaces", f.namespaces.is_some(), "`webhook`");
        }
        let kind = match to {
            ExportTo::Otlp => Some(ExportKind::Otlp {
                endpoint: f.endpoint,
                headers: f.headers,
                ca_file: f.ca_file,
            }),
            ExportTo::Jsonl => {
                if f.directory.is_none() {
                    wrong.insert(
                        0,
                        "a `jsonl` sink needs `directory` (where its files are written)".into(),
                    );
                }
                f.directory.map(|directory| ExportKind::Jsonl {
                    directory,
                    rotate_bytes: f.rotate_bytes,
                })
            }
            ExportTo::Webhook => {
                let format = f.format.unwrap_or_default();
                if f.secret.is_none() && format == WebhookFormat::Json {
                    wrong.insert(0, "a `webhook` sink needs `secret` (its notifications are signed; only `format = \"slack\"`, whose URL is the secret, goes without)".into());
                }
                if f.endpoint.is_none() {
                    wrong.insert(
                        0,
                        "a `webhook` sink needs `endpoint` (the URL notifications are POSTed to)"
                            .into(),
                    );
                }
                f.endpoint.map(|endpoint| {
                    ExportKind::Webhook(WebhookExport {
                        endpoint,
                        secret: f.secret,
                        format,
                        events: f.events,
                        console_url: f.console_url,
                        namespaces: f.namespaces,
                        headers: f.headers,
                        ca_file: f.ca_file,
                    })
                })
            }
        };
        match kind {
            Some(kind) if wrong.is_empty() => Ok(ExportSection {
                kind,
                batch_events: f.batch_events,
                timeout_ms: f.timeout_ms,
                max_lag_seconds: f.max_lag_seconds,
            }),
            _ => Err(wrong.join("; ")),
        }
    }
}

impl From<&ExportSection> for ExportFile {
    fn from(s: &ExportSection) -> Self {
        let mut f = ExportFile {
            to: s.kind.to(),
            endpoint: None,
            secret: None,
            format: None,
            events: None,
            console_url: None,
            namespaces: None,
            headers: BTreeMap::new(),
            ca_file: None,
            directory: None,
            rotate_bytes: None,
            batch_events: s.batch_events,
            timeout_ms: s.timeout_ms,
            max_lag_seconds: s.max_lag_seconds,
        };
        match &s.kind {
            ExportKind::Otlp {
                endpoint,
                headers,
                ca_file,
            } => {
                f.endpoint = endpoint.clone();
                f.headers = headers.clone();
                f.ca_file = ca_file.clone();
            }
            ExportKind::Jsonl {
                directory,
                rotate_bytes,
            } => {
                f.directory = Some(directory.clone());
                f.rotate_bytes = *rotate_bytes;
            }
            ExportKind::Webhook(w) => {
                f.endpoint = Some(w.endpoint.clone());
                f.secret = w.secret.clone();
                f.format = Some(w.format);
                f.events = w.events.clone();
                f.console_url = w.console_url.clone();
                f.namespaces = w.namespaces.clone();
                f.headers = w.headers.clone();
                f.ca_file = w.ca_file.clone();
            }
        }
        f
    }
}

/// `[audit.export.NAME]` as the file writes it: its keys, ranges and schema (the reference
/// lists these); [`ExportSection`] is what everything reads.
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportFile {
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
    /// Answer a held call with an MCP task (the `io.modelcontextprotocol/tasks` extension)
    /// when the client declares the extension: it polls `tasks/get` until a human decided
    /// and the call ran (docs/gateway.md, "MCP tasks"). Absent or `true`: on; a client
    /// without the extension gets the approval-required result either way.
    pub tasks: Option<bool>,
    /// The `pollIntervalMs` a task suggests to its client (default 1000).
    #[key(range = 100..=60_000, unit = "milliseconds")]
    pub task_poll_interval_ms: Option<u64>,
    /// The most working tasks one principal holds (default 100); a held call past it is
    /// answered with the approval-required result, as to a client without tasks.
    #[key(range = 1..=100_000, unit = "tasks")]
    pub max_tasks_per_principal: Option<u32>,
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
    /// Public keys (PEM files, relative to the config file: cosign's ECDSA P-256
    /// `cosign.pub`, or Ed25519) whose signatures are accepted.
    pub public_keys: Vec<String>,
    /// Refuse every plugin without a valid signature by one of `publicKeys` (local plugin
    /// files included: they cannot carry one). Registry plugins need a valid signature
    /// whenever `publicKeys` lists a key, with or without this.
    pub require_signature: bool,
}
