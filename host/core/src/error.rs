//! The closed error vocabulary of the pipeline (docs/error-codes.md) and the only two
//! shapes of it a model may ever see (SI-9, docs/invariants.md).

use serde::{Deserialize, Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// Every code the runtime can produce. The list is closed: adapters add none of their own
/// to core envelopes (the gateway's own codes live in the gateway).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    /// Unknown, unexposed or hidden capability (concealed alike, SI-8).
    CapabilityNotFound,
    /// The input failed its schema.
    InputInvalid,
    /// No well-formed actor, or the procedure reported an unauthenticated caller.
    Unauthenticated,
    /// The procedure's middleware refused the operation.
    Forbidden,
    /// A policy denied the call.
    PolicyDenied,
    /// A policy failed (error, timeout, invalid decision): fail closed (SI-7).
    PolicyFailed,
    /// Only produced by `ExecutionResult::unwrap`-style helpers.
    ApprovalRequired,
    /// Resume before a decision.
    ApprovalPending,
    /// Resume of a rejected approval.
    ApprovalRejected,
    /// Resume after expiry.
    ApprovalExpired,
    /// Resume of an approval that already executed.
    ApprovalConsumed,
    /// The stored input no longer matches its bound hash (SI-5).
    ApprovalInputMismatch,
    /// The approver is the requester (SI-4).
    ApprovalSelfApproval,
    /// The input cannot be canonically serialized.
    ApprovalUnserializableInput,
    /// Resume guards (expected actor/surface) did not match.
    ApprovalResumeMismatch,
    /// The procedure failed.
    ExecutionFailed,
    /// The procedure's output violated its schema; output withheld.
    OutputInvalid,
    /// The attempt ran past its deadline.
    Timeout,
    /// The caller cancelled.
    Cancelled,
    /// Strict audit could not record `capability.started`.
    AuditUnavailable,
    /// An adapter failed.
    AdapterError,
    /// Anything else; also the public face of every non-exposed error.
    InternalError,
}

impl ErrorCode {
    /// The per-code defaults of the error table (digest §2.5): what
    /// [`CapabilityError::new`] starts from.
    pub fn defaults(self) -> ErrorDefaults {
        use ErrorCode::*;
        use Stage as S;
        // One row per code: (stage, retryable, exposed); the message is `default_message`.
        let (stage, retryable, exposed) = match self {
            CapabilityNotFound => (Some(S::Discovery), false, true),
            InputInvalid => (Some(S::InputValidation), false, true),
            Unauthenticated => (Some(S::Authentication), false, true),
            Forbidden => (Some(S::Authorization), false, true),
            PolicyDenied => (Some(S::Policy), false, true),
            PolicyFailed => (Some(S::Policy), false, false),
            ApprovalRequired => (Some(S::Approval), false, true),
            ApprovalPending => (Some(S::Approval), true, true),
            ApprovalRejected => (Some(S::Approval), false, true),
            ApprovalExpired => (Some(S::Approval), false, true),
            ApprovalConsumed => (Some(S::Approval), false, true),
            ApprovalInputMismatch => (Some(S::Approval), false, false),
            ApprovalSelfApproval => (Some(S::Approval), false, true),
            ApprovalUnserializableInput => (Some(S::Approval), false, false),
            ApprovalResumeMismatch => (Some(S::Approval), false, false),
            ExecutionFailed => (Some(S::Execution), false, false),
            OutputInvalid => (Some(S::OutputValidation), false, false),
            Timeout => (Some(S::Timeout), true, true),
            Cancelled => (Some(S::Cancellation), false, true),
            AuditUnavailable => (Some(S::Execution), true, false),
            AdapterError => (Some(S::Adapter), false, false),
            InternalError => (None, false, false),
        };
        ErrorDefaults {
            stage,
            retryable,
            exposed,
            message: self.default_message(),
        }
    }

    /// The public message a [`CapabilityError`] of this code starts with.
    fn default_message(self) -> &'static str {
        use ErrorCode::*;
        match self {
            CapabilityNotFound => NOT_FOUND_MESSAGE,
            InputInvalid => "The input is invalid.",
            Unauthenticated => "Authentication is required.",
            Forbidden => "The operation is forbidden.",
            PolicyDenied => "The request was denied by policy.",
            PolicyFailed => "Policy evaluation failed.",
            ApprovalRequired => "Approval is required.",
            ApprovalPending => "The approval is still pending.",
            ApprovalRejected => "The approval was rejected.",
            ApprovalExpired => "The approval has expired.",
            ApprovalConsumed => "The approval has already been used.",
            ApprovalInputMismatch => "The approved input does not match its hash.",
            ApprovalSelfApproval => "The requester cannot approve their own request.",
            ApprovalUnserializableInput => "The input cannot be serialized for approval.",
            ApprovalResumeMismatch => "The approval does not belong to this caller.",
            ExecutionFailed | InternalError => OPERATION_FAILED,
            OutputInvalid => "The output violated its contract.",
            Timeout => "The operation timed out.",
            Cancelled => "The operation was cancelled.",
            AuditUnavailable => "The audit trail is unavailable.",
            AdapterError => "The adapter failed.",
        }
    }
}

crate::wire_enum! {
    ErrorCode: Display {
        CapabilityNotFound => "CAPABILITY_NOT_FOUND",
        InputInvalid => "INPUT_INVALID",
        Unauthenticated => "UNAUTHENTICATED",
        Forbidden => "FORBIDDEN",
        PolicyDenied => "POLICY_DENIED",
        PolicyFailed => "POLICY_FAILED",
        ApprovalRequired => "APPROVAL_REQUIRED",
        ApprovalPending => "APPROVAL_PENDING",
        ApprovalRejected => "APPROVAL_REJECTED",
        ApprovalExpired => "APPROVAL_EXPIRED",
        ApprovalConsumed => "APPROVAL_CONSUMED",
        ApprovalInputMismatch => "APPROVAL_INPUT_MISMATCH",
        ApprovalSelfApproval => "APPROVAL_SELF_APPROVAL",
        ApprovalUnserializableInput => "APPROVAL_UNSERIALIZABLE_INPUT",
        ApprovalResumeMismatch => "APPROVAL_RESUME_MISMATCH",
        ExecutionFailed => "EXECUTION_FAILED",
        OutputInvalid => "OUTPUT_INVALID",
        Timeout => "TIMEOUT",
        Cancelled => "CANCELLED",
        AuditUnavailable => "AUDIT_UNAVAILABLE",
        AdapterError => "ADAPTER_ERROR",
        InternalError => "INTERNAL_ERROR",
    }
}

/// One row of the error table: the defaults a [`CapabilityError`] of a code starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorDefaults {
    /// The stage (none for INTERNAL_ERROR).
    pub stage: Option<Stage>,
    /// Whether retrying may succeed.
    pub retryable: bool,
    /// Whether a model may see the code and message (`exposeToModel`).
    pub exposed: bool,
    /// The public message.
    pub message: &'static str,
}

/// The constant public message of every concealed denial (SI-8).
pub const NOT_FOUND_MESSAGE: &str = "Capability not found.";
/// The public message of every error a model may not see in detail (SI-9).
pub const OPERATION_FAILED: &str = "The operation failed.";

/// The pipeline stage an error belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// Resolution, exposure, hiding, discovery budget.
    Discovery,
    /// Stage 5: the input did not match its schema.
    InputValidation,
    /// Stage 6 and unauthenticated procedures.
    Authentication,
    /// The procedure refused the caller (forbidden).
    Authorization,
    /// Stages 7 and 9.
    Policy,
    /// Stage 8 and resume.
    Approval,
    /// Stage 11 and audit.
    Execution,
    /// Stage 12: the procedure's output did not match its schema.
    OutputValidation,
    /// A deadline ran out (an attempt, a policy batch, a request).
    Timeout,
    /// The caller cancelled the call.
    Cancellation,
    /// The adapter (a gateway door, an MCP server) failed around the call.
    Adapter,
}

crate::wire_enum! {
    Stage {
        Discovery => "discovery",
        InputValidation => "input-validation",
        Authentication => "authentication",
        Authorization => "authorization",
        Policy => "policy",
        Approval => "approval",
        Execution => "execution",
        OutputValidation => "output-validation",
        Timeout => "timeout",
        Cancellation => "cancellation",
        Adapter => "adapter",
    }
}

/// One schema issue, safe for a model: where and what, never the offending value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issue {
    /// JSON pointer of the offending location (`/amount`); empty for the root.
    pub path: String,
    /// What is wrong, with instance values masked.
    pub message: String,
}

/// A library error kept as the source of one of ours (a database's, an engine's...): its
/// `Display` is what our messages print, and error reporters can walk to it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A private cause: kept for logs and operators, never serialized.
pub type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// A named seam implementation (an authorizer or redactor plugin, say) that refused or
/// failed, with its error: what [`AuthorizeError`](crate::authz::AuthorizeError) and
/// [`RedactError`](crate::redact::RedactError) keep, so logs say which one and why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{name}: {source}")]
pub struct NamedFailure {
    /// The configured name of what failed.
    pub name: String,
    /// Its refusal or failure.
    #[source]
    pub source: Cause,
}

impl NamedFailure {
    /// `name` failed with `source`.
    pub fn new(
        name: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        NamedFailure {
            name: name.into(),
            source: Arc::new(source),
        }
    }
}

/// Declare a seam's error: a variant for a refusal in the seam's own words and `Failed`, a
/// [`NamedFailure`] of a named implementation (a plugin), both read "`$prefix`: …", plus a
/// constructor of the first. The authorizer and redactor seams fail the same way (fail
/// closed, the reason kept private), so their errors are declared once.
macro_rules! seam_error {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($prefix:literal) {
            $(#[$own_meta:meta])*
            $own:ident, built by $ctor:ident;
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, thiserror::Error)]
        #[non_exhaustive]
        pub enum $name {
            $(#[$own_meta])*
            #[error("{prefix}: {0}", prefix = $prefix)]
            $own(String),
            #[doc = concat!(
                "A named implementation (a plugin) refused or failed: ",
                "`NamedFailure::new(name, e).into()`."
            )]
            #[error("{prefix}: {0}", prefix = $prefix)]
            Failed(#[from] $crate::error::NamedFailure),
        }

        impl $name {
            #[doc = concat!("`", stringify!($own), "`, with a private reason.")]
            pub fn $ctor(reason: impl Into<String>) -> Self {
                $name::$own(reason.into())
            }
        }
    };
}
pub(crate) use seam_error;

/// A governed failure. Serializing it yields only the model-safe wire shape (see
/// [`CapabilityError::to_public`]); the stage, the private cause and private details stay
/// in memory for audit and logs.
#[derive(Clone)]
pub struct CapabilityError {
    code: ErrorCode,
    stage: Option<Stage>,
    public_message: Cow<'static, str>,
    retryable: bool,
    expose_to_model: bool,
    issues: Option<Vec<Issue>>,
    private_details: Option<serde_json::Value>,
    cause: Option<Cause>,
}

impl fmt::Debug for CapabilityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CapabilityError")
            .field("code", &self.code)
            .field("stage", &self.stage)
            .field("public_message", &self.public_message)
            .field("retryable", &self.retryable)
            .field("expose_to_model", &self.expose_to_model)
            .field("issues", &self.issues)
            .field("private_details", &self.private_details)
            .field("cause", &self.cause.as_ref().map(|c| c.to_string()))
            .finish()
    }
}

impl fmt::Display for CapabilityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.public_message)
    }
}

impl std::error::Error for CapabilityError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

impl CapabilityError {
    /// An error with the code's defaults.
    pub fn new(code: ErrorCode) -> Self {
        let defaults = code.defaults();
        CapabilityError {
            code,
            stage: defaults.stage,
            public_message: Cow::Borrowed(defaults.message),
            retryable: defaults.retryable,
            expose_to_model: defaults.exposed,
            issues: None,
            private_details: None,
            cause: None,
        }
    }

    /// The concealed not-found error (SI-8): identical whatever the true reason.
    pub fn not_found() -> Self {
        CapabilityError::new(ErrorCode::CapabilityNotFound)
    }

    /// INPUT_INVALID with model-safe issues.
    pub fn input_invalid(issues: Vec<Issue>) -> Self {
        let mut e = CapabilityError::new(ErrorCode::InputInvalid);
        e.issues = Some(issues);
        e
    }

    /// Replace the public message.
    pub fn with_message(mut self, message: impl Into<Cow<'static, str>>) -> Self {
        self.public_message = message.into();
        self
    }

    crate::setters! {
        /// Override whether retrying may help, for the caller's retry logic.
        with_retryable => retryable: bool;
        /// Override whether a model may see the code and message.
        with_exposed => expose_to_model: bool;
    }

    /// Override the stage.
    pub fn with_stage(mut self, stage: Stage) -> Self {
        self.stage = Some(stage);
        self
    }

    /// Attach a private cause (never serialized).
    pub fn with_cause(
        mut self,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        let boxed: Box<dyn std::error::Error + Send + Sync> = cause.into();
        self.cause = Some(Arc::from(boxed));
        self
    }

    /// Attach private details (audit/logs only, never serialized).
    pub fn with_private_details(mut self, details: serde_json::Value) -> Self {
        self.private_details = Some(details);
        self
    }

    /// The error code: what the caller branches on.
    pub fn code(&self) -> ErrorCode {
        self.code
    }
    /// The stage (none for INTERNAL_ERROR).
    pub fn stage(&self) -> Option<Stage> {
        self.stage
    }
    /// The public message.
    pub fn public_message(&self) -> &str {
        &self.public_message
    }
    /// Whether retrying may succeed.
    pub fn retryable(&self) -> bool {
        self.retryable
    }
    /// Whether a model may see the code and message.
    pub fn expose_to_model(&self) -> bool {
        self.expose_to_model
    }
    /// The INPUT_INVALID issues.
    pub fn issues(&self) -> Option<&[Issue]> {
        self.issues.as_deref()
    }
    /// Private details (policy name, reason...).
    pub fn private_details(&self) -> Option<&serde_json::Value> {
        self.private_details.as_ref()
    }
    /// The private cause.
    pub fn cause(&self) -> Option<&Cause> {
        self.cause.as_ref()
    }

    /// The only two wire shapes a model may receive (SI-9): the exposed
    /// `{code, message, retryable[, details]}` or the constant internal error.
    pub fn to_public(&self) -> PublicError {
        if self.expose_to_model {
            PublicError {
                code: self.code,
                message: self.public_message.to_string(),
                retryable: self.retryable,
                details: match (&self.code, &self.issues) {
                    (ErrorCode::InputInvalid, Some(issues)) => Some(PublicDetails {
                        issues: issues.clone(),
                    }),
                    _ => None,
                },
            }
        } else {
            PublicError::internal()
        }
    }
}

impl Serialize for CapabilityError {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_public().serialize(s)
    }
}

/// What crosses a trust boundary of an error.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublicError {
    /// The code (INTERNAL_ERROR for everything not exposed).
    pub code: ErrorCode,
    /// The public message.
    pub message: String,
    /// Whether retrying may succeed.
    pub retryable: bool,
    /// INPUT_INVALID issue paths and messages, never values.
    pub details: Option<PublicDetails>,
}

impl PublicError {
    /// `{code: INTERNAL_ERROR, message: "The operation failed.", retryable: false}`.
    pub fn internal() -> Self {
        PublicError {
            code: ErrorCode::InternalError,
            message: OPERATION_FAILED.to_string(),
            retryable: false,
            details: None,
        }
    }
}

/// The public details of an `INPUT_INVALID` error: which fields are wrong and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublicDetails {
    /// The schema issues.
    pub issues: Vec<Issue>,
}
