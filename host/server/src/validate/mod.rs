//! The one validation path: `check`, `serve`, `mcp` and every command that takes `--config`
//! start with [`validate`], so `serve` refuses exactly what `check` refuses, with the same
//! located problems (`file:line:column: key: message`).
//!
//! Validation goes as far as anything can go without opening the store or a listener:
//!
//! 1. the file: syntax, types, references, value ranges ([`Config::read_with`]), and what
//!    only the crates that run it can tell (reserved paths, registry references, CA
//!    bundles, identity provider URLs: `rules.rs`);
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
use capgate_config::{
    AuthorizeSetting, BindingSection, CapabilitySection, Config, IsolationMode, JwtSection,
    PluginSection,
};
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
use capgate_gateway::routes::{GatewayOptions, GatewayOptionsError};
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

mod assembly;
mod budget;
mod identity;
mod operator;
mod plugins;
mod providers;
mod rules;

use assembly::*;
pub use assembly::{AssemblyError, TestHooks};
pub use budget::{WorstCase, worst_case_ms};
pub use operator::{StoreOnly, validate_store_only};
use plugins::*;

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

/// A deployment that passed every check, with its plugins loaded and bound, and every
/// setting `serve`, reload, export and the background jobs read resolved once (ripgrep's
/// `HiArgs`): nothing downstream of it reads the file model.
pub struct Checked {
    /// The file model: read here, by assembly, and nowhere downstream.
    config: Config,
    /// The located document, for command-specific problems (e.g. `mcp` without
    /// `[mcp] stdioActor`).
    pub doc: Located,
    provider_runtime: ProviderRuntime,
    /// `[upstreams.mcp.NAME]`, shared by the capabilities that call them; `serve` opens
    /// them and keeps their pins checked.
    pub mcp_upstreams: BTreeMap<String, Arc<capgate_provider::mcp::McpUpstream>>,
    capabilities: Vec<CapabilityParts>,
    runtime_policies: Vec<Arc<dyn Policy>>,
    authorizer: Arc<dyn Authorizer>,
    authenticator: SharedAuthenticator,
    /// The console's single sign-on (`[gateway.console.oidc]`).
    pub sign_on: Option<capgate_gateway::console::SignOn>,
    /// `/mcp` as an OAuth protected resource (`[mcp] resource`).
    pub protected_resource: Option<capgate_gateway::mcp::oauth::ProtectedResource>,
    /// What the file allows but `check` and `serve` warn about, located.
    pub warnings: Vec<Problem>,
    settings: Settings,
}

/// What [`Checked`] resolved of the file, beside what it built.
struct Settings {
    revision: String,
    path: PathBuf,
    journal: crate::resolve::JournalSettings,
    gateway: crate::resolve::GatewaySettings,
    metrics: Option<crate::resolve::MetricsSettings>,
    audit: crate::resolve::AuditSettings,
    store: crate::resolve::StoreSettings,
    exports: crate::resolve::ExportSettings,
    telemetry: crate::resolve::TelemetrySettings,
    escalation: Option<crate::resolve::Escalation>,
    api_keys: Vec<crate::resolve::KeyIdentity>,
    mcp_pins: Vec<crate::resolve::McpPin>,
}

impl Settings {
    fn of(config: &Config) -> Settings {
        use crate::resolve::*;
        Settings {
            revision: config.revision.clone(),
            path: config.path.clone(),
            journal: JournalSettings::of(config),
            gateway: GatewaySettings::of(config),
            metrics: MetricsSettings::of(config),
            audit: AuditSettings::of(config),
            store: StoreSettings::of(config),
            exports: ExportSettings::of(&Base::of(config), &config.audit.export),
            telemetry: TelemetrySettings::of(config),
            escalation: Escalation::of(config),
            api_keys: KeyIdentity::all(config),
            mcp_pins: McpPin::all(config),
        }
    }
}

impl Checked {
    /// The deployment's `revision`.
    pub fn revision(&self) -> &str {
        &self.settings.revision
    }

    /// The configuration file it was read from.
    pub fn path(&self) -> &Path {
        &self.settings.path
    }

    /// The invocation journal's settings.
    pub fn journal(&self) -> &crate::resolve::JournalSettings {
        &self.settings.journal
    }

    /// The gateway's doors and stop times.
    pub fn gateway(&self) -> &crate::resolve::GatewaySettings {
        &self.settings.gateway
    }

    /// `[telemetry.metrics]`, when on.
    pub fn metrics(&self) -> Option<&crate::resolve::MetricsSettings> {
        self.settings.metrics.as_ref()
    }

    /// `[audit]`.
    pub fn audit(&self) -> &crate::resolve::AuditSettings {
        &self.settings.audit
    }

    /// `[store]`.
    pub fn store(&self) -> &crate::resolve::StoreSettings {
        &self.settings.store
    }

    /// `[audit.export.NAME]`.
    pub fn exports(&self) -> &crate::resolve::ExportSettings {
        &self.settings.exports
    }

    /// `[telemetry.traces]` (resolved against the environment when traces start).
    pub fn telemetry(&self) -> &crate::resolve::TelemetrySettings {
        &self.settings.telemetry
    }

    /// `[approvals]`'s escalation, if any.
    pub fn escalation(&self) -> Option<&crate::resolve::Escalation> {
        self.settings.escalation.as_ref()
    }

    /// Who each API key authenticates as.
    pub fn api_keys(&self) -> &[crate::resolve::KeyIdentity] {
        &self.settings.api_keys
    }

    /// Every capability's pinned MCP tool, by upstream.
    pub fn mcp_pins(&self) -> &[crate::resolve::McpPin] {
        &self.settings.mcp_pins
    }

    /// The inventory a reviewer reads (`capgate inspect`).
    pub fn inventory(&self) -> crate::resolve::inventory::Inventory {
        crate::resolve::inventory::of(&self.config)
    }
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
    let (config, doc) = rules::load(path, capgate_config::Secrets::All).map_err(refused)?;
    let mut v = Validation {
        cfg: &config,
        doc: &doc,
        problems: Vec::new(),
        warnings: Vec::new(),
    };
    let identity = v.identity();
    let plugins = v.plugins();
    v.shipped_bindings(&plugins);
    v.plugin_configs(&plugins);
    let policies = v.bindings("policies", &config.policies, &plugins, |plugin, b, name| {
        let phases = phases_of(&config, b);
        // One policy per config the binding is bound with: a `cedar` set with several
        // require-approval forbids is bound once per forbid, so that each can ask for its
        // own approval type (capgate_builtin::cedar::slots); anything else once.
        let configs = if b.plugin == "cedar" && !config.plugins.contains_key(&b.plugin) {
            capgate_builtin::cedar::slots(&shipped_config(&config, b))
        } else {
            vec![shipped_config(&config, b)]
        };
        configs
            .into_iter()
            .map(|given| {
                let p = plugin
                    .policy(
                        binding_of(&config, name, b, plugins_section(&config, &b.plugin))
                            .config(given),
                    )?
                    .with_revision(&config.revision)
                    .with_phases(phases.iter().copied());
                Ok(match b.mode {
                    capgate_config::PolicyMode::Enforce => Arc::new(p) as Arc<dyn Policy>,
                    capgate_config::PolicyMode::Shadow => {
                        Arc::new(capgate_core::policy::Shadow::new(p))
                    }
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()
    });
    // Every slot of a binding runs in the same phases: the first stands for them all.
    v.budgets(
        &policies
            .iter()
            .filter_map(|(name, bound)| Some((name.clone(), bound.first()?.clone())))
            .collect(),
    );
    let redactors = v.bindings(
        "redactors",
        &config.redactors,
        &plugins,
        |plugin, b, name| {
            let r = plugin.redactor(binding_of(
                &config,
                name,
                b,
                plugins_section(&config, &b.plugin),
            ))?;
            Ok(Arc::new(r) as Arc<dyn Redactor>)
        },
    );
    let authorizer = v.authorizer(&plugins);
    // The capabilities, as far as their procedures could be built; the registry's own
    // checks (SI-11 retries, tool names, …) run whatever else is wrong.
    let upstreams = v.mcp_upstreams();
    let assembled = v
        .providers(&plugins, &upstreams)
        .map(|(provider_runtime, ids)| {
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
                    policies: providers::pin_policy(c, &upstreams)
                        .into_iter()
                        .chain(pick(&policies, &c.policies).into_iter().flatten())
                        .collect(),
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
    let (Some(identity), Some(authorizer), Some((provider_runtime, capabilities))) =
        (identity, authorizer, assembled)
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
    let runtime_policies = pick(&policies, &config.runtime.policies)
        .into_iter()
        .flatten()
        .collect();
    let mut warnings = config.warnings(&doc);
    warnings.append(&mut v.warnings);
    let checked = Checked {
        warnings,
        mcp_upstreams: upstreams,
        provider_runtime,
        capabilities,
        runtime_policies,
        authorizer,
        authenticator: identity.authenticator,
        sign_on: identity.sign_on,
        protected_resource: identity.protected_resource,
        settings: Settings::of(&config),
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

/// The phases a policy binding runs in: its `phases`; else, for a shipped `cel` or
/// `cedar` policy with a hide rule, discovery and invocation (what it hides is left out of
/// the listings too, not only refused when called: see [`capgate_builtin::hides`]); else
/// core's default, invocation only.
pub(crate) fn phases_of(cfg: &Config, b: &BindingSection) -> Vec<Phase> {
    match &b.phases {
        Some(phases) => phases.clone(),
        None if !cfg.plugins.contains_key(&b.plugin)
            && capgate_builtin::hides(&b.plugin, &shipped_config(cfg, b)) =>
        {
            vec![Phase::Discovery, Phase::Invocation]
        }
        None => capgate_core::policy::DEFAULT_PHASES.to_vec(),
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

/// The checks of step 2 (see the module docs), collecting located problems.
struct Validation<'a> {
    cfg: &'a Config,
    doc: &'a Located,
    problems: Vec<Problem>,
    /// What loads but `check` warns about (beside [`Config::warnings`]).
    warnings: Vec<Problem>,
}

impl Validation<'_> {
    fn problem(&mut self, pointer: &str, message: impl Into<String>) {
        let p = self.doc.problem(pointer, message);
        self.problems.push(p);
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
