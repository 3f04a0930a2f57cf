//! The human side of approvals: reading records for review (inputs redacted), deciding
//! them ([`Approvals::decide`]), and the rules of who may decide what (SI-4, type roles,
//! the requester door).

use super::Inner;
use crate::actor::{ActorKind, ActorRef};
use crate::approval::{
    ApprovalFilter, ApprovalRecord, ApprovalRequest, ApprovalStatus, ApprovalStoreError,
    DecidedVia, Decision, DecisionStatus,
};
use crate::audit::{AuditEvent, EventPayload};

/// Why an approvals operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalsError {
    /// The request was malformed.
    #[error("invalid decision: {0}")]
    Invalid(String),
    /// The coordinator refused or failed.
    #[error(transparent)]
    Store(#[from] ApprovalStoreError),
    /// The decider may not decide this approval: it is their own request (SI-4), or its
    /// type needs a role they do not hold. The message says which, for the decider.
    #[error("{0}")]
    Forbidden(String),
}

/// Why a requester may not approve their own request.
const SELF_APPROVAL: &str =
    "The requester cannot approve their own request (SI-4); another approver must decide it.";

/// Why the requester door refuses the requester's own approval.
const NEEDS_APPROVER: &str = "Only an approver can decide this approval: its requester may confirm it only when every type it carries is self-confirmable (SI-4).";

/// Why a decider may not decide an approval, found before anything is written.
enum Refusal {
    /// An approver of another namespace than the approval's.
    OtherNamespace,
    /// The requester door, for an approval that is not the requester's own.
    NotTheRequesters,
    /// Theirs to see but not to decide (SI-4, a type's roles, not self-confirmable): why,
    /// in words for the decider.
    Forbidden(String),
}

impl Inner {
    /// Whether a request may be decided by its own requester: every requirement was typed,
    /// and every type is self-confirmable.
    pub(crate) fn is_self_confirmable(&self, request: &ApprovalRequest) -> bool {
        !request.untyped
            && !request.types.is_empty()
            && request
                .types
                .iter()
                .all(|t| self.self_confirmable.contains(t))
    }

    /// SI-4: is `approver` deciding their own request, and is that refused? Only a
    /// request whose every requirement was typed, with every type self-confirmable, may be
    /// decided by its requester.
    pub(crate) fn is_forbidden_self_approval(
        &self,
        approver_id: &str,
        request: &ApprovalRequest,
    ) -> bool {
        if !self.reject_self_approval || approver_id != request.actor.id {
            return false;
        }
        !self.is_self_confirmable(request)
    }

    /// The requester door: may the requester decide this request without the approver
    /// role? Only a human (`user`) requester — a service or agent confirming its own call
    /// would be no human confirmation — and only a self-confirmable request.
    pub(crate) fn requester_may_decide(&self, request: &ApprovalRequest) -> bool {
        request.actor.kind == ActorKind::User && self.is_self_confirmable(request)
    }

    /// The checks [`Approvals::decide`] and [`Approvals::may_decide`] share, in order: may
    /// `viewer`, standing as `decider`, make decision `status` on `request`? On success,
    /// the namespace the decision is recorded in and the door it came through.
    fn check_decider(
        &self,
        request: &ApprovalRequest,
        viewer: &ActorRef,
        decider: &Decider,
        status: DecisionStatus,
    ) -> Result<(Option<String>, DecidedVia), Refusal> {
        let own = viewer.id == request.actor.id && viewer.kind == request.actor.kind;
        let approving = status == DecisionStatus::Approved;
        let decided = match decider {
            Decider::Approver { namespace, roles } => {
                if *namespace != request.namespace {
                    return Err(Refusal::OtherNamespace);
                }
                if approving {
                    self.check_type_roles(&request.types, roles)
                        .map_err(Refusal::Forbidden)?;
                }
                (Some(namespace.clone()), DecidedVia::Approver)
            }
            Decider::Requester { namespace, roles } => {
                if *namespace != request.namespace || !own {
                    return Err(Refusal::NotTheRequesters);
                }
                if !self.requester_may_decide(request) {
                    return Err(Refusal::Forbidden(NEEDS_APPROVER.into()));
                }
                if approving {
                    self.check_type_roles(&request.types, roles)
                        .map_err(Refusal::Forbidden)?;
                }
                (Some(namespace.clone()), DecidedVia::Requester)
            }
            Decider::Operator => (None, DecidedVia::Operator),
        };
        if own && approving && self.is_forbidden_self_approval(&viewer.id, request) {
            return Err(Refusal::Forbidden(SELF_APPROVAL.into()));
        }
        Ok(decided)
    }

    /// The roles that may decide an approval of these types: for each configured type, one
    /// of its roles is needed. `Err` names the first type whose roles the decider lacks.
    pub(crate) fn check_type_roles(
        &self,
        types: &[String],
        roles: &[String],
    ) -> Result<(), String> {
        for t in types {
            if let Some(needed) = self.type_roles.get(t)
                && !needed.iter().any(|r| roles.contains(r))
            {
                return Err(format!(
                    "Approvals of type `{t}` can only be decided by a holder of one of the roles: {}.",
                    needed.join(", ")
                ));
            }
        }
        Ok(())
    }
}

/// A human's decision on an approval.
#[derive(Debug, Clone)]
pub struct DecideRequest {
    /// Approve or reject.
    pub status: DecisionStatus,
    /// The approver (authenticated by the approvals UI, never by a model surface).
    pub approver: ActorRef,
    /// What the approver wrote beside the decision, if anything.
    pub comment: Option<String>,
    /// Who is deciding, and from where.
    pub decider: Decider,
}

/// Who stands behind a decision, which bounds what they may decide.
#[derive(Debug, Clone, PartialEq)]
pub enum Decider {
    /// An approver authenticated by the approvals API: decides only approvals requested in
    /// `namespace`, and only types whose configured roles they hold.
    Approver {
        /// The approver's tenant partition.
        namespace: String,
        /// The approver's roles.
        roles: Vec<String>,
    },
    /// The human who requested the call, confirming or declining it themselves without
    /// the approver role (the requester door): decides only their own approval (same
    /// namespace, same actor id and kind; anything else reads as not found), only when it
    /// is self-confirmable and they are a `user`. Recorded as `via: requester`. The
    /// approval types' configured roles apply as for an approver: a type mapped to roles
    /// is confirmed only by a requester holding one of them.
    Requester {
        /// The requester's tenant partition.
        namespace: String,
        /// The requester's roles (checked against the types' configured roles).
        roles: Vec<String>,
    },
    /// An operator at the shell, deciding on the approver's behalf across namespaces
    /// (recorded as such in the decision and its event). Self-decisions are still refused.
    Operator,
}

/// What the requester door finds when a requester asks for one of their own approvals.
#[derive(Debug, Clone, PartialEq)]
pub enum RequesterAccess {
    /// They may confirm or decline it themselves. The record's input is redacted for
    /// review, exactly as an approver would see it.
    Confirmable(Box<ApprovalRecord>),
    /// It is theirs, but only an approver can decide it (a type that is not
    /// self-confirmable, an untyped policy requirement, or a requester who is no `user`).
    NeedsApprover,
}

/// The approvals API of a runtime (reading redacts the stored input for reviewers).
pub struct Approvals<'a> {
    pub(super) rt: &'a Inner,
}

impl Approvals<'_> {
    /// Withdraw an approval its requester no longer wants (an MCP client cancelled the
    /// task holding it): pending, or approved and never run, becomes `cancelled` at once,
    /// so nobody can decide it and no resume can run it. Only the requester's own record
    /// in `namespace` is withdrawn; anyone else's reads as not found. A record already
    /// decided against, expired, consumed or cancelled is refused as it stands.
    pub async fn withdraw(
        &self,
        id: &str,
        namespace: &str,
        requester: &crate::actor::ActorRef,
    ) -> Result<ApprovalRecord, ApprovalStoreError> {
        let own = self.rt.coordinator.get(id).await?.filter(|r| {
            r.request.namespace == namespace
                && r.request.actor.id == requester.id
                && r.request.actor.kind == requester.kind
        });
        if own.is_none() {
            return Err(ApprovalStoreError::NotFound(id.to_string()));
        }
        self.rt.coordinator.withdraw(id, self.rt.clock.now()).await
    }

    /// One record, with lazy expiry applied and the input redacted for review.
    pub async fn get(&self, id: &str) -> Result<Option<ApprovalRecord>, ApprovalsError> {
        self.get_in(id, None).await
    }

    /// One record of a tenant partition (`None`: any): another namespace's record reads
    /// as missing.
    pub async fn get_in(
        &self,
        id: &str,
        namespace: Option<&str>,
    ) -> Result<Option<ApprovalRecord>, ApprovalsError> {
        let now = self.rt.clock.now();
        match self.rt.coordinator.get(id).await? {
            Some(r) if namespace.is_none_or(|n| n == r.request.namespace) => {
                Ok(Some(self.for_review(r, now).await))
            }
            _ => Ok(None),
        }
    }

    /// One record of a tenant partition as stored (input unredacted, status as stored):
    /// what a door hands its authorizer before it shows anything. Another namespace's
    /// record reads as missing. Show it only through [`Approvals::for_reviewer`].
    pub async fn get_stored_in(
        &self,
        id: &str,
        namespace: &str,
    ) -> Result<Option<ApprovalRecord>, ApprovalsError> {
        Ok(self
            .rt
            .coordinator
            .get(id)
            .await?
            .filter(|r| r.request.namespace == namespace))
    }

    /// A stored record as a reviewer may see it: lazy expiry applied, the input redacted
    /// by the capability's redactors (withheld when one fails or the capability is gone).
    pub async fn for_reviewer(&self, record: ApprovalRecord) -> ApprovalRecord {
        let now = self.rt.clock.now();
        self.for_review(record, now).await
    }

    /// Whether the requester of `request` may confirm or decline it themselves (a `user`,
    /// every type self-confirmable): what the requester door asks.
    pub fn requester_may_confirm(&self, request: &crate::approval::ApprovalRequest) -> bool {
        self.rt.requester_may_decide(request)
    }

    /// The record as its requester stored it (input unredacted: they supplied it), when
    /// `namespace` and `requester` are the ones it was requested by; `None` otherwise. For
    /// doors that must authorize a resume against the stored capability and input.
    pub async fn get_for_requester(
        &self,
        id: &str,
        namespace: &str,
        requester: &ActorRef,
    ) -> Result<Option<ApprovalRecord>, ApprovalsError> {
        Ok(self.rt.coordinator.get(id).await?.filter(|r| {
            r.request.namespace == namespace
                && r.request.actor.id == requester.id
                && r.request.actor.kind == requester.kind
        }))
    }

    /// One approval through the requester door: `None` unless `requester` requested it in
    /// `namespace` (another's approval reads exactly like a missing one); otherwise whether
    /// they may decide it themselves.
    pub async fn get_as_requester(
        &self,
        id: &str,
        namespace: &str,
        requester: &ActorRef,
    ) -> Result<Option<RequesterAccess>, ApprovalsError> {
        let Some(record) = self.get_for_requester(id, namespace, requester).await? else {
            return Ok(None);
        };
        if !self.rt.requester_may_decide(&record.request) {
            return Ok(Some(RequesterAccess::NeedsApprover));
        }
        let now = self.rt.clock.now();
        Ok(Some(RequesterAccess::Confirmable(Box::new(
            self.for_review(record, now).await,
        ))))
    }

    /// Records matching a filter, newest first, inputs redacted for review.
    pub async fn list(
        &self,
        filter: &ApprovalFilter,
    ) -> Result<Vec<ApprovalRecord>, ApprovalsError> {
        let now = self.rt.clock.now();
        let records = self.rt.coordinator.list(filter, now).await?;
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            out.push(self.for_review(r, now).await);
        }
        Ok(out)
    }

    /// Whether `viewer`, standing as `decider`, may make decision `status` on `record` now:
    /// the checks [`Approvals::decide`] runs before it writes anything, without writing,
    /// so a console offers only the decisions that would be accepted. `Err` says why not,
    /// in words for the viewer. (A race with another decider is still possible; `decide`
    /// settles it.)
    pub fn may_decide(
        &self,
        record: &ApprovalRecord,
        viewer: &ActorRef,
        decider: &Decider,
        status: DecisionStatus,
    ) -> Result<(), String> {
        let now = self.rt.clock.now();
        let current = record.effective_status(now);
        if current != ApprovalStatus::Pending {
            return Err(format!(
                "The approval is {}; only a pending, unexpired approval can be decided.",
                current.as_str()
            ));
        }
        self.rt
            .check_decider(&record.request, viewer, decider, status)
            .map(|_| ())
            .map_err(|refusal| match refusal {
                Refusal::OtherNamespace => "The approval belongs to another namespace.".into(),
                Refusal::NotTheRequesters => "Only the requester may confirm this approval.".into(),
                Refusal::Forbidden(why) => why,
            })
    }

    /// Approve or reject a pending, unexpired request. Emits `capability.approved` or
    /// `capability.rejected` with the approver as the envelope actor. Executes nothing.
    ///
    /// Refused before anything is written: another namespace's approval (as not found), a
    /// self-decision (SI-4, unless every type is self-confirmable), a type whose
    /// configured roles the approver lacks, and, for [`Decider::Requester`], anything but
    /// the requester's own self-confirmable approval (someone else's reads as not found).
    pub async fn decide(
        &self,
        id: &str,
        request: DecideRequest,
    ) -> Result<ApprovalRecord, ApprovalsError> {
        if request.approver.id.trim().is_empty() || request.approver.id.len() > 256 {
            return Err(ApprovalsError::Invalid(
                "the approver needs a non-empty id of at most 256 characters".into(),
            ));
        }
        if request.comment.as_ref().is_some_and(|c| c.len() > 4096) {
            return Err(ApprovalsError::Invalid(
                "the comment is longer than 4096 bytes".into(),
            ));
        }
        let now = self.rt.clock.now();
        let not_found = || ApprovalsError::Store(ApprovalStoreError::NotFound(id.to_string()));
        let current = self.rt.coordinator.get(id).await?.ok_or_else(not_found)?;
        let (namespace, via) = self
            .rt
            .check_decider(
                &current.request,
                &request.approver,
                &request.decider,
                request.status,
            )
            .map_err(|refusal| match refusal {
                Refusal::OtherNamespace | Refusal::NotTheRequesters => not_found(),
                Refusal::Forbidden(why) => ApprovalsError::Forbidden(why),
            })?;
        let decision = Decision {
            status: request.status,
            approver: request.approver.clone(),
            comment: request.comment.clone(),
            decided_at: now,
            approver_namespace: namespace.clone(),
            via,
        };
        let record = self.rt.coordinator.decide(id, decision, now).await?;
        crate::metrics::approval(match request.status {
            DecisionStatus::Approved => crate::metrics::ApprovalEvent::Approved,
            DecisionStatus::Rejected => crate::metrics::ApprovalEvent::Rejected,
        });
        let via = (via != DecidedVia::Approver).then(|| via.as_str().to_string());
        let requester_namespace = Some(record.request.namespace.clone()).filter(|n| !n.is_empty());
        let payload = match request.status {
            DecisionStatus::Approved => EventPayload::Approved {
                approval_id: id.to_string(),
                approver: request.approver.clone(),
                comment: request.comment,
                namespace,
                via,
                requester_namespace,
            },
            DecisionStatus::Rejected => EventPayload::Rejected {
                approval_id: id.to_string(),
                approver: request.approver.clone(),
                comment: request.comment,
                namespace,
                via,
                requester_namespace,
            },
        };
        let _ = self
            .rt
            .audit
            .emit(AuditEvent {
                timestamp: now,
                surface: record.request.surface,
                actor: request.approver,
                execution_id: None,
                capability_id: Some(record.request.capability_id.clone()),
                correlation_id: record.request.correlation_id.clone(),
                input_hash: Some(record.request.input_hash.clone()),
                payload,
            })
            .await;
        Ok(self.for_review(record, now).await)
    }

    /// Mark up to `limit` approvals past their expiry, still pending or approved and never
    /// run, as expired, announce
    /// each once (a `capgate.approval.expired` event, `capgate_approvals_total{event="expired"}`)
    /// and return them. Run it periodically (`capgate serve` does, every few seconds); with
    /// several replicas on one store each approval is announced by one of them.
    pub async fn expire_due(&self, limit: usize) -> Result<Vec<ApprovalRecord>, ApprovalsError> {
        let now = self.rt.clock.now();
        let expired = self.rt.coordinator.expire_due(now, limit).await?;
        for r in &expired {
            crate::metrics::approval(crate::metrics::ApprovalEvent::Expired);
            let lapsed = r
                .decision
                .as_ref()
                .is_some_and(|d| d.status == DecisionStatus::Approved)
                .then_some(true);
            let payload = EventPayload::ApprovalExpired {
                approval_id: r.request.id.clone(),
                expires_at: r.request.expires_at,
                namespace: namespace_of(r),
                lapsed,
            };
            self.announce(r, now, payload).await;
        }
        Ok(expired)
    }

    /// Escalate up to `limit` approvals still pending `after` their request (each once,
    /// across replicas): a `capgate.approval.escalated` event naming `to`, which webhook
    /// sinks turn into a notification for the second role. Returns them.
    pub async fn escalate_due(
        &self,
        after: std::time::Duration,
        to: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ApprovalRecord>, ApprovalsError> {
        let now = self.rt.clock.now();
        // A wait too long to subtract from now escalates nothing.
        let Some(before) = chrono::Duration::from_std(after)
            .ok()
            .and_then(|d| now.checked_sub_signed(d))
        else {
            return Ok(Vec::new());
        };
        let escalated = self.rt.coordinator.escalate_due(before, now, limit).await?;
        for r in &escalated {
            let pending = (now - r.request.requested_at).to_std().unwrap_or_default();
            let payload = EventPayload::ApprovalEscalated {
                approval_id: r.request.id.clone(),
                escalate_to: to.map(str::to_string),
                pending_ms: u64::try_from(pending.as_millis()).unwrap_or(u64::MAX),
                namespace: namespace_of(r),
            };
            self.announce(r, now, payload).await;
        }
        Ok(escalated)
    }

    /// Record what became of an approval on its own (expired, escalated): the requester as
    /// the actor, the call's capability in the envelope, and no execution id: the call's
    /// execution ended when it asked for the approval (`approval_requested`); the event
    /// names the approval (`approvalId`), as a decision does.
    async fn announce(
        &self,
        r: &ApprovalRecord,
        now: chrono::DateTime<chrono::Utc>,
        payload: EventPayload,
    ) {
        let _ = self
            .rt
            .audit
            .emit(AuditEvent {
                timestamp: now,
                surface: r.request.surface,
                actor: ActorRef::from(&r.request.actor),
                execution_id: None,
                capability_id: Some(r.request.capability_id.clone()),
                correlation_id: r.request.correlation_id.clone(),
                input_hash: Some(r.request.input_hash.clone()),
                payload,
            })
            .await;
    }

    async fn for_review(
        &self,
        mut r: ApprovalRecord,
        now: chrono::DateTime<chrono::Utc>,
    ) -> ApprovalRecord {
        r.status = r.effective_status(now);
        if let Some(cap) = self.rt.registry.get(&r.request.capability_id) {
            let mut input = std::mem::take(&mut r.request.input);
            for red in &cap.redactors {
                match red
                    .redact_approval_input(&cap.info, &r.request.namespace, input)
                    .await
                {
                    Ok(v) => input = v,
                    Err(e) => {
                        tracing::warn!(target: "capgate::approvals", approval = %r.request.id, error = %e, "approval input redaction failed; input withheld");
                        input = serde_json::Value::Null;
                        break;
                    }
                }
            }
            r.request.input = input;
        } else {
            // The capability is gone from this deployment: no redactor can vouch for the
            // stored input, so it is withheld.
            r.request.input = serde_json::Value::Null;
        }
        r
    }
}

/// An approval's namespace for its events (absent when it has none).
fn namespace_of(r: &ApprovalRecord) -> Option<String> {
    Some(r.request.namespace.clone()).filter(|n| !n.is_empty())
}
