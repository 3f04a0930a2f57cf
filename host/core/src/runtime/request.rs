//! What the runtime's entry points take and give: the [`InvokeRequest`] an adapter builds
//! at stage 1 (and its [`AdmissionHook`]), the options of discovery and resume, and the
//! [`CapabilityDescriptor`] a model learns.

use crate::actor::{Actor, ActorRef, Surface};
use crate::error::CapabilityError;
use crate::meta::{Risk, SideEffect};
use crate::procedure::ProgressFn;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// One governed call, as an adapter builds it at stage 1.
pub struct InvokeRequest {
    /// The fixed surface of the adapter.
    pub surface: Surface,
    /// The capability id.
    pub capability_id: String,
    /// The raw input (validated at stage 5).
    pub input: serde_json::Value,
    /// The authenticated actor; `None` fails stage 6.
    pub actor: Option<Actor>,
    /// The caller's tenant partition (empty when the embedder has none): recorded on any
    /// approval the call asks for, and the key of pooled plugin instances.
    pub namespace: String,
    /// The application context.
    pub context: serde_json::Value,
    /// Correlation id to carry through events.
    pub correlation_id: Option<String>,
    /// An adapter-supplied idempotency key (the gateway's journal key); else `idk_…`.
    pub idempotency_key: Option<String>,
    /// The caller's cancellation.
    pub cancel: Option<CancellationToken>,
    /// Where procedure progress goes.
    pub progress: Option<ProgressFn>,
    /// The adapter's admission step (the gateway's journal claim), run once the call passed
    /// stages 3–7 without being concealed: see [`AdmissionHook`].
    pub admission: Option<Arc<dyn AdmissionHook>>,
    /// The adapter's digest of the capability's own contract (see
    /// [`ApprovalRequest::descriptor_digest`](crate::approval::ApprovalRequest::descriptor_digest)),
    /// recorded on any approval the call asks for.
    pub descriptor_digest: Option<String>,
}

/// A call to decide without making it ([`Runtime::simulate`](crate::runtime::Runtime::simulate)):
/// what stages 3–9 read of an [`InvokeRequest`].
#[derive(Debug, Clone)]
pub struct SimulateRequest {
    /// The surface the call came through.
    pub surface: Surface,
    /// The capability id.
    pub capability_id: String,
    /// The raw input (validated as at stage 5).
    pub input: serde_json::Value,
    /// The actor; `None` is decided as stage 6 decides it.
    pub actor: Option<Actor>,
    /// The caller's tenant partition.
    pub namespace: String,
    /// The application context.
    pub context: serde_json::Value,
}

/// An adapter's last word before a call is stored or executed: the pipeline calls it once
/// the capability resolved and is exposed (stages 3–4), the input passed its schema (stage
/// 5), the actor is well formed (stage 6) and the invocation-phase policies did not hide it
/// (stage 7), i.e. for every call whose answer the caller may learn, just before a stage-7
/// refusal or stage 8. Nothing concealed (SI-8) and nothing invalid ever reaches it, so an
/// adapter that records calls here records exactly what the caller can discover.
#[async_trait::async_trait]
pub trait AdmissionHook: Send + Sync {
    /// Admit the call: `Ok(Some(key))` replaces the request's idempotency key (the key the
    /// adapter's record binds), `Ok(None)` keeps it. `Err(e)` stops the call before
    /// anything else happens, recorded as `capability.failed` with `e`; the adapter
    /// answers its caller itself.
    async fn admit(&self) -> Result<Option<String>, CapabilityError>;
}

impl InvokeRequest {
    /// A request with an empty context.
    pub fn new(
        surface: Surface,
        capability_id: impl Into<String>,
        input: serde_json::Value,
        actor: Actor,
    ) -> Self {
        InvokeRequest {
            surface,
            capability_id: capability_id.into(),
            input,
            actor: Some(actor),
            namespace: String::new(),
            context: serde_json::Value::Null,
            correlation_id: None,
            idempotency_key: None,
            cancel: None,
            progress: None,
            admission: None,
            descriptor_digest: None,
        }
    }
    /// Set the capability's descriptor digest (recorded on any approval the call asks for).
    pub fn descriptor_digest(mut self, digest: impl Into<String>) -> Self {
        self.descriptor_digest = Some(digest.into());
        self
    }
    /// Set the admission step (see [`AdmissionHook`]).
    pub fn admission(mut self, hook: Arc<dyn AdmissionHook>) -> Self {
        self.admission = Some(hook);
        self
    }
    /// Set the tenant partition.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }
    /// Set the context.
    pub fn context(mut self, context: serde_json::Value) -> Self {
        self.context = context;
        self
    }
    /// Set the cancellation token.
    pub fn cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }
    /// Set the correlation id.
    pub fn correlation_id(mut self, id: impl Into<String>) -> Self {
        self.correlation_id = Some(id.into());
        self
    }
    /// Set the idempotency key.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
    /// Set the progress callback.
    pub fn progress(mut self, f: ProgressFn) -> Self {
        self.progress = Some(f);
        self
    }
}

/// Narrows discovery to a subset (a convenience, never an authorization check).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scope {
    /// Match capabilities carrying any of these tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Match these exact ids.
    #[serde(default)]
    pub ids: Vec<String>,
}

impl Scope {
    /// Union of tag and id matches; an empty scope matches everything.
    pub fn matches(&self, id: &str, tags: &[String]) -> bool {
        if self.tags.is_empty() && self.ids.is_empty() {
            return true;
        }
        self.ids.iter().any(|i| i == id) || self.tags.iter().any(|t| tags.contains(t))
    }
}

/// Options of [`Runtime::describe`](super::Runtime::describe).
pub struct DescribeOptions {
    /// The caller's tenant partition (empty when the embedder has none).
    pub namespace: String,
    /// Who asks: discovery policies decide what this actor may see.
    pub actor: Actor,
    /// Application context handed to discovery policies.
    pub context: serde_json::Value,
    /// Narrow the list to a subset (a convenience, never an authorization check).
    pub scope: Option<Scope>,
}

/// What a model learns about a capability: enough to call it, nothing else.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityDescriptor {
    /// Canonical id, what the model calls.
    pub id: String,
    /// What the capability does, in the words a model reads.
    pub description: String,
    /// JSON Schema of the input.
    pub input_schema: serde_json::Value,
    /// What calling it does to the world.
    pub side_effect: SideEffect,
    /// How much harm misuse would do.
    pub risk: Risk,
    /// The capability's tags.
    pub tags: Vec<String>,
    /// Set when a call will need approval.
    pub requires_approval: Option<bool>,
    /// Whether model tool lists offer it or a UI presents it in context.
    #[serde(
        default,
        skip_serializing_if = "crate::meta::Discovery::is_discoverable"
    )]
    pub discovery: crate::meta::Discovery,
}

/// Options of [`Runtime::resume`](super::Runtime::resume).
#[derive(Default)]
pub struct ResumeOptions {
    /// Fresh application context.
    pub context: serde_json::Value,
    /// Cancels the resumed execution when the caller goes away.
    pub cancel: Option<CancellationToken>,
    /// Guard: the approval must have been requested by this actor id.
    pub expected_actor: Option<ActorRef>,
    /// Guard: the approval must have been requested on this surface.
    pub expected_surface: Option<Surface>,
    /// Guard: the approval must have been requested in this tenant partition.
    pub expected_namespace: Option<String>,
    /// The resuming actor as authenticated now (same id and kind as the requester, current
    /// attributes). Invocation- and execution-phase policies are re-checked with it; without
    /// it they see the actor stored with the approval.
    pub actor: Option<Actor>,
    /// Adapter-supplied idempotency key.
    pub idempotency_key: Option<String>,
    /// Receives the procedure's progress reports while it runs.
    pub progress: Option<ProgressFn>,
    /// Correlation id of the resuming request (as `invoke` takes one). The execution keeps
    /// the original call's correlation id (stored with the approval) in every event's
    /// envelope; this one is recorded beside it, as `resumeCorrelationId` in the resume's
    /// `capability.started`, `.denied`, `.failed` and `.cancelled` events.
    pub correlation_id: Option<String>,
}
