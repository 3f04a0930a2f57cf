//! Plugins: each one loaded from its directory or registry, pinned by digest, and each
//! binding bound to the interface it needs with its limits, isolation and reserve.
use super::*;

pub(super) fn plugins_section<'a>(cfg: &'a Config, name: &str) -> Option<&'a PluginSection> {
    cfg.plugins.get(name)
}

/// The limits of a plugin's bindings, from its `[plugins.NAME]` section.
pub(super) fn limits_of(p: Option<&PluginSection>, base: Limits) -> Limits {
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

pub(super) fn isolation_of(p: Option<&PluginSection>) -> Isolation {
    match p.and_then(|p| p.isolation).unwrap_or_default() {
        IsolationMode::Pooled => Isolation::pooled(),
        IsolationMode::Fresh => Isolation::Fresh,
    }
}

/// The config a binding's plugin is given: as written, except that a shipped `cedar`
/// policy's `policiesFile` is read (relative to the configuration) and inlined once its
/// SHA-256 matches. A file that cannot be, stays unresolved: the component refuses it on
/// every call, and `check` (which every load runs first) has already refused the file.
pub(super) fn shipped_config(cfg: &Config, b: &BindingSection) -> serde_json::Value {
    if b.plugin != "cedar" || cfg.plugins.contains_key(&b.plugin) {
        return b.config.clone();
    }
    capgate_builtin::cedar::inline(&b.config, |path| std::fs::read(cfg.relative(path)))
        .map_or_else(|_| b.config.clone(), |i| i.config)
}

pub(super) fn binding_of(
    cfg: &Config,
    name: &str,
    b: &BindingSection,
    p: Option<&PluginSection>,
) -> Binding {
    // A shipped plugin (no [plugins.NAME] of its own) runs pooled: it is capgate's own code
    // and keeps nothing between calls but its compiled configuration, so reusing its
    // instances within a namespace shares nothing a fresh one would not, and spares the
    // CEL parser's start-up on every call (docs/guides/policies-without-a-plugin.md).
    let isolation = match p {
        None if capgate_builtin::get(&b.plugin).is_some() => Isolation::pooled(),
        _ => isolation_of(p),
    };
    Binding::new(name)
        .config(shipped_config(cfg, b))
        .limits(limits_of(p, Limits::default()))
        .isolation(isolation)
        .reserve(reserve_of(p))
}

pub(super) fn reserve_of(p: Option<&PluginSection>) -> ReserveOptions {
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

impl Validation<'_> {
    /// Load every plugin (pinned by digest, through the plugin directory, compiled code
    /// cached), exactly as `serve` does.
    pub(super) fn plugins(&mut self) -> BTreeMap<String, Arc<Plugin>> {
        let mut out = BTreeMap::new();
        // The shipped plugins a binding names (`plugin = "cel"`; config refuses a
        // [plugins.NAME] section of the same name).
        let shipped: BTreeMap<&str, &'static capgate_builtin::Builtin> = self
            .cfg
            .policies
            .values()
            .chain(self.cfg.redactors.values())
            .filter_map(|b| capgate_builtin::get(&b.plugin))
            .map(|b| (b.name, b))
            .collect();
        if self.cfg.plugins.is_empty() && shipped.is_empty() {
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
        let cache = self.cfg.state_path(&self.cfg.runtime.compile_cache);
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
        for builtin in shipped.into_values() {
            match host.load_shipped(Some(&dir), builtin.name, builtin.wasm, builtin.sha256) {
                Ok(plugin) => {
                    tracing::info!(
                        plugin = builtin.name,
                        sha256 = builtin.sha256,
                        source = ?plugin.load_source(),
                        ms = plugin.load_time().as_millis() as u64,
                        "shipped plugin loaded"
                    );
                    out.insert(builtin.name.to_string(), plugin);
                }
                Err(e) => self.problem(
                    "/plugins",
                    format!("the shipped plugin `{}`: {e}", builtin.name),
                ),
            }
        }
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
    pub(super) fn oci_settings(&mut self, compile_cache: &Path) -> Option<capgate_oci::Settings> {
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
    pub(super) fn oci_plugin(
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
    pub(super) fn bindings<T: Clone>(
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
}

impl Validation<'_> {
    /// Every binding of a shipped plugin checked as it loads: a `cel` policy's rules
    /// compiled and typed against the input schema of each capability it is attached to
    /// (every capability for a `[runtime] policies` one), a `redact` redactor's pointers
    /// against their output schemas; each problem at its place in the file (a CEL problem
    /// at its character inside the expression).
    pub(super) fn shipped_bindings(&mut self, plugins: &BTreeMap<String, Arc<Plugin>>) {
        let cfg = self.cfg;
        let shipped = |b: &BindingSection| {
            capgate_builtin::get(&b.plugin).is_some() && !cfg.plugins.contains_key(&b.plugin)
        };
        if !cfg
            .policies
            .values()
            .chain(cfg.redactors.values())
            .any(shipped)
        {
            return;
        }
        // Each capability's schemas read once (a schema may be a file), not per binding.
        let resolve = |s: &Option<capgate_config::SchemaRef>| {
            s.as_ref().and_then(|s| cfg.resolve_schema(s).ok())
        };
        let schemas: Vec<(Option<serde_json::Value>, Option<serde_json::Value>)> = cfg
            .capabilities
            .iter()
            .map(|c| (resolve(&c.input_schema), resolve(&c.output_schema)))
            .collect();
        for (section, bindings) in [("policies", &cfg.policies), ("redactors", &cfg.redactors)] {
            let policy = section == "policies";
            for (name, b) in bindings.iter().filter(|(_, b)| shipped(b)) {
                let everywhere = policy && cfg.runtime.policies.contains(name);
                let attached: Vec<capgate_builtin::Attached<'_>> = cfg
                    .capabilities
                    .iter()
                    .zip(&schemas)
                    .filter(|(c, _)| {
                        everywhere
                            || if policy {
                                c.policies.contains(name)
                            } else {
                                c.redactors.contains(name)
                            }
                    })
                    .map(|(c, (input, output))| capgate_builtin::Attached {
                        id: &c.id,
                        schema: if policy { input } else { output }.as_ref(),
                    })
                    .collect();
                let base = format!("/{section}/{}/config", seg(name));
                let (config, file) = if b.plugin == "cedar" {
                    match capgate_builtin::cedar::inline(&b.config, |path| {
                        std::fs::read(cfg.relative(path))
                    }) {
                        Ok(i) => (i.config, i.file),
                        Err(e) => {
                            let at = match e {
                                capgate_builtin::cedar::FileError::Digest { .. } => "/sha256",
                                _ => "/policiesFile",
                            };
                            let problem = self.doc.problem(&format!("{base}{at}"), e.to_string());
                            self.problems.push(problem);
                            continue;
                        }
                    }
                } else {
                    (b.config.clone(), None)
                };
                let mut found = capgate_builtin::check(&b.plugin, &config, &attached);
                // A Cedar set whose shape is right is checked by the shipped component
                // itself: parsed, its annotations read, validated against the schema
                // generated from `attached` (the host does not link Cedar).
                if b.plugin == "cedar"
                    && found.is_empty()
                    && let Some(plugin) = plugins.get("cedar")
                {
                    let given = capgate_builtin::cedar::check_config(&config, &attached);
                    if let Err(e) = cedar_check(plugin, name, given) {
                        match capgate_builtin::cedar::problems(&e) {
                            Some(problems) => found = problems,
                            None => {
                                let problem = self.doc.problem(
                                    &base,
                                    format!("the Cedar policy cannot be checked: {e}"),
                                );
                                self.problems.push(problem);
                            }
                        }
                    }
                }
                let locate = |found: &capgate_builtin::Found| {
                    let pointer = format!("{base}{}", found.pointer);
                    match (&file, found.offset) {
                        // Policies read from a file: the place is in that file.
                        (Some((path, text)), at) if found.pointer == "/policies" => {
                            let (line, column) = line_column(text, at.unwrap_or(0));
                            self.doc.problem(
                                &format!("{base}/policiesFile"),
                                format!("{path}:{line}:{column}: {found}"),
                            )
                        }
                        (_, Some(at)) => {
                            self.doc.problem_in_string(&pointer, at, found.to_string())
                        }
                        (_, None) => self.doc.problem(&pointer, found.to_string()),
                    }
                };
                let problems: Vec<_> = found.iter().map(&locate).collect();
                // A hide rule that reads the input cannot decide in discovery: a warning
                // where the binding runs there (its `phases`, or by default when it hides).
                let mut warnings: Vec<_> = if policy
                    && found.is_empty()
                    && phases_of(cfg, b).contains(&Phase::Discovery)
                {
                    capgate_builtin::discovery_warnings(&b.plugin, &config)
                        .iter()
                        .map(&locate)
                        .collect()
                } else {
                    Vec::new()
                };
                // A reason that reads the input says nothing in the trail (SI-10: events
                // carry the policy's name): a warning where the policy governs something.
                if policy && found.is_empty() && !attached.is_empty() {
                    warnings.extend(
                        capgate_builtin::reason_warnings(&b.plugin, &config)
                            .iter()
                            .map(&locate),
                    );
                }
                self.problems.extend(problems);
                self.warnings.extend(warnings);
            }
        }
    }
}

/// Give the shipped Cedar component a binding's config with the generated schema
/// ([`capgate_builtin::cedar::check_config`]) on one call: it answers allow when the set
/// validates, else its problems as the error. Driven here, synchronously, as `capgate plugin
/// test` drives its cases.
fn cedar_check(plugin: &Arc<Plugin>, name: &str, config: serde_json::Value) -> Result<(), String> {
    use capgate_core::actor::ActorKind;
    use capgate_core::policy::{PolicyRequest, SharedJson};
    let policy = plugin
        .policy(
            Binding::new(name)
                .config(config)
                .isolation(Isolation::Fresh),
        )
        .map_err(|e| e.to_string())?;
    let capability = CapabilityInfo {
        id: "capgate.check".into(),
        side_effect: capgate_core::meta::SideEffect::Read,
        risk: capgate_core::meta::Risk::Low,
        tags: Vec::new(),
    };
    let actor = Actor {
        id: "capgate".into(),
        kind: ActorKind::Service,
        attributes: serde_json::Value::Null,
    };
    let shared = SharedJson::default();
    let request = PolicyRequest {
        phase: Phase::Discovery,
        capability: &capability,
        surface: Surface::Direct,
        namespace: "",
        actor: &actor,
        context: &serde_json::Value::Null,
        input: None,
        execution_id: "",
        approval: None,
        shared: &shared,
    };
    match futures::executor::block_on(policy.evaluate_raw(&request, None)) {
        Ok(_) => Ok(()),
        Err(capgate_wasm::CallError::Guest(message)) => Err(message),
        Err(e) => Err(e.to_string()),
    }
}

/// 1-based line and column of the character at `chars` in `text`.
fn line_column(text: &str, chars: usize) -> (usize, usize) {
    let before: String = text.chars().take(chars).collect();
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

impl Validation<'_> {
    /// Every binding of a plugin of the deployment's own checked against the JSON Schema the
    /// plugin declares for its `config` (its `capgate:config-schema` section): each mismatch
    /// a problem at its key (`/policies/refundLimit/config/maxAmont`), so a typo fails
    /// `check`, `serve` and reload instead of failing every call closed. A plugin that
    /// declares nothing keeps checking its config itself, call by call, and `check` warns
    /// that nothing checked it at load. The shipped plugins have their own checks
    /// ([`Validation::shipped_bindings`]).
    pub(super) fn plugin_configs(&mut self, plugins: &BTreeMap<String, Arc<Plugin>>) {
        let cfg = self.cfg;
        let mut bound: Vec<(String, &str, &serde_json::Value)> = Vec::new();
        for (section, bindings) in [("policies", &cfg.policies), ("redactors", &cfg.redactors)] {
            for (name, b) in bindings {
                bound.push((
                    format!("/{section}/{}/config", seg(name)),
                    &b.plugin,
                    &b.config,
                ));
            }
        }
        for (i, c) in cfg.capabilities.iter().enumerate() {
            if let capgate_config::Procedure::Plugin(name) = &c.procedure.kind {
                bound.push((
                    format!("/capabilities/{i}/procedure/config"),
                    name,
                    &c.procedure.config,
                ));
            }
        }
        if let Some(AuthorizeSetting::Plugin(a)) = &cfg.gateway.authorize {
            bound.push(("/gateway/authorize/config".into(), &a.plugin, &a.config));
        }
        // Each declared schema compiled once, however many bindings use it.
        let mut compiled: BTreeMap<&str, Option<capgate_core::schema::Schema>> = BTreeMap::new();
        for (at, name, config) in bound {
            // Shipped plugins, and plugins that did not load (their own problem), are not
            // this check's.
            let Some(plugin) = cfg.plugins.get(name).and(plugins.get(name)) else {
                continue;
            };
            let Some(declared) = plugin.config_schema() else {
                if !config.is_null() {
                    let warning = self.doc.problem(
                        &at,
                        format!(
                            "plugin `{name}` declares no schema for its config, so nothing checks it before a call (a config it refuses fails every call closed); declare one with the SDK (docs/guides/writing-plugins.md)"
                        ),
                    );
                    self.warnings.push(warning);
                }
                continue;
            };
            if !compiled.contains_key(name) {
                let schema = match capgate_core::schema::Schema::compile(declared.clone()) {
                    Ok(s) => Some(s),
                    Err(e) => {
                        self.problem(
                            &format!("/plugins/{}/path", seg(name)),
                            format!("plugin `{name}` declares a config schema that does not compile: {e}"),
                        );
                        None
                    }
                };
                compiled.insert(name, schema);
            }
            let Some(Some(schema)) = compiled.get(name) else {
                continue;
            };
            for issue in schema.explain(config) {
                self.problem(
                    &format!("{at}{}", issue.path),
                    format!(
                        "{} (the config schema plugin `{name}` declares)",
                        issue.message
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_configuration_knows_every_shipped_plugin_by_name() {
        let embedded: Vec<&str> = capgate_builtin::ALL.iter().map(|b| b.name).collect();
        assert_eq!(capgate_config::SHIPPED_PLUGINS, embedded.as_slice());
    }
}
