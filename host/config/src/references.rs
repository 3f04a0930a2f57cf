//! The configuration's cross-references (names that must resolve, combinations that must
//! not be written together) and its warnings: checks over the whole file that no one
//! section's type can express.

use crate::located::{Located, Problem, seg};
use crate::model::*;
use capgate_core::actor::ActorKind;
use capgate_core::digest::Sha256Hex;
use std::path::Path;

impl Config {
    pub(crate) fn check_references(&self, doc: &Located, problems: &mut Vec<Problem>) {
        for (i, k) in self.gateway.api_keys.iter().enumerate() {
            for (j, s) in k.surfaces.iter().enumerate() {
                if !s.is_gateway_door() {
                    problems.push(doc.problem(
                        &format!("/gateway/apiKeys/{i}/surfaces/{j}"),
                        format!(
                            "`{}` is not a door a key can use (expected aiSdk, workflow or mcp)",
                            s.as_str()
                        ),
                    ));
                }
            }
        }
        for (i, t) in self.runtime.self_confirmable_types.iter().enumerate() {
            if self.approvals.types.contains_key(t) {
                problems.push(doc.problem(
                    &format!("/runtime/selfConfirmableTypes/{i}"),
                    format!(
                        "`{t}` is both self-confirmable and mapped to roles ([approvals.types.{t}]): choose one — the requester confirms it herself, or a holder of one of its roles decides it"
                    ),
                ));
            }
        }
        if let Some(j) = &self.gateway.jwt {
            for (key, set, opt_out, what) in [
                (
                    "audience",
                    j.audience.is_some(),
                    j.allow_missing_audience,
                    "allowMissingAudience",
                ),
                (
                    "issuer",
                    j.issuer.is_some(),
                    j.allow_missing_issuer,
                    "allowMissingIssuer",
                ),
            ] {
                if !set && !opt_out {
                    problems.push(doc.problem(
                        &format!("/gateway/jwt/{key}"),
                        format!(
                            "required: the `{key}` your tokens carry (a token minted for another service must not open this gateway); to accept any, say so with `{what} = true`"
                        ),
                    ));
                }
            }
        }
        if let Some(j) = &self.gateway.jwt {
            identity_provider(j, doc, problems);
        }
        if let Some(o) = &self.gateway.console.oidc {
            let discovered = self.gateway.jwt.as_ref().is_some_and(|j| j.discovers());
            if !discovered {
                problems.push(doc.problem(
                    "/gateway/console/oidc",
                    "single sign-on needs the identity provider's endpoints: set `issuer` and `discovery = true` in [gateway.jwt]",
                ));
            }
            if o.client_id.trim().is_empty() {
                problems.push(doc.problem("/gateway/console/oidc/clientId", "must not be empty"));
            }
            let callback = format!("{}/oidc/callback", self.gateway.console.path);
            let path_ok = reqwest_like_path(&o.redirect_url).is_some_and(|p| p == callback);
            if !path_ok {
                problems.push(doc.problem(
                    "/gateway/console/oidc/redirectUrl",
                    format!(
                        "must be the absolute URL at which browsers reach this console's `{callback}` (e.g. `https://capgate.example.com{callback}`), as registered at the provider"
                    ),
                ));
            }
        }
        if let Some(resource) = &self.mcp.resource {
            let issuer = self.gateway.jwt.as_ref().and_then(|j| j.issuer.as_ref());
            if issuer.is_none() {
                problems.push(doc.problem(
                    "/mcp/resource",
                    "names the identity provider MCP clients get tokens from, which is [gateway.jwt]'s `issuer`: set it",
                ));
            }
            // MCP clients ask for tokens issued for this resource (RFC 8707): a gateway
            // that did not accept that audience would refuse every token they get.
            let audiences = self
                .gateway
                .jwt
                .as_ref()
                .and_then(|j| j.audience.as_ref())
                .map(StringOrList::to_vec);
            if let Some(audiences) = audiences
                && !audiences.iter().any(|a| a == resource)
            {
                problems.push(doc.problem(
                    "/mcp/resource",
                    format!(
                        "MCP clients get tokens for `{resource}`, which [gateway.jwt] `audience` does not list: add it (`audience = [\"…\", \"{resource}\"]`)"
                    ),
                ));
            }
        }
        for (i, k) in self.gateway.operator_keys.iter().enumerate() {
            credential(
                doc,
                problems,
                &format!("/gateway/operatorKeys/{i}"),
                (&k.sha256, &k.actor),
                "`capgate keys hash`",
            );
            if self
                .gateway
                .api_keys
                .iter()
                .any(|t| t.sha256.eq_ignore_ascii_case(&k.sha256))
            {
                problems.push(doc.problem(
                    &format!("/gateway/operatorKeys/{i}/sha256"),
                    "this key is also a tenant's ([[gateway.apiKeys]]): an operator's key must be its own",
                ));
            }
        }
        if let Some(m) = self.telemetry.metrics.as_ref().filter(|m| m.enabled)
            && m.bearer_token_sha256.is_none()
        {
            let (addr, key) = match &m.listen {
                Some(l) => (l.as_str(), "/telemetry/metrics/listen"),
                None => (self.gateway.listen.as_str(), "/gateway/listen"),
            };
            if !crate::values::is_loopback_listen(addr) {
                problems.push(doc.problem(
                    "/telemetry/metrics/bearerTokenSha256",
                    format!(
                        "required: the metrics would be served unauthenticated on `{addr}` ({key}), which is not a loopback address, and they name every tenant's namespace; set bearerTokenSha256 (`capgate keys hash` prints it) or listen on 127.0.0.1"
                    ),
                ));
            }
        }
        for (name, t) in &self.approvals.types {
            if t.roles.is_empty() || t.roles.iter().any(|r| r.trim().is_empty()) {
                problems.push(doc.problem(
                    &format!("/approvals/types/{}/roles", seg(name)),
                    "must list at least one non-empty role (who may decide this type)",
                ));
            }
        }
        for (i, name) in self.runtime.policies.iter().enumerate() {
            if !self.policies.contains_key(name) {
                problems.push(doc.problem(
                    &format!("/runtime/policies/{i}"),
                    format!("no policy binding named `{name}` (declare it as [policies.{name}])"),
                ));
            }
        }
        for (name, r) in &self.redactors {
            for (field, set) in [
                ("phases", r.phases.is_some()),
                ("mode", r.mode != PolicyMode::Enforce),
            ] {
                if set {
                    problems.push(doc.problem(
                        &format!("/redactors/{}/{field}", seg(name)),
                        format!("`{field}` applies to policies only; remove it from this redactor"),
                    ));
                }
            }
        }
        for (section, map) in [("policies", &self.policies), ("redactors", &self.redactors)] {
            for (name, b) in map {
                if !self.plugins.contains_key(&b.plugin)
                    && !crate::SHIPPED_PLUGINS.contains(&b.plugin.as_str())
                {
                    problems.push(doc.problem(
                        &format!("/{section}/{}/plugin", seg(name)),
                        format!(
                            "no plugin named `{}` (declare it as [plugins.{}], or name one that ships with capgate: {})",
                            b.plugin,
                            b.plugin,
                            builtin_names()
                        ),
                    ));
                }
            }
        }
        for (name, p) in &self.plugins {
            if crate::SHIPPED_PLUGINS.contains(&name.as_str()) {
                problems.push(doc.problem(
                    &format!("/plugins/{}", seg(name)),
                    format!("`{name}` ships with capgate, pinned by its build: bind it with `plugin = \"{name}\"` and remove this section (or give your own plugin another name)"),
                ));
            }
            let path = Path::new(&p.path);
            // An `oci://` reference's syntax is checked by the server with the registry
            // client's parser.
            if !p.is_oci()
                && (path.is_absolute()
                    || path
                        .components()
                        .any(|c| !matches!(c, std::path::Component::Normal(_))))
            {
                problems.push(doc.problem(
                    &format!("/plugins/{}/path", seg(name)),
                    "must be a plain path inside runtime.pluginDir (no `..`, no absolute paths), or oci://REGISTRY/REPO@sha256:DIGEST",
                ));
            }
            match &p.sha256 {
                Some(s) if Sha256Hex::is_valid(&s.to_ascii_lowercase()) => {}
                None if p.is_oci() => {}
                _ => problems.push(doc.problem(
                    &format!("/plugins/{}/sha256", seg(name)),
                    "must be the 64-hex-digit SHA-256 of the plugin file (`sha256sum FILE`)",
                )),
            }
            if p.isolation == Some(IsolationMode::Pooled)
                && (p.reserve.is_some() || p.reserve_refill_at.is_some())
            {
                problems.push(doc.problem(
                    &format!("/plugins/{}/reserve", seg(name)),
                    "a reserve applies to fresh isolation only (pooled instances are reused); remove `reserve` or use `isolation = \"fresh\"`",
                ));
            }
        }
        // Read on the raw entries, so an entry whose transport keys do not fit together (the
        // section's own conversion says so) still gets its other mistakes in the same run.
        let raw_upstreams = doc
            .json
            .pointer("/upstreams/mcp")
            .and_then(|v| v.as_object());
        for (name, u) in raw_upstreams.into_iter().flatten() {
            let at = format!("/upstreams/mcp/{}", seg(name));
            if let Some(url) = u.get("url").and_then(|v| v.as_str())
                && !(url.starts_with("http://") || url.starts_with("https://"))
            {
                problems
                    .push(doc.problem(&format!("{at}/url"), "must be an http:// or https:// URL"));
            }
            if let Some(command) = u.get("command").and_then(|v| v.as_array())
                && command
                    .first()
                    .and_then(|p| p.as_str())
                    .is_none_or(str::is_empty)
            {
                problems.push(doc.problem(
                    &format!("{at}/command"),
                    "must name a program first, e.g. [\"npx\", \"-y\", \"@modelcontextprotocol/server-everything\"]",
                ));
            }
        }
        // References and schemas are checked on the raw entries, so a capability with a
        // type error elsewhere still gets its reference mistakes reported in the same run.
        let raw_caps = doc
            .json
            .get("capabilities")
            .and_then(|v| v.as_array())
            .cloned()
            .unwrap_or_default();
        for (n, c) in raw_caps.iter().enumerate() {
            let ptr = format!("/capabilities/{n}");
            let names = |key: &str| -> Vec<(usize, String)> {
                c.get(key)
                    .and_then(|v| v.as_array())
                    .map(|a| {
                        a.iter()
                            .enumerate()
                            .filter_map(|(i, v)| v.as_str().map(|s| (i, s.to_string())))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            for (i, name) in names("policies") {
                if !self.policies.contains_key(&name) {
                    problems.push(doc.problem(
                        &format!("{ptr}/policies/{i}"),
                        format!(
                            "no policy binding named `{name}` (declare it as [policies.{name}])"
                        ),
                    ));
                }
            }
            for (i, name) in names("redactors") {
                if !self.redactors.contains_key(&name) {
                    problems.push(doc.problem(
                        &format!("{ptr}/redactors/{i}"),
                        format!(
                            "no redactor binding named `{name}` (declare it as [redactors.{name}])"
                        ),
                    ));
                }
            }
            if let Some(proc_) = c.get("procedure") {
                if let Some(mcp) = proc_.get("mcp") {
                    if let Some(u) = mcp.get("upstream").and_then(|v| v.as_str())
                        && !self.upstreams.mcp.contains_key(u)
                    {
                        problems.push(doc.problem(
                            &format!("{ptr}/procedure/mcp/upstream"),
                            format!(
                                "no MCP upstream named `{u}` (declare it as [upstreams.mcp.{u}])"
                            ),
                        ));
                    }
                    if let Some(pin) = mcp.get("toolSha256").and_then(|v| v.as_str())
                        && !Sha256Hex::is_valid(&pin.to_ascii_lowercase())
                    {
                        problems.push(doc.problem(
                            &format!("{ptr}/procedure/mcp/toolSha256"),
                            "must be the 64-hex-digit SHA-256 of the tool's definition (`capgate import mcp` prints it)",
                        ));
                    }
                }
                // "Exactly one of" is the section's own conversion (ProcedureSection).
                if let Some(p) = proc_.get("plugin").and_then(|v| v.as_str())
                    && !self.plugins.contains_key(p)
                {
                    problems.push(doc.problem(
                        &format!("{ptr}/procedure/plugin"),
                        format!("no plugin named `{p}` (declare it as [plugins.{p}])"),
                    ));
                }
            }
            for field in ["inputSchema", "outputSchema"] {
                let Some(raw) = c.get(field) else { continue };
                let Ok(schema) = serde_json::from_value::<SchemaRef>(raw.clone()) else {
                    continue;
                };
                match self.resolve_schema(&schema) {
                    Err(e) => problems.push(doc.problem(&format!("{ptr}/{field}"), e)),
                    Ok(v) => {
                        if let Err(e) = capgate_core::schema::Schema::compile(v) {
                            problems.push(doc.problem(&format!("{ptr}/{field}"), e.to_string()));
                        }
                    }
                }
            }
        }
        for (i, r) in self.gateway.routes.iter().enumerate() {
            if !r.path.starts_with('/') || r.path.len() < 2 || r.path.ends_with('/') {
                problems.push(doc.problem(
                    &format!("/gateway/routes/{i}/path"),
                    "must start with `/`, be more than `/`, and not end with `/` (e.g. `/agent`)",
                ));
            }
            if !r.surface.is_gateway_door() {
                problems.push(doc.problem(
                    &format!("/gateway/routes/{i}/surface"),
                    "a gateway route serves `aiSdk`, `mcp` or `workflow`",
                ));
            }
        }
        if self.gateway.audit_drain_timeout_ms >= self.gateway.request_timeout_ms {
            problems.push(doc.problem(
                "/gateway/auditDrainTimeoutMs",
                "must be smaller than requestTimeoutMs (drain time is reserved inside the request ceiling)",
            ));
        }
        if let Some(AuthorizeSetting::Plugin(a)) = &self.gateway.authorize
            && !self.plugins.contains_key(&a.plugin)
        {
            problems.push(doc.problem(
                "/gateway/authorize/plugin",
                format!("no plugin named `{}`", a.plugin),
            ));
        }
        for (i, k) in self.gateway.api_keys.iter().enumerate() {
            credential(
                doc,
                problems,
                &format!("/gateway/apiKeys/{i}"),
                (&k.sha256, &k.actor),
                "`printf '%s' KEY | capgate keys hash`",
            );
            if k.namespace.trim().is_empty() {
                problems.push(doc.problem(
                    &format!("/gateway/apiKeys/{i}/namespace"),
                    "must not be empty",
                ));
            }
            if k.namespace == capgate_core::actor::OPERATOR_NAMESPACE {
                problems.push(doc.problem(
                    &format!("/gateway/apiKeys/{i}/namespace"),
                    format!(
                        "`{}` is reserved for operators ([[gateway.operatorKeys]])",
                        capgate_core::actor::OPERATOR_NAMESPACE
                    ),
                ));
            }
        }
    }

    /// What `capgate check` and `serve` warn about without refusing the file: settings that
    /// are allowed but widen a boundary, located like problems.
    pub fn warnings(&self, doc: &Located) -> Vec<Problem> {
        let mut out = Vec::new();
        for (i, k) in self.gateway.api_keys.iter().enumerate() {
            if k.requester_door == Some(true) && !k.surfaces.is_empty() {
                out.push(doc.problem(
                    &format!("/gateway/apiKeys/{i}/requesterDoor"),
                    "this key opens model doors and the requester door: whatever holds it (an agent host) can confirm its own held calls with no human step; give the human a console credential of her own instead",
                ));
            }
            if k.roles
                .iter()
                .any(|r| r == capgate_core::actor::OPERATOR_ROLE)
            {
                out.push(doc.problem(
                    &format!("/gateway/apiKeys/{i}/roles"),
                    "the `operator` role of a tenant's key opens nothing: the operator API takes an operator's key ([[gateway.operatorKeys]])",
                ));
            }
        }
        if self.gateway.admin.reload && self.gateway.operator_keys.is_empty() {
            out.push(doc.problem(
                "/gateway/admin/reload",
                "no [[gateway.operatorKeys]]: POST /admin/reload refuses every caller (SIGHUP still reloads)",
            ));
        }
        out
    }
}

/// What every credential entry (`[[gateway.apiKeys]]`, `[[gateway.operatorKeys]]`) must be:
/// the SHA-256 hex of the key, never the key (`how` says how to print it), for an actor
/// that is not anonymous.
fn credential(
    doc: &Located,
    problems: &mut Vec<Problem>,
    at: &str,
    (sha256, actor): (&str, &ActorSection),
    how: &str,
) {
    if !Sha256Hex::is_valid(&sha256.to_ascii_lowercase()) {
        problems.push(doc.problem(
            &format!("{at}/sha256"),
            format!("must be the SHA-256 hex of the key ({how}); keys are never stored in clear"),
        ));
    }
    if actor.kind == ActorKind::Anonymous {
        problems.push(doc.problem(&format!("{at}/actor/kind"), "anonymous actors are rejected"));
    }
}

/// The path of an absolute `http(s)://` URL (`None` for anything else).
fn reqwest_like_path(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let slash = rest.find('/')?;
    let path = &rest[slash..];
    (!rest[..slash].is_empty() && !path.contains(['?', '#'])).then_some(path)
}

/// `[gateway.jwt]`'s key source and claim mapping: an issuer to discover from.
fn identity_provider(
    j: &crate::model::JwtSection,
    doc: &crate::located::Located,
    problems: &mut Vec<crate::located::Problem>,
) {
    // One key source is the section's own conversion (JwtSection from JwtFile).
    if j.discovers() && j.issuer.is_none() {
        problems.push(doc.problem(
            "/gateway/jwt/discovery",
            "discovery reads `<issuer>/.well-known/openid-configuration`: set `issuer`",
        ));
    }
    if matches!(&j.audience, Some(crate::model::StringOrList::Many(v)) if v.is_empty()) {
        problems.push(doc.problem(
            "/gateway/jwt/audience",
            "an empty list accepts no token: name the audience(s), or write `allowMissingAudience = true`",
        ));
    }
    if j.algorithms.as_ref().is_some_and(Vec::is_empty) {
        problems.push(doc.problem(
            "/gateway/jwt/algorithms",
            "an empty list accepts no token: leave it out for all four",
        ));
    }
    let c = &j.claims;
    if matches!(c.default_kind, capgate_core::actor::ActorKind::Anonymous) {
        problems.push(doc.problem(
            "/gateway/jwt/claims/defaultKind",
            "a token never makes an anonymous actor: `user`, `service` or `agent`",
        ));
    }
}

/// The names of the plugins that ship with capgate, for messages.
fn builtin_names() -> String {
    crate::SHIPPED_PLUGINS
        .iter()
        .map(|b| format!("`{b}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
