//! The file's checks that need the crates that run it: where the gateway mounts its own
//! doors (reserved paths), an `oci://` reference as the registry client parses it, a CA
//! bundle as the HTTP client reads it, an identity provider's URL and claim pointers as the
//! authenticator takes them. `capgate-config` checks the file's shape without these crates;
//! [`load`] adds these problems to its own, so one run still reports every problem.

use capgate_config::located::{Located, Problem, seg};
use capgate_config::{Config, Secrets};
use std::path::Path;

/// Read `path` (only the secrets `secrets` names) and check it: the file's own problems
/// and these, together.
pub(crate) fn load(path: &Path, secrets: Secrets) -> Result<(Config, Located), Vec<Problem>> {
    let read = Config::read_with(path, secrets)?;
    let mut out = Vec::new();
    check(&read.config, &read.doc, &mut out);
    read.finish(out)
}

fn check(cfg: &Config, doc: &Located, out: &mut Vec<Problem>) {
    for (name, p) in &cfg.plugins {
        if p.is_oci()
            && let Err(e) = capgate_oci::plugin_reference(&p.path)
        {
            out.push(doc.problem(&format!("/plugins/{}/path", seg(name)), e));
        }
    }
    routes(cfg, doc, out);
    console(cfg, doc, out);
    metrics(cfg, doc, out);
    ca_files(cfg, doc, out);
    if let Some(j) = &cfg.gateway.jwt {
        identity_provider(j, doc, out);
    }
}

/// A route may not take a path capgate serves itself.
fn routes(cfg: &Config, doc: &Located, out: &mut Vec<Problem>) {
    for (i, r) in cfg.gateway.routes.iter().enumerate() {
        if let Some(reserved) = capgate_gateway::app::reserved_by(&r.path) {
            out.push(doc.problem(
                &format!("/gateway/routes/{i}/path"),
                format!(
                    "`{}` is served by capgate itself ({}); pick another path",
                    reserved.path, reserved.door
                ),
            ));
        }
    }
}

/// Metrics on the gateway's listener may not take a path served there already.
fn metrics(cfg: &Config, doc: &Located, out: &mut Vec<Problem>) {
    let Some(m) = cfg.telemetry.metrics.as_ref() else {
        return;
    };
    if m.listen.is_some() || !capgate_config::values::is_path(&m.path) {
        return;
    }
    let path = &m.path;
    let taken = capgate_gateway::app::RESERVED
        .iter()
        .map(|r| r.path)
        .chain(cfg.gateway.routes.iter().map(|r| r.path.as_str()))
        .find(|p| path == p || path.starts_with(&format!("{p}/")));
    if let Some(taken) = taken {
        out.push(doc.problem(
            "/telemetry/metrics/path",
            format!("`{taken}` is already served on the gateway's listener; pick another path or give metrics a `listen` address of their own"),
        ));
    }
}

/// The console's path: a prefix the gateway can mount, clear of its own doors, the
/// routes and the metrics path.
fn console(cfg: &Config, doc: &Located, out: &mut Vec<Problem>) {
    const AT: &str = "/gateway/console";
    let c = &cfg.gateway.console;
    if !c.enabled {
        return;
    }
    if let Err(e) = capgate_gateway::console::check_prefix(&c.path) {
        out.push(doc.problem(&format!("{AT}/path"), e.to_string()));
        return;
    }
    let overlaps = |p: &str| {
        p == c.path
            || p.starts_with(&format!("{}/", c.path))
            || c.path.starts_with(&format!("{p}/"))
    };
    if let Some(taken) = capgate_gateway::app::overlapping(&c.path) {
        out.push(doc.problem(
            &format!("{AT}/path"),
            format!(
                "`{}` is served by capgate itself; pick another path for the console",
                taken.path
            ),
        ));
    }
    for r in &cfg.gateway.routes {
        if overlaps(&r.path) {
            out.push(doc.problem(
                &format!("{AT}/path"),
                format!("overlaps the gateway route `{}`; pick another path", r.path),
            ));
        }
    }
    if let Some(m) = cfg
        .telemetry
        .metrics
        .as_ref()
        .filter(|m| m.enabled && m.listen.is_none())
        && overlaps(&m.path)
    {
        out.push(doc.problem(
            &format!("{AT}/path"),
            format!("overlaps the metrics path `{}`; pick another path", m.path),
        ));
    }
}

/// Extra trusted roots must be there and hold a certificate now, not at the first call.
/// A capability's are read from the document, so one whose section has another mistake
/// still gets this one reported in the same run.
fn ca_files(cfg: &Config, doc: &Located, out: &mut Vec<Problem>) {
    let mut check = |pointer: String, ca: &str| {
        if let Err(e) = capgate_provider::http::check_ca_file(&cfg.relative(ca)) {
            out.push(doc.problem(&pointer, e.to_string()));
        }
    };
    for (name, u) in &cfg.upstreams.mcp {
        if let capgate_config::McpTransport::Http {
            ca_file: Some(ca), ..
        } = &u.transport
        {
            check(format!("/upstreams/mcp/{}/caFile", seg(name)), ca);
        }
    }
    let caps = doc.json.get("capabilities").and_then(|v| v.as_array());
    for (i, c) in caps.into_iter().flatten().enumerate() {
        let http = c.pointer("/procedure/http");
        if c.pointer("/procedure/plugin").is_none()
            && c.pointer("/procedure/mcp").is_none()
            && let Some(ca) = http.and_then(|h| h.get("caFile")).and_then(|v| v.as_str())
        {
            check(format!("/capabilities/{i}/procedure/http/caFile"), ca);
        }
    }
}

/// `[gateway.jwt]`: the identity provider's URLs and the claim pointers, as the
/// authenticator takes them.
fn identity_provider(j: &capgate_config::JwtSection, doc: &Located, out: &mut Vec<Problem>) {
    use capgate_gateway::auth::ClaimPointer;
    let jwks_url = match &j.key_source {
        capgate_config::JwtKeySource::JwksUrl(url) => Some(url.as_str()),
        _ => None,
    };
    for (key, url) in [
        ("jwksUrl", jwks_url),
        ("issuer", j.issuer.as_deref().filter(|_| j.discovers())),
    ] {
        if let Some(url) = url
            && let Err(e) = capgate_gateway::identity::fetch::check_url(url)
        {
            out.push(doc.problem(&format!("/gateway/jwt/{key}"), e.to_string()));
        }
    }
    let c = &j.claims;
    let mut pointers: Vec<(String, &str)> = vec![
        ("actorId".into(), &c.actor_id),
        ("namespace".into(), &c.namespace),
        ("roles".into(), &c.roles),
        ("surfaces".into(), &c.surfaces),
        ("requesterDoor".into(), &c.requester_door),
    ];
    if let Some(k) = &c.actor_kind {
        pointers.push(("actorKind".into(), k));
    }
    match &c.attributes {
        capgate_config::AttributesSetting::Object(p) => pointers.push(("attributes".into(), p)),
        capgate_config::AttributesSetting::Each(each) => {
            for (name, p) in each {
                pointers.push((format!("attributes/{name}"), p));
            }
        }
    }
    for (key, pointer) in pointers {
        if let Err(e) = ClaimPointer::parse(pointer) {
            out.push(doc.problem(&format!("/gateway/jwt/claims/{key}"), e.to_string()));
        }
    }
}
