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
use capgate_core::error::{CapabilityError, ErrorCode, PublicError};
use capgate_core::journal::{
    ClaimOutcome, ClaimRequest, InvocationRecord, InvocationState, ResumeClaim, scope_hash,
};
use capgate_core::runtime::{CapabilityDescriptor, DescribeOptions, InvokeRequest, Scope};
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

/// An admitted run: who, under which journal claim, doing what.
pub(crate) struct Run {
    pub(crate) who: Authenticated,
    pub(crate) scope: String,
    pub(crate) invocation_id: String,
    pub(crate) claim_token: String,
    pub(crate) idempotency_key: String,
    pub(crate) call: Call,
}

pub(crate) enum Call {
    Invoke {
        capability_id: String,
        input: Value,
        correlation_id: Option<String>,
    },
    Resume {
        approval_id: String,
        /// The resume's own correlation id, if it sent one.
        correlation_id: Option<String>,
        /// The approval-required outcome recorded before the resume claim reopened it.
        previous_outcome: Option<Value>,
    },
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
        if record.state == InvocationState::Settled
            && let Some(outcome) = super::execution::stored_outcome(record)
        {
            return outcome;
        }
        CapabilityOutcome::OutcomeUnknown {
            invocation_id: record.invocation_id.clone(),
        }
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

    pub(crate) async fn admit_invoke(
        &self,
        who: Authenticated,
        req: InvokeBody,
    ) -> Result<Admission, Reject> {
        self.authorize(
            &who,
            Operation::Invoke,
            Some(&req.capability_id),
            Some(&req.input),
        )
        .await?;

        // Nothing is stored for a capability this surface does not have: the runtime
        // answers it (audited) as the concealed not-found, and nothing is journaled.
        let Some(current) = self.digest_of(&req.capability_id).map(str::to_string) else {
            let result = self.runtime.invoke(self.invoke_request(&who, &req)).await;
            return Ok(Admission::Answer(super::execution::outcome_of(
                &req.invocation_id,
                result,
            )));
        };
        if let Some(given) = &req.contract_digest
            && *given != current
        {
            // CONTRACT_MISMATCH only for what this caller can discover; for anything else
            // the same concealed not-found an unknown id gets (SI-8).
            let scope = Scope {
                tags: vec![],
                ids: vec![req.capability_id.to_string()],
            };
            if self.describe_for(&who, Some(scope)).await?.is_empty() {
                let result = self.runtime.conceal(self.invoke_request(&who, &req)).await;
                return Ok(Admission::Answer(super::execution::outcome_of(
                    &req.invocation_id,
                    result,
                )));
            }
            return Ok(Admission::Answer(CapabilityOutcome::preflight(
                &req.invocation_id,
                OutcomeError::gateway(
                    gateway_codes::CONTRACT_MISMATCH,
                    "The contract digest does not match this deployment; fetch the current contract.",
                ),
            )));
        }

        let scope = self.scope(&who)?;
        let mut claim = ClaimRequest::new(
            scope.clone(),
            req.invocation_id.clone(),
            req.capability_id.clone(),
            req.input.clone(),
        )
        .map_err(Reject::journal)?
        .contract_digest(current)
        .map_err(Reject::journal)?;
        if let Some(c) = &req.correlation_id {
            claim = claim.correlation_id(c.clone()).map_err(Reject::journal)?;
        }
        let claimed = self
            .journal
            .claim(claim, self.runtime.now())
            .await
            .map_err(Reject::journal)?;
        crate::metrics::journal_claim(match &claimed {
            ClaimOutcome::Admitted { .. } => "admitted",
            ClaimOutcome::Existing(r) if r.state == InvocationState::Settled => "replayed",
            ClaimOutcome::Existing(_) => "pending",
            ClaimOutcome::Conflict => "conflict",
        });
        Ok(match claimed {
            ClaimOutcome::Conflict => Admission::Answer(CapabilityOutcome::preflight(
                &req.invocation_id,
                OutcomeError::gateway(
                    gateway_codes::INVOCATION_CONFLICT,
                    "This invocation id is already bound to a different capability or input.",
                ),
            )),
            ClaimOutcome::Existing(record) => Admission::Answer(self.replay(&record)),
            ClaimOutcome::Admitted {
                claim_token,
                record,
            } => Admission::Run(Box::new(Run {
                who,
                scope,
                invocation_id: record.invocation_id,
                claim_token,
                idempotency_key: record.idempotency_key,
                call: Call::Invoke {
                    capability_id: req.capability_id.into(),
                    input: req.input,
                    correlation_id: req.correlation_id.map(String::from),
                },
            })),
        })
    }

    // -- resumeApproval -------------------------------------------------------------

    pub(crate) async fn admit_resume(
        &self,
        who: Authenticated,
        req: ResumeApprovalBody,
    ) -> Result<Admission, Reject> {
        let scope = self.scope(&who)?;
        // Unknown, someone else's, or bound to another invocation: one concealed answer,
        // serialized like the runtime's unknown approval id.
        let concealed = || {
            Admission::Answer(CapabilityOutcome::preflight(
                &req.invocation_id,
                PublicError::internal(),
            ))
        };
        let found = self
            .journal
            .find_approval(&scope, &req.approval_id)
            .await
            .map_err(Reject::journal)?
            .filter(|r| r.invocation_id == req.invocation_id);
        let Some(record) = found else {
            self.authorize(&who, Operation::ResumeApproval, None, None)
                .await?;
            return Ok(concealed());
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
        // The current contract must still be the one the call was admitted under.
        if let (Some(recorded), Some(current)) = (
            record.contract_digest.as_deref(),
            self.digest_of(&record.capability_id),
        ) && recorded != current
        {
            return Ok(Admission::Answer(CapabilityOutcome::preflight(
                &req.invocation_id,
                OutcomeError::gateway(
                    gateway_codes::CONTRACT_MISMATCH,
                    "The deployment's contract changed since this call asked for approval.",
                ),
            )));
        }
        // The caller's own digest, checked as on invoke: CONTRACT_MISMATCH for what it can
        // discover, else the same concealed answer as an unknown approval (SI-8).
        if let Some(given) = &req.contract_digest
            && self.digest_of(&record.capability_id) != Some(given.as_str())
        {
            let scope = Scope {
                tags: vec![],
                ids: vec![record.capability_id.clone()],
            };
            if self.describe_for(&who, Some(scope)).await?.is_empty() {
                return Ok(concealed());
            }
            return Ok(Admission::Answer(CapabilityOutcome::preflight(
                &req.invocation_id,
                OutcomeError::gateway(
                    gateway_codes::CONTRACT_MISMATCH,
                    "The contract digest does not match this deployment; fetch the current contract.",
                ),
            )));
        }
        // Not decided yet: say so without reopening the claim.
        if let Ok(Some(approval)) = self.runtime.approvals().get(&req.approval_id).await
            && approval.effective_status(self.runtime.now()) == ApprovalStatus::Pending
        {
            return Ok(Admission::Answer(CapabilityOutcome::preflight(
                &req.invocation_id,
                public(ErrorCode::ApprovalPending),
            )));
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
                claim_token,
                idempotency_key: reopened.idempotency_key,
                call: Call::Resume {
                    approval_id: req.approval_id.to_string(),
                    correlation_id: req.correlation_id.clone().map(String::from),
                    previous_outcome: record.outcome.clone(),
                },
            })),
            ResumeClaim::NotResumable(current) => Admission::Answer(self.replay(&current)),
            ResumeClaim::NotFound => concealed(),
        })
    }
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
