//! The one validation path: `check`, `serve`, `mcp` and every command that takes `--config`
//! start with [`validate`], so `serve` refuses exactly what `check` refuses, with the same
//! located problems (`file:line:column: key: message`).
//!
//! Validation goes as far as anything can go without opening the store or a listener:
//!
//! 1. the file: syntax, types, references, value ranges ([`Config::load`]);
//! 2. then, when the file is sound, everything building the deployment can refuse: the
//!    gateway's authorizer and authenticators (JWT keys), every plugin loaded and pinned
//!    and every binding bound to the interface it needs, every procedure's provider
//!    (HTTP upstreams, one identity each), the capability registry (SI-11 retries, tool
//!    names, schemas…), each capability's worst-case time (policy batches included)
//!    against the gateway's budget, and each gateway route built for real over a scratch
//!    runtime (its configuration and contract).
//!
//! What passes is a [`Checked`] deployment: `serve`, `mcp` and the operator commands build
//! from it and can then fail only on the store (or the listen address).

use async_trait::async_trait;
use capgate_config::located::{Located, Problem, seg};
use capgate_config::{BindingSection, CapabilitySection, Config, JwtSection, PluginSection};
use capgate_core::actor::{Actor, Surface};
use capgate_core::approval::{ApprovalCoordinator, InMemoryApprovalCoordinator};
use capgate_core::audit::AuditConfig;
use capgate_core::authz::{AuthorizeError, AuthorizeRequest, Authorizer};
use capgate_core::journal::InMemoryInvocationJournal;
use capgate_core::meta::CapabilityMeta;
use capgate_core::policy::{CapabilityInfo, Phase, Policy};
use capgate_core::redact::Redactor;
use capgate_core::registry::{CapabilityDef, Registry, RegistryError, RegistryProblem};
use capgate_core::runtime::{Defaults, Runtime};
use capgate_gateway::auth::{
    ApiKeyEntry, ApiKeys, BuiltinAuthenticator, JwtAuthenticator, JwtConfig, JwtKey,
    SharedAuthenticator,
};
use capgate_gateway::door::{Doorkeeper, Quotas, Rate};
use capgate_gateway::gateway::{GatewayConfig, GatewayConfigError};
use capgate_provider::http::HttpUpstreamError;
use capgate_provider::{
    HttpUpstream, ProcedureProvider, Provider, ProviderConf, ProviderIdentity, ProviderProcedure,
    ProviderRegistry, runtime::ProviderRuntime,
};
use capgate_wasm::{
    Binding, Isolation, Limits, LoadError, Plugin, PluginDir, ReserveOptions, WasmHost,
};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A configuration that was refused: its located problems, printed one per line by every
/// command the same way.
#[derive(Debug)]
pub struct Refused {
    /// The configuration file.
    pub path: PathBuf,
    /// Every problem, in file order.
    pub problems: Vec<Problem>,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} problem(s) in {}; nothing was started. Fix them and run `capgate check --config {}` again.",
            self.problems.len(),
            self.path.display(),
            self.path.display()
        )
    }
}

impl std::error::Error for Refused {}

impl Refused {
    /// Print every problem, then the summary, to stderr.
    pub fn report(&self) {
        for p in &self.problems {
            eprintln!("{p}");
        }
        eprintln!("\n{self}");
    }
}

/// A deployment that passed every check, with its plugins loaded and bound.
pub struct Checked {
    /// The configuration.
    pub config: Config,
    /// The located document, for command-specific problems (e.g. `mcp` without
    /// `[mcp] stdioActor`).
    pub doc: Located,
    provider_runtime: ProviderRuntime,
    capabilities: Vec<CapabilityParts>,
    runtime_policies: Vec<Arc<dyn Policy>>,
    authorizer: Arc<dyn Authorizer>,
    authenticator: SharedAuthenticator,
    /// What the file allows but `check` and `serve` warn about, located.
    pub warnings: Vec<Problem>,
}

/// One capability, ready to be put in a registry.
struct CapabilityParts {
    id: String,
    meta: CapabilityMeta,
    input_schema: Option<serde_json::Value>,
    output_schema: Option<serde_json::Value>,
    policies: Vec<Arc<dyn Policy>>,
    redactors: Vec<Arc<dyn Redactor>>,
    provider: ProviderIdentity,
}

/// `authorize = "authenticated"`: the explicit opt-in that any authenticated principal may
/// use every gateway operation (the runtime's policies remain the authority over what runs).
struct AuthenticatedOnly;

#[async_trait]
impl Authorizer for AuthenticatedOnly {
    async fn authorize(&self, _request: &AuthorizeRequest<'_>) -> Result<(), AuthorizeError> {
        Ok(())
    }
}

/// Validate a configuration file: the [`Checked`] deployment, or every located problem.
pub fn validate(path: &Path) -> Result<Checked, Refused> {
    let refused = |problems: Vec<Problem>| Refused {
        path: path.to_path_buf(),
        problems: sorted(problems),
    };
    let (config, doc) = Config::load(path).map_err(refused)?;
    let mut v = Validation {
        cfg: &config,
        doc: &doc,
        problems: Vec::new(),
    };
    let authenticator = v.authenticator();
    let plugins = v.plugins();
    let policies = v.bindings("policies", &config.policies, &plugins, |plugin, b, name| {
        let mut p = plugin.policy(binding_of(name, b, plugins_section(&config, &b.plugin)))?;
        if let Some(phases) = &b.phases {
            p = p.with_phases(phases.iter().copied());
        }
        Ok(match b.mode {
            capgate_config::PolicyMode::Enforce => Arc::new(p) as Arc<dyn Policy>,
            capgate_config::PolicyMode::Shadow => Arc::new(capgate_core::policy::Shadow::new(p)),
        })
    });
    v.budgets(&policies);
    let redactors = v.bindings(
        "redactors",
        &config.redactors,
        &plugins,
        |plugin, b, name| {
            let r = plugin.redactor(binding_of(name, b, plugins_section(&config, &b.plugin)))?;
            Ok(Arc::new(r) as Arc<dyn Redactor>)
        },
    );
    let authorizer = v.authorizer(&plugins);
    // The capabilities, as far as their procedures could be built; the registry's own
    // checks (SI-11 retries, tool names, …) run whatever else is wrong.
    let assembled = v.providers(&plugins).map(|(provider_runtime, ids)| {
        let schema = |s: &Option<capgate_config::SchemaRef>| {
            s.as_ref().and_then(|s| config.resolve_schema(s).ok())
        };
        let capabilities: Vec<CapabilityParts> = config
            .capabilities
            .iter()
            .zip(ids)
            .map(|(c, provider)| CapabilityParts {
                id: c.id.clone(),
                meta: meta_of(c),
                input_schema: schema(&c.input_schema),
                output_schema: schema(&c.output_schema),
                policies: pick(&policies, &c.policies),
                redactors: pick(&redactors, &c.redactors),
                provider,
            })
            .collect();
        (provider_runtime, capabilities)
    });
    if let Some((provider_runtime, capabilities)) = &assembled
        && let Err(e) = registry_of(capabilities, provider_runtime, None)
    {
        for p in &e.problems {
            let problem = registry_problem(&config, &doc, p);
            v.problems.push(problem);
        }
    }
    let (Some(authenticator), Some(authorizer), Some((provider_runtime, capabilities))) =
        (authenticator, authorizer, assembled)
    else {
        // Whatever could not be built has its problem; never refuse with none.
        if v.problems.is_empty() {
            v.problem("", "the deployment could not be assembled");
        }
        return Err(refused(v.problems));
    };
    if !v.problems.is_empty() {
        return Err(refused(v.problems));
    }
    let runtime_policies = pick(&policies, &config.runtime.policies);
    let warnings = config.warnings(&doc);
    let checked = Checked {
        warnings,
        provider_runtime,
        capabilities,
        runtime_policies,
        authorizer,
        authenticator,
        config,
        doc,
    };
    let problems = checked.check_assembly();
    if problems.is_empty() {
        Ok(checked)
    } else {
        Err(Refused {
            path: path.to_path_buf(),
            problems: sorted(problems),
        })
    }
}

/// The bound hooks `names` lists, in its order.
fn pick<T: Clone>(map: &BTreeMap<String, T>, names: &[String]) -> Vec<T> {
    names.iter().filter_map(|n| map.get(n).cloned()).collect()
}

/// In file order (line, then column), each problem once.
fn sorted(mut problems: Vec<Problem>) -> Vec<Problem> {
    problems.sort_by_key(|p| (p.line, p.column));
    let mut seen = std::collections::HashSet::new();
    problems.retain(|p| seen.insert(p.to_string()));
    problems
}

fn plugins_section<'a>(cfg: &'a Config, name: &str) -> Option<&'a PluginSection> {
    cfg.plugins.get(name)
}

/// The limits of a plugin's bindings, from its `[plugins.NAME]` section.
fn limits_of(p: Option<&PluginSection>, base: Limits) -> Limits {
    let Some(p) = p else { return base };
    let mut l = base;
    if let Some(f) = p.fuel {
        l = l.with_fuel(if f == 0 { None } else { Some(f) });
    }
    if let Some(mb) = p.memory_mb {
        l = l.with_memory_bytes(
            usize::try_from(mb)
                .unwrap_or(usize::MAX)
                .saturating_mul(1 << 20),
        );
    }
    if let Some(ms) = p.timeout_ms {
        l = l.with_timeout(Duration::from_millis(ms));
    }
    l
}

fn isolation_of(p: Option<&PluginSection>) -> Isolation {
    match p.and_then(|p| p.isolation.as_deref()) {
        Some("pooled") => Isolation::pooled(),
        _ => Isolation::Fresh,
    }
}

fn binding_of(name: &str, b: &BindingSection, p: Option<&PluginSection>) -> Binding {
    Binding::new(name)
        .config(b.config.clone())
        .limits(limits_of(p, Limits::default()))
        .isolation(isolation_of(p))
        .reserve(reserve_of(p))
}

fn reserve_of(p: Option<&PluginSection>) -> ReserveOptions {
    let default = ReserveOptions::default();
    match p.map(|p| (p.reserve, p.reserve_refill_at)) {
        Some((Some(size), at)) => ReserveOptions {
            size,
            refill_at: at.unwrap_or(size / 2),
        },
        Some((None, Some(at))) => ReserveOptions {
            refill_at: at,
            ..default
        },
        _ => default,
    }
}

fn meta_of(c: &CapabilitySection) -> CapabilityMeta {
    let mut m = CapabilityMeta::new(c.description.clone(), c.side_effect, c.risk);
    m.expose = c.expose;
    m.tags = c.tags.clone();
    m.timeout_ms = c.timeout_ms;
    m.retry = c.retry.clone();
    m.idempotent = c.idempotent;
    m.approval = c.approval.clone();
    m.adapters = c.adapters.clone();
    m.discovery = c.discovery;
    m
}

/// The longest a governed call can take inside the runtime, as the runtime runs it: each
/// policy batch it has (stage 7 and stage 9, each under one shared deadline of
/// `policyTimeoutMs`; `policy_batches` of them, 0 to 2), then every attempt up to its
/// timeout (stages 10–11), plus the backoff between attempts (`backoffMs × 2^(n-1)` before
/// attempt n+1). A resume runs the same two batches (its freshness re-check and stage 9).
pub fn worst_case_ms(meta: &CapabilityMeta, defaults: &Defaults, policy_batches: u32) -> WorstCase {
    let timeout = meta.timeout_ms.unwrap_or(defaults.timeout_ms);
    let retry = meta.retry.as_ref().filter(|_| meta.retry_eligible());
    let retries = retry.map_or(0, |r| r.max_attempts);
    let base = retry
        .and_then(|r| r.backoff_ms)
        .unwrap_or(defaults.retry_backoff_ms);
    let backoff = (1..=retries).fold(0u64, |sum, n| {
        sum.saturating_add(base.saturating_mul(1u64 << (n - 1).min(20)))
    });
    let attempts = 1 + retries;
    let policies = defaults
        .policy_timeout_ms
        .saturating_mul(u64::from(policy_batches));
    WorstCase {
        attempts,
        timeout,
        backoff,
        policy_batches,
        policy_timeout: defaults.policy_timeout_ms,
        total: timeout
            .saturating_mul(u64::from(attempts))
            .saturating_add(backoff)
            .saturating_add(policies),
    }
}

/// [`worst_case_ms`], itemized for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorstCase {
    /// Attempts (1 + retries).
    pub attempts: u32,
    /// Per-attempt timeout.
    pub timeout: u64,
    /// Sum of the backoffs.
    pub backoff: u64,
    /// Policy batches the call runs (invocation phase, execution phase: 0 to 2).
    pub policy_batches: u32,
    /// The deadline of each policy batch (`runtime.policyTimeoutMs`).
    pub policy_timeout: u64,
    /// The total.
    pub total: u64,
}

/// The checks of step 2 (see the module docs), collecting located problems.
struct Validation<'a> {
    cfg: &'a Config,
    doc: &'a Located,
    problems: Vec<Problem>,
}

impl Validation<'_> {
    fn problem(&mut self, pointer: &str, message: impl Into<String>) {
        let p = self.doc.problem(pointer, message);
        self.problems.push(p);
    }

    /// The configured authorizer: `"authenticated"`, or the plugin bound as an authorizer.
    fn authorizer(
        &mut self,
        plugins: &BTreeMap<String, Arc<Plugin>>,
    ) -> Option<Arc<dyn Authorizer>> {
        match &self.cfg.gateway.authorize {
            None => {
                self.problem(
                    "/gateway/authorize",
                    "is not set, and the gateway never runs without an authorizer: add to [gateway] \
                     `authorize = \"authenticated\"` (any authenticated caller may use every operation) \
                     or `authorize = { plugin = \"NAME\" }` (a Wasm authorizer plugin decides per operation)",
                );
                None
            }
            Some(serde_json::Value::String(s)) if s == "authenticated" => {
                Some(Arc::new(AuthenticatedOnly))
            }
            Some(v) => {
                let name = v.get("plugin").and_then(|p| p.as_str())?;
                let plugin = plugins.get(name)?;
                let section = self.cfg.plugins.get(name);
                let config = v.get("config").cloned().unwrap_or(serde_json::Value::Null);
                let binding = Binding::new("gateway.authorize")
                    .config(config)
                    .limits(limits_of(section, Limits::default()))
                    .isolation(isolation_of(section));
                match plugin.authorizer(binding) {
                    Ok(a) => Some(Arc::new(a)),
                    Err(e) => {
                        self.problem("/gateway/authorize/plugin", e.to_string());
                        None
                    }
                }
            }
        }
    }

    /// API keys and JWT, as configured: at least one way to authenticate.
    fn authenticator(&mut self) -> Option<SharedAuthenticator> {
        let mut keys = ApiKeys::new();
        for k in &self.cfg.gateway.api_keys {
            let attributes = if k.actor.attributes.is_null() {
                serde_json::json!({})
            } else {
                k.actor.attributes.clone()
            };
            let mut entry = ApiKeyEntry::new(
                Actor {
                    id: k.actor.id.clone(),
                    kind: k.actor.kind,
                    attributes,
                },
                k.namespace.clone(),
                k.roles.clone(),
                k.surfaces.clone(),
                k.context.clone(),
            );
            entry.requester_door = k.opens_requester_door();
            keys.insert_hashed(k.sha256.clone(), entry);
        }
        for k in &self.cfg.gateway.operator_keys {
            let mut entry = ApiKeyEntry::new(
                Actor {
                    id: k.actor.id.clone(),
                    kind: k.actor.kind,
                    attributes: serde_json::json!({}),
                },
                capgate_gateway::auth::OPERATOR_NAMESPACE,
                vec![capgate_gateway::admin::OPERATOR_ROLE.to_owned()],
                Vec::new(),
                serde_json::Value::Null,
            );
            entry.operator = true;
            entry.requester_door = false;
            keys.insert_hashed(k.sha256.clone(), entry);
        }
        let jwt = match &self.cfg.gateway.jwt {
            None => None,
            Some(j) => Some(self.jwt(j)?),
        };
        if keys.is_empty() && jwt.is_none() {
            self.problem(
                "/gateway",
                "no way to authenticate: add [[gateway.apiKeys]] (`printf '%s' KEY | capgate keys hash` prints the hash) or [gateway.jwt]",
            );
            return None;
        }
        Some(Arc::new(BuiltinAuthenticator {
            api_keys: keys,
            jwt,
        }))
    }

    fn jwt(&mut self, j: &JwtSection) -> Option<JwtAuthenticator> {
        let key = match (&j.hs256_secret_env, &j.rs256_public_key, &j.jwks) {
            (Some(var), None, None) => {
                let at = "/gateway/jwt/hs256SecretEnv";
                let Ok(secret) = std::env::var(var) else {
                    self.problem(at, format!("the environment variable {var} is not set"));
                    return None;
                };
                if secret.len() < 32 {
                    self.problem(at, format!("{var} must hold at least 32 bytes"));
                    return None;
                }
                match JwtKey::hs256(secret.as_bytes()) {
                    Ok(k) => k,
                    Err(e) => {
                        self.problem(at, format!("{var}: {e}"));
                        return None;
                    }
                }
            }
            (None, Some(pem), None) => {
                let at = "/gateway/jwt/rs256PublicKey";
                let path = self.cfg.relative(pem);
                let key = std::fs::read(&path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))
                    .and_then(|bytes| {
                        JwtKey::rs256_pem(&bytes).map_err(|e| {
                            format!(
                                "{}: {e} (expected an RSA public key, `-----BEGIN PUBLIC KEY-----`)",
                                path.display()
                            )
                        })
                    });
                match key {
                    Ok(k) => k,
                    Err(e) => {
                        self.problem(at, e);
                        return None;
                    }
                }
            }
            (None, None, Some(jwks)) => {
                let at = "/gateway/jwt/jwks";
                let path = self.cfg.relative(jwks);
                let key = std::fs::read(&path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))
                    .and_then(|bytes| {
                        JwtKey::jwks(&bytes).map_err(|e| format!("{}: {e}", path.display()))
                    });
                match key {
                    Ok(k) => k,
                    Err(e) => {
                        self.problem(at, e);
                        return None;
                    }
                }
            }
            _ => {
                self.problem(
                    "/gateway/jwt",
                    "set exactly one of hs256SecretEnv, rs256PublicKey or jwks",
                );
                return None;
            }
        };
        Some(JwtAuthenticator::new(JwtConfig {
            key,
            issuer: j.issuer.clone(),
            audience: j.audience.clone(),
            actor_id_claim: "sub".into(),
            actor_kind_claim: None,
            namespace_claim: j.namespace_claim.clone().unwrap_or_else(|| "org".into()),
            attributes_claim: "attributes".into(),
            roles_claim: "roles".into(),
            surfaces_claim: j
                .surfaces_claim
                .clone()
                .unwrap_or_else(|| "surfaces".into()),
            requester_door_claim: j
                .requester_door_claim
                .clone()
                .unwrap_or_else(|| "requesterDoor".into()),
        }))
    }

    /// Every capability a gateway route serves must be able to finish (or time out) inside
    /// the gateway's work budget, policy batches included (`policies`: the bound policy
    /// bindings, for their phases). Within it, a hung procedure is ended by the runtime's
    /// own timer (TIMEOUT in the audit trail, the envelope `cancelled` with effect unknown);
    /// past it the gateway cancels it first (CANCELLED). Over HTTP both answer
    /// `outcome-unknown` and leave the receipt pending: the effect may have happened.
    fn budgets(&mut self, policies: &BTreeMap<String, Arc<dyn Policy>>) {
        let g = &self.cfg.gateway;
        let budget = g
            .request_timeout_ms
            .saturating_sub(g.audit_drain_timeout_ms);
        let defaults = Defaults {
            timeout_ms: self.cfg.runtime.timeout_ms,
            policy_timeout_ms: self.cfg.runtime.policy_timeout_ms,
            ..Defaults::default()
        };
        let surfaces: Vec<Surface> = g.routes.iter().map(|r| r.surface).collect();
        for (i, c) in self.cfg.capabilities.iter().enumerate() {
            let served: Vec<&str> = surfaces
                .iter()
                .filter(|s| c.expose.allows(**s))
                .map(|s| s.as_str())
                .collect();
            if served.is_empty() {
                continue;
            }
            // Runtime policies, then the capability's own: a batch runs when any of them
            // (shadow ones too) takes part in its phase.
            let bound: Vec<&Arc<dyn Policy>> = self
                .cfg
                .runtime
                .policies
                .iter()
                .chain(&c.policies)
                .filter_map(|name| policies.get(name))
                .collect();
            let batches = [Phase::Invocation, Phase::Execution]
                .into_iter()
                .filter(|phase| bound.iter().any(|p| p.phases().contains(phase)))
                .count();
            let batches = u32::try_from(batches).unwrap_or(2);
            let w = worst_case_ms(&meta_of(c), &defaults, batches);
            if w.total <= budget {
                continue;
            }
            let at = format!("/capabilities/{i}");
            let (pointer, what) = if w.attempts > 1 {
                (format!("{at}/retry"), "timeoutMs or retry.maxAttempts")
            } else if c.timeout_ms.is_some() {
                (format!("{at}/timeoutMs"), "timeoutMs")
            } else if w.policy_batches > 0 && !c.policies.is_empty() {
                (
                    format!("{at}/policies"),
                    "its timeoutMs (it uses runtime.timeoutMs) or runtime.policyTimeoutMs",
                )
            } else {
                (
                    format!("{at}/id"),
                    "its timeoutMs (it uses runtime.timeoutMs)",
                )
            };
            let mut breakdown = if w.attempts > 1 {
                format!(
                    "{} attempts × {} ms + {} ms backoff",
                    w.attempts, w.timeout, w.backoff
                )
            } else {
                format!("its {} ms timeout", w.timeout)
            };
            if w.policy_batches > 0 {
                breakdown = format!(
                    "{} policy batch{} × {} ms (runtime.policyTimeoutMs) + {breakdown}",
                    w.policy_batches,
                    if w.policy_batches > 1 { "es" } else { "" },
                    w.policy_timeout
                );
            }
            self.problem(
                &pointer,
                format!(
                    "`{}` may run for {} ms ({breakdown}), longer than the {budget} ms the gateway gives a call \
                     (gateway.requestTimeoutMs {} − auditDrainTimeoutMs {}) on {}: a hung call would outlast it, \
                     so the gateway would stop waiting and cancel it (audited as CANCELLED) before the runtime's \
                     own timeout could end it (TIMEOUT); over HTTP it answers outcome-unknown either way, as its \
                     effect is unknown. Lower {what}, or raise gateway.requestTimeoutMs",
                    c.id,
                    w.total,
                    g.request_timeout_ms,
                    g.audit_drain_timeout_ms,
                    served.join(", ")
                ),
            );
        }
    }

    /// Load every plugin (pinned by digest, through the plugin directory, compiled code
    /// cached), exactly as `serve` does.
    fn plugins(&mut self) -> BTreeMap<String, Arc<Plugin>> {
        let mut out = BTreeMap::new();
        if self.cfg.plugins.is_empty() {
            return out;
        }
        // The refill mark against the reserve it refills, the library's size when none is
        // written.
        for (name, p) in &self.cfg.plugins {
            if let Some(at) = p.reserve_refill_at {
                let size = p.reserve.unwrap_or(ReserveOptions::default().size);
                if at >= size {
                    self.problem(
                        &format!("/plugins/{}/reserveRefillAt", seg(name)),
                        format!("must be below `reserve` ({size}): the reserve refills when it falls to this many"),
                    );
                }
            }
        }
        let host = match WasmHost::shared() {
            Ok(h) => h,
            Err(e) => {
                self.problem("/plugins", e.to_string());
                return out;
            }
        };
        // Created (0700) and checked by `with_cache` below: a cache another user, or the
        // group, could write is refused.
        let cache = self.cfg.relative(&self.cfg.runtime.compile_cache);
        let dir = match PluginDir::open(self.cfg.plugin_dir()) {
            Ok(d) => d,
            Err(e) => {
                self.problem(
                    "/runtime/pluginDir",
                    format!(
                        "cannot open the plugin directory {}: {e}",
                        self.cfg.plugin_dir().display()
                    ),
                );
                return out;
            }
        };
        let dir = match dir.with_cache(&cache) {
            Ok(d) => d,
            Err(e) => {
                self.problem(
                    "/runtime/compileCache",
                    format!("cannot use the compile cache {}: {e}", cache.display()),
                );
                return out;
            }
        };
        let oci = self.oci_settings(&cache);
        for (name, p) in &self.cfg.plugins {
            let at = format!("/plugins/{}", seg(name));
            if capgate_oci::is_oci(&p.path) {
                if let Some(settings) = &oci
                    && let Some(plugin) = self.oci_plugin(&host, settings, &cache, name, p)
                {
                    out.insert(name.clone(), plugin);
                }
                continue;
            }
            if oci.as_ref().is_some_and(|o| o.require) {
                self.problem(
                    &format!("{at}/path"),
                    "runtime.oci.requireSignature admits only plugins from an OCI registry signed by a key of runtime.oci.publicKeys, and this is a local file (push it with `capgate plugin push --sign-key`)",
                );
                continue;
            }
            match host.load(&dir, &p.path, p.sha256.as_deref().unwrap_or_default()) {
                Ok(plugin) => {
                    tracing::info!(
                        plugin = %name,
                        source = ?plugin.load_source(),
                        ms = plugin.load_time().as_millis() as u64,
                        "plugin loaded"
                    );
                    out.insert(name.clone(), plugin);
                }
                Err(e) => {
                    let field = match &e {
                        LoadError::DigestMismatch { .. } | LoadError::BadPin { .. } => "/sha256",
                        LoadError::Io { .. } | LoadError::Invalid { .. } => "/path",
                        _ => "",
                    };
                    let message = match &e {
                        LoadError::Io { source, .. } => format!(
                            "cannot read {}: {source}",
                            self.cfg.plugin_dir().join(&p.path).display()
                        ),
                        _ => e.to_string(),
                    };
                    self.problem(&format!("{at}{field}"), message);
                }
            }
        }
        out
    }

    /// The `[runtime.oci]` settings, resolved (public keys read); `None` after a problem.
    fn oci_settings(&mut self, compile_cache: &Path) -> Option<capgate_oci::Settings> {
        let o = &self.cfg.runtime.oci;
        let mut keys = Vec::new();
        let mut ok = true;
        for (i, k) in o.public_keys.iter().enumerate() {
            match capgate_oci::sign::PublicKey::load(&self.cfg.relative(k)) {
                Ok(key) => keys.push(key),
                Err(e) => {
                    self.problem(&format!("/runtime/oci/publicKeys/{i}"), e);
                    ok = false;
                }
            }
        }
        if o.require_signature && o.public_keys.is_empty() {
            self.problem(
                "/runtime/oci/requireSignature",
                "requires at least one key in runtime.oci.publicKeys",
            );
            ok = false;
        }
        ok.then(|| capgate_oci::Settings {
            cache: o
                .cache
                .as_ref()
                .map_or_else(|| compile_cache.join("oci"), |c| self.cfg.relative(c)),
            insecure: o.insecure_registries.clone(),
            keys,
            // With a key listed, every registry plugin needs a valid signature by one
            // (`oci::fetch`); `requireSignature` also refuses local files.
            require: o.require_signature,
        })
    }

    /// A plugin from an OCI registry (or the cache), verified and loaded.
    fn oci_plugin(
        &mut self,
        host: &WasmHost,
        settings: &capgate_oci::Settings,
        compile_cache: &Path,
        name: &str,
        p: &PluginSection,
    ) -> Option<Arc<Plugin>> {
        let at = format!("/plugins/{}", seg(name));
        // The reference was checked with the file (Config::load).
        let reference = capgate_oci::plugin_reference(&p.path).ok()?;
        let fetched = match capgate_oci::fetch(&reference, settings, p.sha256.as_deref()) {
            Ok(f) => f,
            Err(e) => {
                let field = if matches!(e, capgate_oci::OciError::Pin { .. }) {
                    "sha256"
                } else {
                    "path"
                };
                self.problem(
                    &format!("{at}/{field}"),
                    format!("plugin `{name}` ({}): {e}", p.path),
                );
                return None;
            }
        };
        let loaded = PluginDir::open(&fetched.dir)
            .and_then(|d| d.with_cache(compile_cache))
            .and_then(|d| host.load(&d, &fetched.file, &fetched.wasm_sha256));
        match loaded {
            Ok(plugin) => {
                tracing::info!(
                    plugin = %name,
                    reference = %p.path,
                    downloaded = fetched.downloaded,
                    signed_by = fetched.signed_by.as_deref().unwrap_or("-"),
                    source = ?plugin.load_source(),
                    ms = plugin.load_time().as_millis() as u64,
                    "plugin loaded from an OCI registry"
                );
                Some(plugin)
            }
            Err(e) => {
                self.problem(
                    &format!("{at}/path"),
                    format!("plugin `{name}` ({}): {e}", p.path),
                );
                None
            }
        }
    }

    /// Bind every declared policy or redactor to its plugin (also the ones no capability
    /// uses yet: a binding that cannot work is a mistake either way).
    fn bindings<T: Clone>(
        &mut self,
        section: &str,
        bindings: &BTreeMap<String, BindingSection>,
        plugins: &BTreeMap<String, Arc<Plugin>>,
        bind: impl Fn(&Arc<Plugin>, &BindingSection, &str) -> Result<T, LoadError>,
    ) -> BTreeMap<String, T> {
        let mut out = BTreeMap::new();
        for (name, b) in bindings {
            // A plugin that did not load has its own problem already.
            let Some(plugin) = plugins.get(&b.plugin) else {
                continue;
            };
            match bind(plugin, b, name) {
                Ok(t) => {
                    out.insert(name.clone(), t);
                }
                Err(e) => self.problem(&format!("/{section}/{}/plugin", seg(name)), e.to_string()),
            }
        }
        out
    }

    /// Every capability's procedure as a provider (so the provider runtime's watchdog and
    /// probes govern it), each identity registered once.
    fn providers(
        &mut self,
        plugins: &BTreeMap<String, Arc<Plugin>>,
    ) -> Option<(ProviderRuntime, Vec<ProviderIdentity>)> {
        let mut registry = ProviderRegistry::new();
        let mut ids = Vec::new();
        let mut owners: BTreeMap<ProviderIdentity, String> = BTreeMap::new();
        let mut complete = true;
        for (i, c) in self.cfg.capabilities.iter().enumerate() {
            let at = format!("/capabilities/{i}/procedure");
            let conf = ProviderConf {
                response_stall_timeout_ms: c.procedure.response_stall_timeout_ms,
                ..Default::default()
            };
            let provider: Arc<dyn Provider> = match (&c.procedure.plugin, &c.procedure.http) {
                (Some(name), None) => {
                    let Some(plugin) = plugins.get(name) else {
                        complete = false;
                        continue;
                    };
                    let section = self.cfg.plugins.get(name);
                    let info = CapabilityInfo {
                        id: c.id.clone(),
                        side_effect: c.side_effect,
                        risk: c.risk,
                        tags: c.tags.clone(),
                    };
                    let binding = Binding::new(c.id.clone())
                        .config(c.procedure.config.clone())
                        .limits(limits_of(section, Limits::procedure()))
                        .isolation(isolation_of(section));
                    match plugin.procedure(binding, info) {
                        Ok(p) => Arc::new(ProcedureProvider::new(
                            ProviderIdentity::new("wasm", c.id.clone()),
                            p,
                        )),
                        Err(e) => {
                            self.problem(&format!("{at}/plugin"), e.to_string());
                            complete = false;
                            continue;
                        }
                    }
                }
                (None, Some(http)) => {
                    // `caFile` is relative to the config file, like every other path in it.
                    let mut http = http.clone();
                    http.ca_file = http.ca_file.map(|p| self.cfg.relative(p));
                    match HttpUpstream::new(http) {
                        Ok(u) => Arc::new(u),
                        Err(e) => {
                            let field = match &e {
                                HttpUpstreamError::EmptyTarget => "/http/target".to_string(),
                                HttpUpstreamError::InvalidHeader(h) => {
                                    format!("/http/headers/{}", seg(h))
                                }
                                HttpUpstreamError::CaFileUnreadable { .. }
                                | HttpUpstreamError::CaFileInvalid { .. } => {
                                    "/http/caFile".to_string()
                                }
                                HttpUpstreamError::InvalidUrl { field, .. }
                                | HttpUpstreamError::UnsupportedScheme { field, .. }
                                | HttpUpstreamError::TlsUnavailable { field } => {
                                    format!("/http/{field}")
                                }
                                _ => "/http".to_string(),
                            };
                            self.problem(&format!("{at}{field}"), e.to_string());
                            complete = false;
                            continue;
                        }
                    }
                }
                // Reported by the reference checks of the file.
                _ => {
                    complete = false;
                    continue;
                }
            };
            let id = provider.identity().clone();
            if let Some(other) = owners.get(&id) {
                let pointer = if c.procedure.http.is_some() {
                    format!("{at}/http/target")
                } else {
                    format!("/capabilities/{i}/id")
                };
                self.problem(
                    &pointer,
                    format!(
                        "capability `{other}` already uses the procedure provider `{id}`; each capability needs its own (give this upstream another `target`)"
                    ),
                );
                complete = false;
                continue;
            }
            if let Err(e) = registry.register(provider, conf) {
                self.problem(&at, e.to_string());
                complete = false;
                continue;
            }
            owners.insert(id.clone(), c.id.clone());
            ids.push(id);
        }
        complete.then(|| (ProviderRuntime::new(registry), ids))
    }
}

impl Checked {
    /// The capability registry of the deployment.
    pub fn registry(&self) -> Result<Registry, RegistryError> {
        registry_of(&self.capabilities, &self.provider_runtime, None)
    }

    /// The governed runtime over these approvals and this audit.
    pub fn runtime(
        &self,
        approvals: Arc<dyn ApprovalCoordinator>,
        audit: AuditConfig,
    ) -> Result<Runtime, AssemblyError> {
        self.assemble(approvals, audit, None)
    }

    /// The runtime `capgate test` runs a scenario on: this deployment exactly (its plugins,
    /// policies, redactors, schemas, defaults, approval rules), with the scenario's clock,
    /// every policy seen through `hooks.observe`, and the procedures of `hooks.procedures`
    /// replaced by the scenario's stubs.
    pub fn test_runtime(
        &self,
        approvals: Arc<dyn ApprovalCoordinator>,
        audit: AuditConfig,
        hooks: &TestHooks,
    ) -> Result<Runtime, AssemblyError> {
        self.assemble(approvals, audit, Some(hooks))
    }

    fn assemble(
        &self,
        approvals: Arc<dyn ApprovalCoordinator>,
        audit: AuditConfig,
        hooks: Option<&TestHooks>,
    ) -> Result<Runtime, AssemblyError> {
        let cfg = &self.config;
        let defaults = Defaults {
            timeout_ms: cfg.runtime.timeout_ms,
            policy_timeout_ms: cfg.runtime.policy_timeout_ms,
            approval_expires_in_ms: cfg.runtime.approval_expires_in_ms,
            ..Defaults::default()
        };
        let registry = registry_of(&self.capabilities, &self.provider_runtime, hooks)?;
        let mut builder = Runtime::builder(registry)
            .approvals(approvals)
            .reject_self_approval(cfg.runtime.reject_self_approval)
            .self_confirmable_types(cfg.runtime.self_confirmable_types.clone());
        for (approval_type, t) in &cfg.approvals.types {
            builder = builder.approval_type_roles(approval_type.clone(), t.roles.clone());
        }
        builder = builder.audit(audit).defaults(defaults);
        for p in &self.runtime_policies {
            builder = builder.policy_arc(observed(p, hooks));
        }
        if let Some(h) = hooks {
            builder = builder.clock(h.clock.clone());
        }
        Ok(builder.build()?)
    }

    /// A runtime for what needs no store (the contract, the route checks): in-memory
    /// approvals, no audit, its startup warnings (which are about exactly that) silenced.
    pub fn scratch_runtime(&self) -> Result<Runtime, AssemblyError> {
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
            self.runtime(
                Arc::new(InMemoryApprovalCoordinator::new()),
                AuditConfig::default(),
            )
        })
    }

    /// The configured authorizer of every door (and of `mcp --stdio`).
    pub fn authorizer(&self) -> Arc<dyn Authorizer> {
        self.authorizer.clone()
    }

    /// The doorkeeper every door of the deployment shares: its authenticator, authorizer
    /// and rate limits, on the runtime's clock.
    pub fn doorkeeper(&self, runtime: &Runtime) -> Doorkeeper {
        let r = &self.config.gateway.rate_limit;
        let quotas = Quotas::new(
            Rate::new(r.principal_per_second, r.principal_burst),
            Rate::new(r.namespace_per_second, r.namespace_burst),
        );
        let g = &self.config.gateway;
        let unauthenticated = capgate_gateway::throttle::PerMinute::new(
            r.unauthenticated_per_minute,
            r.unauthenticated_burst,
        )
        .map(|rate| Arc::new(capgate_gateway::throttle::Throttle::new(rate)));
        Doorkeeper::new(self.authenticator.clone(), self.authorizer.clone())
            .quotas(Arc::new(quotas))
            .clock(Arc::new(RuntimeClock(runtime.clone())))
            .clients(capgate_gateway::throttle::ClientAddresses {
                trusted_proxies: g
                    .trusted_proxies
                    .iter()
                    .filter_map(|p| p.parse().ok())
                    .collect(),
            })
            .unauthenticated(unauthenticated)
    }

    /// The configuration of one gateway route.
    pub fn gateway_config(
        &self,
        surface: Surface,
        runtime: Runtime,
        journal: Arc<dyn capgate_core::journal::InvocationJournal>,
        doorkeeper: Doorkeeper,
    ) -> GatewayConfig {
        let g = &self.config.gateway;
        GatewayConfig {
            surface,
            revision: self.config.revision.clone(),
            runtime,
            journal,
            doorkeeper,
            request_timeout: Duration::from_millis(g.request_timeout_ms),
            audit_drain_timeout: Duration::from_millis(g.audit_drain_timeout_ms),
            max_body_bytes: g.max_body_bytes,
        }
    }

    /// The MCP server's options, from `[mcp]` (and `gateway.approvalConsoleUrl`).
    pub fn mcp_options(&self) -> capgate_gateway::mcp::McpOptions {
        capgate_gateway::mcp::McpOptions {
            approval_url: self.config.gateway.approval_console_url.clone(),
            resume_tool: self.config.mcp.resume_tool,
            allowed_hosts: self.config.mcp.allowed_hosts.clone(),
            ..Default::default()
        }
    }

    /// The service actor, namespace and context of `capgate mcp --stdio`, or the located
    /// problem of a file that has none.
    pub fn stdio_identity(&self) -> Result<(Actor, String, serde_json::Value), Refused> {
        let m = &self.config.mcp;
        match (&m.stdio_actor, &m.stdio_namespace) {
            (Some(a), Some(namespace)) => Ok((
                Actor {
                    id: a.id.clone(),
                    kind: a.kind,
                    attributes: if a.attributes.is_null() {
                        serde_json::json!({})
                    } else {
                        a.attributes.clone()
                    },
                },
                namespace.clone(),
                m.stdio_context.clone(),
            )),
            _ => Err(Refused {
                path: self.config.path.clone(),
                problems: vec![self.doc.problem(
                    "/mcp/stdioActor",
                    "`capgate mcp --stdio` runs as a configured service actor: add to [mcp] \
                     `stdioActor = { id = \"svc_agent\", kind = \"service\" }` and `stdioNamespace = \"org_1\"`",
                )],
            }),
        }
    }

    /// What building the runtime and each gateway route refuses, located.
    fn check_assembly(&self) -> Vec<Problem> {
        let doc = &self.doc;
        let runtime = match self.scratch_runtime() {
            Ok(r) => r,
            Err(AssemblyError::Registry(e)) => {
                return e
                    .problems
                    .iter()
                    .map(|p| registry_problem(&self.config, doc, p))
                    .collect();
            }
            Err(AssemblyError::Runtime(e)) => {
                return vec![doc.problem("/audit/strict", e.to_string())];
            }
        };
        let mut out = Vec::new();
        let keeper = self.doorkeeper(&runtime);
        for (i, r) in self.config.gateway.routes.iter().enumerate() {
            let config = self.gateway_config(
                r.surface,
                runtime.clone(),
                Arc::new(InMemoryInvocationJournal::new()),
                keeper.clone(),
            );
            if let Err(e) = capgate_gateway::gateway::capability_router(config) {
                out.push(match &e {
                    GatewayConfigError::Surface(_) => {
                        doc.problem(&format!("/gateway/routes/{i}/surface"), e.to_string())
                    }
                    GatewayConfigError::EmptyRevision => doc.problem(
                        "/revision",
                        "the gateway needs a non-empty `revision` (it is part of every contract digest), e.g. revision = \"2026-11-01\"",
                    ),
                    GatewayConfigError::ZeroRequestTimeout => {
                        doc.problem("/gateway/requestTimeoutMs", e.to_string())
                    }
                    GatewayConfigError::DrainNotBelowRequestTimeout { .. } => {
                        doc.problem("/gateway/auditDrainTimeoutMs", e.to_string())
                    }
                    GatewayConfigError::ZeroBodyLimit => {
                        doc.problem("/gateway/maxBodyBytes", e.to_string())
                    }
                    GatewayConfigError::Contract(c) => {
                        doc.problem(
                        &capability_pointer(&self.config, &c.capability, false),
                        e.to_string(),
                    )
                    }
                });
            }
        }
        out
    }
}

/// Wraps a policy in an observer (`capgate test`'s record of what each policy decided).
pub type PolicyObserver = Box<dyn Fn(Arc<dyn Policy>) -> Arc<dyn Policy> + Send + Sync>;

/// What `capgate test` changes in a deployment for one scenario, and nothing else: the
/// clock the approvals expire by, an observer around every policy (the stances it reports),
/// and stubs for the procedures the scenario replaces.
pub struct TestHooks {
    /// The scenario's clock.
    pub clock: Arc<dyn capgate_core::clock::Clock>,
    /// Wraps every policy (capability-level and runtime-level) in an observer.
    pub observe: PolicyObserver,
    /// Capability id → the procedure that replaces its configured one.
    pub procedures: BTreeMap<String, Arc<dyn capgate_core::procedure::Procedure>>,
    /// The procedure of every capability `procedures` does not replace; `None`: the
    /// configured one runs for real (`capgate test --live`).
    pub unstubbed: Option<Arc<dyn capgate_core::procedure::Procedure>>,
}

fn observed(p: &Arc<dyn Policy>, hooks: Option<&TestHooks>) -> Arc<dyn Policy> {
    match hooks {
        Some(h) => (h.observe)(p.clone()),
        None => p.clone(),
    }
}

/// The registry of these capabilities, each procedure through the provider runtime (or, for
/// `capgate test`, as `hooks` say).
fn registry_of(
    capabilities: &[CapabilityParts],
    provider_runtime: &ProviderRuntime,
    hooks: Option<&TestHooks>,
) -> Result<Registry, RegistryError> {
    let mut registry = Registry::builder();
    for c in capabilities {
        let stub = hooks.and_then(|h| h.procedures.get(&c.id).or(h.unstubbed.as_ref()));
        let def = CapabilityDef::new(c.id.clone(), c.meta.clone());
        let mut def = match stub {
            Some(p) => def.procedure_arc(p.clone()),
            None => def.procedure(ProviderProcedure::new(
                provider_runtime.clone(),
                c.provider.clone(),
            )),
        };
        if let Some(s) = &c.input_schema {
            def = def.input_schema(s.clone());
        }
        if let Some(s) = &c.output_schema {
            def = def.output_schema(s.clone());
        }
        for p in &c.policies {
            def = def.policy_arc(observed(p, hooks));
        }
        for r in &c.redactors {
            def = def.redactor_arc(r.clone());
        }
        registry.push(def);
    }
    registry.build()
}

/// `/capabilities/N` of a capability id (the second declaration for a duplicate).
fn capability_pointer(cfg: &Config, id: &str, second: bool) -> String {
    let mut hits = cfg
        .capabilities
        .iter()
        .enumerate()
        .filter(|(_, c)| c.id == id)
        .map(|(i, _)| i);
    let first = hits.next();
    let index = if second { hits.next().or(first) } else { first };
    index.map_or_else(
        || "/capabilities".to_string(),
        |i| format!("/capabilities/{i}"),
    )
}

/// Why the runtime of a checked configuration could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum AssemblyError {
    /// The capability registry refused the capabilities.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The runtime builder refused the configuration (strict audit without a sink).
    #[error(transparent)]
    Runtime(#[from] capgate_core::runtime::RuntimeBuildError),
}

/// A registry problem at its place: `meta.retry.backoffMs` → `retry/backoffMs`.
fn registry_problem(cfg: &Config, doc: &Located, p: &RegistryProblem) -> Problem {
    let duplicate = p.field == "id" && p.message.contains("declared twice");
    let at = capability_pointer(cfg, &p.capability, duplicate);
    let field = p.field.strip_prefix("meta.").unwrap_or(&p.field);
    let pointer = format!("{at}/{}", field.replace('.', "/"));
    doc.problem(&pointer, p.message.clone())
}

/// The runtime's clock, for credential expiry at the doors.
struct RuntimeClock(Runtime);

impl capgate_core::clock::Clock for RuntimeClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.0.now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capgate_core::meta::{RetryConfig, Risk, SideEffect};

    #[test]
    fn the_worst_case_counts_every_attempt_and_the_doubling_backoff() {
        let mut m = CapabilityMeta::new("d", SideEffect::Read, Risk::Low);
        m.timeout_ms = Some(1_000);
        m.retry = Some(RetryConfig {
            max_attempts: 3,
            backoff_ms: Some(100),
            retry_on: None,
        });
        let w = worst_case_ms(&m, &Defaults::default(), 0);
        assert_eq!(
            (w.attempts, w.timeout, w.backoff, w.total),
            (4, 1_000, 700, 4_700)
        );
    }

    #[test]
    fn the_worst_case_adds_one_policy_deadline_per_batch() {
        let mut m = CapabilityMeta::new("d", SideEffect::Read, Risk::Low);
        m.timeout_ms = Some(1_000);
        let defaults = Defaults {
            policy_timeout_ms: 250,
            ..Defaults::default()
        };
        let totals: Vec<u64> = (0..=2)
            .map(|batches| worst_case_ms(&m, &defaults, batches).total)
            .collect();
        assert_eq!(totals, [1_000, 1_250, 1_500]);
        let w = worst_case_ms(&m, &defaults, 2);
        assert_eq!((w.policy_batches, w.policy_timeout), (2, 250));
    }

    #[test]
    fn a_write_that_may_not_retry_counts_one_attempt() {
        let mut m = CapabilityMeta::new("d", SideEffect::Write, Risk::Low);
        m.retry = Some(RetryConfig {
            max_attempts: 3,
            backoff_ms: None,
            retry_on: None,
        });
        let w = worst_case_ms(&m, &Defaults::default(), 0);
        assert_eq!((w.attempts, w.total), (1, 30_000));
    }
}
