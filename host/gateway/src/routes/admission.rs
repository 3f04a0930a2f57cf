//! What a request is before anything runs: the preflight of `invoke` and `resumeApproval`
//! (exposure, contract digest, journal claim) and the shared lookups of the route.

use super::{Gateway, LOG};
use crate::auth::Authenticated;
use crate::door::{Door, WireBody, check_id};
use crate::reject::Reject;
use crate::wire::{
    CapabilityOutcome, DescribeBody, GetApprovalBody, GetInvocationBody, InvokeBody,
    MAX_SCOPE_ENTRIES, OutcomeError, PortableCapabilityDescriptor, ResumeApprovalBody,
    gateway_codes, public,
};
use capgate_core::approval::ApprovalStatus;
use capgate_core::authz::Operation;
use capgate_core::canonical::input_hash;
use capgate_core::error::{CapabilityError, ErrorCode, PublicError};
use capgate_core::journal::{InvocationRecord, InvocationState, ResumeClaim, scope_hash};
use capgate_core::runtime::{
    CapabilityDescriptor, DescribeOptions, InvokeRequest, ResumeOptions, Scope,
};
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// How a request that passed its preflight goes on.
pub(crate) enum Admission {
    /// Answer without executing (preflight failure, replay, unknown).
    Answer(CapabilityOutcome),
    /// This request owns the claim: execute, then settle.
    Run(Box<Run>),
}

/// A run: who, under which journal claim, doing what.
pub(crate) struct Run {
    pub(crate) who: Authenticated,
    pub(crate) scope: String,
    pub(crate) invocation_id: String,
    /// The claim a resume reopened before it runs; an invoke has none yet: its claim is
    /// made by the runtime's admission step, once the call is known to be admissible.
    pub(crate) claimed: Option<Claimed>,
    pub(crate) call: Call,
}

/// A journal claim this request owns.
pub(crate) struct Claimed {
    pub(crate) claim_token: String,
    pub(crate) idempotency_key: String,
}

pub(crate) enum Call {
    Invoke {
        capability_id: String,
        input: Value,
        correlation_id: Option<String>,
        /// The current contract digest of the capability, when this surface has it.
        contract_digest: Option<String>,
    },
    Resume {
        approval_id: String,
        /// The resume's own correlation id, if it sent one.
        correlation_id: Option<String>,
        /// The approval-required outcome recorded before the resume claim reopened it.
        previous_outcome: Option<Value>,
    },
}

/// `INVOCATION_CONFLICT` for `invocation_id`.
pub(crate) fn conflict(invocation_id: &str) -> CapabilityOutcome {
    CapabilityOutcome::preflight(
        invocation_id,
        OutcomeError::gateway(
            gateway_codes::INVOCATION_CONFLICT,
            "This invocation id is already bound to a different capability or input.",
        ),
    )
}

/// Replay what the journal holds: the settled outcome, or unknown.
pub(crate) fn replay(record: &InvocationRecord) -> CapabilityOutcome {
    if record.state == InvocationState::Settled
        && let Some(outcome) = super::execution::stored_outcome(record)
    {
        return outcome;
    }
    CapabilityOutcome::OutcomeUnknown {
        invocation_id: record.invocation_id.clone(),
    }
}

impl WireBody for DescribeBody {
    const OPERATION: &'static str = "describe";
    fn check(&self) -> Result<(), Reject> {
        match &self.scope {
            Some(s) => check_scope(s),
            None => Ok(()),
        }
    }
}

// Their ids are `BoundedId`s, refused while the body is parsed.
impl WireBody for InvokeBody {
    const OPERATION: &'static str = "invoke";
}

impl WireBody for GetInvocationBody {
    const OPERATION: &'static str = "getInvocation";
}

impl WireBody for GetApprovalBody {
    const OPERATION: &'static str = "getApproval";
}

impl WireBody for ResumeApprovalBody {
    const OPERATION: &'static str = "resumeApproval";
}

fn check_scope(scope: &Scope) -> Result<(), Reject> {
    let entries = scope.tags.len().saturating_add(scope.ids.len());
    if entries > MAX_SCOPE_ENTRIES {
        return Err(Reject::bad_request(format!(
            "`scope` has {entries} entries; at most {MAX_SCOPE_ENTRIES} tags and ids are accepted."
        )));
    }
    for (i, t) in scope.tags.iter().enumerate() {
        check_id(&format!("scope.tags[{i}]"), t)?;
    }
    for (i, id) in scope.ids.iter().enumerate() {
        check_id(&format!("scope.ids[{i}]"), id)?;
    }
    Ok(())
}

impl Gateway {
    /// Time the work of a request may take before the audit drain.
    pub(crate) fn work_budget(&self) -> Duration {
        self.request_timeout
            .saturating_sub(self.audit_drain_timeout)
    }

    /// Step 4 of the door for this route.
    pub(crate) async fn authorize(
        &self,
        who: &Authenticated,
        operation: Operation,
        capability_id: Option<&str>,
        input: Option<&Value>,
    ) -> Result<(), Reject> {
        self.doorkeeper
            .authorize(
                who,
                Door::Surface(self.surface),
                operation,
                capability_id,
                input,
            )
            .await
    }

    /// Step 4 for a lookup (getInvocation, getApproval): on the record's capability and
    /// input when the caller's scope has one, else on the bare operation, so an unknown id
    /// is refused exactly where a known one would be and answers only `null` otherwise.
    pub(crate) async fn authorize_lookup(
        &self,
        who: &Authenticated,
        operation: Operation,
        record: Option<&InvocationRecord>,
    ) -> Result<(), Reject> {
        match record {
            Some(r) => {
                self.authorize(who, operation, Some(&r.capability_id), Some(&r.input))
                    .await
            }
            None => self.authorize(who, operation, None, None).await,
        }
    }

    /// The caller's journal scope: namespace + actor + this surface.
    pub(crate) fn scope(&self, who: &Authenticated) -> Result<String, Reject> {
        scope_hash(
            &who.principal.namespace,
            &who.principal.actor.reference(),
            self.surface,
        )
        .map_err(|e| {
            tracing::info!(target: LOG, reason = %e, "principal has no journal scope");
            Reject::unauthenticated()
        })
    }

    pub(crate) fn descriptor(&self, capability_id: &str) -> Option<&PortableCapabilityDescriptor> {
        self.by_id
            .get(capability_id)
            .and_then(|i| self.contract.get(*i))
    }

    fn digest_of(&self, capability_id: &str) -> Option<&str> {
        self.descriptor(capability_id)
            .map(|d| d.contract_digest.as_str())
    }

    /// Flush audit sinks within the drain reservation (and never past the ceiling).
    pub(crate) async fn drain(&self, started: Instant) {
        let ceiling = started + self.request_timeout;
        let deadline = (Instant::now() + self.audit_drain_timeout).min(ceiling);
        match tokio::time::timeout_at(deadline, self.runtime.drain_audit()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(target: LOG, error = %e, "audit drain failed"),
            Err(_) => tracing::error!(target: LOG, "audit drain timed out"),
        }
    }

    /// Replay what the journal holds: the settled outcome, or unknown.
    pub(crate) fn replay(&self, record: &InvocationRecord) -> CapabilityOutcome {
        replay(record)
    }

    /// Whether this caller may learn that `capability_id` exists: the authorizer lets it
    /// describe, and discovery shows it this capability. A refusal for anything else is
    /// answered as the concealed not-found (SI-8).
    pub(crate) async fn may_learn(
        &self,
        who: &Authenticated,
        capability_id: &str,
    ) -> Result<bool, Reject> {
        if self
            .authorize(who, Operation::Describe, None, None)
            .await
            .is_err()
        {
            return Ok(false);
        }
        self.discoverable(who, capability_id).await
    }

    /// Whether this caller can discover `capability_id` here (describe's filtering).
    pub(crate) async fn discoverable(
        &self,
        who: &Authenticated,
        capability_id: &str,
    ) -> Result<bool, Reject> {
        let options = DescribeOptions {
            namespace: who.principal.namespace.clone(),
            actor: who.principal.actor.clone(),
            context: who.context.clone(),
            scope: Some(Scope {
                tags: vec![],
                ids: vec![capability_id.to_string()],
            }),
        };
        // The runtime's answer without a `capabilities.discovered`: this is the door's own
        // check, not a discovery the caller made.
        let found = self
            .runtime
            .discoverable(self.surface, options)
            .await
            .map_err(|e| describe_error(&e))?;
        Ok(!found.is_empty())
    }

    /// The discovery pipeline for this caller.
    pub(crate) async fn describe_for(
        &self,
        who: &Authenticated,
        scope: Option<Scope>,
    ) -> Result<Vec<CapabilityDescriptor>, Reject> {
        let options = DescribeOptions {
            namespace: who.principal.namespace.clone(),
            actor: who.principal.actor.clone(),
            context: who.context.clone(),
            scope,
        };
        self.runtime
            .describe(self.surface, options)
            .await
            .map_err(|e| describe_error(&e))
    }

    /// The contract entries this caller can discover (the same filtering as describe).
    pub(crate) async fn visible_contract(
        &self,
        who: &Authenticated,
        scope: Option<Scope>,
    ) -> Result<Vec<PortableCapabilityDescriptor>, Reject> {
        let descriptors = self.describe_for(who, scope).await?;
        Ok(descriptors
            .iter()
            .filter_map(|d| {
                let mut p = self.descriptor(&d.id)?.clone();
                p.requires_approval = d.requires_approval.unwrap_or(p.requires_approval);
                Some(p)
            })
            .collect())
    }

    fn invoke_request(&self, who: &Authenticated, req: &InvokeBody) -> InvokeRequest {
        let mut request = InvokeRequest::new(
            self.surface,
            req.capability_id.clone(),
            req.input.clone(),
            who.principal.actor.clone(),
        )
        .namespace(who.principal.namespace.clone())
        .context(who.context.clone());
        if let Some(c) = &req.correlation_id {
            request = request.correlation_id(c.clone());
        }
        request
    }

    // -- invoke ---------------------------------------------------------------------

    /// The one admission order of `invoke` (docs/gateway.md, "Invocation semantics"):
    ///
    /// 1. Every name is authorized with the capability id as sent and the input (seed 004:
    ///    authorization runs for every invocation). A refusal is the authorizer's `403`
    ///    only where this caller may learn the capability exists (it may describe, and
    ///    discovery shows it); anywhere else it is the concealed not-found, identical to a
    ///    name that does not exist (SI-8), so a principal refused everything cannot tell
    ///    real ids from unknown ones.
    /// 2. A stale `contractDigest`: CONTRACT_MISMATCH for what the caller can discover,
    ///    else the concealed not-found.
    /// 3. A read-only journal lookup: an existing record is replayed or is a conflict
    ///    (a record for a name the surface no longer has is authorized on the record).
    /// 4. Otherwise the runtime runs it; its admission step claims the journal only once
    ///    the call resolved, passed its schema and was not hidden by policy, so nothing
    ///    concealed and nothing invalid is ever stored.
    pub(crate) async fn admit_invoke(
        &self,
        who: Authenticated,
        req: InvokeBody,
    ) -> Result<Admission, Reject> {
        let scope = self.scope(&who)?;
        let current = self.digest_of(&req.capability_id).map(str::to_string);
        let asked = self
            .authorize(
                &who,
                Operation::Invoke,
                Some(&req.capability_id),
                Some(&req.input),
            )
            .await;
        if let Err(refused) = asked {
            if refused.status == axum::http::StatusCode::FORBIDDEN
                && !(current.is_some() && self.may_learn(&who, &req.capability_id).await?)
            {
                return Ok(self.concealed(&who, &req).await);
            }
            return Err(refused);
        }
        if let Some(current) = &current
            && let Some(given) = &req.contract_digest
            && given != current
        {
            // CONTRACT_MISMATCH only for what this caller can discover; for anything
            // else the same concealed not-found an unknown id gets (SI-8).
            if !self.discoverable(&who, &req.capability_id).await? {
                return Ok(self.concealed(&who, &req).await);
            }
            return Ok(Admission::Answer(CapabilityOutcome::preflight(
                &req.invocation_id,
                OutcomeError::gateway(
                    gateway_codes::CONTRACT_MISMATCH,
                    "The contract digest does not match this deployment; fetch the current contract.",
                ),
            )));
        }

        let existing = self
            .journal
            .get(&scope, &req.invocation_id)
            .await
            .map_err(Reject::journal)?;
        if let Some(record) = existing {
            if current.is_none() {
                self.authorize(
                    &who,
                    Operation::Invoke,
                    Some(&record.capability_id),
                    Some(&record.input),
                )
                .await?;
            }
            let binds = input_hash(&req.input)
                .ok()
                .is_some_and(|h| record.binds(&req.capability_id, &h));
            crate::metrics::journal_claim(match (binds, record.state) {
                (false, _) => "conflict",
                (true, InvocationState::Settled) => "replayed",
                (true, InvocationState::Pending) => "pending",
            });
            return Ok(Admission::Answer(if binds {
                self.replay(&record)
            } else {
                conflict(&req.invocation_id)
            }));
        }

        Ok(Admission::Run(Box::new(Run {
            who,
            scope,
            invocation_id: req.invocation_id.to_string(),
            claimed: None,
            call: Call::Invoke {
                capability_id: req.capability_id.into(),
                input: req.input,
                correlation_id: req.correlation_id.map(String::from),
                contract_digest: current,
            },
        })))
    }

    /// The concealed not-found, audited by the runtime, with nothing journaled.
    async fn concealed(&self, who: &Authenticated, req: &InvokeBody) -> Admission {
        let result = self.runtime.conceal(self.invoke_request(who, req)).await;
        Admission::Answer(super::execution::outcome_of(&req.invocation_id, result))
    }

    // -- resumeApproval -------------------------------------------------------------

    pub(crate) async fn admit_resume(
        &self,
        who: Authenticated,
        req: ResumeApprovalBody,
    ) -> Result<Admission, Reject> {
        let scope = self.scope(&who)?;
        let found = self
            .journal
            .find_approval(&scope, &req.approval_id)
            .await
            .map_err(Reject::journal)?
            .filter(|r| r.invocation_id == req.invocation_id);
        let Some(record) = found else {
            self.authorize(&who, Operation::ResumeApproval, None, None)
                .await?;
            return Ok(self.resume_concealed(&who, &req).await);
        };
        self.authorize(
            &who,
            Operation::ResumeApproval,
            Some(&record.capability_id),
            Some(&record.input),
        )
        .await?;
        if !record.awaiting_approval {
            // Already resumed: its result (or unknown while that run is in flight).
            return Ok(Admission::Answer(self.replay(&record)));
        }
        let me = &who.principal;
        let approval = self
            .runtime
            .approvals()
            .get_for_requester(&req.approval_id, &me.namespace, &me.actor.reference())
            .await
            .ok()
            .flatten();
        // The capability must still be the one the call asked approval for: its own digest
        // (without the deployment revision) as recorded on the approval, so a revision
        // bump that changed nothing about it keeps the approval; for an approval recorded
        // without one, the contract digest the call was admitted under.
        let unchanged = match approval
            .as_ref()
            .and_then(|a| a.request.descriptor_digest.as_deref())
        {
            Some(recorded) => {
                self.descriptor_digests
                    .get(&record.capability_id)
                    .map(String::as_str)
                    == Some(recorded)
            }
            None => match (
                record.contract_digest.as_deref(),
                self.digest_of(&record.capability_id),
            ) {
                (Some(recorded), Some(current)) => recorded == current,
                _ => true,
            },
        };
        if !unchanged {
            return Ok(self
                .resume_refused(
                    &who,
                    &req,
                    stale_contract(),
                    OutcomeError::gateway(
                        gateway_codes::CONTRACT_MISMATCH,
                        "The deployment's contract changed since this call asked for approval.",
                    ),
                )
                .await);
        }
        // The caller's own digest, checked as on invoke: CONTRACT_MISMATCH for what it can
        // discover, else the same concealed answer as an unknown approval (SI-8).
        if let Some(given) = &req.contract_digest
            && self.digest_of(&record.capability_id) != Some(given.as_str())
        {
            if !self.discoverable(&who, &record.capability_id).await? {
                return Ok(self.resume_concealed(&who, &req).await);
            }
            return Ok(self
                .resume_refused(
                    &who,
                    &req,
                    stale_contract(),
                    OutcomeError::gateway(
                        gateway_codes::CONTRACT_MISMATCH,
                        "The contract digest does not match this deployment; fetch the current contract.",
                    ),
                )
                .await);
        }
        // Not decided yet: say so without reopening the claim.
        if let Some(approval) = &approval
            && approval.effective_status(self.runtime.now()) == ApprovalStatus::Pending
        {
            return Ok(self
                .resume_refused(
                    &who,
                    &req,
                    CapabilityError::new(ErrorCode::ApprovalPending),
                    public(ErrorCode::ApprovalPending).into(),
                )
                .await);
        }
        let reopened = self
            .journal
            .claim_resume(
                &scope,
                &record.invocation_id,
                &req.approval_id,
                self.runtime.now(),
            )
            .await
            .map_err(Reject::journal)?;
        Ok(match reopened {
            ResumeClaim::Admitted {
                claim_token,
                record: reopened,
            } => Admission::Run(Box::new(Run {
                who,
                scope,
                invocation_id: reopened.invocation_id,
                claimed: Some(Claimed {
                    claim_token,
                    idempotency_key: reopened.idempotency_key,
                }),
                call: Call::Resume {
                    approval_id: req.approval_id.to_string(),
                    correlation_id: req.correlation_id.clone().map(String::from),
                    previous_outcome: record.outcome.clone(),
                },
            })),
            ResumeClaim::NotResumable(current) => Admission::Answer(self.replay(&current)),
            ResumeClaim::NotFound => self.resume_concealed(&who, &req).await,
        })
    }

    /// The options a refused resume is recorded with: the caller as the resume would run.
    fn refusal_options(&self, who: &Authenticated, req: &ResumeApprovalBody) -> ResumeOptions {
        ResumeOptions {
            context: who.context.clone(),
            expected_actor: Some(who.principal.actor.reference()),
            expected_surface: Some(self.surface),
            expected_namespace: Some(who.principal.namespace.clone()),
            actor: Some(who.principal.actor.clone()),
            correlation_id: req.correlation_id.clone().map(String::from),
            ..ResumeOptions::default()
        }
    }

    /// A resume refused before the runtime: recorded as the runtime records its own
    /// refusals (`capability.failed`, docs/events.md), answered with `error`.
    async fn resume_refused(
        &self,
        who: &Authenticated,
        req: &ResumeApprovalBody,
        recorded: CapabilityError,
        error: OutcomeError,
    ) -> Admission {
        let opened = self
            .runtime
            .refuse_resume(&req.approval_id, self.refusal_options(who, req), recorded)
            .await;
        Admission::Answer(
            CapabilityOutcome::preflight(&req.invocation_id, error)
                .in_execution(opened.execution_id()),
        )
    }

    /// Unknown, someone else's, or bound to another invocation: one concealed answer,
    /// serialized and audited like the runtime's unknown approval id.
    async fn resume_concealed(&self, who: &Authenticated, req: &ResumeApprovalBody) -> Admission {
        let recorded = CapabilityError::new(ErrorCode::InternalError)
            .with_stage(capgate_core::error::Stage::Approval)
            .with_cause("unknown approval for this caller");
        let opened = self
            .runtime
            .refuse_resume(&req.approval_id, self.refusal_options(who, req), recorded)
            .await;
        Admission::Answer(
            CapabilityOutcome::preflight(&req.invocation_id, PublicError::internal())
                .in_execution(opened.execution_id()),
        )
    }
}

/// What a resume refused for a changed contract is recorded as: `ADAPTER_ERROR` (the
/// core's code for an adapter's own refusal; the caller reads `CONTRACT_MISMATCH`).
fn stale_contract() -> CapabilityError {
    CapabilityError::new(ErrorCode::AdapterError)
        .with_cause("the capability's contract changed since the approval was asked for")
}

fn describe_error(e: &CapabilityError) -> Reject {
    let p = e.to_public();
    let status = if p.code == ErrorCode::Timeout {
        axum::http::StatusCode::GATEWAY_TIMEOUT
    } else {
        axum::http::StatusCode::INTERNAL_SERVER_ERROR
    };
    Reject {
        status,
        code: p.code.as_str(),
        message: p.message,
        retryable: p.retryable,
        retry_after: None,
    }
}
