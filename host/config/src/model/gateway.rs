//! `[gateway]`: the listener and routes, who may call (API keys, operator keys, JWT and
//! its claims), the console, the authorizer and the rate limits.

use crate::keys::Keys;
use crate::values::{MAX_CONSOLE_SESSION_MINUTES, MAX_MS, MAX_REPLAY_HORIZON_HOURS, MAX_STORAGE};
use capgate_core::actor::{ActorKind, Surface};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    pub trusted_proxies: Vec<ProxyAddress>,
}

/// One `trustedProxies` entry: an IP address, parsed where it is written (anything else is
/// a problem at the entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ProxyAddress(pub std::net::IpAddr);

impl TryFrom<String> for ProxyAddress {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse().map(ProxyAddress).map_err(|_| {
            format!("`{s}` is not an IP address (list each proxy's address, e.g. \"10.0.0.5\")")
        })
    }
}

impl From<ProxyAddress> for String {
    fn from(a: ProxyAddress) -> String {
        a.0.to_string()
    }
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

/// `[gateway.admin]`: the operator API (docs/guides/operating.md, "Reloading without a restart").
#[derive(Keys, Debug, Clone, Default, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AdminSection {
    /// Serve `POST /admin/reload` to operator principals (`[[gateway.operatorKeys]]`), as
    /// the authorizer allows (default off; SIGHUP reloads either way).
    pub reload: bool,
}

/// `[gateway.console]`: the approval console, a web page for approvers on the approvals
/// API (docs/guides/approvals.md, "Approval console").
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
            request_timeout_ms: millis(capgate_core::defaults::routes::DEFAULT_REQUEST_TIMEOUT),
            audit_drain_timeout_ms: millis(
                capgate_core::defaults::routes::DEFAULT_AUDIT_DRAIN_TIMEOUT,
            ),
            max_body_bytes: capgate_core::defaults::routes::DEFAULT_MAX_BODY_BYTES,
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
#[key(file = "JwtFile")]
#[serde(try_from = "JwtFile")]
pub struct JwtSection {
    /// Where the keys that verify a token come from.
    pub key_source: JwtKeySource,
    /// Required issuer (`iss`); required unless `allowMissingIssuer = true`.
    pub issuer: Option<String>,
    /// Required audience (`aud`), or a list of which a token must name one.
    pub audience: Option<StringOrList>,
    /// Accept tokens for any audience (no `audience`): the explicit opt-out.
    pub allow_missing_audience: bool,
    /// Accept tokens from any issuer the key signs for (no `issuer`): the explicit opt-out.
    pub allow_missing_issuer: bool,
    /// Algorithms accepted with JWKS keys (absent: all four).
    pub algorithms: Option<Vec<JwtAlgorithm>>,
    /// How often the provider's keys are fetched again, in seconds.
    pub refresh_seconds: u64,
    /// The least time between two fetches of the provider's keys, in seconds.
    pub min_refresh_seconds: u64,
    /// Which claims give the principal.
    pub claims: ClaimsSection,
}

/// Where `[gateway.jwt]`'s keys come from: exactly one source. Adding one is a variant, its
/// key in [`JwtFile`] and an arm in each conversion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtKeySource {
    /// `hs256SecretEnv = "VAR"`: an HS256 secret from this environment variable.
    Hs256SecretEnv(String),
    /// `rs256PublicKey = "file.pem"`: an RS256 public key (relative to the config file).
    Rs256PublicKey(String),
    /// `jwks = "file.json"`: a JWKS file (relative to the config file).
    Jwks(String),
    /// `jwksUrl = "https://…"`: the identity provider's JWKS URL, fetched and kept fresh.
    JwksUrl(String),
    /// `discovery = true`: the JWKS found in the issuer's OpenID configuration.
    Discovery,
}

impl JwtSection {
    /// Whether the keys (and the console's sign-in endpoints) are discovered from the issuer.
    pub fn discovers(&self) -> bool {
        self.key_source == JwtKeySource::Discovery
    }
}

impl TryFrom<JwtFile> for JwtSection {
    type Error = &'static str;

    fn try_from(f: JwtFile) -> Result<Self, Self::Error> {
        let key_source = match (
            f.hs256_secret_env,
            f.rs256_public_key,
            f.jwks,
            f.jwks_url,
            f.discovery,
        ) {
            (Some(var), None, None, None, false) => JwtKeySource::Hs256SecretEnv(var),
            (None, Some(pem), None, None, false) => JwtKeySource::Rs256PublicKey(pem),
            (None, None, Some(jwks), None, false) => JwtKeySource::Jwks(jwks),
            (None, None, None, Some(url), false) => JwtKeySource::JwksUrl(url),
            (None, None, None, None, true) => JwtKeySource::Discovery,
            _ => {
                return Err(
                    "set exactly one key source: `discovery = true` (with `issuer`), `jwksUrl`, `jwks` (a file), `rs256PublicKey` or `hs256SecretEnv`",
                );
            }
        };
        Ok(JwtSection {
            key_source,
            issuer: f.issuer,
            audience: f.audience,
            allow_missing_audience: f.allow_missing_audience,
            allow_missing_issuer: f.allow_missing_issuer,
            algorithms: f.algorithms,
            refresh_seconds: f.refresh_seconds,
            min_refresh_seconds: f.min_refresh_seconds,
            claims: f.claims,
        })
    }
}

impl From<&JwtSection> for JwtFile {
    fn from(s: &JwtSection) -> Self {
        let mut f = JwtFile {
            hs256_secret_env: None,
            rs256_public_key: None,
            jwks: None,
            jwks_url: None,
            discovery: false,
            issuer: s.issuer.clone(),
            audience: s.audience.clone(),
            allow_missing_audience: s.allow_missing_audience,
            allow_missing_issuer: s.allow_missing_issuer,
            algorithms: s.algorithms.clone(),
            refresh_seconds: s.refresh_seconds,
            min_refresh_seconds: s.min_refresh_seconds,
            claims: s.claims.clone(),
        };
        match &s.key_source {
            JwtKeySource::Hs256SecretEnv(v) => f.hs256_secret_env = Some(v.clone()),
            JwtKeySource::Rs256PublicKey(v) => f.rs256_public_key = Some(v.clone()),
            JwtKeySource::Jwks(v) => f.jwks = Some(v.clone()),
            JwtKeySource::JwksUrl(v) => f.jwks_url = Some(v.clone()),
            JwtKeySource::Discovery => f.discovery = true,
        }
        f
    }
}

/// `[gateway.jwt]` as the file writes it: its keys, ranges and schema (the reference lists
/// these); [`JwtSection`] is what everything reads.
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JwtFile {
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
