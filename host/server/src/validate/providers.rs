//! Procedures: every capability's provider (a Wasm procedure or an HTTP upstream) built,
//! one identity each.
use super::*;
use capgate_config::Procedure;
use capgate_provider::mcp::{McpToolProvider, McpUpstream, PinPolicy};

impl Validation<'_> {
    /// Every capability's procedure as a provider (so the provider runtime's watchdog and
    /// probes govern it), each identity registered once.
    pub(super) fn providers(
        &mut self,
        plugins: &BTreeMap<String, Arc<Plugin>>,
        upstreams: &BTreeMap<String, Arc<McpUpstream>>,
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
            let provider: Arc<dyn Provider> = match &c.procedure.kind {
                Procedure::Mcp(m) => {
                    // An unknown upstream is reported by the file's reference checks.
                    let Some(upstream) = upstreams.get(&m.upstream) else {
                        complete = false;
                        continue;
                    };
                    Arc::new(McpToolProvider::new(
                        c.id.clone(),
                        upstream.clone(),
                        m.tool.clone(),
                        m.tool_sha256.to_ascii_lowercase(),
                    ))
                }
                Procedure::Plugin(name) => {
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
                Procedure::Http(http) => {
                    match HttpUpstream::new(crate::resolve::http_upstream(self.cfg, http)) {
                        Ok(u) => Arc::new(u),
                        Err(e) => {
                            let field: String = std::iter::once("/http".to_string())
                                .chain(e.setting().into_iter().flatten().map(seg))
                                .collect::<Vec<_>>()
                                .join("/");
                            self.problem(&format!("{at}{field}"), e.to_string());
                            complete = false;
                            continue;
                        }
                    }
                }
            };
            let id = provider.identity().clone();
            if let Some(other) = owners.get(&id) {
                let pointer = if c.procedure.http().is_some() {
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

    /// Every `[upstreams.mcp.NAME]` as an upstream (not connected: that is `serve`'s).
    pub(super) fn mcp_upstreams(&mut self) -> BTreeMap<String, Arc<McpUpstream>> {
        let mut out = BTreeMap::new();
        for (name, config) in crate::resolve::mcp_upstreams(self.cfg) {
            match McpUpstream::new(config) {
                Ok(u) => {
                    out.insert(name, Arc::new(u));
                }
                Err(e) => {
                    self.problem(&format!("/upstreams/mcp/{}", seg(&name)), e.to_string());
                }
            }
        }
        out
    }
}

/// The pin policy of an MCP-backed capability (run before its own policies), if it is one.
pub(super) fn pin_policy(
    c: &CapabilitySection,
    upstreams: &BTreeMap<String, Arc<McpUpstream>>,
) -> Option<Arc<dyn Policy>> {
    let m = c.procedure.mcp()?;
    let upstream = upstreams.get(&m.upstream)?;
    Some(Arc::new(PinPolicy::new(
        upstream.clone(),
        m.tool.clone(),
        m.tool_sha256.to_ascii_lowercase(),
    )))
}
