//! The run of an admitted request and its receipt: execute on a task of its own under the
//! work budget, settle the journal (or leave it pending when the effect is unknown).

use super::admission::{Call, Claimed, Run, conflict, replay};
use super::{Gateway, LOG};
use crate::reject::Reject;
use crate::wire::{CapabilityOutcome, InvocationReceipt};
use capgate_core::error::{CapabilityError, ErrorCode};
use capgate_core::journal::{
    ClaimOutcome, ClaimRequest, InvocationJournal, InvocationRecord, InvocationState, JournalError,
    Settlement,
};
use capgate_core::result::ExecutionResult;
use capgate_core::runtime::{AdmissionHook, InvokeRequest, ResumeOptions, Runtime};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

impl Gateway {
    /// Execute an admitted run on its own task, cancelled when the work budget runs out
    /// or the request is dropped; answer unknown when it does not finish in time.
    pub(crate) async fn execute(
        self: &Arc<Self>,
        run: Box<Run>,
        started: Instant,
    ) -> Result<CapabilityOutcome, Reject> {
        let invocation_id = run.invocation_id.clone();
        let cancel = CancellationToken::new();
        // Fires if this request future is dropped (client gone) before the run ends.
        let on_drop = cancel.clone().drop_guard();
        let gateway = self.clone();
        let token = cancel.clone();
        // In the request's trace, so the execution's root span continues the caller's trace
        // (or, for a request the head decision left out, opens none).
        let mut task = tokio::spawn(capgate_core::trace::in_current_trace(async move {
            gateway.execute_and_settle(*run, token).await
        }));
        let work_deadline = started + self.work_budget();
        let joined = tokio::select! {
            joined = &mut task => Some(joined),
            _ = tokio::time::sleep_until(work_deadline) => {
                cancel.cancel();
                // Give a cooperative procedure part of the drain reservation to wind down.
                let grace = work_deadline + self.audit_drain_timeout / 2;
                tokio::time::timeout_at(grace, &mut task).await.ok()
            }
        };
        let _ = on_drop.disarm();
        match joined {
            Some(Ok(outcome)) => outcome,
            Some(Err(e)) => {
                tracing::error!(target: LOG, invocation = %invocation_id, error = %e, "execution task failed");
                Ok(CapabilityOutcome::OutcomeUnknown { invocation_id })
            }
            None => {
                tracing::warn!(target: LOG, invocation = %invocation_id, "execution did not stop in time; outcome unknown");
                Ok(CapabilityOutcome::OutcomeUnknown { invocation_id })
            }
        }
    }

    async fn execute_and_settle(
        &self,
        mut run: Run,
        cancel: CancellationToken,
    ) -> Result<CapabilityOutcome, Reject> {
        let actor = run.who.principal.actor.clone();
        let result = match &run.call {
            Call::Invoke {
                capability_id,
                input,
                correlation_id,
                contract_digest,
            } => {
                let slot = Arc::new(ClaimSlot::default());
                let hook = JournalAdmission {
                    journal: self.journal.clone(),
                    runtime: self.runtime.clone(),
                    scope: run.scope.clone(),
                    namespace: run.who.principal.namespace.clone(),
                    invocation_id: run.invocation_id.clone(),
                    capability_id: capability_id.clone(),
                    input: input.clone(),
                    correlation_id: correlation_id.clone(),
                    contract_digest: contract_digest.clone(),
                    slot: slot.clone(),
                };
                let mut request =
                    InvokeRequest::new(self.surface, capability_id.clone(), input.clone(), actor)
                        .namespace(run.who.principal.namespace.clone())
                        .context(run.who.context.clone())
                        .cancel(cancel)
                        .admission(Arc::new(hook));
                if let Some(d) = self.descriptor_digests.get(capability_id) {
                    request = request.descriptor_digest(d.clone());
                }
                if let Some(c) = correlation_id {
                    request = request.correlation_id(c.clone());
                }
                let result = self.runtime.invoke(request).await;
                match slot.take() {
                    // The journal answered instead (a replay, a conflict, a refusal): the
                    // call stopped before it was run and this request claimed nothing.
                    // An answer that names no execution names the one the runtime opened
                    // and audited for it.
                    SlotState::Answered(answer) => {
                        return answer.map(|a| a.in_execution(result.execution_id()));
                    }
                    SlotState::Claimed(claimed) => run.claimed = Some(claimed),
                    // Never admitted: concealed, invalid or otherwise refused before the
                    // claim. Nothing was stored, so nothing is settled.
                    SlotState::Empty => {
                        return Ok(outcome_of(&run.invocation_id, result));
                    }
                }
                result
            }
            Call::Resume {
                approval_id,
                correlation_id,
                ..
            } => {
                let options = ResumeOptions {
                    context: run.who.context.clone(),
                    cancel: Some(cancel),
                    expected_actor: Some(actor.reference()),
                    expected_surface: Some(self.surface),
                    expected_namespace: Some(run.who.principal.namespace.clone()),
                    actor: Some(actor.clone()),
                    idempotency_key: run.claimed.as_ref().map(|c| c.idempotency_key.clone()),
                    progress: None,
                    correlation_id: correlation_id.clone(),
                };
                self.runtime.resume(approval_id, options).await
            }
        };
        let Some(claim_token) = run.claimed.as_ref().map(|c| c.claim_token.clone()) else {
            return Ok(outcome_of(&run.invocation_id, result));
        };
        let unknown = CapabilityOutcome::OutcomeUnknown {
            invocation_id: run.invocation_id.clone(),
        };
        if result.effect_unknown() {
            // The procedure was entered: a late or partial effect may still commit. The
            // claim stays pending; only an operator's reconcile may settle it.
            tracing::warn!(
                target: LOG,
                invocation = %run.invocation_id,
                execution = %result.execution_id(),
                "effect status unknown; receipt left pending"
            );
            return Ok(unknown);
        }
        if matches!(run.call, Call::Invoke { .. })
            && result
                .error()
                .is_some_and(|e| e.code() == ErrorCode::CapabilityNotFound)
        {
            // Hidden by an execution-phase policy after the claim, before anything ran: the
            // call is stored exactly as an unknown name is, that is not at all (SI-8), so
            // its id reads and can be reused as one never claimed.
            if let Err(e) = self
                .journal
                .release(&run.scope, &run.invocation_id, &claim_token)
                .await
            {
                tracing::error!(target: LOG, invocation = %run.invocation_id, error = %e, "releasing a concealed call's claim failed; it stays pending");
            }
            return Ok(outcome_of(&run.invocation_id, result));
        }
        let outcome = outcome_of(&run.invocation_id, result.clone());
        let Ok(value) = serde_json::to_value(&outcome) else {
            tracing::error!(target: LOG, invocation = %run.invocation_id, "outcome could not be serialized; receipt left pending");
            return Ok(unknown);
        };
        let settlement = match (&result, &run.call) {
            (ExecutionResult::ApprovalRequired { approval, .. }, _) => {
                Settlement::approval_required(approval.id.clone(), value)
            }
            // The resume found the approval still undecided (a decision raced the
            // pre-check): nothing ran, so the call keeps waiting for that approval.
            (
                ExecutionResult::Failed { error, .. },
                Call::Resume {
                    approval_id,
                    previous_outcome: Some(previous),
                    ..
                },
            ) if error.code() == ErrorCode::ApprovalPending => {
                Settlement::approval_required(approval_id.clone(), previous.clone())
            }
            _ => Settlement::final_outcome(value),
        };
        let settled = self
            .journal
            .settle(
                &run.scope,
                &run.invocation_id,
                &claim_token,
                settlement.clone(),
                self.runtime.now(),
            )
            .await;
        match settled {
            Ok(_) => {}
            Err(JournalError::Backend(e)) => {
                // The result is real and the store is away: keep settling in the
                // background until it is back, so the receipt does not stay pending.
                tracing::error!(target: LOG, invocation = %run.invocation_id, error = %e, "settling the receipt failed; retrying in the background");
                tokio::spawn(settle_until_back(
                    self.journal.clone(),
                    self.runtime.clone(),
                    run,
                    claim_token,
                    settlement,
                ));
            }
            Err(e) => {
                // The result is real; the receipt stays pending until reconciled.
                tracing::error!(target: LOG, invocation = %run.invocation_id, error = %e, "settling the receipt failed");
            }
        }
        Ok(outcome)
    }
}

/// What the admission step of one invoke left for the request that ran it.
#[derive(Default)]
enum SlotState {
    /// The step was never reached (or never finished): nothing was claimed.
    #[default]
    Empty,
    /// This request owns the claim: settle it.
    Claimed(Claimed),
    /// The journal answered instead of admitting (replay, conflict, refusal).
    Answered(Result<CapabilityOutcome, Reject>),
}

/// Where [`JournalAdmission`] leaves its result for the request.
#[derive(Default)]
struct ClaimSlot(Mutex<SlotState>);

impl ClaimSlot {
    fn put(&self, state: SlotState) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }
    fn take(&self) -> SlotState {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The gateway's admission step ([`AdmissionHook`]): the atomic journal claim, made only
/// once the runtime found the call admissible (resolved, exposed, schema-valid, not hidden
/// by policy), so nothing concealed and nothing invalid is ever stored, and within the
/// namespace's storage budget.
struct JournalAdmission {
    journal: Arc<dyn InvocationJournal>,
    runtime: Runtime,
    scope: String,
    namespace: String,
    invocation_id: String,
    capability_id: String,
    input: serde_json::Value,
    correlation_id: Option<String>,
    contract_digest: Option<String>,
    slot: Arc<ClaimSlot>,
}

impl JournalAdmission {
    fn request(&self) -> Result<ClaimRequest, JournalError> {
        let mut claim = ClaimRequest::new(
            self.scope.clone(),
            self.invocation_id.clone(),
            self.capability_id.clone(),
            self.input.clone(),
        )?
        .namespace(self.namespace.clone())?;
        if let Some(d) = &self.contract_digest {
            claim = claim.contract_digest(d.clone())?;
        }
        if let Some(c) = &self.correlation_id {
            claim = claim.correlation_id(c.clone())?;
        }
        Ok(claim)
    }

    /// Stop the call: the request answers `answer`; the runtime records why.
    fn stop(&self, answer: Result<CapabilityOutcome, Reject>, why: &str) -> CapabilityError {
        self.slot.put(SlotState::Answered(answer));
        CapabilityError::new(ErrorCode::AdapterError)
            .with_private_details(serde_json::json!({ "journal": why }))
    }
}

#[async_trait::async_trait]
impl AdmissionHook for JournalAdmission {
    async fn admit(&self) -> Result<Option<String>, CapabilityError> {
        let claim = match self.request() {
            Ok(c) => c,
            Err(e) => return Err(self.stop(Err(Reject::journal(e)), "invalid claim")),
        };
        let claimed = self.journal.claim(claim, self.runtime.now()).await;
        crate::metrics::journal_claim(match &claimed {
            Ok(ClaimOutcome::Admitted { .. }) => "admitted",
            Ok(ClaimOutcome::Existing(r)) if r.state == InvocationState::Settled => "replayed",
            Ok(ClaimOutcome::Existing(_)) => "pending",
            Ok(ClaimOutcome::Conflict) => "conflict",
            Err(JournalError::QuotaExceeded { .. }) => "quota_exceeded",
            Err(_) => "failed",
        });
        match claimed {
            Ok(ClaimOutcome::Admitted {
                claim_token,
                record,
            }) => {
                let key = record.idempotency_key.clone();
                self.slot.put(SlotState::Claimed(Claimed {
                    claim_token,
                    idempotency_key: record.idempotency_key,
                }));
                Ok(Some(key))
            }
            // A concurrent request with the same id claimed it first.
            Ok(ClaimOutcome::Existing(record)) => {
                Err(self.stop(Ok(replay(&record)), "claimed by a concurrent request"))
            }
            Ok(ClaimOutcome::Conflict) => Err(self.stop(
                Ok(conflict(&self.invocation_id)),
                "invocation id bound to other content",
            )),
            Err(e) => {
                let why = if matches!(e, JournalError::QuotaExceeded { .. }) {
                    "namespace over its storage budget"
                } else {
                    "claim failed"
                };
                Err(self.stop(Err(Reject::journal(e)), why))
            }
        }
    }
}

/// First wait before settling a receipt again after the store failed; doubled per try.
const SETTLE_RETRY_MIN: Duration = Duration::from_millis(200);
/// Longest wait between two tries.
const SETTLE_RETRY_MAX: Duration = Duration::from_secs(5);
/// How long a settlement is retried before the receipt is left pending for an operator's
/// reconcile (the process may also stop first: the receipt is then pending just the same).
const SETTLE_RETRY_FOR: Duration = Duration::from_secs(15 * 60);

/// Settle `run`'s receipt once the store answers again: the settlement is a
/// compare-and-set on the claim token, so a retry whose earlier try did commit finds the
/// record settled and stops; only a backend failure is retried.
async fn settle_until_back(
    journal: Arc<dyn InvocationJournal>,
    runtime: Runtime,
    run: Run,
    claim_token: String,
    settlement: Settlement,
) {
    let give_up = Instant::now() + SETTLE_RETRY_FOR;
    let mut wait = SETTLE_RETRY_MIN;
    loop {
        tokio::time::sleep(wait).await;
        let result = journal
            .settle(
                &run.scope,
                &run.invocation_id,
                &claim_token,
                settlement.clone(),
                runtime.now(),
            )
            .await;
        match result {
            Ok(_) => {
                tracing::warn!(target: LOG, invocation = %run.invocation_id, "receipt settled after the store came back");
                return;
            }
            Err(JournalError::Backend(e)) if Instant::now() < give_up => {
                tracing::debug!(target: LOG, invocation = %run.invocation_id, error = %e, "settling the receipt failed again");
                wait = (wait * 2).min(SETTLE_RETRY_MAX);
            }
            Err(JournalError::NotPending(_)) => {
                // An earlier try committed though its answer was lost.
                return;
            }
            Err(e) => {
                tracing::error!(target: LOG, invocation = %run.invocation_id, error = %e, "settling the receipt failed; left pending for reconcile");
                return;
            }
        }
    }
}

/// The wire outcome of a runtime result (effect-unknown results are handled before).
pub(crate) fn outcome_of(invocation_id: &str, result: ExecutionResult) -> CapabilityOutcome {
    let invocation_id = invocation_id.to_string();
    match result {
        ExecutionResult::Completed {
            execution_id,
            output,
        } => CapabilityOutcome::Completed {
            invocation_id,
            execution_id,
            output,
        },
        ExecutionResult::ApprovalRequired {
            execution_id,
            approval,
        } => CapabilityOutcome::ApprovalRequired {
            invocation_id,
            execution_id,
            approval,
        },
        ExecutionResult::Failed {
            execution_id,
            error,
            ..
        } => CapabilityOutcome::Failed {
            invocation_id,
            execution_id,
            error: error.to_public().into(),
        },
        ExecutionResult::Cancelled {
            execution_id,
            error,
            ..
        } => CapabilityOutcome::Cancelled {
            invocation_id,
            execution_id,
            error: error.to_public().into(),
        },
    }
}

/// The settled outcome of a record, if it reads back as one for this invocation.
pub(crate) fn stored_outcome(record: &InvocationRecord) -> Option<CapabilityOutcome> {
    let value = record.outcome.clone()?;
    match serde_json::from_value::<CapabilityOutcome>(value) {
        Ok(o) if o.invocation_id() == record.invocation_id => Some(o),
        Ok(_) | Err(_) => {
            tracing::error!(target: LOG, invocation = %record.invocation_id, "stored outcome is malformed; treated as unknown");
            None
        }
    }
}

/// The public receipt of a record.
pub(crate) fn receipt(record: &InvocationRecord) -> InvocationReceipt {
    record.receipt_with(match record.state {
        InvocationState::Settled => stored_outcome(record),
        InvocationState::Pending => None,
    })
}
