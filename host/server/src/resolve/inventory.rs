//! A deployment's inventory, as `capgate inspect` prints it for a reviewer: per capability
//! its surfaces, side effect, risk, policies, redactors, static approval, timeout and
//! retry, sorted by id, and the rules of every policy written as expressions. Read from the
//! checked file ([`crate::validate::Checked::inventory`]), so `inspect` refuses exactly what
//! `check` refuses.

use capgate_config::{CapabilitySection, Config};
use capgate_core::actor::Surface;
use capgate_core::meta::{ApprovalConfig, RetryConfig, Risk, SideEffect};
use serde::Serialize;

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

/// The inventory of a configuration (that passed `check`: [`crate::validate::Checked::inventory`]).
pub fn of(config: &Config) -> Inventory {
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
