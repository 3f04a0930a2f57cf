//! The keys of capgate-core's own settings that the file writes inline in a capability
//! (`expose`, `retry`, `approval`, `adapters`). capgate-core deserializes them (with
//! `deny_unknown_fields`) and checks their values; their fields cannot carry `#[key]`, so
//! their keys are declared here, field for field, and the model's fields point at these
//! with `#[key(table, declared = "…")]`. The reference and the JSON Schema are generated
//! from these declarations; a test reads a fully written value of each with capgate-core's
//! own type, so a field added there without its key here fails it.

use crate::keys::Keys;
use capgate_core::error::ErrorCode;
use capgate_core::registry::MAX_RETRY_ATTEMPTS;
use serde::Deserialize;

/// `capabilities[].expose` (capgate-core's `Expose`): a surface is reachable only when its
/// flag is exactly `true` (SI-1).
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(deny_unknown_fields)]
pub struct ExposeKeys {
    /// Direct server calls.
    pub direct: Option<bool>,
    /// AI SDK tools (the `/agent` door).
    #[serde(rename = "aiSdk")]
    pub ai_sdk: Option<bool>,
    /// MCP tools (the `/mcp` door).
    pub mcp: Option<bool>,
    /// Workflow steps (the `/workflow` door).
    pub workflow: Option<bool>,
    /// The test harness.
    pub test: Option<bool>,
}

/// `capabilities[].retry` (capgate-core's `RetryConfig`): runtime-managed retries of the
/// procedure, for idempotent capabilities only (SI-11).
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryKeys {
    /// Additional attempts after the first.
    #[key(range = 0..=MAX_RETRY_ATTEMPTS, unit = "attempts")]
    pub max_attempts: u32,
    /// Base backoff; attempt n waits `backoffMs * 2^(n-1)`. Absent: 250.
    pub backoff_ms: Option<u64>,
    /// When set, only errors with one of these codes are retried (absent: every retryable
    /// error).
    pub retry_on: Option<Vec<ErrorCode>>,
}

/// `capabilities[].approval` (capgate-core's `ApprovalConfig`): a static approval
/// requirement (policies may require one per call too).
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalKeys {
    /// Always require approval before execution.
    #[serde(default)]
    pub required: bool,
    /// The approval type (e.g. `human-confirmation`); `[approvals.types.NAME]` says who may
    /// decide it.
    #[serde(rename = "type")]
    pub approval_type: Option<String>,
    /// How long the request stays open (absent: `runtime.approvalExpiresInMs`).
    pub expires_in_ms: Option<u64>,
}

/// `capabilities[].adapters` (capgate-core's `AdapterNames`): tool-name overrides per model
/// adapter.
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdapterKeys {
    /// Tool name for the AI SDK adapter (absent: the id with `.` replaced by `_`).
    pub ai_sdk: Option<String>,
    /// Tool name for MCP (absent: the id with `.` replaced by `_`).
    pub mcp: Option<String>,
}

/// `[redactors.NAME]`: read as a [`super::BindingSection`] (whose `phases` and `mode` are
/// for policies, and refused on a redactor at their keys); these are the keys a redactor
/// takes.
#[derive(Keys, Debug, Clone, Deserialize)]
#[key(live)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RedactorKeys {
    /// The plugin: the name of a `[plugins.NAME]`, or `redact`, the shipped redactor of JSON
    /// pointers in `config.drop` / `config.mask` (docs/guides/policies-without-a-plugin.md).
    pub plugin: String,
    /// Handed to the plugin on every call.
    #[serde(default)]
    pub config: serde_json::Value,
}
