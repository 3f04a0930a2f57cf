//! Reading the deployment file: parse it, deserialize each section with its problems
//! located (`file:line:column: key: message`), then check references and ranges, and
//! report every problem together before anything starts.

use crate::located::{Located, Problem, seg};
use crate::model::*;
use serde::de::DeserializeOwned;
use std::path::Path;

/// The largest `reserve` one plugin may ask for (each ready instance holds a pool slot).
pub(crate) const MAX_RESERVE: u32 = 64;

const TOP_KEYS: &[&str] = &[
    "revision",
    "runtime",
    "store",
    "audit",
    "plugins",
    "policies",
    "redactors",
    "capabilities",
    "gateway",
    "mcp",
    "upstreams",
    "approvals",
    "telemetry",
];

/// Deserialize one part of a located document, locating the error inside it (the
/// configuration here, and `capgate test`'s scenario files).
pub fn part<T: DeserializeOwned>(
    doc: &Located,
    pointer: &str,
    problems: &mut Vec<Problem>,
) -> Option<T> {
    let value = doc.json.pointer(pointer).cloned()?;
    part_of(doc, pointer, value, problems)
}

/// [`part`] of a table with one of its subtables left out (read on its own, so a mistake in
/// it leaves the rest of the table to be checked): `[gateway]` without `[gateway.jwt]`.
fn part_without<T: DeserializeOwned>(
    doc: &Located,
    pointer: &str,
    subtable: &str,
    problems: &mut Vec<Problem>,
) -> Option<T> {
    let mut value = doc.json.pointer(pointer).cloned()?;
    if let Some(table) = value.as_object_mut() {
        table.remove(subtable);
    }
    part_of(doc, pointer, value, problems)
}

fn part_of<T: DeserializeOwned>(
    doc: &Located,
    pointer: &str,
    value: serde_json::Value,
    problems: &mut Vec<Problem>,
) -> Option<T> {
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(v) => Some(v),
        Err(e) => {
            let mut at = pointer.to_string();
            for s in e.path().iter() {
                use serde_path_to_error::Segment as S;
                match s {
                    S::Map { key } => at.push_str(&format!("/{}", seg(key))),
                    S::Seq { index } => at.push_str(&format!("/{index}")),
                    _ => {}
                }
            }
            if doc.is_overflow(&at) {
                // Already one located problem of its own (`Located::overflow_problems`).
                return None;
            }
            let msg = e.inner().to_string();
            // serde reports an unknown field at its parent; point at the field itself.
            if let Some(field) = msg
                .strip_prefix("unknown field `")
                .and_then(|r| r.split('`').next())
            {
                let last = format!("/{}", seg(field));
                if !at.ends_with(&last) {
                    at.push_str(&last);
                }
            }
            problems.push(doc.problem(&at, msg));
            None
        }
    }
}

/// `[upstreams]`, each `[upstreams.mcp.NAME]` read on its own: a mistake in one entry is
/// located there and leaves the others (and the capabilities that name them) to be checked.
fn upstreams(doc: &Located, problems: &mut Vec<Problem>) -> UpstreamsSection {
    let mut out = UpstreamsSection::default();
    let Some(section) = doc.json.get("upstreams") else {
        return out;
    };
    let Some(section) = section.as_object() else {
        problems.push(doc.problem("/upstreams", "must be a table"));
        return out;
    };
    for key in section.keys().filter(|k| k.as_str() != "mcp") {
        problems.push(doc.problem(
            &format!("/upstreams/{}", seg(key)),
            format!("unknown field `{key}`, expected `mcp`"),
        ));
    }
    out.mcp = entries(doc, "/upstreams/mcp", problems);
    out
}

/// A map of tables (`[audit.export.NAME]`, `[upstreams.mcp.NAME]`), each entry read on its
/// own: a mistake in one is located there and leaves the others to be checked.
fn entries<T: DeserializeOwned>(
    doc: &Located,
    pointer: &str,
    problems: &mut Vec<Problem>,
) -> std::collections::BTreeMap<String, T> {
    let mut out = std::collections::BTreeMap::new();
    match doc.json.pointer(pointer) {
        None => {}
        Some(serde_json::Value::Object(map)) => {
            for name in map.keys() {
                if let Some(v) = part(doc, &format!("{pointer}/{}", seg(name)), problems) {
                    out.insert(name.clone(), v);
                }
            }
        }
        Some(_) => problems.push(doc.problem(pointer, "must be a table of tables")),
    }
    out
}

/// Which `#[key(secret)]` values [`Config::load_with`] reads from their variable or file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Secrets {
    /// Every one; an unset variable or unreadable file is a problem at its key. What
    /// `check`, `serve` and every command that runs the deployment need.
    All,
    /// Only `store.url`: the other secrets (API key and operator key hashes, the metrics
    /// token) are left unread, as empty strings, and no problem of their values is
    /// reported. For the operator commands, which use the store and nothing those secrets
    /// guard; such a config must never serve.
    StoreOnly,
    /// None, `store.url` included (the command line names the store): as
    /// [`Secrets::StoreOnly`] for `store.url` too.
    None,
}

impl Secrets {
    /// Whether the secret at `pointer` is read.
    fn reads(self, pointer: &str) -> bool {
        match self {
            Secrets::All => true,
            Secrets::StoreOnly => pointer == STORE_URL,
            Secrets::None => false,
        }
    }
}

/// The pointer of `store.url`, the one secret [`Secrets::StoreOnly`] reads.
const STORE_URL: &str = "/store/url";

impl Config {
    /// Read and check a configuration file (syntax, types, references, value ranges):
    /// every problem, located, or the config with its located document (for the checks of
    /// the assembly's checks, which locate their problems in it too).
    pub fn load(path: &Path) -> Result<(Config, Located), Vec<Problem>> {
        Config::load_with(path, Secrets::All)
    }

    /// [`Config::load`], reading only the secrets `secrets` names.
    pub fn load_with(path: &Path, secrets: Secrets) -> Result<(Config, Located), Vec<Problem>> {
        Config::read_with(path, secrets)?.finish(Vec::new())
    }

    /// Read a configuration file as far as it goes, for checks outside this crate to add
    /// their problems to the file's own before anything is refused ([`Read::finish`]); the
    /// error is a file that cannot be read or parsed at all.
    pub fn read_with(path: &Path, secrets: Secrets) -> Result<Read, Vec<Problem>> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            vec![Problem {
                file: path.to_path_buf(),
                line: 1,
                column: 1,
                key: String::new(),
                message: format!("cannot read the configuration file: {e}"),
            }]
        })?;
        Config::read_text(path, text, secrets)
    }

    /// Check a configuration's text as [`Config::load`] does its file (`path` only names
    /// it in the problems and anchors relative paths; nothing is read): the fuzz target of
    /// the configuration loader drives this.
    pub fn parse(path: &Path, text: String) -> Result<(Config, Located), Vec<Problem>> {
        Config::parse_with(path, text, Secrets::All)
    }

    /// [`Config::parse`], reading only the secrets `secrets` names: a problem at a secret
    /// left unread (its value is an empty string) is not reported.
    pub fn parse_with(
        path: &Path,
        text: String,
        secrets: Secrets,
    ) -> Result<(Config, Located), Vec<Problem>> {
        Config::read_text(path, text, secrets)?.finish(Vec::new())
    }

    /// [`Config::read_with`] over a text (`path` names it and anchors relative paths).
    pub fn read_text(path: &Path, text: String, secrets: Secrets) -> Result<Read, Vec<Problem>> {
        let mut doc = Located::parse(path, text).map_err(|p| vec![p])?;
        let mut problems = doc.overflow_problems();
        let (resolve_problems, unread) = resolve_secrets(path, &mut doc, secrets);
        problems.extend(resolve_problems);
        let mut cfg = Config {
            path: path.to_path_buf(),
            ..Default::default()
        };
        let Some(root) = doc.json.as_object() else {
            return Err(vec![doc.problem("", "the file must be a TOML table")]);
        };
        for k in root.keys() {
            if !TOP_KEYS.contains(&k.as_str()) {
                problems.push(doc.problem(
                    &format!("/{}", seg(k)),
                    format!(
                        "unknown section `{k}` (expected one of {})",
                        TOP_KEYS.join(", ")
                    ),
                ));
            }
        }
        cfg.revision = part(&doc, "/revision", &mut problems).unwrap_or_default();
        cfg.runtime = part(&doc, "/runtime", &mut problems).unwrap_or_default();
        cfg.store = part(&doc, "/store", &mut problems).unwrap_or_default();
        cfg.audit = part_without(&doc, "/audit", "export", &mut problems).unwrap_or_default();
        cfg.audit.export = entries(&doc, "/audit/export", &mut problems);
        cfg.gateway = part_without(&doc, "/gateway", "jwt", &mut problems).unwrap_or_default();
        cfg.gateway.jwt = part(&doc, "/gateway/jwt", &mut problems);
        cfg.mcp = part(&doc, "/mcp", &mut problems).unwrap_or_default();
        cfg.upstreams = upstreams(&doc, &mut problems);
        cfg.approvals = part(&doc, "/approvals", &mut problems).unwrap_or_default();
        cfg.telemetry = part(&doc, "/telemetry", &mut problems).unwrap_or_default();
        crate::telemetry::check(&cfg.telemetry, &doc, &mut problems);
        let names = |section: &str| -> Vec<String> {
            doc.json
                .get(section)
                .and_then(|v| v.as_object())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        };
        for name in names("plugins") {
            if let Some(p) = part(&doc, &format!("/plugins/{}", seg(&name)), &mut problems) {
                cfg.plugins.insert(name, p);
            }
        }
        for name in names("policies") {
            if let Some(p) = part(&doc, &format!("/policies/{}", seg(&name)), &mut problems) {
                cfg.policies.insert(name, p);
            }
        }
        for name in names("redactors") {
            if let Some(p) = part(&doc, &format!("/redactors/{}", seg(&name)), &mut problems) {
                cfg.redactors.insert(name, p);
            }
        }
        let caps = doc
            .json
            .get("capabilities")
            .and_then(|v| v.as_array())
            .map_or(0, Vec::len);
        if doc.json.get("capabilities").is_some_and(|v| !v.is_array()) {
            problems.push(doc.problem(
                "/capabilities",
                "must be an array of tables: write each capability as [[capabilities]]",
            ));
        }
        for i in 0..caps {
            let ptr = format!("/capabilities/{i}");
            if let Some(c) = part::<CapabilitySection>(&doc, &ptr, &mut problems) {
                cfg.capabilities.push(c);
            }
        }
        cfg.check_references(&doc, &mut problems);
        cfg.check_values(&doc, &mut problems);
        Ok(Read {
            config: cfg,
            doc,
            problems,
            unread: unread.iter().map(|p| crate::located::dotted(p)).collect(),
        })
    }
}

/// A file read as far as it goes: the model (a section with a problem in it left at its
/// default), the located document, and the file's own problems. The checks that need the
/// crates that run a deployment (reserved paths, registry references, CA bundles, identity
/// provider URLs) are `capgate-server`'s; they read this and add theirs, so one run still
/// reports every problem.
pub struct Read {
    /// The model, as far as it was read.
    pub config: Config,
    /// The located document.
    pub doc: Located,
    problems: Vec<Problem>,
    unread: Vec<String>,
}

impl Read {
    /// The config and its document, or every problem (the file's and `more`), leaving out
    /// those at a secret this read did not resolve.
    pub fn finish(self, more: Vec<Problem>) -> Result<(Config, Located), Vec<Problem>> {
        let mut problems = self.problems;
        problems.extend(more);
        problems.retain(|p| !self.unread.contains(&p.key));
        if problems.is_empty() {
            Ok((self.config, self.doc))
        } else {
            Err(problems)
        }
    }
}

/// Maps whose every value may be a secret ([`crate::model::SecretString`]; a `#[key(secret)]`
/// declares one value): an HTTP upstream's static headers, which typically carry a service
/// credential.
pub const SECRET_MAP_VALUES: &[&str] = &["/capabilities/*/procedure/http/headers/*"];

/// Every `#[key(secret)]` value (and every [`SECRET_MAP_VALUES`] value) the file gives as `{ env = "VAR" }` or `{ file = "path" }`,
/// replaced in the document by the variable's value or the file's contents (one trailing
/// newline removed) before anything reads it; a variable that is unset or a file that cannot
/// be read is a problem at the key, and the value is left out. Values are never put in a
/// message. A secret `secrets` does not read is left out whatever its form; its pointer is
/// returned beside the problems.
fn resolve_secrets(
    path: &Path,
    doc: &mut Located,
    secrets: Secrets,
) -> (Vec<Problem>, Vec<String>) {
    let base = path.parent().unwrap_or(Path::new("."));
    let mut problems = Vec::new();
    let mut unread = Vec::new();
    let mut resolved: Vec<(String, Option<String>)> = Vec::new();
    let declared = crate::keys::all()
        .into_iter()
        .filter(|k| k.secret)
        .map(|k| k.pointer);
    let foreign = SECRET_MAP_VALUES.iter().map(|p| p.to_string());
    for key_pointer in declared.chain(foreign) {
        for pointer in expand(&doc.json, &key_pointer) {
            if !secrets.reads(&pointer) {
                resolved.push((pointer.clone(), None));
                unread.push(pointer);
                continue;
            }
            let Some(source) = doc.json.pointer(&pointer).and_then(|v| v.as_object()) else {
                continue;
            };
            let prefix = match source.get("prefix") {
                None => Some(""),
                Some(serde_json::Value::String(p)) => Some(p.as_str()),
                Some(_) => None,
            };
            let named = source.len() - usize::from(source.contains_key("prefix"));
            let value = match (source.get("env"), source.get("file"), named, prefix) {
                (Some(serde_json::Value::String(var)), None, 1, Some(_)) => match std::env::var(var) {
                    Ok(v) => Ok(v),
                    Err(_) => Err(format!(
                        "the environment variable `{var}` this key names is not set"
                    )),
                },
                (None, Some(serde_json::Value::String(file)), 1, Some(_)) => {
                    let at = base.join(file);
                    match std::fs::read_to_string(&at) {
                        Ok(text) => {
                            let text = text.strip_suffix('\n').unwrap_or(&text);
                            Ok(text.strip_suffix('\r').unwrap_or(text).to_string())
                        }
                        Err(e) => Err(format!(
                            "cannot read `{}`, the file this key names: {e}",
                            at.display()
                        )),
                    }
                }
                _ => Err(
                    "a secret is written as a string, `{ env = \"VAR\" }` or `{ file = \"path\" }` (with an optional string `prefix`)"
                        .to_string(),
                ),
            };
            match value {
                Ok(v) => resolved.push((pointer, Some(format!("{}{v}", prefix.unwrap_or(""))))),
                Err(message) => {
                    problems.push(doc.problem(&pointer, message));
                    resolved.push((pointer, None));
                }
            }
        }
    }
    for (pointer, value) in resolved {
        let Some(slot) = doc.json.pointer_mut(&pointer) else {
            continue;
        };
        // A problem is already reported; an empty string keeps the rest of the file's
        // checks going without a second, confusing type error at the same key.
        *slot = serde_json::Value::String(value.unwrap_or_default());
    }
    (problems, unread)
}

/// The concrete pointers a key pointer with `*` segments names in this document.
fn expand(json: &serde_json::Value, pointer: &str) -> Vec<String> {
    let mut out = vec![(String::new(), json)];
    for segment in pointer.split('/').skip(1) {
        let mut next = Vec::new();
        for (at, value) in out {
            if segment == "*" {
                match value {
                    serde_json::Value::Array(items) => {
                        for (i, v) in items.iter().enumerate() {
                            next.push((format!("{at}/{i}"), v));
                        }
                    }
                    serde_json::Value::Object(map) => {
                        for (k, v) in map {
                            next.push((format!("{at}/{}", seg(k)), v));
                        }
                    }
                    _ => {}
                }
            } else if let Some(v) = value.get(segment) {
                next.push((format!("{at}/{segment}"), v));
            }
        }
        out = next;
    }
    out.into_iter().map(|(at, _)| at).collect()
}
