//! From a [`Checked`] deployment to what runs: the registry, the runtime, the doors'
//! settings, and the assembly checks that need them built (each gateway route over a
//! scratch runtime).
use super::*;

pub(super) fn meta_of(c: &CapabilitySection) -> CapabilityMeta {
    let mut m = CapabilityMeta::new(c.description.clone(), c.side_effect, c.risk);
    m.expose = c.expose;
    m.tags = c.tags.clone();
    m.timeout_ms = c.timeout_ms;
    m.retry = c.retry.clone();
    m.idempotent = c.idempotent;
    m.approval = c.approval.clone();
    m.adapters = c.adapters.clone();
    m.discovery = c.discovery;
    m.task_after_ms = c.task_after_ms;
    m
}

/// A runtime builder over `registry` with the rules of `cfg` every runtime of it shares:
/// its approvals and audit, who may decide what (SI-4, self-confirmable types, the types'
/// roles) and its defaults. The one place those rules are set, for [`Checked`] and for the
/// operator commands' [`StoreOnly`] alike.
pub(super) fn runtime_builder(
    cfg: &Config,
    registry: Registry,
    approvals: Arc<dyn ApprovalCoordinator>,
    audit: AuditConfig,
) -> capgate_core::runtime::RuntimeBuilder {
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
    builder.audit(audit).defaults(defaults)
}

impl Checked {
    /// Whether the deployment loads Wasm plugins of its own (`/readyz` then checks the
    /// Wasm host still bounds calls).
    pub fn loads_plugins(&self) -> bool {
        !self.config.plugins.is_empty()
    }

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

    pub(super) fn assemble(
        &self,
        approvals: Arc<dyn ApprovalCoordinator>,
        audit: AuditConfig,
        hooks: Option<&TestHooks>,
    ) -> Result<Runtime, AssemblyError> {
        let registry = registry_of(&self.capabilities, &self.provider_runtime, hooks)?;
        let mut builder = runtime_builder(&self.config, registry, approvals, audit);
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

    /// The authenticator every door shares (`capgate whoami` asks it directly).
    pub fn authenticator(&self) -> SharedAuthenticator {
        self.authenticator.clone()
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
                trusted_proxies: g.trusted_proxies.iter().map(|p| p.0).collect(),
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
    ) -> GatewayOptions {
        let g = &self.config.gateway;
        GatewayOptions {
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

    /// The MCP server's options, from `[mcp]` (and `gateway.approvalConsoleUrl`), its tasks
    /// kept in this process (`capgate_server::serve::mcp_options` keeps them in the
    /// deployment's store).
    pub fn mcp_options(&self) -> capgate_gateway::mcp::McpOptions {
        capgate_gateway::mcp::McpOptions {
            approval_url: self.config.gateway.approval_console_url.clone(),
            resume_tool: self.config.mcp.resume_tool,
            allowed_hosts: self.config.mcp.allowed_hosts.clone(),
            protected_resource: self.protected_resource.clone(),
            max_sessions_per_principal: self.config.mcp.max_sessions_per_principal.map_or(
                capgate_gateway::mcp::DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
                |n| usize::try_from(n).unwrap_or(usize::MAX),
            ),
            tasks: self.mcp_tasks(std::sync::Arc::new(
                capgate_gateway::mcp::InMemoryMcpTaskStore::new(),
            )),
            ..Default::default()
        }
    }

    /// `[mcp]`'s tasks over `store` (`None` when `tasks = false`): the configured poll
    /// interval and bound, kept as long as the journal's replay horizon past each
    /// approval's expiry.
    pub fn mcp_tasks(
        &self,
        store: std::sync::Arc<dyn capgate_gateway::mcp::McpTaskStore>,
    ) -> Option<capgate_gateway::mcp::McpTasks> {
        let m = &self.config.mcp;
        if m.tasks == Some(false) {
            return None;
        }
        let mut tasks = capgate_gateway::mcp::McpTasks::new(store);
        if let Some(ms) = m.task_poll_interval_ms {
            tasks.poll_interval = Duration::from_millis(ms);
        }
        if let Some(n) = m.max_tasks_per_principal {
            tasks.max_per_principal = n;
        }
        tasks.retention = self.settings.journal.replay_horizon();
        Some(tasks)
    }

    /// The service actor, namespace and context of `capgate mcp --stdio`, or the located
    /// problem of a file that has none.
    pub fn stdio_identity(&self) -> Result<(Actor, String, serde_json::Value), Refused> {
        let m = &self.config.mcp;
        match (&m.stdio_actor, &m.stdio_namespace) {
            (Some(a), Some(namespace)) => Ok((
                a.to_actor(),
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
    pub(super) fn check_assembly(&self) -> Vec<Problem> {
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
            if let Err(e) = capgate_gateway::routes::capability_router(config) {
                out.push(match &e {
                    GatewayOptionsError::Surface(_) => {
                        doc.problem(&format!("/gateway/routes/{i}/surface"), e.to_string())
                    }
                    GatewayOptionsError::EmptyRevision => doc.problem(
                        "/revision",
                        "the gateway needs a non-empty `revision` (it is part of every contract digest), e.g. revision = \"2026-11-01\"",
                    ),
                    GatewayOptionsError::ZeroRequestTimeout => {
                        doc.problem("/gateway/requestTimeoutMs", e.to_string())
                    }
                    GatewayOptionsError::DrainNotBelowRequestTimeout { .. } => {
                        doc.problem("/gateway/auditDrainTimeoutMs", e.to_string())
                    }
                    GatewayOptionsError::ZeroBodyLimit => {
                        doc.problem("/gateway/maxBodyBytes", e.to_string())
                    }
                    GatewayOptionsError::Contract(c) => {
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

pub(super) fn observed(p: &Arc<dyn Policy>, hooks: Option<&TestHooks>) -> Arc<dyn Policy> {
    match hooks {
        Some(h) => (h.observe)(p.clone()),
        None => p.clone(),
    }
}

/// The registry of these capabilities, each procedure through the provider runtime (or, for
/// `capgate test`, as `hooks` say).
pub(super) fn registry_of(
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
pub(super) fn capability_pointer(cfg: &Config, id: &str, second: bool) -> String {
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
pub(super) fn registry_problem(cfg: &Config, doc: &Located, p: &RegistryProblem) -> Problem {
    let duplicate = p.kind == capgate_core::registry::RegistryProblemKind::DuplicateId;
    let at = capability_pointer(cfg, &p.capability, duplicate);
    let field = p.field.strip_prefix("meta.").unwrap_or(&p.field);
    let pointer = format!("{at}/{}", field.replace('.', "/"));
    doc.problem(&pointer, p.message.clone())
}

/// The runtime's clock, for credential expiry at the doors.
pub(super) struct RuntimeClock(Runtime);

impl capgate_core::clock::Clock for RuntimeClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.0.now()
    }
}
