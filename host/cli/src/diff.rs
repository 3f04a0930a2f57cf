//! `capgate contract diff OLD NEW`: what changed between two revisions of a deployment's
//! portable contract, and whether a caller built against OLD can break on NEW.
//!
//! Each side is a contract file (the JSON array `capgate contract export` prints: one
//! surface's descriptors) or a `.toml` deployment file, whose contract is exported in
//! process exactly as `capgate contract export` does it (the same validation, no store).
//!
//! Contracts are per surface. Two deployment files are compared on every model-facing
//! gateway surface (aiSdk, mcp, workflow), so exposure changes show; when a contract file
//! is involved only one surface can be compared (the file holds one), `--surface` or
//! aiSdk — `contract export`'s own default, so a file exported without `--surface`
//! compares right.
//!
//! A change is **breaking** when a call that the old contract allowed can fail (or reach
//! a different tool) under the new one, and **additive** otherwise. For input schemas
//! the rule is: breaking when some input valid under the old schema may be refused by the
//! new one; a keyword whose effect capgate cannot compare (`anyOf`, `$ref`, a changed
//! `pattern`, …) counts as breaking, and the change says why.

use crate::validate::{Refused, validate};
use capgate_core::actor::Surface;
use capgate_core::meta::SideEffect;
use capgate_gateway::wire::PortableCapabilityDescriptor;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The `format` field of the JSON report.
pub const REPORT_FORMAT: &str = "capgate.contract-diff.v1";

/// The surfaces two deployment files are compared on by default.
pub const GATEWAY_SURFACES: [Surface; 3] = [Surface::AiSdk, Surface::Mcp, Surface::Workflow];

/// Why a diff could not be made (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// The file could not be read.
    #[error(
        "cannot read {}: {source}. Check the path: OLD and NEW are contract files (`capgate contract export … > contract.json`) or .toml deployment files",
        path.display()
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a contract.
    #[error(
        "{} is not a capgate contract: {reason}. Write one with `capgate contract export --config capgate.toml --surface aiSdk > contract.json`, or pass the .toml deployment file itself",
        path.display()
    )]
    NotContract {
        /// The file.
        path: PathBuf,
        /// What is wrong, with its place.
        reason: String,
    },
    /// The deployment file was refused (its problems are in [`Refused`]).
    #[error(
        "{} was refused, so it has no contract to compare: fix the problems above (`capgate check --config {}` lists them)",
        .0.path.display(), .0.path.display()
    )]
    Refused(Refused),
    /// The deployment's capability registry could not be built.
    #[error("{}: cannot build its capabilities: {reason}", path.display())]
    Assembly {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// `--surface` is not a gateway surface.
    #[error(
        "unknown surface `{0}`: a contract is per surface, pass --surface aiSdk, mcp or workflow"
    )]
    Surface(Surface),
}

/// One side of a diff, as read from its file.
pub enum Side {
    /// A contract file: one surface's descriptors.
    Contract {
        /// Its descriptors.
        descriptors: Vec<PortableCapabilityDescriptor>,
    },
    /// A validated deployment file.
    Config(Box<crate::validate::Checked>),
}

impl Side {
    /// Read a side: a `.toml` file is a deployment (validated as `capgate check` does), any
    /// other file a contract.
    pub fn read(path: &Path) -> Result<Side, DiffError> {
        if path.extension().is_some_and(|e| e == "toml") {
            if !path.is_file() {
                // The same words as for a contract file, rather than a located problem.
                let source = std::fs::metadata(path).err().unwrap_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file")
                });
                return Err(DiffError::Read {
                    path: path.to_path_buf(),
                    source,
                });
            }
            return validate(path)
                .map(|c| Side::Config(Box::new(c)))
                .map_err(DiffError::Refused);
        }
        let text = std::fs::read_to_string(path).map_err(|source| DiffError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Side::Contract {
            descriptors: parse_contract(path, &text)?,
        })
    }

    fn is_config(&self) -> bool {
        matches!(self, Side::Config(_))
    }

    /// This side's contract on `surfaces` (a contract file holds its one surface).
    pub fn contract(&self, surfaces: &[Surface]) -> Result<Contract, DiffError> {
        match self {
            Side::Contract { descriptors } => Ok(surfaces
                .iter()
                .map(|s| (s.as_str().to_string(), descriptors.clone()))
                .collect()),
            Side::Config(checked) => {
                let runtime = checked.scratch_runtime().map_err(|e| DiffError::Assembly {
                    path: checked.config.path.clone(),
                    reason: e.to_string(),
                })?;
                Ok(surfaces
                    .iter()
                    .map(|s| {
                        let c = capgate_gateway::contract::export_contract(
                            &runtime,
                            *s,
                            &checked.config.revision,
                        );
                        (s.as_str().to_string(), c)
                    })
                    .collect())
            }
        }
    }
}

/// The surfaces to compare: `--surface` when given; every gateway surface for two
/// deployment files; aiSdk (`contract export`'s default) when a contract file is involved.
pub fn surfaces(flag: Option<Surface>, old: &Side, new: &Side) -> Result<Vec<Surface>, DiffError> {
    select_surfaces(flag, old.is_config() && new.is_config())
}

fn select_surfaces(flag: Option<Surface>, two_configs: bool) -> Result<Vec<Surface>, DiffError> {
    match flag {
        Some(s) if GATEWAY_SURFACES.contains(&s) => Ok(vec![s]),
        Some(s) => Err(DiffError::Surface(s)),
        None if two_configs => Ok(GATEWAY_SURFACES.to_vec()),
        None => Ok(vec![Surface::AiSdk]),
    }
}

/// A contract file's descriptors, with a precise reason when it is not one.
pub fn parse_contract(
    path: &Path,
    text: &str,
) -> Result<Vec<PortableCapabilityDescriptor>, DiffError> {
    let not = |reason: String| DiffError::NotContract {
        path: path.to_path_buf(),
        reason,
    };
    let value: Value = serde_json::from_str(text).map_err(|e| {
        not(format!(
            "it is not JSON ({e}); a deployment file must end in .toml"
        ))
    })?;
    if !value.is_array() {
        return Err(not(format!(
            "expected a JSON array of capability descriptors, found {}",
            kind(&value)
        )));
    }
    let descriptors: Vec<PortableCapabilityDescriptor> = serde_path_to_error::deserialize(&value)
        .map_err(|e| {
        let at = e.path().to_string();
        not(format!("at `{at}`: {}", e.inner()))
    })?;
    let mut seen = BTreeSet::new();
    for (i, d) in descriptors.iter().enumerate() {
        if d.version != capgate_gateway::contract::CONTRACT_VERSION {
            return Err(not(format!(
                "[{i}] (`{}`) is descriptor version {}, and this capgate reads version {}",
                d.id,
                d.version,
                capgate_gateway::contract::CONTRACT_VERSION
            )));
        }
        if !seen.insert(d.id.as_str()) {
            return Err(not(format!("[{i}]: capability `{}` is listed twice", d.id)));
        }
    }
    Ok(descriptors)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A contract: each compared surface's descriptors, by surface name.
pub type Contract = BTreeMap<String, Vec<PortableCapabilityDescriptor>>;

/// Whether a change can break a caller built against the old contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Impact {
    /// Nothing a caller did before fails now.
    Additive,
    /// A call the old contract allowed may fail, or reach something else, now.
    Breaking,
}

capgate_core::wire_enum! {
    Impact {
        Additive => "additive",
        Breaking => "breaking",
    }
}

/// What happened to a capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Only in NEW.
    Added,
    /// Only in OLD.
    Removed,
    /// In both, different.
    Changed,
}

capgate_core::wire_enum! {
    Status {
        Added => "added",
        Removed => "removed",
        Changed => "changed",
    }
}

/// One change of one capability.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// What changed: a descriptor field (`risk`, `toolNames.mcp`), `surfaces`, `capability`
    /// (added or removed), or `inputSchema` with the JSON pointer of the keyword
    /// (`inputSchema/properties/amount/maximum`).
    pub field: String,
    /// Breaking or additive.
    pub impact: Impact,
    /// What it means for a caller, in a sentence.
    pub detail: String,
    /// The old value, where there is one.
    pub old: Option<Value>,
    /// The new value, where there is one.
    pub new: Option<Value>,
}

impl Change {
    fn new(field: impl Into<String>, impact: Impact, detail: impl Into<String>) -> Change {
        Change {
            field: field.into(),
            impact,
            detail: detail.into(),
            old: None,
            new: None,
        }
    }

    fn values(mut self, old: Option<&Value>, new: Option<&Value>) -> Change {
        self.old = old.cloned();
        self.new = new.cloned();
        self
    }
}

/// The surfaces a capability is on, in OLD and NEW.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Surfaces {
    /// In OLD (empty when added).
    pub old: Vec<String>,
    /// In NEW (empty when removed).
    pub new: Vec<String>,
}

/// One added, removed or changed capability.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityDiff {
    /// The capability id.
    pub id: String,
    /// Added, removed or changed.
    pub status: Status,
    /// Breaking when any of its changes is.
    pub impact: Impact,
    /// Where it is exposed, before and after.
    pub surfaces: Surfaces,
    /// Its changes, in a fixed order.
    pub changes: Vec<Change>,
}

/// Counts over the whole diff.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Capabilities only in NEW.
    pub added: usize,
    /// Capabilities only in OLD.
    pub removed: usize,
    /// Capabilities in both, changed.
    pub changed: usize,
    /// Capabilities in both, identical.
    pub unchanged: usize,
    /// Breaking changes.
    pub breaking_changes: usize,
    /// Additive changes.
    pub additive_changes: usize,
}

/// The whole diff (the `--format json` document).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Always [`REPORT_FORMAT`].
    pub format: &'static str,
    /// The OLD file.
    pub old: String,
    /// The NEW file.
    pub new: String,
    /// The surfaces compared.
    pub surfaces: Vec<String>,
    /// Whether anything is breaking.
    pub breaking: bool,
    /// Counts.
    pub summary: Summary,
    /// Added, removed and changed capabilities, by id.
    pub capabilities: Vec<CapabilityDiff>,
}

/// One capability across the compared surfaces.
struct Entry<'a> {
    surfaces: Vec<String>,
    descriptor: &'a PortableCapabilityDescriptor,
}

fn entries(contract: &Contract) -> BTreeMap<&str, Entry<'_>> {
    let mut out: BTreeMap<&str, Entry<'_>> = BTreeMap::new();
    for (surface, descriptors) in contract {
        for d in descriptors {
            out.entry(d.id.as_str())
                .or_insert_with(|| Entry {
                    surfaces: Vec::new(),
                    descriptor: d,
                })
                .surfaces
                .push(surface.clone());
        }
    }
    out
}

/// Compare two contracts over the same surfaces.
pub fn diff(old: &Contract, new: &Contract, old_name: &str, new_name: &str) -> Report {
    let (before, after) = (entries(old), entries(new));
    let ids: BTreeSet<&str> = before.keys().chain(after.keys()).copied().collect();
    let mut summary = Summary::default();
    let mut capabilities = Vec::new();
    for id in ids {
        let (status, changes, surfaces) = match (before.get(id), after.get(id)) {
            (Some(o), None) => {
                summary.removed += 1;
                let detail = format!("removed from {}: calls to it fail", o.surfaces.join(", "));
                (
                    Status::Removed,
                    vec![Change::new("capability", Impact::Breaking, detail)],
                    Surfaces {
                        old: o.surfaces.clone(),
                        new: vec![],
                    },
                )
            }
            (None, Some(n)) => {
                summary.added += 1;
                let detail = format!("new capability on {}", n.surfaces.join(", "));
                (
                    Status::Added,
                    vec![Change::new("capability", Impact::Additive, detail)],
                    Surfaces {
                        old: vec![],
                        new: n.surfaces.clone(),
                    },
                )
            }
            (Some(o), Some(n)) => {
                let changes = capability_changes(o, n);
                if changes.is_empty() {
                    summary.unchanged += 1;
                    continue;
                }
                summary.changed += 1;
                (
                    Status::Changed,
                    changes,
                    Surfaces {
                        old: o.surfaces.clone(),
                        new: n.surfaces.clone(),
                    },
                )
            }
            (None, None) => continue,
        };
        for c in &changes {
            match c.impact {
                Impact::Breaking => summary.breaking_changes += 1,
                Impact::Additive => summary.additive_changes += 1,
            }
        }
        let impact = changes
            .iter()
            .map(|c| c.impact)
            .max()
            .unwrap_or(Impact::Additive);
        capabilities.push(CapabilityDiff {
            id: id.to_string(),
            status,
            impact,
            surfaces,
            changes,
        });
    }
    Report {
        format: REPORT_FORMAT,
        old: old_name.to_string(),
        new: new_name.to_string(),
        surfaces: old
            .keys()
            .chain(new.keys())
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        breaking: summary.breaking_changes > 0,
        summary,
        capabilities,
    }
}

fn json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// How dangerous a side effect is; `external` and `destructive` share the top rank (a
/// change between them is breaking: neither is safer for a caller).
fn danger(s: SideEffect) -> u8 {
    match s {
        SideEffect::None => 0,
        SideEffect::Read => 1,
        SideEffect::Write => 2,
        SideEffect::External | SideEffect::Destructive => 3,
    }
}

fn capability_changes(o: &Entry<'_>, n: &Entry<'_>) -> Vec<Change> {
    let mut out = Vec::new();
    for s in o.surfaces.iter().filter(|s| !n.surfaces.contains(s)) {
        out.push(Change::new(
            "surfaces",
            Impact::Breaking,
            format!("no longer exposed on {s}: calls through it fail"),
        ));
    }
    for s in n.surfaces.iter().filter(|s| !o.surfaces.contains(s)) {
        out.push(Change::new(
            "surfaces",
            Impact::Additive,
            format!("now exposed on {s}"),
        ));
    }
    let (a, b) = (o.descriptor, n.descriptor);
    if a.version != b.version {
        out.push(
            Change::new(
                "version",
                Impact::Breaking,
                format!("descriptor version {} → {}", a.version, b.version),
            )
            .values(Some(&json(&a.version)), Some(&json(&b.version))),
        );
    }
    if a.description != b.description {
        out.push(
            Change::new(
                "description",
                Impact::Additive,
                "description changed (what the model reads)",
            )
            .values(Some(&json(&a.description)), Some(&json(&b.description))),
        );
    }
    schema_changes(&a.input_schema, &b.input_schema, "", &mut out);
    if a.side_effect != b.side_effect {
        let (x, y) = (a.side_effect.as_str(), b.side_effect.as_str());
        let (impact, why) = match danger(b.side_effect).cmp(&danger(a.side_effect)) {
            std::cmp::Ordering::Less => (Impact::Additive, "less dangerous"),
            std::cmp::Ordering::Greater => (Impact::Breaking, "more dangerous"),
            std::cmp::Ordering::Equal => (
                Impact::Breaking,
                "as dangerous but different (treated as breaking)",
            ),
        };
        out.push(
            Change::new(
                "sideEffect",
                impact,
                format!("side effect {x} → {y}: {why}"),
            )
            .values(Some(&json(&x)), Some(&json(&y))),
        );
    }
    if a.risk != b.risk {
        let (impact, how) = if b.risk > a.risk {
            (Impact::Breaking, "raised")
        } else {
            (Impact::Additive, "lowered")
        };
        let (x, y) = (a.risk.as_str(), b.risk.as_str());
        out.push(
            Change::new("risk", impact, format!("risk {how}: {x} → {y}"))
                .values(Some(&json(&x)), Some(&json(&y))),
        );
    }
    if a.requires_approval != b.requires_approval {
        let (impact, detail) = if b.requires_approval {
            (
                Impact::Breaking,
                "needs approval now: calls suspend until a human decides",
            )
        } else {
            (Impact::Additive, "no longer needs approval")
        };
        out.push(Change::new("requiresApproval", impact, detail).values(
            Some(&json(&a.requires_approval)),
            Some(&json(&b.requires_approval)),
        ));
    }
    if a.discovery != b.discovery {
        let (x, y) = (a.discovery.as_str(), b.discovery.as_str());
        let (impact, detail) = if b.discovery.is_discoverable() {
            (Impact::Additive, "listed to models again")
        } else {
            (Impact::Breaking, "left out of model tool lists now")
        };
        out.push(
            Change::new(
                "discovery",
                impact,
                format!("discovery {x} → {y}: {detail}"),
            )
            .values(Some(&json(&x)), Some(&json(&y))),
        );
    }
    for t in a.tags.iter().filter(|t| !b.tags.contains(t)) {
        out.push(Change::new(
            "tags",
            Impact::Breaking,
            format!("tag `{t}` removed: a describe scoped by it no longer lists the capability"),
        ));
    }
    for t in b.tags.iter().filter(|t| !a.tags.contains(t)) {
        out.push(Change::new(
            "tags",
            Impact::Additive,
            format!("tag `{t}` added"),
        ));
    }
    for (field, x, y) in [
        (
            "toolNames.aiSdk",
            &a.tool_names.ai_sdk,
            &b.tool_names.ai_sdk,
        ),
        ("toolNames.mcp", &a.tool_names.mcp, &b.tool_names.mcp),
    ] {
        if x != y {
            out.push(
                Change::new(
                    field,
                    Impact::Breaking,
                    format!("tool renamed `{x}` → `{y}`: calls by the old name fail"),
                )
                .values(Some(&json(x)), Some(&json(y))),
            );
        }
    }
    if out.is_empty() && a.contract_digest != b.contract_digest {
        // Nothing a caller sees changed, but something the digest covers did: policies,
        // redactors, output schema, timeout, retry, the revision…
        out.push(
            Change::new(
                "contractDigest",
                Impact::Additive,
                "only the digest changed (exposure elsewhere, governance, output schema, limits or revision): \
                 callers that pin the old digest get CONTRACT_MISMATCH until they refresh",
            )
            .values(
                Some(&json(&a.contract_digest)),
                Some(&json(&b.contract_digest)),
            ),
        );
    }
    out
}

/// Keywords that document a schema and never change what it accepts.
const ANNOTATIONS: [&str; 10] = [
    "description",
    "title",
    "examples",
    "default",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
    "$id",
];
/// Lower bounds: raising one (or adding it) refuses values that passed.
const LOWER_BOUNDS: [&str; 6] = [
    "minimum",
    "exclusiveMinimum",
    "minLength",
    "minItems",
    "minProperties",
    "minContains",
];
/// Upper bounds: lowering one (or adding it) refuses values that passed.
const UPPER_BOUNDS: [&str; 6] = [
    "maximum",
    "exclusiveMaximum",
    "maxLength",
    "maxItems",
    "maxProperties",
    "maxContains",
];
/// Constraints capgate cannot compare: adding or changing one is breaking, removing it
/// additive.
const OPAQUE_CONSTRAINTS: [&str; 4] = ["pattern", "format", "contentEncoding", "contentMediaType"];

/// A JSON pointer segment (RFC 6901).
fn seg(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

fn field(at: &str) -> String {
    format!("inputSchema{at}")
}

/// Whether `v` accepts every instance (`true`, or an object of annotations only).
fn accepts_all(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::Object(m) => m.keys().all(|k| ANNOTATIONS.contains(&k.as_str())),
        _ => false,
    }
}

/// The changes of one (sub)schema at JSON pointer `at`.
fn schema_changes(old: &Value, new: &Value, at: &str, out: &mut Vec<Change>) {
    if old == new {
        return;
    }
    let empty = Map::new();
    let as_object = |v: &Value| match v {
        Value::Object(m) => Some(m.clone()),
        Value::Bool(true) => Some(empty.clone()),
        _ => None,
    };
    match (as_object(old), as_object(new)) {
        (Some(o), Some(n)) => object_changes(&o, &n, at, out),
        _ if old == &Value::Bool(false) => out.push(
            Change::new(
                field(at),
                Impact::Additive,
                "accepted nothing, accepts values now",
            )
            .values(Some(old), Some(new)),
        ),
        _ if new == &Value::Bool(false) => out.push(
            Change::new(field(at), Impact::Breaking, "accepts nothing now")
                .values(Some(old), Some(new)),
        ),
        _ => out.push(
            Change::new(
                field(at),
                Impact::Breaking,
                "not a schema capgate can compare (treated as breaking: review it)",
            )
            .values(Some(old), Some(new)),
        ),
    }
}

/// `type` as a set of names; `None` when absent (any type).
fn types(v: Option<&Value>) -> Option<Option<BTreeSet<String>>> {
    match v {
        None => Some(None),
        Some(Value::String(s)) => Some(Some(BTreeSet::from([s.clone()]))),
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| t.as_str().map(str::to_string))
            .collect::<Option<BTreeSet<_>>>()
            .map(Some),
        Some(_) => None,
    }
}

fn list(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(", ")
}

fn object_changes(o: &Map<String, Value>, n: &Map<String, Value>, at: &str, out: &mut Vec<Change>) {
    let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
    for key in keys {
        let (x, y) = (o.get(key), n.get(key));
        if x == y {
            continue;
        }
        let here = format!("{at}/{}", seg(key));
        let change =
            |impact: Impact, detail: String| Change::new(field(&here), impact, detail).values(x, y);
        match key.as_str() {
            "type" => match (types(x), types(y)) {
                (Some(None), Some(Some(b))) => out.push(change(
                    Impact::Breaking,
                    format!("type restricted to {}", list(&b)),
                )),
                (Some(Some(_)), Some(None)) => {
                    out.push(change(Impact::Additive, "any type accepted now".into()))
                }
                (Some(Some(a)), Some(Some(b))) => {
                    let lost: BTreeSet<String> = a
                        .iter()
                        .filter(|t| {
                            !(b.contains(*t) || (t.as_str() == "integer" && b.contains("number")))
                        })
                        .cloned()
                        .collect();
                    out.push(if lost.is_empty() {
                        change(
                            Impact::Additive,
                            format!("type widened: {} → {}", list(&a), list(&b)),
                        )
                    } else {
                        change(
                            Impact::Breaking,
                            format!(
                                "type narrowed: {} → {} ({} refused now)",
                                list(&a),
                                list(&b),
                                list(&lost)
                            ),
                        )
                    });
                }
                _ => out.push(opaque(change, key)),
            },
            "properties" => properties(o, n, at, out),
            "required" => required(x, y, at, out),
            "additionalProperties" => {
                let (a, b) = (
                    x.cloned().unwrap_or(Value::Bool(true)),
                    y.cloned().unwrap_or(Value::Bool(true)),
                );
                if b == Value::Bool(false) && a != Value::Bool(false) {
                    out.push(change(
                        Impact::Breaking,
                        "additionalProperties is false now: callers that send undeclared properties are refused"
                            .into(),
                    ));
                } else {
                    schema_changes(&a, &b, &here, out);
                }
            }
            "items" => match (x, y) {
                (_, None) => out.push(change(
                    Impact::Additive,
                    "items are unconstrained now".into(),
                )),
                (None, Some(b)) => schema_changes(&Value::Bool(true), b, &here, out),
                (Some(a), Some(b)) if !a.is_array() && !b.is_array() => {
                    schema_changes(a, b, &here, out)
                }
                _ => out.push(opaque(change, key)),
            },
            "enum" => match (x.map(Value::as_array), y.map(Value::as_array)) {
                (None, Some(Some(b))) => out.push(change(
                    Impact::Breaking,
                    format!("values restricted to {}", Value::Array(b.clone())),
                )),
                (Some(Some(_)), None) => {
                    out.push(change(Impact::Additive, "any value accepted now".into()))
                }
                (Some(Some(a)), Some(Some(b))) => {
                    let lost: Vec<Value> = a.iter().filter(|v| !b.contains(v)).cloned().collect();
                    out.push(if lost.is_empty() {
                        change(Impact::Additive, "more values accepted".into())
                    } else {
                        change(
                            Impact::Breaking,
                            format!("{} no longer accepted", Value::Array(lost)),
                        )
                    });
                }
                _ => out.push(opaque(change, key)),
            },
            "const" => out.push(match y {
                None => change(Impact::Additive, "any value accepted now".into()),
                Some(v) => change(Impact::Breaking, format!("only {v} accepted now")),
            }),
            "uniqueItems" => {
                let on = |v: Option<&Value>| v == Some(&Value::Bool(true));
                out.push(if on(y) {
                    change(Impact::Breaking, "items must be unique now".into())
                } else {
                    change(Impact::Additive, "items need not be unique now".into())
                });
            }
            "multipleOf" => match (x.and_then(Value::as_f64), y.and_then(Value::as_f64)) {
                (_, None) if y.is_none() => {
                    out.push(change(Impact::Additive, "multipleOf removed".into()))
                }
                (Some(a), Some(b)) if b != 0.0 && (a / b).fract() == 0.0 => out.push(change(
                    Impact::Additive,
                    format!("multipleOf {a} → {b}: every old multiple still passes"),
                )),
                _ => out.push(change(
                    Impact::Breaking,
                    "multipleOf added or changed: values that passed may be refused".into(),
                )),
            },
            k if ANNOTATIONS.contains(&k) => out.push(change(
                Impact::Additive,
                format!("`{k}` changed (documentation only)"),
            )),
            k if LOWER_BOUNDS.contains(&k) || UPPER_BOUNDS.contains(&k) => {
                let lower = LOWER_BOUNDS.contains(&k);
                match (x.map(Value::as_f64), y.map(Value::as_f64)) {
                    (None, Some(Some(b))) => {
                        out.push(change(Impact::Breaking, format!("new {k} {b}")))
                    }
                    (Some(Some(_)), None) => {
                        out.push(change(Impact::Additive, format!("{k} removed")))
                    }
                    (Some(Some(a)), Some(Some(b))) => {
                        let tighter = if lower { b > a } else { b < a };
                        let how = if b > a { "raised" } else { "lowered" };
                        out.push(change(
                            if tighter {
                                Impact::Breaking
                            } else {
                                Impact::Additive
                            },
                            format!("{k} {how}: {a} → {b}"),
                        ));
                    }
                    _ => out.push(opaque(change, key)),
                }
            }
            k if OPAQUE_CONSTRAINTS.contains(&k) && y.is_none() => {
                out.push(change(Impact::Additive, format!("{k} removed")))
            }
            _ => out.push(opaque(change, key)),
        }
    }
}

/// A change capgate cannot prove only loosens the schema.
fn opaque(change: impl Fn(Impact, String) -> Change, key: &str) -> Change {
    change(
        Impact::Breaking,
        format!(
            "`{key}` changed, and capgate cannot prove the new schema accepts every input the old one did: \
             treated as breaking (review it; --allow-breaking accepts it)"
        ),
    )
}

fn properties(o: &Map<String, Value>, n: &Map<String, Value>, at: &str, out: &mut Vec<Change>) {
    let empty = Map::new();
    let props = |m: &Map<String, Value>| -> Option<Map<String, Value>> {
        match m.get("properties") {
            None => Some(empty.clone()),
            Some(Value::Object(p)) => Some(p.clone()),
            Some(_) => None,
        }
    };
    let (Some(a), Some(b)) = (props(o), props(n)) else {
        out.push(
            Change::new(
                field(&format!("{at}/properties")),
                Impact::Breaking,
                "`properties` is not an object: cannot compare (treated as breaking)",
            )
            .values(o.get("properties"), n.get("properties")),
        );
        return;
    };
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for name in names {
        let here = format!("{at}/properties/{}", seg(name));
        match (a.get(name), b.get(name)) {
            (Some(x), Some(y)) => schema_changes(x, y, &here, out),
            (Some(x), None) => {
                let extra = n
                    .get("additionalProperties")
                    .cloned()
                    .unwrap_or(Value::Bool(true));
                let (impact, detail) = if extra == Value::Bool(false) {
                    (
                        Impact::Breaking,
                        format!(
                            "property `{name}` removed and additionalProperties is false: callers that send it are refused"
                        ),
                    )
                } else if accepts_all(&extra) {
                    (
                        Impact::Additive,
                        format!(
                            "property `{name}` removed (still accepted: additionalProperties allows it; the capability may ignore it)"
                        ),
                    )
                } else {
                    (
                        Impact::Breaking,
                        format!(
                            "property `{name}` removed: its values now fall under additionalProperties' schema, which may refuse them"
                        ),
                    )
                };
                out.push(Change::new(field(&here), impact, detail).values(Some(x), None));
            }
            (None, Some(y)) => {
                let required = n
                    .get("required")
                    .and_then(Value::as_array)
                    .is_some_and(|r| r.iter().any(|v| v.as_str() == Some(name.as_str())));
                // A new required property is breaking through `required`, reported there.
                let detail = if required {
                    format!("new property `{name}` (required: see inputSchema{at}/required)")
                } else {
                    format!("new optional property `{name}`")
                };
                out.push(Change::new(field(&here), Impact::Additive, detail).values(None, Some(y)))
            }
            (None, None) => {}
        }
    }
}

fn required(x: Option<&Value>, y: Option<&Value>, at: &str, out: &mut Vec<Change>) {
    let names = |v: Option<&Value>| -> Option<BTreeSet<String>> {
        match v {
            None => Some(BTreeSet::new()),
            Some(Value::Array(a)) => a.iter().map(|s| s.as_str().map(str::to_string)).collect(),
            Some(_) => None,
        }
    };
    let here = format!("{at}/required");
    let (Some(a), Some(b)) = (names(x), names(y)) else {
        out.push(
            Change::new(
                field(&here),
                Impact::Breaking,
                "`required` is not a list of names: cannot compare (treated as breaking)",
            )
            .values(x, y),
        );
        return;
    };
    for name in b.difference(&a) {
        out.push(
            Change::new(
                field(&here),
                Impact::Breaking,
                format!("new required property `{name}`: callers that omit it are refused"),
            )
            .values(None, Some(&Value::String(name.clone()))),
        );
    }
    for name in a.difference(&b) {
        out.push(
            Change::new(
                field(&here),
                Impact::Additive,
                format!("property `{name}` is optional now"),
            )
            .values(Some(&Value::String(name.clone())), None),
        );
    }
}

impl Report {
    /// The table for people: one row per change, then a summary line.
    pub fn render_table(&self) -> String {
        let mut out = format!(
            "contract diff {} → {} (surfaces: {})\n\n",
            self.old,
            self.new,
            self.surfaces.join(", ")
        );
        if self.capabilities.is_empty() {
            out.push_str("no capability changed\n");
        } else {
            let mut rows = Vec::new();
            for c in &self.capabilities {
                for (i, ch) in c.changes.iter().enumerate() {
                    let first = i == 0;
                    rows.push(vec![
                        if first { c.id.clone() } else { String::new() },
                        if first {
                            c.status.as_str().to_string()
                        } else {
                            String::new()
                        },
                        ch.impact.as_str().to_string(),
                        ch.field.clone(),
                        ch.detail.clone(),
                    ]);
                }
            }
            out.push_str(&crate::table::render(
                &["CAPABILITY", "STATUS", "IMPACT", "FIELD", "CHANGE"],
                &rows,
            ));
        }
        let s = &self.summary;
        out.push_str(&format!(
            "\n{} added, {} removed, {} changed, {} unchanged; {} breaking change(s), {} additive\n",
            s.added, s.removed, s.changed, s.unchanged, s.breaking_changes, s.additive_changes
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capgate_core::meta::{Discovery, Risk};
    use capgate_gateway::wire::ToolNames;
    use serde_json::json;

    fn descriptor(id: &str) -> PortableCapabilityDescriptor {
        PortableCapabilityDescriptor {
            version: 1,
            id: id.into(),
            path: id.split('.').map(str::to_string).collect(),
            description: "Refund an order.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "orderId": {"type": "string", "minLength": 1},
                    "amount": {"type": "number", "minimum": 0, "maximum": 500},
                    "reason": {"type": "string", "enum": ["damaged", "late", "other"]}
                },
                "required": ["orderId", "amount"],
                "additionalProperties": false
            }),
            side_effect: SideEffect::Write,
            risk: Risk::High,
            tags: vec!["payments".into()],
            requires_approval: false,
            discovery: Discovery::Discoverable,
            tool_names: ToolNames {
                ai_sdk: id.replace('.', "_"),
                mcp: id.replace('.', "_"),
            },
            contract_digest: "d1".into(),
        }
    }

    fn contract(surfaces: &[(&str, Vec<PortableCapabilityDescriptor>)]) -> Contract {
        surfaces
            .iter()
            .map(|(s, d)| (s.to_string(), d.clone()))
            .collect()
    }

    /// The diff of one capability on aiSdk, before and after `edit`.
    fn changed(edit: impl Fn(&mut PortableCapabilityDescriptor)) -> Report {
        let old = descriptor("orders.refund");
        let mut new = old.clone();
        edit(&mut new);
        new.contract_digest = "d2".into();
        diff(
            &contract(&[("aiSdk", vec![old])]),
            &contract(&[("aiSdk", vec![new])]),
            "old",
            "new",
        )
    }

    fn schema(edit: impl Fn(&mut Value)) -> Report {
        changed(|d| edit(&mut d.input_schema))
    }

    fn only(report: &Report) -> &Change {
        let changes: Vec<&Change> = report
            .capabilities
            .iter()
            .flat_map(|c| &c.changes)
            .collect();
        assert_eq!(changes.len(), 1, "exactly one change: {changes:#?}");
        changes[0]
    }

    #[test]
    fn two_configs_compare_every_gateway_surface_and_a_contract_file_one() {
        let names = |flag, both| -> Vec<&'static str> {
            match select_surfaces(flag, both) {
                Ok(s) => s.into_iter().map(Surface::as_str).collect(),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(names(None, true), ["aiSdk", "mcp", "workflow"]);
        assert_eq!(names(None, false), ["aiSdk"]);
        assert_eq!(names(Some(Surface::Mcp), true), ["mcp"]);
        assert_eq!(names(Some(Surface::Workflow), false), ["workflow"]);
        for bad in [Surface::Direct, Surface::Test] {
            assert!(matches!(
                select_surfaces(Some(bad), true),
                Err(DiffError::Surface(_))
            ));
        }
    }

    #[test]
    fn identical_contracts_have_no_changes() {
        let c = contract(&[("aiSdk", vec![descriptor("orders.refund")])]);
        let r = diff(&c, &c, "old", "new");
        assert!(r.capabilities.is_empty());
        assert!(!r.breaking);
        assert_eq!(r.summary.unchanged, 1);
    }

    #[test]
    fn a_removed_capability_is_breaking_and_a_new_one_additive() {
        let r = diff(
            &contract(&[("aiSdk", vec![descriptor("a.one")])]),
            &contract(&[("aiSdk", vec![descriptor("b.two")])]),
            "old",
            "new",
        );
        assert!(r.breaking);
        assert_eq!(r.capabilities[0].id, "a.one");
        assert_eq!(r.capabilities[0].status, Status::Removed);
        assert_eq!(r.capabilities[0].impact, Impact::Breaking);
        assert_eq!(r.capabilities[1].status, Status::Added);
        assert_eq!(r.capabilities[1].impact, Impact::Additive);
        assert_eq!(r.summary.added, 1);
        assert_eq!(r.summary.removed, 1);
    }

    #[test]
    fn a_surface_removed_is_breaking_and_a_surface_added_additive() {
        let d = descriptor("orders.refund");
        let r = diff(
            &contract(&[
                ("aiSdk", vec![d.clone()]),
                ("mcp", vec![d.clone()]),
                ("workflow", vec![]),
            ]),
            &contract(&[
                ("aiSdk", vec![d.clone()]),
                ("mcp", vec![]),
                ("workflow", vec![d]),
            ]),
            "old",
            "new",
        );
        let c = &r.capabilities[0];
        assert_eq!(c.status, Status::Changed);
        assert_eq!(c.surfaces.old, vec!["aiSdk", "mcp"]);
        assert_eq!(c.surfaces.new, vec!["aiSdk", "workflow"]);
        assert_eq!(c.changes[0].impact, Impact::Breaking);
        assert!(c.changes[0].detail.contains("no longer exposed on mcp"));
        assert_eq!(c.changes[1].impact, Impact::Additive);
        assert!(c.changes[1].detail.contains("now exposed on workflow"));
    }

    #[test]
    fn widened_exposure_alone_is_additive() {
        let d = descriptor("orders.refund");
        let r = diff(
            &contract(&[("aiSdk", vec![d.clone()]), ("mcp", vec![])]),
            &contract(&[("aiSdk", vec![d.clone()]), ("mcp", vec![d])]),
            "old",
            "new",
        );
        assert!(!r.breaking);
        assert_eq!(only(&r).field, "surfaces");
    }

    #[test]
    fn higher_risk_is_breaking_and_lower_risk_additive() {
        let up = changed(|d| d.risk = Risk::Critical);
        assert_eq!(only(&up).impact, Impact::Breaking);
        assert_eq!(only(&up).detail, "risk raised: high → critical");
        let down = changed(|d| d.risk = Risk::Low);
        assert_eq!(only(&down).impact, Impact::Additive);
    }

    #[test]
    fn a_new_approval_requirement_is_breaking_and_dropping_one_additive() {
        let r = changed(|d| d.requires_approval = true);
        assert_eq!(only(&r).field, "requiresApproval");
        assert_eq!(only(&r).impact, Impact::Breaking);
        let old = {
            let mut d = descriptor("orders.refund");
            d.requires_approval = true;
            d
        };
        let r = diff(
            &contract(&[("aiSdk", vec![old])]),
            &contract(&[("aiSdk", vec![descriptor("orders.refund")])]),
            "o",
            "n",
        );
        assert_eq!(only(&r).impact, Impact::Additive);
    }

    #[test]
    fn a_more_dangerous_side_effect_is_breaking_and_a_safer_one_additive() {
        let r = changed(|d| d.side_effect = SideEffect::Destructive);
        assert_eq!(only(&r).impact, Impact::Breaking);
        let r = changed(|d| d.side_effect = SideEffect::Read);
        assert_eq!(only(&r).impact, Impact::Additive);
    }

    #[test]
    fn external_and_destructive_swapping_is_breaking() {
        let old = {
            let mut d = descriptor("x.y");
            d.side_effect = SideEffect::External;
            d
        };
        let mut new = old.clone();
        new.side_effect = SideEffect::Destructive;
        let r = diff(
            &contract(&[("aiSdk", vec![old])]),
            &contract(&[("aiSdk", vec![new])]),
            "o",
            "n",
        );
        assert_eq!(only(&r).impact, Impact::Breaking);
    }

    #[test]
    fn a_description_change_is_additive() {
        let r = changed(|d| d.description = "Refund an order, fully or in part.".into());
        assert_eq!(only(&r).field, "description");
        assert_eq!(only(&r).impact, Impact::Additive);
        assert!(!r.breaking);
    }

    #[test]
    fn a_renamed_tool_is_breaking() {
        let r = changed(|d| d.tool_names.mcp = "refund".into());
        assert_eq!(only(&r).field, "toolNames.mcp");
        assert_eq!(only(&r).impact, Impact::Breaking);
    }

    #[test]
    fn becoming_contextual_is_breaking() {
        let r = changed(|d| d.discovery = Discovery::Contextual);
        assert_eq!(only(&r).impact, Impact::Breaking);
    }

    #[test]
    fn a_removed_tag_is_breaking_and_an_added_tag_additive() {
        let r = changed(|d| d.tags = vec!["refunds".into()]);
        let c = &r.capabilities[0].changes;
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].impact, Impact::Breaking);
        assert_eq!(c[1].impact, Impact::Additive);
    }

    #[test]
    fn a_digest_only_change_is_reported_as_additive() {
        let r = changed(|_| {});
        assert_eq!(only(&r).field, "contractDigest");
        assert_eq!(only(&r).impact, Impact::Additive);
        assert!(only(&r).detail.contains("CONTRACT_MISMATCH"));
    }

    #[test]
    fn a_new_required_property_is_breaking() {
        let r = schema(|s| {
            s["properties"]["note"] = json!({"type": "string"});
            s["required"] = json!(["orderId", "amount", "note"]);
        });
        let c = &r.capabilities[0].changes;
        assert_eq!(c.len(), 2, "{c:#?}");
        assert_eq!(c[0].field, "inputSchema/properties/note");
        assert_eq!(c[0].impact, Impact::Additive);
        assert_eq!(
            c[0].detail,
            "new property `note` (required: see inputSchema/required)"
        );
        assert_eq!(c[1].field, "inputSchema/required");
        assert_eq!(c[1].impact, Impact::Breaking);
        assert!(c[1].detail.contains("new required property `note`"));
        assert!(r.breaking);
    }

    #[test]
    fn a_new_optional_property_is_additive() {
        let r = schema(|s| s["properties"]["note"] = json!({"type": "string"}));
        assert_eq!(only(&r).impact, Impact::Additive);
    }

    #[test]
    fn a_property_made_optional_is_additive() {
        let r = schema(|s| s["required"] = json!(["orderId"]));
        assert_eq!(only(&r).impact, Impact::Additive);
        assert!(only(&r).detail.contains("`amount` is optional now"));
    }

    #[test]
    fn a_removed_property_is_breaking_when_additional_properties_is_false() {
        let r = schema(|s| {
            if let Some(p) = s["properties"].as_object_mut() {
                p.remove("reason");
            }
        });
        assert_eq!(only(&r).field, "inputSchema/properties/reason");
        assert_eq!(only(&r).impact, Impact::Breaking);
    }

    #[test]
    fn a_removed_property_is_additive_when_additional_properties_allow_it() {
        let r = schema(|s| {
            if let Some(p) = s["properties"].as_object_mut() {
                p.remove("reason");
            }
            s["additionalProperties"] = json!(true);
        });
        let c = &r.capabilities[0].changes;
        assert!(c.iter().all(|c| c.impact == Impact::Additive), "{c:#?}");
    }

    #[test]
    fn additional_properties_turned_false_is_breaking() {
        let old = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let new = json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false});
        let mut out = Vec::new();
        schema_changes(&old, &new, "", &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].field, "inputSchema/additionalProperties");
        assert_eq!(out[0].impact, Impact::Breaking);
        let mut back = Vec::new();
        schema_changes(&new, &old, "", &mut back);
        assert_eq!(back[0].impact, Impact::Additive);
    }

    #[test]
    fn a_narrower_type_is_breaking_and_a_wider_one_additive() {
        let r = schema(|s| s["properties"]["amount"]["type"] = json!("integer"));
        assert_eq!(only(&r).impact, Impact::Breaking);
        assert_eq!(only(&r).field, "inputSchema/properties/amount/type");
        let r = schema(|s| s["properties"]["orderId"]["type"] = json!(["string", "null"]));
        assert_eq!(only(&r).impact, Impact::Additive);
    }

    #[test]
    fn integer_to_number_is_a_widening() {
        let mut out = Vec::new();
        schema_changes(
            &json!({"type": "integer"}),
            &json!({"type": "number"}),
            "",
            &mut out,
        );
        assert_eq!(out[0].impact, Impact::Additive);
    }

    #[test]
    fn a_removed_enum_value_is_breaking_and_an_added_one_additive() {
        let r = schema(|s| s["properties"]["reason"]["enum"] = json!(["damaged", "late"]));
        assert_eq!(only(&r).impact, Impact::Breaking);
        assert!(only(&r).detail.contains("\"other\""));
        let r = schema(|s| {
            s["properties"]["reason"]["enum"] = json!(["damaged", "late", "other", "duplicate"])
        });
        assert_eq!(only(&r).impact, Impact::Additive);
    }

    #[test]
    fn a_lower_maximum_or_higher_minimum_is_breaking() {
        let r = schema(|s| s["properties"]["amount"]["maximum"] = json!(100));
        assert_eq!(only(&r).impact, Impact::Breaking);
        assert_eq!(only(&r).detail, "maximum lowered: 500 → 100");
        let r = schema(|s| s["properties"]["amount"]["minimum"] = json!(1));
        assert_eq!(only(&r).impact, Impact::Breaking);
        let r = schema(|s| s["properties"]["orderId"]["maxLength"] = json!(64));
        assert_eq!(only(&r).impact, Impact::Breaking);
        assert_eq!(only(&r).detail, "new maxLength 64");
    }

    #[test]
    fn a_higher_maximum_or_a_removed_bound_is_additive() {
        let r = schema(|s| s["properties"]["amount"]["maximum"] = json!(1000));
        assert_eq!(only(&r).impact, Impact::Additive);
        let r = schema(|s| {
            if let Some(a) = s["properties"]["orderId"].as_object_mut() {
                a.remove("minLength");
            }
        });
        assert_eq!(only(&r).impact, Impact::Additive);
    }

    #[test]
    fn a_schema_description_change_is_additive() {
        let r = schema(|s| s["properties"]["amount"]["description"] = json!("In euros."));
        assert_eq!(only(&r).impact, Impact::Additive);
        assert!(only(&r).detail.contains("documentation only"));
    }

    #[test]
    fn an_uncomparable_keyword_is_breaking_and_says_why() {
        let r = schema(|s| {
            s["properties"]["orderId"]["anyOf"] = json!([{"pattern": "^ord_"}, {"pattern": "^o-"}])
        });
        assert_eq!(only(&r).impact, Impact::Breaking);
        assert!(
            only(&r).detail.contains("cannot prove"),
            "{}",
            only(&r).detail
        );
        let r = schema(|s| s["properties"]["orderId"]["pattern"] = json!("^ord_"));
        assert_eq!(only(&r).impact, Impact::Breaking);
    }

    #[test]
    fn nested_objects_are_compared_property_by_property() {
        let mut out = Vec::new();
        schema_changes(
            &json!({"type": "object", "properties": {"address": {"type": "object", "properties": {"zip": {"type": "string"}}}}}),
            &json!({"type": "object", "properties": {"address": {"type": "object", "properties": {"zip": {"type": "string"}}, "required": ["zip"]}}}),
            "",
            &mut out,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].field, "inputSchema/properties/address/required");
        assert_eq!(out[0].impact, Impact::Breaking);
    }

    #[test]
    fn a_multiple_of_a_divisor_is_additive() {
        let mut out = Vec::new();
        schema_changes(
            &json!({"multipleOf": 10}),
            &json!({"multipleOf": 5}),
            "",
            &mut out,
        );
        assert_eq!(out[0].impact, Impact::Additive);
        let mut out = Vec::new();
        schema_changes(
            &json!({"multipleOf": 5}),
            &json!({"multipleOf": 10}),
            "",
            &mut out,
        );
        assert_eq!(out[0].impact, Impact::Breaking);
    }

    #[test]
    fn a_contract_file_must_be_an_array_of_version_1_descriptors() {
        let p = Path::new("old.json");
        let err = |text: &str| match parse_contract(p, text) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted {text}"),
        };
        assert!(
            err("{\"a\":1}")
                .contains("expected a JSON array of capability descriptors, found an object")
        );
        assert!(err("revision = 1").contains("not JSON"));
        assert!(
            err("[{\"id\":\"x\"}]").contains("at `[0]`"),
            "{}",
            err("[{\"id\":\"x\"}]")
        );
        let mut d = json(&descriptor("a.b"));
        d["version"] = json!(2);
        assert!(err(&Value::Array(vec![d]).to_string()).contains("version 2"));
        let d = json(&descriptor("a.b"));
        assert!(err(&Value::Array(vec![d.clone(), d]).to_string()).contains("listed twice"));
        let ok = Value::Array(vec![json(&descriptor("a.b"))]).to_string();
        assert!(parse_contract(p, &ok).is_ok());
    }

    #[test]
    fn the_json_report_has_the_documented_shape() {
        let r = changed(|d| d.risk = Risk::Critical);
        let v = json(&r);
        assert_eq!(v["format"], "capgate.contract-diff.v1");
        assert_eq!(v["breaking"], true);
        assert_eq!(v["surfaces"], json!(["aiSdk"]));
        assert_eq!(v["summary"]["breakingChanges"], 1);
        let c = &v["capabilities"][0];
        assert_eq!(c["id"], "orders.refund");
        assert_eq!(c["status"], "changed");
        assert_eq!(c["impact"], "breaking");
        assert_eq!(c["surfaces"], json!({"old": ["aiSdk"], "new": ["aiSdk"]}));
        assert_eq!(
            c["changes"][0],
            json!({"field": "risk", "impact": "breaking", "detail": "risk raised: high → critical", "old": "high", "new": "critical"})
        );
    }

    #[test]
    fn the_table_has_one_row_per_change_and_a_summary() {
        let t = changed(|d| {
            d.risk = Risk::Critical;
            d.description = "x".into();
        })
        .render_table();
        assert!(t.contains("CAPABILITY"), "{t}");
        assert!(
            t.contains("orders.refund  changed  additive  description"),
            "{t}"
        );
        assert!(
            t.contains(&format!("\n{}breaking  risk", " ".repeat(24))),
            "{t}"
        );
        assert!(
            t.contains(
                "0 added, 0 removed, 1 changed, 0 unchanged; 1 breaking change(s), 1 additive"
            ),
            "{t}"
        );
    }
}
