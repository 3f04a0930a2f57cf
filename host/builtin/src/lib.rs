//! capgate-builtin: the plugins that ship inside capgate, and the checks of their
//! configuration that run when a deployment is loaded.
//!
//! A policy such as "refunds over 500 need a manager" should not need a crate, a build and
//! a pin of its own. capgate ships policy components that are configured with expressions
//! instead: `[policies.X] plugin = "cel"` (or `"cedar"`) needs no `[plugins.cel]` section. Each one is a
//! WebAssembly component like any other (same sandbox, fuel, deadline and memory cap, fails
//! closed), built from source under `plugins/` by this crate's build script and embedded
//! with the SHA-256 the build computed, so the binary pins it as a deployment pins its own
//! plugins.
//!
//! ```
//! let cel = capgate_builtin::get("cel").expect("capgate ships the CEL policy");
//! assert_eq!(cel.sha256.len(), 64);
//! assert!(cel.wasm.starts_with(b"\0asm"));
//! ```
//!
//! [`cedar::check`] checks a `cedar` binding's shape, and [`cedar::check_config`] gives the
//! shipped component itself a Cedar schema generated from the capabilities the binding is
//! attached to, so it parses and validates the set with the very crate its calls run (the
//! host does not link Cedar; see [`cedar`]).
//!
//! [`cel::check`] compiles a `cel` binding's expressions with the same parser the component
//! runs, and types them against each capability's input schema, so a syntax error, a type
//! error or a field the schema does not have is reported at its place in the file.

pub mod cedar;
pub mod cel;
pub mod redact;

use std::fmt;

/// A plugin that ships inside capgate.
#[derive(Debug)]
pub struct Builtin {
    /// What `plugin = "…"` names it by.
    pub name: &'static str,
    /// What it is for (`capgate inspect`, errors).
    pub summary: &'static str,
    /// The component's bytes, built from source with capgate.
    pub wasm: &'static [u8],
    /// Lowercase hex SHA-256 of [`Builtin::wasm`], computed by the build.
    pub sha256: &'static str,
}

/// The CEL policy (`plugins/cel`).
pub static CEL: Builtin = Builtin {
    name: "cel",
    summary: "policy: rules written as CEL expressions (first matching rule decides)",
    wasm: include_bytes!(concat!(env!("OUT_DIR"), "/cel_policy.wasm")),
    sha256: include_str!(concat!(env!("OUT_DIR"), "/cel_policy.wasm.sha256")),
};

/// The declarative redactor (`plugins/redact`).
pub static REDACT: Builtin = Builtin {
    name: "redact",
    summary: "redactor: drop or mask JSON pointers (with `*`) in outputs and approval views",
    wasm: include_bytes!(concat!(env!("OUT_DIR"), "/redact.wasm")),
    sha256: include_str!(concat!(env!("OUT_DIR"), "/redact.wasm.sha256")),
};

/// The Cedar policy (`plugins/cedar`).
pub static CEDAR: Builtin = Builtin {
    name: "cedar",
    summary: "policy: a Cedar policy set (forbid wins; @stance for hide and require-approval)",
    wasm: include_bytes!(concat!(env!("OUT_DIR"), "/cedar_policy_plugin.wasm")),
    sha256: include_str!(concat!(env!("OUT_DIR"), "/cedar_policy_plugin.wasm.sha256")),
};

/// Every shipped plugin.
pub static ALL: &[&Builtin] = &[&CEL, &CEDAR, &REDACT];

/// The shipped plugin called `name`, if there is one.
pub fn get(name: &str) -> Option<&'static Builtin> {
    ALL.iter().copied().find(|b| b.name == name)
}

/// What is wrong with a shipped plugin's configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The configuration's shape (a missing key, a wrong type, an unknown key, a pointer
    /// that is not one).
    #[error("{message}")]
    Config {
        /// What is wrong.
        message: String,
    },
    /// An expression does not parse.
    #[error("CEL syntax error: {message}")]
    Syntax {
        /// The parser's message.
        message: String,
    },
    /// An expression would fail on every call: operands of the wrong type, a variable that
    /// does not exist, a `when` that is not a bool.
    #[error("CEL type error: {message}")]
    Type {
        /// What does not type.
        message: String,
    },
    /// A Cedar policy set does not parse.
    #[error("Cedar syntax error: {message}")]
    CedarSyntax {
        /// Cedar's message.
        message: String,
    },
    /// A Cedar policy set does not validate against the schema generated from the
    /// capabilities it is attached to (an unknown attribute, a type error, an unknown
    /// action).
    #[error("Cedar validation error: {message}")]
    CedarValidation {
        /// Cedar's message.
        message: String,
    },
    /// A hide rule that cannot decide in discovery, where the binding runs (a warning:
    /// the configuration loads).
    #[error("{message}")]
    Discovery {
        /// What is wrong, and what to do.
        message: String,
    },
    /// A policy's reason reads the input (a warning: the configuration loads). The filled
    /// text goes to the approver with the approval record, and back to the caller as a
    /// deny's public message; the audit trail records the policy's name instead (SI-10).
    #[error("{message}")]
    ReasonReadsInput {
        /// What the reason does, and where the text goes.
        message: String,
    },
    /// An expression reads a field the capability's input schema does not have (or a
    /// redactor names one its output schema does not have).
    #[error("{}", unknown_field(capability, field, known))]
    UnknownField {
        /// The capability whose input schema was read.
        capability: String,
        /// The field as the expression spells it, e.g. `input.amout`.
        field: String,
        /// The fields the schema has there.
        known: Vec<String>,
    },
}

fn unknown_field(capability: &str, field: &str, known: &[String]) -> String {
    let known = if known.is_empty() {
        "none".to_string()
    } else {
        known.join(", ")
    };
    let schema = if field.starts_with("input") {
        "input"
    } else {
        "output"
    };
    format!(
        "`{field}` is not in the {schema} schema of capability `{capability}` (its fields there: {known})"
    )
}

/// A problem and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// JSON pointer into the binding's `config`, e.g. `/rules/0/when`.
    pub pointer: String,
    /// Character offset inside the string at `pointer`, where the problem starts.
    pub offset: Option<usize>,
    /// What is wrong.
    pub problem: Problem,
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.problem)
    }
}

/// The load-time check of a shipped plugin's binding (`cel` and `cedar` policies, `redact`
/// redactors; a `cedar` config with `policiesFile` inlined first by [`cedar::inline`])
/// against the capabilities it is attached to; nothing for other plugins.
pub fn check(
    plugin: &str,
    config: &serde_json::Value,
    capabilities: &[Attached<'_>],
) -> Vec<Found> {
    match plugin {
        "cel" => cel::check(config, capabilities),
        "cedar" => cedar::check(config, capabilities),
        "redact" => redact::check(config, capabilities),
        _ => Vec::new(),
    }
}

/// Whether a shipped policy's config (a `cedar` one with `policiesFile` inlined) has a
/// `hide` rule (a CEL rule with `stance = "hide"`, a Cedar forbid with `@stance("hide")`).
/// capgate runs such a binding, when it names no `phases`, in discovery and invocation
/// instead of invocation only: a capability hidden only when called
/// would still be listed, and answering "not found" to what was just listed gives the
/// hiding away. In discovery the components try only what can hide (see `plugins/cel`
/// and `plugins/cedar`).
pub fn hides(plugin: &str, config: &serde_json::Value) -> bool {
    match plugin {
        "cel" => cel::hides(config),
        "cedar" => cedar::hides(config),
        _ => false,
    }
}

/// The warnings of a shipped policy binding that runs in discovery: its hide rules that
/// read the input, which discovery does not have (located like [`check`]'s problems).
pub fn discovery_warnings(plugin: &str, config: &serde_json::Value) -> Vec<Found> {
    match plugin {
        "cel" => cel::hide_reads_input(config),
        "cedar" => cedar::hide_reads_input(config),
        _ => Vec::new(),
    }
}

/// The warnings of a shipped policy binding whose reasons read the input: each such reason
/// (a CEL rule's `reason`, a Cedar `@reason`), located at its first `${…}` that reads it.
/// Only the approver reads the filled text (and the caller, for a deny); events, exports
/// and notifications record the policy's name as the reason code, so a reason that needs
/// the input to make sense says nothing in the trail.
pub fn reason_warnings(plugin: &str, config: &serde_json::Value) -> Vec<Found> {
    match plugin {
        "cel" => cel::reason_reads_input(config),
        "cedar" => cedar::reason_reads_input(config),
        _ => Vec::new(),
    }
}

/// The message of a [`Problem::ReasonReadsInput`]: `what` names the input as the policy
/// language spells it.
fn reason_reads_input(what: &str) -> Problem {
    Problem::ReasonReadsInput {
        message: format!(
            "this reason reads `{what}`: the approver sees it filled in with the approval, and a deny's reason is returned to the caller, but events, exports and notifications carry only the reason code (the policy's name, SI-10), never this text; say in the policy's name or its `code` what the trail should show"
        ),
    }
}

/// A capability a binding is attached to, with the schema its check reads (the input
/// schema for a policy, the output schema for a redactor).
#[derive(Debug, Clone, Copy)]
pub struct Attached<'a> {
    /// Its id.
    pub id: &'a str,
    /// The schema, if it has one.
    pub schema: Option<&'a serde_json::Value>,
}
