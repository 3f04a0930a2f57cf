//! The pipeline, laid out like docs/pipeline.md so the two can be read side by side:
//! [`invoke`] holds stages 2–8, [`execute`] stages 9–15 (shared with resume), [`resume`]
//! the stage-8 re-entry, and [`discovery`] the discovery pipeline.

mod discovery;
mod execute;
mod invoke;
mod policies;
mod resume;
mod simulate;

pub(crate) use discovery::describe;
pub(crate) use invoke::{conceal, invoke};
pub(crate) use resume::{refuse_resume, resume};
pub(crate) use simulate::simulate;
pub use simulate::{SimulatedOutcome, Simulation};

use crate::actor::{ActorKind, ActorRef, Surface};
use crate::audit::{AuditEvent, DenyReason, EventPayload};
use crate::error::{CapabilityError, ErrorCode};
use crate::registry::Capability;
use crate::result::{EffectStatus, ExecutionResult};
use crate::runtime::Inner;
use std::sync::Arc;
use std::time::Instant;

/// `gen_ai.operation.name` of a governed call's root span: OpenTelemetry's GenAI semantic
/// conventions name a tool's execution `execute_tool` (with `gen_ai.tool.name` the tool
/// and `error.type` the failure), beside capgate's own `capgate.*` attributes.
pub(crate) const GEN_AI_OPERATION: &str = "execute_tool";

/// A new `prefix_<uuid v7>` id (time-ordered, so ids sort by creation in stores).
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7())
}

/// How far a failed call got towards its effect: what `capability.failed` records
/// (`attempts`, `executedBeforeFailure`) and what the envelope's `effectStatus` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EffectProgress {
    /// Refused or failed before the procedure was entered: no attempt, no effect.
    NotStarted,
    /// The procedure was entered and its last attempt failed or was cut short (timeout,
    /// cancellation): whether the effect happened is unknown.
    Attempted {
        /// Attempts made, the failed one included.
        attempts: u32,
    },
    /// The procedure was entered and every attempt failed in a way that shows it had no
    /// effect (a defined error it answered, a refusal, an adapter that sent nothing:
    /// [`crate::procedure::ProcedureError::had_no_effect`]): the call failed, and its
    /// receipt can say so.
    Refused {
        /// Attempts made, the failed one included.
        attempts: u32,
    },
    /// The procedure returned, then a later stage (output validation, redaction) failed:
    /// the effect happened, its output is withheld.
    Executed {
        /// Attempts made, the successful one included.
        attempts: u32,
    },
}

impl EffectProgress {
    fn attempts(self) -> u32 {
        match self {
            EffectProgress::NotStarted => 0,
            EffectProgress::Attempted { attempts }
            | EffectProgress::Refused { attempts }
            | EffectProgress::Executed { attempts } => attempts,
        }
    }

    /// Whether the effect is unknown: the procedure was entered, and it did not answer a
    /// failure that shows it had none.
    fn effect_unknown(self) -> bool {
        !matches!(
            self,
            EffectProgress::NotStarted | EffectProgress::Refused { .. }
        )
    }

    fn executed_before_failure(self) -> bool {
        matches!(self, EffectProgress::Executed { .. })
    }
}

/// The facts every event of one execution shares.
pub(crate) struct Exec<'a> {
    pub(crate) rt: &'a Inner,
    pub(crate) execution_id: String,
    pub(crate) surface: Surface,
    /// The caller's tenant partition (empty when the embedder has none).
    pub(crate) namespace: String,
    pub(crate) actor: ActorRef,
    pub(crate) capability_id: String,
    pub(crate) correlation_id: Option<String>,
    /// On resume: the approval asked for, carried by every terminal event (even a refusal
    /// before the approval is consumed).
    pub(crate) approval_id: Option<String>,
    /// On resume: the resume request's own correlation id, recorded beside the original
    /// (which stays the envelope's).
    pub(crate) resume_correlation_id: Option<String>,
    pub(crate) input_hash: Option<String>,
    pub(crate) started: Instant,
    pub(crate) span: tracing::Span,
}

impl Exec<'_> {
    pub(crate) fn event(&self, payload: EventPayload) -> AuditEvent {
        AuditEvent {
            timestamp: self.rt.clock.now(),
            surface: self.surface,
            actor: self.actor.clone(),
            execution_id: Some(self.execution_id.clone()),
            capability_id: Some(self.capability_id.clone()),
            correlation_id: self.correlation_id.clone(),
            input_hash: self.input_hash.clone(),
            payload,
        }
    }

    /// Best-effort emission: a sink failure is reported by the auditor, never fatal.
    pub(crate) async fn emit(&self, payload: EventPayload) {
        if self.rt.audit.is_active() {
            let _ = self.rt.audit.emit(self.event(payload)).await;
        }
    }

    pub(crate) fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn close_span(&self, outcome: &'static str, error: Option<&CapabilityError>) {
        self.span.record("capgate.outcome", outcome);
        match error {
            Some(e) => {
                self.span.record("otel.status_code", "ERROR");
                self.span.record("capgate.error_code", e.code().as_str());
                self.span.record("error.type", e.code().as_str());
            }
            None => {
                self.span.record("otel.status_code", "OK");
            }
        }
    }

    /// Terminal: a failure that is a denial (stages 3, 4, 7 and their re-checks on resume):
    /// `capability.denied`.
    pub(crate) async fn denied(
        &self,
        reason: crate::audit::DenyReason,
        error: CapabilityError,
        policy_decisions: Option<Vec<crate::policy::PolicyStance>>,
    ) -> ExecutionResult {
        let payload = EventPayload::Denied {
            reason,
            public_code: error.to_public().code,
            policy_decisions,
            approval_id: self.approval_id.clone(),
            resume_correlation_id: self.resume_correlation_id.clone(),
        };
        self.fail_with(payload, "denied", error, None).await
    }

    /// Terminal: a failure before the procedure was entered (no attempt, no effect), with
    /// no policy stances to record.
    pub(crate) async fn failed_before_procedure(&self, error: CapabilityError) -> ExecutionResult {
        self.failed(error, EffectProgress::NotStarted, None).await
    }

    /// Terminal: any other failure: `capability.failed` (or `.cancelled` for TIMEOUT and
    /// CANCELLED).
    pub(crate) async fn failed(
        &self,
        error: CapabilityError,
        progress: EffectProgress,
        policy_decisions: Option<Vec<crate::policy::PolicyStance>>,
    ) -> ExecutionResult {
        let effect_status = progress.effect_unknown().then_some(EffectStatus::Unknown);
        if matches!(error.code(), ErrorCode::Timeout | ErrorCode::Cancelled) {
            let metadata = error
                .private_details()
                .and_then(|d| d.get("adapterMetadata"))
                .cloned();
            self.emit(EventPayload::Cancelled {
                code: error.code(),
                duration_ms: self.elapsed_ms(),
                metadata,
                approval_id: self.approval_id.clone(),
                resume_correlation_id: self.resume_correlation_id.clone(),
            })
            .await;
            self.close_span("cancelled", Some(&error));
            return ExecutionResult::Cancelled {
                execution_id: self.execution_id.clone(),
                error,
                effect_status,
            };
        }
        let payload = EventPayload::Failed {
            code: error.code(),
            stage: error.stage(),
            retryable: error.retryable(),
            attempts: progress.attempts(),
            executed_before_failure: progress.executed_before_failure().then_some(true),
            policy_decisions,
            approval_id: self.approval_id.clone(),
            resume_correlation_id: self.resume_correlation_id.clone(),
        };
        self.fail_with(payload, "failed", error, effect_status)
            .await
    }

    /// End the execution as failed: its terminal event `payload`, the span closed as
    /// `outcome`, and the failed envelope.
    async fn fail_with(
        &self,
        payload: EventPayload,
        outcome: &'static str,
        error: CapabilityError,
        effect_status: Option<EffectStatus>,
    ) -> ExecutionResult {
        self.emit(payload).await;
        self.close_span(outcome, Some(&error));
        ExecutionResult::Failed {
            execution_id: self.execution_id.clone(),
            error,
            effect_status,
        }
    }

    /// Stages 3–5, shared by a call and by its resume (which re-checks them against the
    /// current deployment): the capability `resolved` must exist and be exposed on the
    /// execution's surface (else the not-found denial, concealed as an unknown id: SI-1,
    /// SI-8), and `input` must pass its current schema; from here on only the validated
    /// value exists (SI-6). `Err` is the terminal result.
    pub(crate) async fn admit_input(
        &self,
        resolved: Option<Arc<Capability>>,
        input: serde_json::Value,
    ) -> Result<(Arc<Capability>, serde_json::Value), ExecutionResult> {
        // ── Stage 3: resolve the capability id ──
        let Some(cap) = resolved else {
            return Err(self
                .denied(DenyReason::Unknown, CapabilityError::not_found(), None)
                .await);
        };
        // ── Stage 4: exposure on this surface (concealed as not found, SI-1/SI-8) ──
        if !cap.meta.expose.allows(self.surface) {
            return Err(self
                .denied(DenyReason::NotExposed, CapabilityError::not_found(), None)
                .await);
        }
        // ── Stage 5: input validation ──
        match cap.input.validate(input) {
            Ok(v) => Ok((cap, v)),
            Err(issues) => Err(self
                .failed_before_procedure(CapabilityError::input_invalid(issues))
                .await),
        }
    }
}

/// The actor recorded when a request carries none (stage 6 will refuse it).
pub(crate) fn missing_actor() -> ActorRef {
    ActorRef {
        id: String::new(),
        kind: ActorKind::Anonymous,
    }
}

/// Turn a panic payload into a message for private causes.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}
