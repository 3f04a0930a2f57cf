//! `capgate inspect --config F`: the inventory of a deployment that a reviewer reads in a
//! pull request — per capability its surfaces, side effect, risk, policies, redactors,
//! static approval, timeout and retry — sorted by capability id.
//!
//! It reads the file as the first step of `capgate check` does (syntax, types, references,
//! value ranges, every problem located) and loads no plugin, so it works before the plugins
//! are built; `capgate check` is the full validation.

use crate::validate::Refused;
use capgate_config::{CapabilitySection, Config};
use capgate_core::actor::Surface;
use capgate_core::meta::{ApprovalConfig, RetryConfig, Risk, SideEffect};
use serde::Serialize;
use std::path::Path;

/// The `format` field of the JSON inventory.
pub const INVENTORY_FORMAT: &str = "capgate.inventory.v1";

/// One capability's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// The capability id.
    pub id: String,
    /// The surfaces it is exposed on, in the documented order ([`Surface::ALL`]).
    pub surfaces: Vec<String>,
    /// Side effect.
    pub side_effect: SideEffect,
    /// Risk.
    pub risk: Risk,
    /// Its own policy bindings, in order (the runtime-level ones run first, for every
    /// capability: [`Inventory::runtime_policies`]).
    pub policies: Vec<String>,
    /// Its redactor bindings, in order.
    pub redactors: Vec<String>,
    /// The static approval requirement (policies may require one per call too).
    pub approval: Option<ApprovalConfig>,
    /// The per-attempt timeout in force, in milliseconds.
    pub timeout_ms: u64,
    /// Whether that timeout is `[runtime] timeoutMs` (the capability sets none).
    pub timeout_default: bool,
    /// Runtime-managed retries.
    pub retry: Option<RetryConfig>,
}

/// The whole inventory (the `--format json` document).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    /// Always [`INVENTORY_FORMAT`].
    pub format: &'static str,
    /// The configuration file.
    pub config: String,
    /// The deployment revision.
    pub revision: String,
    /// Policies every capability runs, before its own.
    pub runtime_policies: Vec<String>,
    /// The policy bindings in shadow mode (evaluated, never enforced), by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shadow_policies: Vec<String>,
    /// One row per capability, by id.
    pub capabilities: Vec<Row>,
    /// The rules of every policy written as expressions (`plugin = "cel"` or `"cedar"`), by
    /// name: what a reviewer reads instead of a plugin's source.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RulePolicy>,
}

/// A policy written as expressions, with its rules in the order they are tried.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RulePolicy {
    /// The binding's name.
    pub policy: String,
    /// The shipped plugin (`cel` or `cedar`).
    pub plugin: String,
    /// A `cel` policy's rules as written (`when`, `stance`, …); the first whose `when`
    /// holds decides.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<serde_json::Value>,
    /// A `cedar` policy's policy set as written inline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policies: Option<String>,
    /// A `cedar` policy's `policiesFile` and the SHA-256 that pins it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policies_file: Option<String>,
}

/// Read `path` and take its inventory; a refused file has every problem located.
pub fn inspect(path: &Path) -> Result<Inventory, Refused> {
    let (config, _) = Config::load(path).map_err(|problems| Refused {
        path: path.to_path_buf(),
        problems,
    })?;
    Ok(inventory(&config))
}

/// The inventory of a loaded configuration.
pub fn inventory(config: &Config) -> Inventory {
    let mut capabilities: Vec<Row> = config
        .capabilities
        .iter()
        .map(|c| row(c, config.runtime.timeout_ms))
        .collect();
    capabilities.sort_by(|a, b| a.id.cmp(&b.id));
    Inventory {
        format: INVENTORY_FORMAT,
        config: config.path.display().to_string(),
        revision: config.revision.clone(),
        runtime_policies: config.runtime.policies.clone(),
        shadow_policies: config
            .policies
            .iter()
            .filter(|(_, b)| b.mode == capgate_config::PolicyMode::Shadow)
            .map(|(name, _)| name.clone())
            .collect(),
        capabilities,
        rules: config
            .policies
            .iter()
            .filter(|(_, b)| {
                [capgate_builtin::CEL.name, capgate_builtin::CEDAR.name]
                    .contains(&b.plugin.as_str())
                    && !config.plugins.contains_key(&b.plugin)
            })
            .map(|(name, b)| {
                let text = |k: &str| {
                    b.config
                        .get(k)
                        .and_then(serde_json::Value::as_str)
                        .map(str::to_string)
                };
                RulePolicy {
                    policy: name.clone(),
                    plugin: b.plugin.clone(),
                    rules: b
                        .config
                        .get("rules")
                        .and_then(serde_json::Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                    policies: text("policies"),
                    policies_file: text("policiesFile")
                        .map(|f| format!("{f} (sha256 {})", text("sha256").unwrap_or_default())),
                }
            })
            .collect(),
    }
}

fn row(c: &CapabilitySection, default_timeout_ms: u64) -> Row {
    Row {
        id: c.id.clone(),
        surfaces: Surface::ALL
            .into_iter()
            .filter(|s| c.expose.allows(*s))
            .map(|s| s.as_str().to_string())
            .collect(),
        side_effect: c.side_effect,
        risk: c.risk,
        policies: c.policies.clone(),
        redactors: c.redactors.clone(),
        approval: c.approval.clone(),
        timeout_ms: c.timeout_ms.unwrap_or(default_timeout_ms),
        timeout_default: c.timeout_ms.is_none(),
        retry: c.retry.clone(),
    }
}

fn or_dash(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(", ")
    }
}

fn approval_cell(a: Option<&ApprovalConfig>) -> String {
    match a {
        Some(a) if a.required => match &a.approval_type {
            Some(t) => format!("required ({t})"),
            None => "required".into(),
        },
        _ => "-".into(),
    }
}

fn retry_cell(r: Option<&RetryConfig>) -> String {
    match r {
        Some(r) if r.max_attempts > 0 => {
            let mut s = format!("{} retries", r.max_attempts);
            if let Some(b) = r.backoff_ms {
                s.push_str(&format!(", backoff {b} ms"));
            }
            if let Some(codes) = &r.retry_on {
                let codes: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
                s.push_str(&format!(", on {}", codes.join("|")));
            }
            s
        }
        _ => "-".into(),
    }
}

impl Inventory {
    /// The table for people: one row per capability, then the runtime-level policies.
    pub fn render_table(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .capabilities
            .iter()
            .map(|r| {
                vec![
                    r.id.clone(),
                    or_dash(&r.surfaces),
                    r.side_effect.as_str().into(),
                    r.risk.as_str().into(),
                    or_dash(&self.marked(&r.policies)),
                    or_dash(&r.redactors),
                    approval_cell(r.approval.as_ref()),
                    if r.timeout_default {
                        format!("{} ms (default)", r.timeout_ms)
                    } else {
                        format!("{} ms", r.timeout_ms)
                    },
                    retry_cell(r.retry.as_ref()),
                ]
            })
            .collect();
        let mut out = format!(
            "{} (revision {}): {} capabilities\n\n",
            self.config,
            self.revision,
            self.capabilities.len()
        );
        out.push_str(&crate::table::render(
            &[
                "CAPABILITY",
                "SURFACES",
                "SIDE EFFECT",
                "RISK",
                "POLICIES",
                "REDACTORS",
                "APPROVAL",
                "TIMEOUT",
                "RETRY",
            ],
            &rows,
        ));
        out.push_str(&format!(
            "\nruntime policies (every capability, before its own): {}\n",
            if self.runtime_policies.is_empty() {
                "none".to_string()
            } else {
                self.marked(&self.runtime_policies).join(", ")
            }
        ));
        for p in self
            .rules
            .iter()
            .filter(|p| p.plugin == capgate_builtin::CEDAR.name)
        {
            out.push_str(&format!(
                "\npolicy {} (cedar): a satisfied forbid decides (@stance), else a satisfied permit allows, else deny\n",
                p.policy
            ));
            if let Some(file) = &p.policies_file {
                out.push_str(&format!("  policies from {file}\n"));
            }
            for line in p.policies.iter().flat_map(|t| t.lines()) {
                out.push_str(&format!("  | {line}\n"));
            }
        }
        for p in self
            .rules
            .iter()
            .filter(|p| p.plugin == capgate_builtin::CEL.name)
        {
            out.push_str(&format!(
                "\npolicy {} ({}): {} rules, the first that holds decides, none allows\n",
                p.policy,
                p.plugin,
                p.rules.len()
            ));
            for (i, r) in p.rules.iter().enumerate() {
                let text = |k: &str| r.get(k).and_then(serde_json::Value::as_str).unwrap_or("?");
                let mut line =
                    format!("  {}. when {}  =>  {}", i + 1, text("when"), text("stance"));
                if let Some(t) = r.get("type").and_then(serde_json::Value::as_str) {
                    line.push_str(&format!(" ({t})"));
                }
                if let Some(reason) = r.get("reason").and_then(serde_json::Value::as_str) {
                    line.push_str(&format!(": {reason}"));
                }
                out.push_str(&line);
                out.push('\n');
            }
        }
        out
    }

    /// Policy names, a shadow one marked `(shadow)`: a reviewer sees what does not enforce.
    fn marked(&self, policies: &[String]) -> Vec<String> {
        policies
            .iter()
            .map(|p| {
                if self.shadow_policies.contains(p) {
                    format!("{p} (shadow)")
                } else {
                    p.clone()
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capgate_core::meta::Expose;
    use serde_json::json;

    fn capability(id: &str) -> CapabilitySection {
        match serde_json::from_value(json!({
            "id": id,
            "description": "d",
            "expose": {"aiSdk": true, "mcp": false, "workflow": true},
            "sideEffect": "write",
            "risk": "high",
            "procedure": {"plugin": "p"},
        })) {
            Ok(c) => c,
            Err(e) => panic!("fixture: {e}"),
        }
    }

    fn config(capabilities: Vec<CapabilitySection>) -> Config {
        let mut c = Config {
            revision: "r1".into(),
            capabilities,
            ..Config::default()
        };
        c.runtime.timeout_ms = 30_000;
        c
    }

    #[test]
    fn rows_are_sorted_by_capability_id() {
        let inv = inventory(&config(vec![
            capability("orders.refund"),
            capability("customers.search"),
            capability("messages.send"),
        ]));
        let ids: Vec<&str> = inv.capabilities.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["customers.search", "messages.send", "orders.refund"]);
    }

    #[test]
    fn only_surfaces_set_to_true_are_listed() {
        let inv = inventory(&config(vec![capability("a.b")]));
        assert_eq!(inv.capabilities[0].surfaces, ["aiSdk", "workflow"]);
        let mut c = capability("a.b");
        c.expose = Expose::default();
        let inv = inventory(&config(vec![c]));
        assert!(inv.capabilities[0].surfaces.is_empty());
        assert!(inv.render_table().contains("a.b         -  "));
    }

    #[test]
    fn a_capability_without_a_timeout_shows_the_runtime_default() {
        let mut set = capability("b.set");
        set.timeout_ms = Some(10_000);
        let inv = inventory(&config(vec![capability("a.default"), set]));
        assert_eq!(inv.capabilities[0].timeout_ms, 30_000);
        assert!(inv.capabilities[0].timeout_default);
        assert!(!inv.capabilities[1].timeout_default);
        let t = inv.render_table();
        assert!(t.contains("30000 ms (default)"), "{t}");
        assert!(t.contains("10000 ms"), "{t}");
    }

    #[test]
    fn approval_and_retry_cells_say_what_is_configured() {
        let mut c = capability("messages.send");
        c.approval = Some(ApprovalConfig {
            required: true,
            approval_type: Some("human-confirmation".into()),
            expires_in_ms: None,
        });
        c.retry = Some(RetryConfig {
            max_attempts: 2,
            backoff_ms: Some(100),
            retry_on: None,
        });
        let t = inventory(&config(vec![c])).render_table();
        assert!(t.contains("required (human-confirmation)"), "{t}");
        assert!(t.contains("2 retries, backoff 100 ms"), "{t}");
    }

    #[test]
    fn the_json_inventory_has_the_documented_shape() {
        let mut c = capability("orders.refund");
        c.policies = vec!["orgIsolation".into(), "refundLimit".into()];
        let mut cfg = config(vec![c]);
        cfg.runtime.policies = vec!["businessHours".into()];
        let v = serde_json::to_value(inventory(&cfg)).unwrap_or_default();
        assert_eq!(v["format"], "capgate.inventory.v1");
        assert_eq!(v["revision"], "r1");
        assert_eq!(v["runtimePolicies"], json!(["businessHours"]));
        assert_eq!(
            v["capabilities"][0],
            json!({
                "id": "orders.refund",
                "surfaces": ["aiSdk", "workflow"],
                "sideEffect": "write",
                "risk": "high",
                "policies": ["orgIsolation", "refundLimit"],
                "redactors": [],
                "approval": null,
                "timeoutMs": 30000,
                "timeoutDefault": true,
                "retry": null
            })
        );
    }
}
