//! Redaction shapes what leaves the trust boundary: the output a model sees (stage 13) and
//! the input a human approver sees in approval listings.

use crate::policy::CapabilityInfo;
use async_trait::async_trait;
use std::sync::Arc;

crate::error::seam_error! {
    /// Why a redactor failed. Output redaction failing withholds the output (fail closed).
    pub enum RedactError ("redaction failed") {
        /// The redactor refused the value, for this reason.
        Refused, built by refused;
    }
}

/// Maps values to their model-safe (or approver-safe) form.
#[async_trait]
pub trait Redactor: Send + Sync + 'static {
    /// A stable name for logs.
    fn name(&self) -> &str;
    /// Stage 13: the validated output → what the adapter may serialize. `namespace` is the
    /// call's tenant partition (empty when the embedder has none): pooled implementations
    /// key their instances by it.
    async fn redact_output(
        &self,
        capability: &CapabilityInfo,
        namespace: &str,
        output: serde_json::Value,
    ) -> Result<serde_json::Value, RedactError>;
    /// The stored approval input → what an approval listing shows (`namespace` is the
    /// approval's). Default: unchanged.
    async fn redact_approval_input(
        &self,
        _capability: &CapabilityInfo,
        _namespace: &str,
        input: serde_json::Value,
    ) -> Result<serde_json::Value, RedactError> {
        Ok(input)
    }
}

type RedactFn = dyn Fn(serde_json::Value) -> Result<serde_json::Value, RedactError> + Send + Sync;

/// A redactor from synchronous closures.
pub struct FnRedactor {
    name: String,
    output: Arc<RedactFn>,
    approval_input: Option<Arc<RedactFn>>,
}

impl FnRedactor {
    /// Also redact approval inputs with this closure.
    pub fn with_approval_input<F>(mut self, f: F) -> Self
    where
        F: Fn(serde_json::Value) -> Result<serde_json::Value, RedactError> + Send + Sync + 'static,
    {
        self.approval_input = Some(Arc::new(f));
        self
    }
}

/// An output redactor from a closure.
///
/// ```
/// use capgate_core::redact::redactor_fn;
/// let strip_gateway_ref = redactor_fn("strip-gateway-ref", |mut out| {
///     if let Some(o) = out.as_object_mut() { o.remove("gatewayRef"); }
///     Ok(out)
/// });
/// # let _ = strip_gateway_ref;
/// ```
pub fn redactor_fn<F>(name: impl Into<String>, f: F) -> FnRedactor
where
    F: Fn(serde_json::Value) -> Result<serde_json::Value, RedactError> + Send + Sync + 'static,
{
    FnRedactor {
        name: name.into(),
        output: Arc::new(f),
        approval_input: None,
    }
}

#[async_trait]
impl Redactor for FnRedactor {
    fn name(&self) -> &str {
        &self.name
    }
    async fn redact_output(
        &self,
        _capability: &CapabilityInfo,
        _namespace: &str,
        output: serde_json::Value,
    ) -> Result<serde_json::Value, RedactError> {
        (self.output)(output)
    }
    async fn redact_approval_input(
        &self,
        _capability: &CapabilityInfo,
        _namespace: &str,
        input: serde_json::Value,
    ) -> Result<serde_json::Value, RedactError> {
        match &self.approval_input {
            Some(f) => f(input),
            None => Ok(input),
        }
    }
}
