//! capgate-plugin: write capgate policies, redactors, procedure adapters and gateway
//! authorizers in Rust, compiled to WebAssembly components for `wasm32-wasip2`.
//!
//! The capgate host loads a plugin by the WIT interface it exports
//! (`capgate:plugin@0.3.0`, see `wit/capgate.wit`), runs each call in a fresh sandbox bounded
//! by fuel, a deadline and a memory cap, and treats every failure — a panic, an `Err`, a
//! value that does not parse — as a refusal. This crate hides the generated bindings behind
//! one small trait per plugin kind and an export macro, so a policy is about fifteen lines:
//!
//! ```
//! use capgate_plugin::{Decision, Policy, PolicyRequest, export_policy};
//!
//! struct RefundLimit;
//!
//! impl Policy for RefundLimit {
//!     fn evaluate(request: PolicyRequest) -> Result<Decision, String> {
//!         let max = request.config_value("/maxAmount").and_then(|v| v.as_f64()).unwrap_or(500.0);
//!         let amount = request.input_value("/amount").and_then(|v| v.as_f64()).unwrap_or(0.0);
//!         Ok(if amount > max {
//!             Decision::require_approval(format!("Refund of ${amount} exceeds ${max}"))
//!         } else {
//!             Decision::Allow
//!         })
//!     }
//! }
//!
//! export_policy!(RefundLimit);
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2`; the `.wasm` file in
//! `target/wasm32-wasip2/release/` is the component the host pins by SHA-256.
//!
//! # Core concepts
//!
//! - [`Policy`] + [`export_policy!`]: allow, deny, hide or require approval.
//! - [`Redactor`] + [`export_redactor!`]: what of an output (or approval input) leaves the boundary.
//! - [`Procedure`] + [`export_procedure!`]: the operation itself, with [`ProcedureError`]'s mapping.
//! - [`Authorizer`] + [`export_authorizer!`]: may this gateway principal do this operation,
//!   through this door ([`AuthorizeRequest::surface`]; `None` for the human approvals API).
//! - [`config_schema!`]: the JSON Schema of the binding's `config`, checked by `capgate check`
//!   at load rather than by the plugin on every call.
//! - [`log`]: a line into the host's tracing (capped in size and rate by the host).
//! - Structured values arrive as JSON text and are parsed on demand
//!   ([`PolicyRequest::input`], [`PolicyRequest::config`], ...), so a plugin only pays for what it reads.
//!
//! A panic inside a plugin is reported to the host log (at `error`) and then traps: the host
//! fails the call closed.
//!
//! # Contract versions
//!
//! The current contract is `capgate:plugin@0.3.0`. It added one import, `request`, through
//! which policies and authorizers read single values of the call from the host (the
//! `*_value` helpers); the exports are unchanged. `capgate:plugin@0.2.0` changed only the
//! gateway authorizer: it is now told the surface of the door and asked about the approvals
//! API's operations too. Policies, redactors and procedures export the unchanged 0.1.0
//! interfaces (`capgate:plugin/policy@0.1.0`, ...), which 0.2.0 and 0.3.0 reuse; authorizers
//! export `capgate:plugin/authorizer@0.2.0`. The host still loads components built against
//! 0.1.0 and 0.2.0 (the frozen versions in `wit/deps`), including authorizers built with
//! earlier versions of this crate (0.1.0 interface: not told the surface, not asked about the
//! approvals API).
//!
//! An authorizer that keeps one tenant off the workflow door:
//!
//! ```
//! use capgate_plugin::{AuthorizeRequest, Authorizer, Surface, export_authorizer};
//!
//! struct NoWorkflowForOrg2;
//!
//! impl Authorizer for NoWorkflowForOrg2 {
//!     fn authorize(request: AuthorizeRequest) -> Result<(), String> {
//!         if request.principal.namespace == "org_2" && request.surface == Some(Surface::Workflow) {
//!             return Err("org_2 may not use the workflow door".into());
//!         }
//!         Ok(())
//!     }
//! }
//!
//! export_authorizer!(NoWorkflowForOrg2);
//! ```

#![warn(missing_docs)]

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
pub use serde_json::{self, Value, json};
use std::sync::Once;

/// Generated bindings, one module per world. Public only for the export macros.
///
/// The WIT resolve holds three versions of `capgate:plugin` (0.3.0 and the frozen 0.2.0 and
/// 0.1.0 it reuses), so wit-bindgen puts the version into package module names
/// (`plugin0_1_0`, `plugin0_2_0`, `plugin0_3_0`). Each world module re-exports its 0.1.0
/// imports and its exports under those names and under the unversioned path they had before
/// 0.2.0 (`capgate::plugin`, `exports::capgate::plugin`), so code that reached into these
/// bindings keeps compiling.
#[doc(hidden)]
pub mod bindings {
    /// The versioned and pre-0.2.0 paths of one world's generated modules.
    macro_rules! paths {
        ($export:ident, $exported:ident) => {
            pub use generated::$export;
            /// Imported interfaces (`capgate:plugin@0.1.0`).
            pub mod capgate {
                pub use super::generated::capgate::plugin0_1_0;
                pub use super::generated::capgate::plugin0_1_0 as plugin;
            }
            /// Exported interfaces.
            pub mod exports {
                /// `capgate:plugin`.
                pub mod capgate {
                    pub use super::super::generated::exports::capgate::$exported;
                    pub use super::super::generated::exports::capgate::$exported as plugin;
                }
            }
        };
    }
    /// The `policy-plugin` world.
    pub mod policy {
        /// What wit-bindgen generated.
        pub mod generated {
            wit_bindgen::generate!({
                world: "policy-plugin",
                path: "wit",
                // The 0.3.0 worlds use earlier versions' interfaces: generate those too.
                generate_all,
                default_bindings_module: "capgate_plugin::bindings::policy",
                pub_export_macro: true,
                export_macro_name: "__export_policy_plugin",
            });
        }
        paths!(__export_policy_plugin, plugin0_1_0);
    }
    /// The `redactor-plugin` world.
    pub mod redactor {
        /// What wit-bindgen generated.
        pub mod generated {
            wit_bindgen::generate!({
                world: "redactor-plugin",
                path: "wit",
                // The 0.3.0 worlds use earlier versions' interfaces: generate those too.
                generate_all,
                default_bindings_module: "capgate_plugin::bindings::redactor",
                pub_export_macro: true,
                export_macro_name: "__export_redactor_plugin",
            });
        }
        paths!(__export_redactor_plugin, plugin0_1_0);
    }
    /// The `procedure-plugin` world.
    pub mod procedure {
        /// What wit-bindgen generated.
        pub mod generated {
            wit_bindgen::generate!({
                world: "procedure-plugin",
                path: "wit",
                // The 0.3.0 worlds use earlier versions' interfaces: generate those too.
                generate_all,
                default_bindings_module: "capgate_plugin::bindings::procedure",
                pub_export_macro: true,
                export_macro_name: "__export_procedure_plugin",
            });
        }
        paths!(__export_procedure_plugin, plugin0_1_0);
    }
    /// The `authorizer-plugin` world.
    pub mod authorizer {
        /// What wit-bindgen generated.
        pub mod generated {
            wit_bindgen::generate!({
                world: "authorizer-plugin",
                path: "wit",
                // The 0.3.0 worlds use earlier versions' interfaces: generate those too.
                generate_all,
                default_bindings_module: "capgate_plugin::bindings::authorizer",
                pub_export_macro: true,
                export_macro_name: "__export_authorizer_plugin",
            });
        }
        paths!(__export_authorizer_plugin, plugin0_2_0);
    }
}

use bindings::policy::capgate::plugin::host as host_imports;

/// Severity of a [`log`] line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// Very detailed.
    Trace,
    /// Debugging.
    Debug,
    /// Normal operation.
    Info,
    /// Something looks wrong.
    Warn,
    /// Something failed.
    Error,
}

/// Write a line into the host's tracing. The host truncates long lines and drops lines past
/// its rate cap, so logging can never become a way to exhaust the host.
pub fn log(level: LogLevel, message: &str) {
    use host_imports::LogLevel as L;
    let level = match level {
        LogLevel::Trace => L::Trace,
        LogLevel::Debug => L::Debug,
        LogLevel::Info => L::Info,
        LogLevel::Warn => L::Warn,
        LogLevel::Error => L::Error,
    };
    host_imports::log(level, message);
}

/// Report progress from a running procedure (resets the host's stall watchdog). Only
/// meaningful inside [`Procedure::invoke`].
pub fn report_progress(value: &Value) {
    bindings::procedure::capgate::plugin::progress::report(&value.to_string());
}

/// The door a call came through (wire spelling as in the capgate spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Surface {
    /// Server code.
    #[serde(rename = "direct")]
    Direct,
    /// AI SDK tools (model-facing).
    #[serde(rename = "aiSdk")]
    AiSdk,
    /// MCP (model-facing).
    #[serde(rename = "mcp")]
    Mcp,
    /// A workflow step.
    #[serde(rename = "workflow")]
    Workflow,
    /// Tests.
    #[serde(rename = "test")]
    Test,
}

impl Surface {
    /// Whether a model talks through this surface.
    pub fn is_model_facing(self) -> bool {
        matches!(self, Surface::AiSdk | Surface::Mcp)
    }
}

/// The kind of principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActorKind {
    /// A human.
    User,
    /// A workload.
    Service,
    /// An autonomous agent identity.
    Agent,
    /// Explicitly anonymous.
    Anonymous,
}

/// What a capability does to the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SideEffect {
    /// Pure computation.
    None,
    /// Reads state.
    Read,
    /// Changes state.
    Write,
    /// Changes state irreversibly.
    Destructive,
    /// Acts outside the application.
    External,
}

/// How much harm a wrong call could do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
    /// Critical.
    Critical,
}

/// When a policy runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Building tool lists (no input).
    Discovery,
    /// Before approval.
    Invocation,
    /// Right before execution.
    Execution,
}

/// The authenticated principal, with its attributes still as JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct Actor {
    /// Stable id.
    pub id: String,
    /// Kind.
    pub kind: ActorKind,
    /// Attributes as JSON text (`null` when none); see [`Actor::attributes`].
    pub attributes_json: String,
}

impl Actor {
    /// The attributes, parsed (`Null` when absent or malformed).
    pub fn attributes(&self) -> Value {
        parse_or_null(&self.attributes_json)
    }
    /// One attribute by JSON pointer (e.g. `/orgId`); inside the host, read from the host's
    /// parsed attributes without parsing them here.
    pub fn attribute(&self, pointer: &str) -> Option<Value> {
        let text = Some(self.attributes_json.as_str());
        if let Some(answer) = lazy::get(lazy::Doc::Attributes, text, pointer) {
            return answer;
        }
        self.attributes().pointer(pointer).cloned()
    }
}

/// What a plugin may know about the capability.
#[derive(Debug, Clone, PartialEq)]
pub struct CapabilityInfo {
    /// Canonical id, e.g. `orders.refund`.
    pub id: String,
    /// Side effect.
    pub side_effect: SideEffect,
    /// Risk.
    pub risk: Risk,
    /// Tags.
    pub tags: Vec<String>,
}

/// The approval an execution runs under.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRef {
    /// `apr_…`
    pub id: String,
    /// Who approved.
    pub approver_id: String,
    /// Their kind.
    pub approver_kind: ActorKind,
}

/// The question put to a policy. JSON fields stay text until read.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyRequest {
    /// Which phase.
    pub phase: Phase,
    /// The surface of the call.
    pub surface: Surface,
    /// The capability.
    pub capability: CapabilityInfo,
    /// The actor.
    pub actor: Actor,
    /// The validated input as JSON text; `None` during discovery.
    pub input_json: Option<String>,
    /// The context projection as JSON text.
    pub context_json: String,
    /// The execution id (empty in discovery).
    pub execution_id: String,
    /// The approval, in the execution phase after a resume.
    pub approval: Option<ApprovalRef>,
    /// The binding's `config` as JSON text.
    pub config_json: String,
}

impl PolicyRequest {
    /// The validated input (`None` in discovery or if it does not parse).
    pub fn input(&self) -> Option<Value> {
        self.input_json
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
    }
    /// One input value by JSON pointer (e.g. `/amount`). Inside the host, read from the
    /// host's parsed input (`capgate:plugin/request@0.3.0`) without parsing the input here.
    pub fn input_value(&self, pointer: &str) -> Option<Value> {
        if let Some(answer) = lazy::get(lazy::Doc::Input, self.input_json.as_deref(), pointer) {
            return answer;
        }
        self.input().and_then(|v| v.pointer(pointer).cloned())
    }
    /// The context projection (`Null` when none).
    pub fn context(&self) -> Value {
        parse_or_null(&self.context_json)
    }
    /// One context value by JSON pointer (read from the host's parsed context inside the host).
    pub fn context_value(&self, pointer: &str) -> Option<Value> {
        if let Some(answer) = lazy::get(lazy::Doc::Context, Some(&self.context_json), pointer) {
            return answer;
        }
        self.context().pointer(pointer).cloned()
    }
    /// The binding's config, deserialized into the plugin's own type.
    pub fn config<T: DeserializeOwned>(&self) -> Result<T, String> {
        parse_config(&self.config_json)
    }
    /// One config value by JSON pointer (read from the host's parsed config inside the host).
    pub fn config_value(&self, pointer: &str) -> Option<Value> {
        if let Some(answer) = lazy::get(lazy::Doc::Config, Some(&self.config_json), pointer) {
            return answer;
        }
        parse_or_null(&self.config_json).pointer(pointer).cloned()
    }
}

/// A policy's stance. The host combines a batch as deny > hide > require-approval > allow.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Go ahead.
    Allow,
    /// Refuse (POLICY_DENIED); `message` is public, `code` private.
    Deny {
        /// Private code.
        code: Option<String>,
        /// Public message.
        message: Option<String>,
    },
    /// Conceal the capability.
    Hide,
    /// Hold for a human.
    RequireApproval {
        /// Why (non-empty).
        reason: String,
        /// Approval type, e.g. `manager`.
        approval_type: Option<String>,
        /// Expiry in milliseconds.
        expires_in_ms: Option<u64>,
    },
}

impl Decision {
    /// Deny with a public message.
    pub fn deny(message: impl Into<String>) -> Self {
        Decision::Deny {
            code: None,
            message: Some(message.into()),
        }
    }
    /// Require approval with a reason.
    pub fn require_approval(reason: impl Into<String>) -> Self {
        Decision::RequireApproval {
            reason: reason.into(),
            approval_type: None,
            expires_in_ms: None,
        }
    }
}

/// A governance rule. `Err` fails the batch closed (POLICY_FAILED).
pub trait Policy {
    /// Decide.
    fn evaluate(request: PolicyRequest) -> Result<Decision, String>;
}

/// Shapes what leaves the trust boundary. `Err` withholds the value.
pub trait Redactor {
    /// The validated output → what the model may see.
    fn redact_output(
        capability: CapabilityInfo,
        output: Value,
        config: Value,
    ) -> Result<Value, String>;
    /// A stored approval input → what a reviewer sees. Default: unchanged.
    fn redact_approval_input(
        _capability: CapabilityInfo,
        input: Value,
        _config: Value,
    ) -> Result<Value, String> {
        Ok(input)
    }
}

/// One attempt of a governed call, as a procedure plugin sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcedureCall {
    /// The capability.
    pub capability: CapabilityInfo,
    /// The validated input.
    pub input: Value,
    /// The application context.
    pub context: Value,
    /// The surface.
    pub surface: Surface,
    /// The actor the call runs as.
    pub actor: Actor,
    /// This execution.
    pub execution_id: String,
    /// Stable across retries: pass it downstream.
    pub idempotency_key: String,
    /// 1-based attempt number.
    pub attempt: u32,
    /// The approval, after a resume.
    pub approval: Option<ApprovalRef>,
    /// The binding's config.
    pub config: Value,
}

/// How a procedure fails; the host keeps the spec's mapping apart.
#[derive(Debug, Clone, PartialEq)]
pub enum ProcedureError {
    /// EXECUTION_FAILED shown to the model with `message`.
    Defined {
        /// Private application code.
        code: String,
        /// Public message.
        message: String,
        /// Private extra data.
        data: Option<Value>,
        /// Whether retrying may help.
        retryable: bool,
    },
    /// UNAUTHENTICATED.
    Unauthorized(String),
    /// FORBIDDEN.
    Forbidden(String),
    /// EXECUTION_FAILED hidden from the model.
    Internal(String),
}

/// The application's operation. `health` is the optional provider probe.
pub trait Procedure {
    /// Run one attempt.
    fn invoke(call: ProcedureCall) -> Result<Value, ProcedureError>;
    /// `Ok` when the provider can serve. Default: always healthy.
    fn health(_config: Value) -> Result<(), String> {
        Ok(())
    }
}

/// What an authorizer is asked about: the gateway's five operations and the approvals API's
/// three. Wire spelling (serde, [`Operation::as_str`]) is camelCase, as in the capgate
/// configuration file (`"invoke"`, `"decideApproval"`). Operations may be added in later
/// contract versions, so a `match` needs a wildcard arm (deny what you do not know).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum Operation {
    /// Tool listing (and the contract).
    Describe,
    /// A governed call.
    Invoke,
    /// A receipt lookup.
    GetInvocation,
    /// An approval lookup by its requester.
    GetApproval,
    /// Continuing after approval.
    ResumeApproval,
    /// The approvals API: listing approvals for review (no surface).
    ListApprovals,
    /// The approvals API: reading one approval for review (no surface).
    ReviewApproval,
    /// The approvals API: approving or rejecting (no surface).
    DecideApproval,
}

impl Operation {
    /// The wire spelling, e.g. `getInvocation`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Describe => "describe",
            Operation::Invoke => "invoke",
            Operation::GetInvocation => "getInvocation",
            Operation::GetApproval => "getApproval",
            Operation::ResumeApproval => "resumeApproval",
            Operation::ListApprovals => "listApprovals",
            Operation::ReviewApproval => "reviewApproval",
            Operation::DecideApproval => "decideApproval",
        }
    }

    /// Whether this is one of the human approvals API's operations (asked with no surface).
    pub fn is_approvals_api(self) -> bool {
        matches!(
            self,
            Operation::ListApprovals | Operation::ReviewApproval | Operation::DecideApproval
        )
    }
}

impl Surface {
    /// The wire spelling, e.g. `aiSdk`.
    pub fn as_str(self) -> &'static str {
        match self {
            Surface::Direct => "direct",
            Surface::AiSdk => "aiSdk",
            Surface::Mcp => "mcp",
            Surface::Workflow => "workflow",
            Surface::Test => "test",
        }
    }
}

/// An authenticated gateway caller.
#[derive(Debug, Clone, PartialEq)]
pub struct Principal {
    /// The actor.
    pub actor: Actor,
    /// Its tenant partition (never empty).
    pub namespace: String,
}

/// The question put to an authorizer. JSON fields stay text until read.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthorizeRequest {
    /// Who asks (authenticated by the host).
    pub principal: Principal,
    /// What they want to do.
    pub operation: Operation,
    /// The door they came through, fixed by the host's route: [`Surface::AiSdk`] for an agent
    /// route, [`Surface::Mcp`], [`Surface::Workflow`]. `None` for the human approvals API
    /// (its three operations), which is no model surface.
    pub surface: Option<Surface>,
    /// The capability concerned (for lookups: the stored one), if any.
    pub capability_id: Option<String>,
    /// The input concerned as JSON text (for lookups: the stored, private one), if any.
    pub input_json: Option<String>,
    /// The binding's `config` as JSON text (`null` when none).
    pub config_json: String,
}

impl AuthorizeRequest {
    /// The input (`None` when there is none or it does not parse).
    pub fn input(&self) -> Option<Value> {
        self.input_json
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
    }
    /// One input value by JSON pointer (e.g. `/orgId`), read from the host's parsed input
    /// inside the host.
    pub fn input_value(&self, pointer: &str) -> Option<Value> {
        if let Some(answer) = lazy::get(lazy::Doc::Input, self.input_json.as_deref(), pointer) {
            return answer;
        }
        self.input().and_then(|v| v.pointer(pointer).cloned())
    }
    /// The binding's config, deserialized into the plugin's own type.
    pub fn config<T: DeserializeOwned>(&self) -> Result<T, String> {
        parse_config(&self.config_json)
    }
    /// One config value by JSON pointer (read from the host's parsed config inside the host).
    pub fn config_value(&self, pointer: &str) -> Option<Value> {
        if let Some(answer) = lazy::get(lazy::Doc::Config, Some(&self.config_json), pointer) {
            return answer;
        }
        parse_or_null(&self.config_json).pointer(pointer).cloned()
    }
}

/// Gateway authorization: `Ok` allows, `Err` denies (the reason is only logged, never shown
/// to the caller). Asked for every operation on every door — agent, MCP and workflow routes
/// with their surface, the human approvals API with none — so an authorizer can keep a
/// tenant off a door or an agent away from approval decisions.
///
/// Exported as `capgate:plugin/authorizer@0.2.0`. (Components built with capgate-plugin 0.1
/// export `authorizer@0.1.0`: still loaded, never told the surface, never asked about the
/// approvals API.)
pub trait Authorizer {
    /// Decide.
    fn authorize(request: AuthorizeRequest) -> Result<(), String>;
}

/// Reading one value of the request from the host (`capgate:plugin/request@0.3.0`) instead of
/// parsing the JSON text it also sent. The glue lends the texts of the call being served (by
/// the address of their buffers); a helper asked about exactly one of those texts asks the
/// host, and about anything else (a request built by a unit test, a clone, an edited field)
/// parses as before. Outside a component (native unit tests) nothing is lent.
mod lazy {
    use serde_json::Value;
    use std::cell::Cell;

    /// The documents `get` can read.
    #[derive(Clone, Copy)]
    pub(crate) enum Doc {
        Input = 0,
        Context = 1,
        Attributes = 2,
        Config = 3,
    }

    thread_local! {
        /// Address and length of each lent text; `(0, 0)` when not lent.
        static LENT: Cell<[(usize, usize); 4]> = const { Cell::new([(0, 0); 4]) };
    }

    fn mark(text: Option<&str>) -> (usize, usize) {
        match text {
            Some(t) if !t.is_empty() => (t.as_ptr() as usize, t.len()),
            _ => (0, 0),
        }
    }

    /// Lends the texts of the call being served until dropped.
    pub(crate) struct Lent;

    impl Lent {
        /// Input, context, actor attributes and config, in [`Doc`]'s order.
        #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
        pub(crate) fn new(texts: [Option<&str>; 4]) -> Lent {
            LENT.with(|l| l.set(texts.map(mark)));
            Lent
        }
    }

    impl Drop for Lent {
        fn drop(&mut self) {
            LENT.with(|l| l.set([(0, 0); 4]));
        }
    }

    /// `Some(answer)` when `text` is the lent text of `doc` and the host answered; `None` to
    /// parse `text` instead.
    pub(crate) fn get(doc: Doc, text: Option<&str>, pointer: &str) -> Option<Option<Value>> {
        let m = mark(text);
        if m.0 == 0 || LENT.with(|l| l.get()[doc as usize]) != m {
            return None;
        }
        ask(doc, pointer)
    }

    #[cfg(target_arch = "wasm32")]
    fn ask(doc: Doc, pointer: &str) -> Option<Option<Value>> {
        use crate::bindings::policy::generated::capgate::plugin0_3_0::request as r;
        let which = match doc {
            Doc::Input => r::Document::Input,
            Doc::Context => r::Document::Context,
            Doc::Attributes => r::Document::ActorAttributes,
            Doc::Config => r::Document::Config,
        };
        Some(r::get(which, pointer).and_then(|v| match v {
            r::Value::Null => Some(Value::Null),
            r::Value::Boolean(b) => Some(Value::Bool(b)),
            r::Value::Number(n) => n.parse::<serde_json::Number>().ok().map(Value::Number),
            r::Value::Text(t) => Some(Value::String(t)),
            r::Value::Json(j) => serde_json::from_str(&j).ok(),
        }))
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn ask(_doc: Doc, _pointer: &str) -> Option<Option<Value>> {
        None
    }
}

fn parse_or_null(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or(Value::Null)
}

fn parse_config<T: DeserializeOwned>(s: &str) -> Result<T, String> {
    serde_json::from_str(s).map_err(|e| format!("invalid plugin config: {e}"))
}

fn parse_json(what: &str, s: &str) -> Result<Value, String> {
    serde_json::from_str(s).map_err(|e| format!("host sent invalid JSON {what}: {e}"))
}

fn to_json(v: &Value) -> String {
    v.to_string()
}

/// Declare the JSON Schema of the `config` this plugin's bindings take, so that
/// `capgate check`, `serve` and reload refuse a config that does not match it, located at
/// its key (`/policies/refundLimit/config/maxAmont`), instead of the plugin failing every
/// call closed in production. One line, a string literal or `include_str!`:
///
/// ```
/// capgate_plugin::config_schema!(r#"{
///   "type": "object",
///   "properties": { "maxAmount": { "type": "number" }, "label": { "type": "string" } },
///   "required": ["maxAmount"],
///   "additionalProperties": false
/// }"#);
/// ```
///
/// The schema is stored in the component's `capgate:config-schema` custom section (the
/// host reads it at load; a section that is not JSON refuses the plugin). Declare it once
/// per component. A plugin that declares nothing keeps checking its config itself.
#[macro_export]
macro_rules! config_schema {
    ($schema:expr) => {
        const _: () = {
            const SCHEMA: &str = $schema;
            #[used]
            #[unsafe(link_section = "capgate:config-schema")]
            static CONFIG_SCHEMA: [u8; SCHEMA.len()] = {
                let bytes = SCHEMA.as_bytes();
                let mut out = [0u8; SCHEMA.len()];
                let mut i = 0;
                while i < bytes.len() {
                    out[i] = bytes[i];
                    i += 1;
                }
                out
            };
        };
    };
}

/// Export a [`Policy`] as the component's `capgate:plugin/policy` interface.
#[macro_export]
macro_rules! export_policy {
    ($t:ty) => {
        #[doc(hidden)]
        pub struct __CapgatePolicyExport;
        impl $crate::bindings::policy::exports::capgate::plugin::policy::Guest for __CapgatePolicyExport {
            fn evaluate(
                request: $crate::bindings::policy::exports::capgate::plugin::policy::PolicyRequest,
            ) -> ::core::result::Result<
                $crate::bindings::policy::exports::capgate::plugin::policy::Decision,
                ::std::string::String,
            > {
                $crate::__glue::policy_evaluate::<$t>(request)
            }
        }
        $crate::bindings::policy::__export_policy_plugin!(__CapgatePolicyExport with_types_in $crate::bindings::policy);
    };
}

/// Export a [`Redactor`] as the component's `capgate:plugin/redactor` interface.
#[macro_export]
macro_rules! export_redactor {
    ($t:ty) => {
        #[doc(hidden)]
        pub struct __CapgateRedactorExport;
        impl $crate::bindings::redactor::exports::capgate::plugin::redactor::Guest for __CapgateRedactorExport {
            fn redact_output(
                capability: $crate::bindings::redactor::capgate::plugin::types::CapabilityInfo,
                output: ::std::string::String,
                config: ::std::string::String,
            ) -> ::core::result::Result<::std::string::String, ::std::string::String> {
                $crate::__glue::redact_output::<$t>(capability, output, config)
            }
            fn redact_approval_input(
                capability: $crate::bindings::redactor::capgate::plugin::types::CapabilityInfo,
                input: ::std::string::String,
                config: ::std::string::String,
            ) -> ::core::result::Result<::std::string::String, ::std::string::String> {
                $crate::__glue::redact_approval_input::<$t>(capability, input, config)
            }
        }
        $crate::bindings::redactor::__export_redactor_plugin!(__CapgateRedactorExport with_types_in $crate::bindings::redactor);
    };
}

/// Export a [`Procedure`] as the component's `capgate:plugin/procedure` and `health`
/// interfaces.
#[macro_export]
macro_rules! export_procedure {
    ($t:ty) => {
        #[doc(hidden)]
        pub struct __CapgateProcedureExport;
        impl $crate::bindings::procedure::exports::capgate::plugin::procedure::Guest for __CapgateProcedureExport {
            fn invoke(
                call: $crate::bindings::procedure::exports::capgate::plugin::procedure::Call,
            ) -> ::core::result::Result<
                ::std::string::String,
                $crate::bindings::procedure::exports::capgate::plugin::procedure::ProcedureError,
            > {
                $crate::__glue::procedure_invoke::<$t>(call)
            }
        }
        impl $crate::bindings::procedure::exports::capgate::plugin::health::Guest for __CapgateProcedureExport {
            fn check(config: ::std::string::String) -> ::core::result::Result<(), ::std::string::String> {
                $crate::__glue::procedure_health::<$t>(config)
            }
        }
        $crate::bindings::procedure::__export_procedure_plugin!(__CapgateProcedureExport with_types_in $crate::bindings::procedure);
    };
}

/// Export an [`Authorizer`] as the component's `capgate:plugin/authorizer@0.2.0` interface.
#[macro_export]
macro_rules! export_authorizer {
    ($t:ty) => {
        #[doc(hidden)]
        pub struct __CapgateAuthorizerExport;
        impl $crate::bindings::authorizer::exports::capgate::plugin::authorizer::Guest for __CapgateAuthorizerExport {
            fn authorize(
                request: $crate::bindings::authorizer::exports::capgate::plugin::authorizer::AuthorizeRequest,
            ) -> ::core::result::Result<(), ::std::string::String> {
                $crate::__glue::authorize::<$t>(request)
            }
        }
        $crate::bindings::authorizer::__export_authorizer_plugin!(__CapgateAuthorizerExport with_types_in $crate::bindings::authorizer);
    };
}

/// Conversions between the generated bindings and this crate's types. Used by the export
/// macros only.
#[doc(hidden)]
pub mod __glue {
    use super::*;

    /// Route panic messages to the host log before the trap, once per instance.
    pub fn init() {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| {
            std::panic::set_hook(Box::new(|info| {
                let msg = format!("plugin panicked: {info}");
                log(LogLevel::Error, &msg);
            }));
        });
    }

    macro_rules! convert_types {
        ($m:ident) => {
            #[allow(dead_code)]
            pub(crate) mod $m {
                use super::super::*;
                use crate::bindings::$m::capgate::plugin::types as t;

                pub fn surface(s: t::Surface) -> Surface {
                    match s {
                        t::Surface::Direct => Surface::Direct,
                        t::Surface::AiSdk => Surface::AiSdk,
                        t::Surface::Mcp => Surface::Mcp,
                        t::Surface::Workflow => Surface::Workflow,
                        t::Surface::Test => Surface::Test,
                    }
                }
                pub fn actor_kind(k: t::ActorKind) -> ActorKind {
                    match k {
                        t::ActorKind::User => ActorKind::User,
                        t::ActorKind::Service => ActorKind::Service,
                        t::ActorKind::Agent => ActorKind::Agent,
                        t::ActorKind::Anonymous => ActorKind::Anonymous,
                    }
                }
                pub fn actor(a: t::Actor) -> Actor {
                    Actor {
                        id: a.id,
                        kind: actor_kind(a.kind),
                        attributes_json: a.attributes,
                    }
                }
                pub fn capability(c: t::CapabilityInfo) -> CapabilityInfo {
                    CapabilityInfo {
                        id: c.id,
                        side_effect: match c.side_effect {
                            t::SideEffect::None => SideEffect::None,
                            t::SideEffect::Read => SideEffect::Read,
                            t::SideEffect::Write => SideEffect::Write,
                            t::SideEffect::Destructive => SideEffect::Destructive,
                            t::SideEffect::External => SideEffect::External,
                        },
                        risk: match c.risk {
                            t::Risk::Low => Risk::Low,
                            t::Risk::Medium => Risk::Medium,
                            t::Risk::High => Risk::High,
                            t::Risk::Critical => Risk::Critical,
                        },
                        tags: c.tags,
                    }
                }
                #[allow(dead_code)]
                pub fn approval(a: t::ApprovalRef) -> ApprovalRef {
                    ApprovalRef {
                        id: a.id,
                        approver_id: a.approver_id,
                        approver_kind: actor_kind(a.approver_kind),
                    }
                }
            }
        };
    }
    convert_types!(policy);
    convert_types!(redactor);
    convert_types!(procedure);
    convert_types!(authorizer);

    use crate::bindings::policy::capgate::plugin::types::Phase as WitPhase;
    use crate::bindings::policy::exports::capgate::plugin::policy as wp;

    /// `policy.evaluate` → [`Policy::evaluate`].
    pub fn policy_evaluate<P: Policy>(r: wp::PolicyRequest) -> Result<wp::Decision, String> {
        init();
        let _lent = lazy::Lent::new([
            r.input.as_deref(),
            Some(&r.context),
            Some(&r.actor.attributes),
            Some(&r.config),
        ]);
        let request = PolicyRequest {
            phase: match r.phase {
                WitPhase::Discovery => Phase::Discovery,
                WitPhase::Invocation => Phase::Invocation,
                WitPhase::Execution => Phase::Execution,
            },
            surface: policy::surface(r.surface),
            capability: policy::capability(r.capability),
            actor: policy::actor(r.actor),
            input_json: r.input,
            context_json: r.context,
            execution_id: r.execution_id,
            approval: r.approval.map(policy::approval),
            config_json: r.config,
        };
        Ok(match P::evaluate(request)? {
            Decision::Allow => wp::Decision::Allow,
            Decision::Deny { code, message } => wp::Decision::Deny(wp::Denial { code, message }),
            Decision::Hide => wp::Decision::Hide,
            Decision::RequireApproval {
                reason,
                approval_type,
                expires_in_ms,
            } => wp::Decision::RequireApproval(wp::ApprovalRequirement {
                reason,
                approval_type,
                expires_in_ms,
            }),
        })
    }

    type RedactorCap = crate::bindings::redactor::capgate::plugin::types::CapabilityInfo;

    /// `redactor.redact-output` → [`Redactor::redact_output`].
    pub fn redact_output<R: Redactor>(
        c: RedactorCap,
        output: String,
        config: String,
    ) -> Result<String, String> {
        init();
        let out = R::redact_output(
            redactor::capability(c),
            parse_json("output", &output)?,
            parse_json("config", &config)?,
        )?;
        Ok(to_json(&out))
    }

    /// `redactor.redact-approval-input` → [`Redactor::redact_approval_input`].
    pub fn redact_approval_input<R: Redactor>(
        c: RedactorCap,
        input: String,
        config: String,
    ) -> Result<String, String> {
        init();
        let out = R::redact_approval_input(
            redactor::capability(c),
            parse_json("input", &input)?,
            parse_json("config", &config)?,
        )?;
        Ok(to_json(&out))
    }

    use crate::bindings::procedure::exports::capgate::plugin::procedure as wproc;

    /// `procedure.invoke` → [`Procedure::invoke`].
    pub fn procedure_invoke<P: Procedure>(c: wproc::Call) -> Result<String, wproc::ProcedureError> {
        init();
        let internal = |e: String| wproc::ProcedureError::Internal(e);
        let call = ProcedureCall {
            capability: procedure::capability(c.capability),
            input: parse_json("input", &c.input).map_err(internal)?,
            context: parse_json("context", &c.context).map_err(internal)?,
            surface: procedure::surface(c.surface),
            actor: procedure::actor(c.actor),
            execution_id: c.execution_id,
            idempotency_key: c.idempotency_key,
            attempt: c.attempt,
            approval: c.approval.map(procedure::approval),
            config: parse_json("config", &c.config).map_err(internal)?,
        };
        match P::invoke(call) {
            Ok(v) => Ok(to_json(&v)),
            Err(ProcedureError::Defined {
                code,
                message,
                data,
                retryable,
            }) => Err(wproc::ProcedureError::Defined(wproc::DefinedError {
                code,
                message,
                data: data.as_ref().map(to_json),
                retryable,
            })),
            Err(ProcedureError::Unauthorized(m)) => Err(wproc::ProcedureError::Unauthorized(m)),
            Err(ProcedureError::Forbidden(m)) => Err(wproc::ProcedureError::Forbidden(m)),
            Err(ProcedureError::Internal(m)) => Err(wproc::ProcedureError::Internal(m)),
        }
    }

    /// `health.check` → [`Procedure::health`].
    pub fn procedure_health<P: Procedure>(config: String) -> Result<(), String> {
        init();
        P::health(parse_json("config", &config)?)
    }

    use crate::bindings::authorizer::exports::capgate::plugin::authorizer as wa;

    /// `authorizer.authorize` (0.2.0) → [`Authorizer::authorize`].
    pub fn authorize<A: Authorizer>(r: wa::AuthorizeRequest) -> Result<(), String> {
        init();
        let operation = match r.operation {
            wa::Operation::Describe => Operation::Describe,
            wa::Operation::Invoke => Operation::Invoke,
            wa::Operation::GetInvocation => Operation::GetInvocation,
            wa::Operation::GetApproval => Operation::GetApproval,
            wa::Operation::ResumeApproval => Operation::ResumeApproval,
            wa::Operation::ListApprovals => Operation::ListApprovals,
            wa::Operation::ReviewApproval => Operation::ReviewApproval,
            wa::Operation::DecideApproval => Operation::DecideApproval,
        };
        let _lent = lazy::Lent::new([
            r.input.as_deref(),
            None,
            Some(&r.principal.actor.attributes),
            Some(&r.config),
        ]);
        A::authorize(AuthorizeRequest {
            principal: Principal {
                actor: authorizer::actor(r.principal.actor),
                namespace: r.principal.namespace,
            },
            operation,
            surface: r.surface.map(authorizer::surface),
            capability_id: r.capability_id,
            input_json: r.input,
            config_json: r.config,
        })
    }
}
