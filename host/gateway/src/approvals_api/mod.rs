//! The human approvals API: what an approval console calls. Separate from the capability
//! gateway on purpose — no gateway operation and no model tool can decide an approval.
//!
//! | route | answer |
//! |---|---|
//! | `GET /approvals?status=pending&capability=orders.refund&requester=u_dana&limit=50&offset=0` | [`ApprovalView`]`[]`, newest first |
//! | `GET /approvals/{id}` | [`ApprovalView`] (`404` when unknown) |
//! | `POST /approvals/{id}/decision` `{"decision": "approved"\|"rejected", "comment"?}` | the decided [`ApprovalView`] |
//!
//! Every request passes the same door as the capability routes ([`crate::door`]):
//! authenticated (`401`), within quota (`429`), holding the configured role (or, for one
//! approval, admitted by the requester door below) and authorized by the deployment's
//! authorizer for the operation (`listApprovals`, `reviewApproval`,
//! `decideApproval`, told no surface: this is no model door) (`403` otherwise). The decider
//! is the authenticated principal, never a body field.
//!
//! **Tenancy.** An approver sees and decides only approvals requested in their own
//! namespace; another namespace's id reads `404` exactly like a missing one. The decision
//! (and its audit event) records the approver's namespace.
//!
//! **Who may decide.** A self-decision is refused when it is made (`403`, SI-4), unless
//! every type of the approval is self-confirmable; an approval whose type is mapped to
//! roles (`[approvals.types.manager] roles = ["manager"]`) can only be approved by a holder
//! of one of them (`403` with the reason). Deciding executes nothing: the requester resumes
//! the call afterwards, with their own fresh credentials.
//!
//! **The requester door.** A caller without the role may still `GET /approvals/{id}` and
//! decide an approval they requested themselves (same namespace, same actor id and kind,
//! a `user`) when every type it carries is self-confirmable (`selfConfirmableTypes`, e.g.
//! `human-confirmation`): the human confirming their own call. The authorizer is asked
//! exactly as for an approver (`reviewApproval`, `decideApproval`), and the decision is
//! recorded as `via: requester` (core's [`Decider::Requester`](capgate_core::runtime::Decider::Requester)). Their own approval of any
//! other type is `403` (an approver must decide it); anyone else's approval, and a missing
//! one, is `404`, so the door tells a requester nothing about approvals that are not
//! theirs. Listing stays for approvers. No model door reaches any of this: the door is a
//! human's credential used outside `/agent`, `/workflow` and `/mcp`, none of which can
//! decide an approval. **The credential must be a human's**: one that opens a model door
//! (an agent's key, `surfaces = ["aiSdk", …]`) does not open the requester door
//! ([`crate::auth::Authenticated::requester_door`], `403` before any lookup) unless the
//! operator said so for that key (`requesterDoor = true`, which `capgate check` warns
//! about): whatever holds the agent's key cannot confirm the agent's own held calls. The
//! type's configured roles apply here too (a role-mapped type is confirmed only by a
//! requester holding one of its roles).
//!
//! **The authorizer sees what is decided.** For one approval (`reviewApproval`,
//! `decideApproval`) it is given the approval's capability and its stored, unredacted
//! input, on both doors, before anything is shown or decided.
//!
//! What an approver sees of the stored input: the input after the capability's redactors'
//! `redact_approval_input` (the core's [`Approvals`](capgate_core::runtime::Approvals)
//! applies them on every read); when a redactor fails, or the capability no longer exists,
//! the input is withheld (`null`). The requester appears as `{id, kind}` only (no
//! attributes).
//!
//! **What a console needs.** Each view says what *this viewer* may decide now
//! (`mayApprove`, `mayReject`, with `decisionNote` saying why not: the same checks a
//! decision runs, without running it; a requester is offered no decision on their own
//! approval unless it is self-confirmable), which policies asked (`policies`), whether the
//! input is withheld (`inputWithheld`), and, for a consumed approval, how the resumed call
//! ended (`outcome`, from the audit trail, when the router was given an
//! [`ExecutionHistory`]). The approval console ([`crate::console`]) is a page over exactly
//! this API.
//!
//! The shape of every door: `options` ([`ApprovalsOptions`]: the role, where outcomes are
//! read from), `router` ([`ApprovalsRouter`], under [`PREFIX`]), `handlers` (one short
//! function per route), plus `view` (the wire shapes) and `access` (who may see and decide
//! which approval).

mod access;
mod handlers;
mod options;
mod router;
mod view;

pub use access::REQUESTER_DOOR_CLOSED;
pub use options::{
    APPROVER_ROLE, ApprovalsOptions, DECISION_AUDIT_DRAIN_TIMEOUT, ExecutionHistory,
    MAX_DECISION_BODY_BYTES,
};
pub use router::{ApprovalsRouter, PREFIX, approvals_router};
pub use view::{ApprovalView, DecisionBody, ExecutionOutcome, OutcomeStatus};

const LOG: &str = "capgate::approvals_api";
