//! Static capability metadata: what a capability is, where it is exposed,
//! what it may do, and how the runtime must treat it.

use crate::actor::Surface;
use crate::error::ErrorCode;
use serde::{Deserialize, Serialize};

/// What a capability does to the world. Drives retry eligibility (SI-11) and MCP hints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SideEffect {
    /// Pure computation: nothing changes, so retries are always safe.
    None,
    /// Reads state without changing it.
    Read,
    /// Changes state: retried only when declared idempotent (SI-11).
    Write,
    /// Changes state irreversibly.
    Destructive,
    /// Acts on a system outside the application (payments, email).
    External,
}

impl SideEffect {
    /// `none` and `read` can be retried without an idempotency declaration.
    pub fn is_read_only(self) -> bool {
        matches!(self, SideEffect::None | SideEffect::Read)
    }
}

crate::wire_enum! {
    SideEffect {
        None => "none",
        Read => "read",
        Write => "write",
        Destructive => "destructive",
        External => "external",
    }
}

/// How much harm a wrong call could do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    /// Low risk: little harm if misused.
    Low,
    /// Medium risk: reviewable harm if misused.
    Medium,
    /// High risk: policies usually gate it (approvals, limits).
    High,
    /// Critical risk: misuse does lasting harm.
    Critical,
}

crate::wire_enum! {
    Risk {
        Low => "low",
        Medium => "medium",
        High => "high",
        Critical => "critical",
    }
}

/// Per-surface exposure. A surface is reachable only when its flag is exactly `true` (SI-1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expose {
    /// Direct server calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct: Option<bool>,
    /// AI SDK tools.
    #[serde(default, rename = "aiSdk", skip_serializing_if = "Option::is_none")]
    pub ai_sdk: Option<bool>,
    /// Whether MCP clients see it as a tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<bool>,
    /// Whether workflow steps may call it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<bool>,
    /// Whether the test surface may call it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<bool>,
}

impl Expose {
    /// Exposure on exactly the given surfaces.
    pub fn on(surfaces: impl IntoIterator<Item = Surface>) -> Self {
        let mut e = Expose::default();
        for s in surfaces {
            *e.slot(s) = Some(true);
        }
        e
    }

    fn slot(&mut self, surface: Surface) -> &mut Option<bool> {
        match surface {
            Surface::Direct => &mut self.direct,
            Surface::AiSdk => &mut self.ai_sdk,
            Surface::Mcp => &mut self.mcp,
            Surface::Workflow => &mut self.workflow,
            Surface::Test => &mut self.test,
        }
    }

    /// Stage 4: true only when the flag is present and `true`.
    pub fn allows(&self, surface: Surface) -> bool {
        let flag = match surface {
            Surface::Direct => self.direct,
            Surface::AiSdk => self.ai_sdk,
            Surface::Mcp => self.mcp,
            Surface::Workflow => self.workflow,
            Surface::Test => self.test,
        };
        flag == Some(true)
    }
}

/// Runtime-managed retries of stage 11 (SI-11 decides eligibility).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetryConfig {
    /// Additional attempts after the first.
    pub max_attempts: u32,
    /// Base backoff; attempt n waits `backoff_ms * 2^(n-1)`. Default 250.
    pub backoff_ms: Option<u64>,
    /// When set, only errors with one of these codes are retried (the declarative form of
    /// the reference's `retryOn` predicate).
    pub retry_on: Option<Vec<ErrorCode>>,
}

/// Static approval requirement of a capability.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalConfig {
    /// Always require approval before execution.
    #[serde(default)]
    pub required: bool,
    /// Approval type (e.g. `human-confirmation`).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub approval_type: Option<String>,
    /// Expiry of the request; default `defaults.approval_expires_in_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_ms: Option<u64>,
}

/// Tool-name overrides per model adapter.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdapterNames {
    /// Tool name for the AI SDK adapter (default: id with `.` replaced by `_`).
    pub ai_sdk: Option<String>,
    /// Tool name for MCP (default: id with `.` replaced by `_`).
    pub mcp: Option<String>,
}

/// The governance metadata of one capability. Policies, redactors and the
/// procedure are attached to the capability definition, not stored here, so the meta stays
/// plain data that can be hashed into the contract digest.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapabilityMeta {
    /// What the capability does, for the model (required, non-empty).
    pub description: String,
    /// Surfaces on which it exists.
    pub expose: Expose,
    /// What it does to the world.
    pub side_effect: SideEffect,
    /// How risky it is.
    pub risk: Risk,
    /// Free tags (used by discovery scopes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Per-capability timeout of one attempt; default `defaults.timeout_ms`.
    pub timeout_ms: Option<u64>,
    /// Runtime retries of a failed attempt (only for idempotent or read-only capabilities).
    pub retry: Option<RetryConfig>,
    /// Explicit declaration that repeating a call is safe.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub idempotent: bool,
    /// Static approval requirement.
    pub approval: Option<ApprovalConfig>,
    /// Tool names per adapter, when the id's derived name does not suit.
    pub adapters: Option<AdapterNames>,
    /// How clients find it: listed to models, or presented by a UI in context (the
    /// portable contract's `discovery`, docs/gateway.md). Omitted when `discoverable`, so
    /// older digests hold.
    #[serde(default, skip_serializing_if = "Discovery::is_discoverable")]
    pub discovery: Discovery,
    /// MCP: a call still running this many milliseconds after it started is answered, to
    /// a client of the `io.modelcontextprotocol/tasks` extension, with a task the client
    /// polls, so a slow procedure no longer holds the request (its timeout and
    /// cancellation unchanged). Absent: every call holds its request until it ends.
    pub task_after_ms: Option<u64>,
}

/// How a capability is found (the portable contract's `discovery`, docs/gateway.md).
///
/// Both kinds are callable on the surfaces they are exposed on and governed the same way;
/// the difference is only who offers them: a `discoverable` capability is listed to models
/// (MCP `tools/list`, exported tool sets), a `contextual` one is left out of those lists
/// because a browser presents it, bound to what the user is looking at.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Discovery {
    /// Listed by discovery, subject to discovery policies (the default).
    #[default]
    Discoverable,
    /// Not offered in model tool lists; callable where exposed.
    Contextual,
}

impl Discovery {
    /// `true` for the default, so serialization can omit it.
    pub fn is_discoverable(&self) -> bool {
        *self == Discovery::Discoverable
    }
}

crate::wire_enum! {
    Discovery {
        Discoverable => "discoverable",
        Contextual => "contextual",
    }
}

impl CapabilityMeta {
    /// A meta with the required fields; the rest default.
    pub fn new(description: impl Into<String>, side_effect: SideEffect, risk: Risk) -> Self {
        CapabilityMeta {
            description: description.into(),
            expose: Expose::default(),
            side_effect,
            risk,
            tags: Vec::new(),
            timeout_ms: None,
            retry: None,
            idempotent: false,
            approval: None,
            adapters: None,
            discovery: Discovery::Discoverable,
            task_after_ms: None,
        }
    }

    /// Builder: answer an MCP call still running after `ms` with a task
    /// ([`CapabilityMeta::task_after_ms`]).
    pub fn run_as_task_after_ms(mut self, ms: u64) -> Self {
        self.task_after_ms = Some(ms);
        self
    }

    /// Builder: how clients find it ([`Discovery`]).
    pub fn with_discovery(mut self, discovery: Discovery) -> Self {
        self.discovery = discovery;
        self
    }

    /// Builder: expose on these surfaces.
    pub fn exposed_on(mut self, surfaces: impl IntoIterator<Item = Surface>) -> Self {
        self.expose = Expose::on(surfaces);
        self
    }

    /// Builder: add tags.
    pub fn tagged(mut self, tags: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.tags.extend(tags.into_iter().map(Into::into));
        self
    }

    /// Builder: per-attempt timeout.
    pub fn with_timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// Builder: retry failed attempts as `retry` says.
    pub fn with_retry(mut self, retry: RetryConfig) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Builder: idempotency declaration.
    pub fn idempotent(mut self, yes: bool) -> Self {
        self.idempotent = yes;
        self
    }

    /// Builder: static approval.
    pub fn with_approval(mut self, approval: ApprovalConfig) -> Self {
        self.approval = Some(approval);
        self
    }

    /// The tool name a model adapter uses: the override, else the id with `.` → `_`.
    pub fn tool_name(&self, id: &str, surface: Surface) -> String {
        let custom = self.adapters.as_ref().and_then(|a| match surface {
            Surface::AiSdk => a.ai_sdk.clone(),
            Surface::Mcp => a.mcp.clone(),
            _ => None,
        });
        custom.unwrap_or_else(|| default_tool_name(id))
    }

    /// SI-11: may the runtime re-run stage 11 after a retryable failure?
    pub fn retry_eligible(&self) -> bool {
        match &self.retry {
            Some(r) if r.max_attempts > 0 => self.side_effect.is_read_only() || self.idempotent,
            _ => false,
        }
    }
}

/// `orders.refund` → `orders_refund`.
pub fn default_tool_name(id: &str) -> String {
    id.replace('.', "_")
}
