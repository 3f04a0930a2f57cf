//! The compatibility diff of two contracts: what changed between two revisions of a
//! deployment's portable contract, and whether a caller built against OLD can break on NEW.
//!
//! A change is **breaking** when a call that the old contract allowed can fail (or reach
//! a different tool) under the new one, and **additive** otherwise. For input schemas
//! the rule is: breaking when some input valid under the old schema may be refused by the
//! new one; a keyword whose effect capgate cannot compare (`anyOf`, `$ref`, a changed
//! `pattern`, …) counts as breaking, and the change says why.
//!
//! [`diff`] compares two [`Contract`]s surface by surface and returns a [`Report`] (the
//! document `capgate contract diff --format json` prints). Its parts, one job each:
//!
//! - this module: the report's types and the capability-level walk (added, removed,
//!   changed capabilities, counted in the [`Summary`]);
//! - `capability`: the fields of one capability present on both sides (surfaces, side
//!   effect, risk, approval, discovery, tags, tool names, digest);
//! - `schema`: the JSON-Schema compatibility engine for input schemas;
//! - `report`: the report as a table for people.

mod capability;
mod report;
mod schema;

use crate::descriptor::{Contract, PortableCapabilityDescriptor};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

pub use report::TABLE_HEADERS;

/// The `format` field of the JSON report, so a program can tell this document's version.
pub const REPORT_FORMAT: &str = "capgate.contract-diff.v1";

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
    /// Whether this change can break a caller built against OLD.
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
    /// Whether it was added, removed or changed.
    pub status: Status,
    /// Breaking when any of its changes is.
    pub impact: Impact,
    /// Where it is exposed, before and after.
    pub surfaces: Surfaces,
    /// Its changes, in a fixed order.
    pub changes: Vec<Change>,
}

/// Counts over the whole diff, for the report's last line and for CI gates.
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
    /// How many changes, over all capabilities, are breaking.
    pub breaking_changes: usize,
    /// How many changes, over all capabilities, are additive.
    pub additive_changes: usize,
}

/// The whole diff (the `--format json` document).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Always [`REPORT_FORMAT`].
    pub format: &'static str,
    /// The name of the OLD side (the file as given, or what the caller called it).
    pub old: String,
    /// The name of the NEW side.
    pub new: String,
    /// The surfaces compared.
    pub surfaces: Vec<String>,
    /// Whether anything is breaking.
    pub breaking: bool,
    /// How many capabilities were added, removed, changed or left alone, and how many
    /// changes are breaking or additive.
    pub summary: Summary,
    /// Added, removed and changed capabilities, by id.
    pub capabilities: Vec<CapabilityDiff>,
}

/// One capability across the compared surfaces.
struct Entry<'a> {
    surfaces: Vec<String>,
    descriptor: &'a PortableCapabilityDescriptor,
}

/// Every capability of `contract`, by id, with the surfaces it is on.
fn entries(contract: &Contract) -> BTreeMap<&str, Entry<'_>> {
    let mut out: BTreeMap<&str, Entry<'_>> = BTreeMap::new();
    for (surface, descriptors) in contract.iter() {
        for d in descriptors {
            out.entry(d.id.as_str())
                .or_insert_with(|| Entry {
                    surfaces: Vec::new(),
                    descriptor: d,
                })
                .surfaces
                .push(surface.to_string());
        }
    }
    out
}

/// Compare two contracts: every capability of either, by id, across the surfaces either
/// covers (compare contracts of the same surfaces, or a surface missing on one side reads
/// as every capability leaving or joining it). `old_name` and `new_name` only label the
/// report.
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
                let changes = capability::changes(o, n);
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
            .surfaces()
            .chain(new.surfaces())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(str::to_string)
            .collect(),
        breaking: summary.breaking_changes > 0,
        summary,
        capabilities,
    }
}

/// A value as JSON for a change's `old` / `new` (plain data always serializes).
fn json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{changed, contract, descriptor, only};
    use capgate_core::actor::Surface;
    use capgate_core::meta::Risk;
    use serde_json::json;

    #[test]
    fn identical_contracts_have_no_changes() {
        let c = contract(&[(Surface::AiSdk, vec![descriptor("orders.refund")])]);
        let r = diff(&c, &c, "old", "new");
        assert!(r.capabilities.is_empty());
        assert!(!r.breaking);
        assert_eq!(r.summary.unchanged, 1);
    }

    #[test]
    fn a_removed_capability_is_breaking_and_a_new_one_additive() {
        let r = diff(
            &contract(&[(Surface::AiSdk, vec![descriptor("a.one")])]),
            &contract(&[(Surface::AiSdk, vec![descriptor("b.two")])]),
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
                (Surface::AiSdk, vec![d.clone()]),
                (Surface::Mcp, vec![d.clone()]),
                (Surface::Workflow, vec![]),
            ]),
            &contract(&[
                (Surface::AiSdk, vec![d.clone()]),
                (Surface::Mcp, vec![]),
                (Surface::Workflow, vec![d]),
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
            &contract(&[(Surface::AiSdk, vec![d.clone()]), (Surface::Mcp, vec![])]),
            &contract(&[(Surface::AiSdk, vec![d.clone()]), (Surface::Mcp, vec![d])]),
            "old",
            "new",
        );
        assert!(!r.breaking);
        assert_eq!(only(&r).field, "surfaces");
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
}
