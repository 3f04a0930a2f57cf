//! From a checked [`Config`] to a running deployment: the store, every plugin loaded and
//! pinned, the bindings, the capability registry and the core runtime. Everything that can
//! fail fails here, before a listener opens.

use crate::config::{BindingSection, CapabilitySection, Config, PluginSection};
use anyhow::{Context, anyhow, bail};
use capgate_core::approval::ApprovalCoordinator;
use capgate_core::audit::{AuditConfig, AuditSink, JsonLinesSink};
use capgate_core::authz::Authorizer;
use capgate_core::journal::InvocationJournal;
use capgate_core::meta::CapabilityMeta;
use capgate_core::policy::{CapabilityInfo, Policy};
use capgate_core::redact::Redactor;
use capgate_core::registry::{CapabilityDef, Registry};
use capgate_core::runtime::{Defaults, Runtime};
use capgate_provider::{
    HttpUpstream, ProcedureProvider, Provider, ProviderConf, ProviderIdentity, ProviderProcedure,
    ProviderRegistry, runtime::ProviderRuntime,
};
use capgate_store::{AuditSinkOptions, SqlAuditSink, Store};
use capgate_wasm::{Binding, Isolation, Limits, Plugin, PluginDir, WasmHost};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What `serve` and `mcp` run: one runtime over one store.
pub struct Deployment {
    /// The governed runtime.
    pub runtime: Runtime,
    /// The store (approvals, audit, journal).
    pub store: Store,
    /// The invocation journal of the gateway.
    pub journal: Arc<dyn InvocationJournal>,
    /// The store's audit sink, for its loss counters.
    pub audit: Arc<SqlAuditSink>,
    /// The gateway's authorizer plugin, when `gateway.authorize = { plugin = … }`.
    pub authorizer_plugin: Option<Arc<dyn Authorizer>>,
}

/// The limits of a plugin's bindings, from its `[plugins.NAME]` section.
fn limits_of(p: &PluginSection, base: Limits) -> Limits {
    let mut l = base;
    if let Some(f) = p.fuel {
        l = l.with_fuel(if f == 0 { None } else { Some(f) });
    }
    if let Some(mb) = p.memory_mb {
        l = l.with_memory_bytes((mb as usize).saturating_mul(1 << 20));
    }
    if let Some(ms) = p.timeout_ms {
        l = l.with_timeout(Duration::from_millis(ms));
    }
    l
}

fn isolation_of(p: &PluginSection) -> Isolation {
    match p.isolation.as_deref() {
        Some("pooled") => Isolation::pooled(),
        _ => Isolation::Fresh,
    }
}

/// Load every plugin (pinned by digest, through the plugin directory, compiled code cached).
fn load_plugins(cfg: &Config) -> anyhow::Result<BTreeMap<String, Arc<Plugin>>> {
    if cfg.plugins.is_empty() {
        return Ok(BTreeMap::new());
    }
    let host = WasmHost::shared().context("could not start the Wasm engine")?;
    let cache = cfg.relative(&cfg.runtime.compile_cache);
    std::fs::create_dir_all(&cache)
        .with_context(|| format!("cannot create the compile cache {}", cache.display()))?;
    let dir = PluginDir::open(cfg.plugin_dir())
        .and_then(|d| d.with_cache(&cache))
        .with_context(|| {
            format!(
                "cannot open the plugin directory {} (runtime.pluginDir)",
                cfg.plugin_dir().display()
            )
        })?;
    let mut out = BTreeMap::new();
    for (name, p) in &cfg.plugins {
        let plugin = host
            .load(&dir, &p.path, &p.sha256)
            .with_context(|| format!("plugin `{name}`"))?;
        tracing::info!(
            plugin = %name,
            source = ?plugin.load_source(),
            ms = plugin.load_time().as_millis() as u64,
            "plugin loaded"
        );
        out.insert(name.clone(), plugin);
    }
    Ok(out)
}

fn binding_of(name: &str, b: &BindingSection, p: &PluginSection, base: Limits) -> Binding {
    Binding::new(name)
        .config(b.config.clone())
        .limits(limits_of(p, base))
        .isolation(isolation_of(p))
}

fn policy(
    cfg: &Config,
    plugins: &BTreeMap<String, Arc<Plugin>>,
    name: &str,
) -> anyhow::Result<Arc<dyn Policy>> {
    let b = cfg
        .policies
        .get(name)
        .ok_or_else(|| anyhow!("no policy binding `{name}`"))?;
    let (plugin, section) = plugin_of(cfg, plugins, &b.plugin)?;
    let mut p = plugin
        .policy(binding_of(name, b, section, Limits::default()))
        .with_context(|| format!("policy `{name}`"))?;
    if let Some(phases) = &b.phases {
        p = p.with_phases(phases.iter().copied());
    }
    Ok(Arc::new(p))
}

fn redactor(
    cfg: &Config,
    plugins: &BTreeMap<String, Arc<Plugin>>,
    name: &str,
) -> anyhow::Result<Arc<dyn Redactor>> {
    let b = cfg
        .redactors
        .get(name)
        .ok_or_else(|| anyhow!("no redactor binding `{name}`"))?;
    let (plugin, section) = plugin_of(cfg, plugins, &b.plugin)?;
    Ok(Arc::new(
        plugin
            .redactor(binding_of(name, b, section, Limits::default()))
            .with_context(|| format!("redactor `{name}`"))?,
    ))
}

fn plugin_of<'a>(
    cfg: &'a Config,
    plugins: &'a BTreeMap<String, Arc<Plugin>>,
    name: &str,
) -> anyhow::Result<(&'a Arc<Plugin>, &'a PluginSection)> {
    match (plugins.get(name), cfg.plugins.get(name)) {
        (Some(p), Some(s)) => Ok((p, s)),
        _ => bail!("no plugin named `{name}`"),
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

/// Every capability's procedure becomes a provider (so the provider runtime's watchdog and
/// probes govern it); returns the registry of providers and each capability's identity.
fn providers(
    cfg: &Config,
    plugins: &BTreeMap<String, Arc<Plugin>>,
) -> anyhow::Result<(ProviderRuntime, Vec<ProviderIdentity>)> {
    let mut registry = ProviderRegistry::new();
    let mut ids = Vec::new();
    for c in &cfg.capabilities {
        let conf = ProviderConf {
            response_stall_timeout_ms: c.procedure.response_stall_timeout_ms,
            ..Default::default()
        };
        let provider: Arc<dyn Provider> = match (&c.procedure.plugin, &c.procedure.http) {
            (Some(name), None) => {
                let (plugin, section) = plugin_of(cfg, plugins, name)?;
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
                let procedure = plugin
                    .procedure(binding, info)
                    .with_context(|| format!("capability `{}`: procedure", c.id))?;
                Arc::new(ProcedureProvider::new(
                    ProviderIdentity::new("wasm", c.id.clone()),
                    procedure,
                ))
            }
            (None, Some(http)) => {
                // `caFile` is relative to the config file, like every other path in it.
                let mut http = http.clone();
                http.ca_file = http.ca_file.map(|p| cfg.relative(p));
                Arc::new(
                    HttpUpstream::new(http)
                        .with_context(|| format!("capability `{}`: procedure.http", c.id))?,
                )
            }
            _ => bail!(
                "capability `{}`: set exactly one of procedure.plugin or procedure.http",
                c.id
            ),
        };
        let id = provider.identity().clone();
        registry
            .register(provider, conf)
            .map_err(|e| anyhow!("capability `{}`: {e}", c.id))?;
        ids.push(id);
    }
    Ok((ProviderRuntime::new(registry), ids))
}

/// Build the deployment a checked configuration describes.
pub async fn build(cfg: &Config) -> anyhow::Result<Deployment> {
    let url = cfg.store_url();
    let store = Store::open(&url)
        .await
        .with_context(|| format!("could not open the store {}", crate::redact_url(&url)))?;
    let pending: Vec<String> = store
        .migration_status()
        .await
        .context("could not read the store's migration status")?
        .into_iter()
        .filter(|m| !m.applied)
        .map(|m| format!("{} {}", m.version, m.description))
        .collect();
    if !pending.is_empty() {
        bail!(
            "the store {} is missing migrations ({}); run `capgate migrate --store {}` once, then start again",
            crate::redact_url(&url),
            pending.join(", "),
            crate::redact_url(&url)
        );
    }
    let plugins = load_plugins(cfg)?;

    let (provider_runtime, provider_ids) = providers(cfg, &plugins)?;
    let mut registry = Registry::builder();
    for (c, provider_id) in cfg.capabilities.iter().zip(provider_ids) {
        let mut def = CapabilityDef::new(c.id.clone(), meta_of(c)).procedure(
            ProviderProcedure::new(provider_runtime.clone(), provider_id),
        );
        if let Some(s) = &c.input_schema {
            def = def.input_schema(
                cfg.resolve_schema(s)
                    .map_err(|e| anyhow!("{}: {e}", c.id))?,
            );
        }
        if let Some(s) = &c.output_schema {
            def = def.output_schema(
                cfg.resolve_schema(s)
                    .map_err(|e| anyhow!("{}: {e}", c.id))?,
            );
        }
        for name in &c.policies {
            def = def.policy_arc(policy(cfg, &plugins, name)?);
        }
        for name in &c.redactors {
            def = def.redactor_arc(redactor(cfg, &plugins, name)?);
        }
        registry.push(def);
    }
    let registry = registry.build().context("the capability registry")?;

    let audit = Arc::new(
        store
            .audit_sink(AuditSinkOptions::default())
            .context("the audit sink")?,
    );
    let mut sinks: Vec<Arc<dyn AuditSink>> = vec![audit.clone()];
    if let Some(jsonl) = &cfg.audit.jsonl {
        let path = cfg.relative(jsonl);
        sinks.push(Arc::new(JsonLinesSink::append_to(&path).with_context(
            || format!("cannot open the audit file {}", path.display()),
        )?));
    }
    let approvals: Arc<dyn ApprovalCoordinator> = Arc::new(store.approvals());
    let defaults = Defaults {
        timeout_ms: cfg.runtime.timeout_ms,
        policy_timeout_ms: cfg.runtime.policy_timeout_ms,
        approval_expires_in_ms: cfg.runtime.approval_expires_in_ms,
        ..Defaults::default()
    };
    let mut builder = Runtime::builder(registry)
        .approvals(approvals)
        .reject_self_approval(cfg.runtime.reject_self_approval)
        .self_confirmable_types(cfg.runtime.self_confirmable_types.clone());
    for (approval_type, t) in &cfg.approvals.types {
        builder = builder.approval_type_roles(approval_type.clone(), t.roles.clone());
    }
    builder = builder
        .audit(AuditConfig {
            sinks,
            strict: cfg.audit.strict,
            verbose: cfg.audit.verbose,
            on_sink_error: None,
        })
        .defaults(defaults);
    for name in &cfg.runtime.policies {
        builder = builder.policy_arc(policy(cfg, &plugins, name)?);
    }
    let runtime = builder.build().context("the runtime")?;

    let authorizer_plugin: Option<Arc<dyn Authorizer>> = match cfg
        .gateway
        .authorize
        .as_ref()
        .and_then(|v| v.get("plugin"))
        .and_then(|p| p.as_str())
    {
        Some(name) => {
            let (plugin, section) = plugin_of(cfg, &plugins, name)?;
            let config = cfg
                .gateway
                .authorize
                .as_ref()
                .and_then(|v| v.get("config"))
                .cloned()
                .unwrap_or(serde_json::Value::Null);
            Some(Arc::new(
                plugin
                    .authorizer(
                        Binding::new("gateway.authorize")
                            .config(config)
                            .limits(limits_of(section, Limits::default()))
                            .isolation(isolation_of(section)),
                    )
                    .context("gateway.authorize plugin")?,
            ))
        }
        None => None,
    };
    let journal: Arc<dyn InvocationJournal> = Arc::new(store.journal().with_replay_horizon(
        Duration::from_secs(cfg.gateway.replay_horizon_hours.saturating_mul(3600)),
    ));
    Ok(Deployment {
        runtime,
        store,
        journal,
        audit,
        authorizer_plugin,
    })
}
