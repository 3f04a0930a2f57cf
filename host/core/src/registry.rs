//! The capability registry: declarations compiled once (schemas, tool names), kept in
//! declaration order, and checked all at once so a deployment learns every mistake in one go.

use crate::actor::Surface;
use crate::meta::{CapabilityMeta, SideEffect};
use crate::policy::{CapabilityInfo, Policy};
use crate::procedure::{Middleware, Procedure};
use crate::redact::Redactor;
use crate::schema::Schema;
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// Upper bound on runtime retries per capability.
pub const MAX_RETRY_ATTEMPTS: u32 = 10;

/// A capability as declared: metadata, schemas, governance hooks and the procedure.
pub struct CapabilityDef {
    /// Canonical id, e.g. `orders.refund`.
    pub id: String,
    /// Governance metadata: exposure, side effect, risk, retries, approval.
    pub meta: CapabilityMeta,
    /// JSON Schema of the input.
    pub input_schema: Value,
    /// JSON Schema of the output (none: any output passes).
    pub output_schema: Option<Value>,
    /// The capability's own policies, run after the runtime-level ones.
    pub policies: Vec<Arc<dyn Policy>>,
    /// Redactors, applied in order at stage 13 and to approval listings.
    pub redactors: Vec<Arc<dyn Redactor>>,
    /// The application middleware chain, run in order before the procedure.
    pub middleware: Vec<Arc<dyn Middleware>>,
    /// The operation itself; required (the registry refuses a capability without one).
    pub procedure: Option<Arc<dyn Procedure>>,
}

impl CapabilityDef {
    /// Start a declaration. The input schema defaults to "any JSON value".
    pub fn new(id: impl Into<String>, meta: CapabilityMeta) -> Self {
        CapabilityDef {
            id: id.into(),
            meta,
            input_schema: Value::Bool(true),
            output_schema: None,
            policies: Vec::new(),
            redactors: Vec::new(),
            middleware: Vec::new(),
            procedure: None,
        }
    }
    /// Set the input schema.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }
    /// Set the output schema.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }
    /// Add a policy.
    pub fn policy(mut self, p: impl Policy) -> Self {
        self.policies.push(Arc::new(p));
        self
    }
    /// Add a shared policy.
    pub fn policy_arc(mut self, p: Arc<dyn Policy>) -> Self {
        self.policies.push(p);
        self
    }
    /// Add a redactor.
    pub fn redactor(mut self, r: impl Redactor) -> Self {
        self.redactors.push(Arc::new(r));
        self
    }
    /// Add a shared redactor.
    pub fn redactor_arc(mut self, r: Arc<dyn Redactor>) -> Self {
        self.redactors.push(r);
        self
    }
    /// Add a middleware.
    pub fn middleware(mut self, m: impl Middleware) -> Self {
        self.middleware.push(Arc::new(m));
        self
    }
    /// Set the procedure.
    pub fn procedure(mut self, p: impl Procedure) -> Self {
        self.procedure = Some(Arc::new(p));
        self
    }
    /// Set a shared procedure.
    pub fn procedure_arc(mut self, p: Arc<dyn Procedure>) -> Self {
        self.procedure = Some(p);
        self
    }
}

/// A compiled, checked capability.
pub struct Capability {
    /// Canonical id, e.g. `orders.refund`.
    pub id: String,
    /// Governance metadata: exposure, side effect, risk, retries, approval.
    pub meta: CapabilityMeta,
    /// What policies and redactors see.
    pub info: CapabilityInfo,
    /// Compiled input schema.
    pub input: Schema,
    /// Compiled output schema.
    pub output: Option<Schema>,
    /// The capability's own policies, run after the runtime-level ones.
    pub policies: Vec<Arc<dyn Policy>>,
    /// Redactors, applied in order at stage 13 and to approval listings.
    pub redactors: Vec<Arc<dyn Redactor>>,
    /// The application middleware chain, run in order before the procedure.
    pub middleware: Vec<Arc<dyn Middleware>>,
    /// The operation itself.
    pub procedure: Arc<dyn Procedure>,
    /// Resolved AI SDK tool name.
    pub ai_sdk_tool: String,
    /// Resolved MCP tool name.
    pub mcp_tool: String,
}

impl fmt::Debug for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capability")
            .field("id", &self.id)
            .field("meta", &self.meta)
            .finish_non_exhaustive()
    }
}

impl Capability {
    /// The tool name on a model surface (the id with `.` → `_` elsewhere).
    pub fn tool_name(&self, surface: Surface) -> &str {
        match surface {
            Surface::Mcp => &self.mcp_tool,
            _ => &self.ai_sdk_tool,
        }
    }
}

/// One problem found while building a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryProblem {
    /// The capability (or `*` for registry-wide problems).
    pub capability: String,
    /// The field at fault, e.g. `meta.retry`.
    pub field: String,
    /// What is wrong and what to do.
    pub message: String,
    /// Which rule was broken, so a caller that locates the problem (the configuration
    /// check) decides by kind, never by the message's words.
    pub kind: RegistryProblemKind,
}

/// The rule a [`RegistryProblem`] breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistryProblemKind {
    /// The id is not a valid capability id.
    InvalidId,
    /// A second capability has the same id.
    DuplicateId,
    /// A required value is missing or empty.
    Missing,
    /// A number is out of its range.
    OutOfRange,
    /// A side-effecting capability retries without being idempotent (SI-11).
    RetryNotIdempotent,
    /// A derived or configured tool name is not a valid tool name.
    InvalidToolName,
    /// Two capabilities have the same tool name on one surface.
    ToolNameCollision,
    /// An input or output schema does not compile.
    InvalidSchema,
}

/// Every problem of a registry, reported together.
#[derive(Debug, Clone, thiserror::Error)]
pub struct RegistryError {
    /// The problems, in declaration order.
    pub problems: Vec<RegistryProblem>,
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "the capability registry has {} problem(s):",
            self.problems.len()
        )?;
        for p in &self.problems {
            writeln!(f, "  - {} ({}): {}", p.capability, p.field, p.message)?;
        }
        Ok(())
    }
}

/// The set of capabilities a runtime governs, in declaration order.
#[derive(Default)]
pub struct Registry {
    caps: Vec<Arc<Capability>>,
    by_id: HashMap<String, usize>,
    by_tool: HashMap<(Surface, String), usize>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.caps.iter().map(|c| &c.id))
            .finish()
    }
}

/// Collects declarations, then checks them all at once.
#[derive(Default)]
pub struct RegistryBuilder {
    defs: Vec<CapabilityDef>,
}

impl RegistryBuilder {
    /// Add a capability.
    pub fn capability(mut self, def: CapabilityDef) -> Self {
        self.defs.push(def);
        self
    }

    /// Add a capability in place.
    pub fn push(&mut self, def: CapabilityDef) {
        self.defs.push(def);
    }

    /// Compile and check everything; every problem is reported in one error.
    pub fn build(self) -> Result<Registry, RegistryError> {
        let mut problems = Vec::new();
        let mut reg = Registry::default();
        let mut seen_tools: HashMap<(Surface, String), String> = HashMap::new();
        let mut seen_ids: std::collections::HashSet<String> = std::collections::HashSet::new();
        for def in self.defs {
            let before = problems.len();
            let mut problem = |kind: RegistryProblemKind, field: &str, message: String| {
                problems.push(RegistryProblem {
                    capability: def.id.clone(),
                    field: field.to_string(),
                    message,
                    kind,
                })
            };
            use RegistryProblemKind as K;
            if let Err(m) = check_id(&def.id) {
                problem(K::InvalidId, "id", m);
            }
            if !seen_ids.insert(def.id.clone()) {
                problem(
                    K::DuplicateId,
                    "id",
                    "declared twice; capability ids must be unique".into(),
                );
            }
            let meta = &def.meta;
            if meta.description.trim().is_empty() {
                problem(
                    K::Missing,
                    "meta.description",
                    "is required and must not be empty".into(),
                );
            }
            if meta.timeout_ms == Some(0) {
                problem(
                    K::OutOfRange,
                    "meta.timeoutMs",
                    "must be a positive number of milliseconds".into(),
                );
            }
            if let Some(a) = &meta.approval
                && a.expires_in_ms == Some(0)
            {
                problem(
                    K::OutOfRange,
                    "meta.approval.expiresInMs",
                    "must be a positive number of milliseconds".into(),
                );
            }
            if let Some(r) = &meta.retry {
                if r.max_attempts > MAX_RETRY_ATTEMPTS {
                    problem(
                        K::OutOfRange,
                        "meta.retry.maxAttempts",
                        format!("must be at most {MAX_RETRY_ATTEMPTS}"),
                    );
                }
                if r.backoff_ms == Some(0) {
                    problem(
                        K::OutOfRange,
                        "meta.retry.backoffMs",
                        "must be positive".into(),
                    );
                }
                if !matches!(meta.side_effect, SideEffect::None | SideEffect::Read)
                    && !meta.idempotent
                {
                    problem(
                        K::RetryNotIdempotent,
                        "meta.retry",
                        format!(
                            "a `{}` capability may only be retried when declared `idempotent: true` (SI-11)",
                            meta.side_effect.as_str()
                        ),
                    );
                }
            }
            for surface in Surface::MODEL_FACING {
                let name = meta.tool_name(&def.id, surface);
                if let Err(m) = check_tool_name(&name) {
                    problem(
                        K::InvalidToolName,
                        "meta.adapters",
                        format!("{} tool name `{name}` {m}", surface),
                    );
                }
                match seen_tools.get(&(surface, name.clone())) {
                    Some(other) if other != &def.id => problem(
                        K::ToolNameCollision,
                        "meta.adapters",
                        format!("{surface} tool name `{name}` collides with capability `{other}`"),
                    ),
                    Some(_) => {}
                    None => {
                        seen_tools.insert((surface, name.clone()), def.id.clone());
                    }
                }
            }
            let input = match Schema::compile(def.input_schema) {
                Ok(s) => Some(s),
                Err(e) => {
                    problem(K::InvalidSchema, "inputSchema", e.to_string());
                    None
                }
            };
            let output = match def.output_schema.map(Schema::compile).transpose() {
                Ok(s) => s,
                Err(e) => {
                    problem(K::InvalidSchema, "outputSchema", e.to_string());
                    None
                }
            };
            if def.procedure.is_none() {
                problem(
                    K::Missing,
                    "procedure",
                    "no procedure is bound; every capability needs one".into(),
                );
            }
            if problems.len() > before {
                continue;
            }
            let (Some(input), Some(procedure)) = (input, def.procedure) else {
                continue;
            };
            let ai_sdk_tool = meta.tool_name(&def.id, Surface::AiSdk);
            let mcp_tool = meta.tool_name(&def.id, Surface::Mcp);
            let idx = reg.caps.len();
            reg.by_tool
                .insert((Surface::AiSdk, ai_sdk_tool.clone()), idx);
            reg.by_tool.insert((Surface::Mcp, mcp_tool.clone()), idx);
            reg.by_id.insert(def.id.clone(), idx);
            let info = CapabilityInfo {
                id: def.id.clone(),
                side_effect: meta.side_effect,
                risk: meta.risk,
                tags: meta.tags.clone(),
            };
            reg.caps.push(Arc::new(Capability {
                id: def.id,
                meta: def.meta,
                info,
                input,
                output,
                policies: def.policies,
                redactors: def.redactors,
                middleware: def.middleware,
                procedure,
                ai_sdk_tool,
                mcp_tool,
            }));
        }
        if problems.is_empty() {
            Ok(reg)
        } else {
            Err(RegistryError { problems })
        }
    }
}

fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 128 {
        return Err("must be 1 to 128 characters".into());
    }
    if id.split('.').any(str::is_empty) {
        return Err("must be dot-separated non-empty segments, like `orders.refund`".into());
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    {
        return Err("may contain only ASCII letters, digits, `.`, `_` and `-`".into());
    }
    Ok(())
}

fn check_tool_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err("must be 1 to 64 characters".into());
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err("may contain only ASCII letters, digits, `_` and `-`".into());
    }
    Ok(())
}

impl Registry {
    /// Start a registry.
    pub fn builder() -> RegistryBuilder {
        RegistryBuilder::default()
    }

    /// Look up by id (stage 3).
    pub fn get(&self, id: &str) -> Option<&Arc<Capability>> {
        self.by_id.get(id).map(|&i| &self.caps[i])
    }

    /// Look up by a model adapter's tool name.
    pub fn by_tool_name(&self, surface: Surface, tool: &str) -> Option<&Arc<Capability>> {
        let key = match surface {
            Surface::Mcp => Surface::Mcp,
            _ => Surface::AiSdk,
        };
        self.by_tool
            .get(&(key, tool.to_string()))
            .map(|&i| &self.caps[i])
    }

    /// Every capability in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Capability>> {
        self.caps.iter()
    }

    /// How many capabilities.
    pub fn len(&self) -> usize {
        self.caps.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.caps.is_empty()
    }
}
