//! How a plugin is bound: a name for audit, its `config`, limits, isolation and namespace.

use crate::limits::{Isolation, Limits, ReserveOptions};
use serde::{Deserialize, Serialize};

/// One binding of a plugin to an interface, as the configuration file describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Binding {
    /// Stable name for audit and the governance manifest (e.g. `refundLimit`).
    pub name: String,
    /// Passed to every call as the WIT `config` field (JSON).
    #[serde(default)]
    pub config: serde_json::Value,
    /// Per-call limits (fuel, memory, time, output, logs).
    #[serde(default)]
    pub limits: Limits,
    /// Fresh (default) or pooled instances.
    #[serde(default)]
    pub isolation: Isolation,
    /// The tenant partition this binding serves; pooled instances never cross it.
    #[serde(default)]
    pub namespace: String,
    /// Fresh isolation: how many ready instances to keep instantiated ahead of calls.
    #[serde(default)]
    pub reserve: ReserveOptions,
}

impl Binding {
    /// A binding with default limits, fresh isolation, `null` config.
    pub fn new(name: impl Into<String>) -> Self {
        Binding {
            name: name.into(),
            config: serde_json::Value::Null,
            limits: Limits::default(),
            isolation: Isolation::Fresh,
            namespace: String::new(),
            reserve: ReserveOptions::default(),
        }
    }
    capgate_core::setters! {
        /// Builder: the `config` JSON.
        config => config: serde_json::Value;
        /// Builder: the per-call limits.
        limits => limits: Limits;
        /// Builder: fresh or pooled instances.
        isolation => isolation: Isolation;
        /// Builder: the reserve of ready instances (fresh isolation).
        reserve => reserve: ReserveOptions;
    }
    /// Builder: the tenant partition the binding serves.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }
}
