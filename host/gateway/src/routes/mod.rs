//! The HTTP capability gateway (docs/gateway.md): five JSON operations over one
//! [`Runtime`](capgate_core::runtime::Runtime), on one fixed surface, with an [`InvocationJournal`](capgate_core::journal::InvocationJournal) that admits every
//! caller-chosen invocation id at most once.
//!
//! | route | operation |
//! |---|---|
//! | `POST /describe` | actor-filtered portable descriptors |
//! | `POST /invoke` | a governed call under a stable invocation id |
//! | `POST /getInvocation` | the caller's receipt, or `null` |
//! | `POST /getApproval` | the caller's approval, or `null` |
//! | `POST /resumeApproval` | continue an approved call under its original invocation id |
//! | `GET /contract` | the portable contract of what this caller may discover here |
//! | `GET /tools?format=ai-sdk\|openai` | the caller's tool list in an agent framework's shape |
//!
//! Every request passes its door ([`crate::door`]): authenticated, bound to this surface
//! (a credential that does not name it is refused like a bad one, `401`), within its
//! quota (`429`), and each operation authorized (`403`). Receipt and approval lookups hand
//! the authorizer the *stored* capability and input; a record that does not exist in the
//! caller's scope (namespace + actor + surface) answers `null` exactly like a missing one.
//! A malformed body (bad JSON, unknown field, an id over 256 characters, a scope over 1000
//! entries) is `400`; a body over the limit is `413`; all with a
//! [`GatewayErrorBody`](crate::wire::GatewayErrorBody).
//!
//! `invoke` follows one admission order (docs/gateway.md, "Invocation semantics"): the
//! authorizer sees only names this surface has (its refusal for a capability the caller
//! cannot discover is the concealed not-found); a stale `contractDigest` is
//! `CONTRACT_MISMATCH` for a capability this caller can discover (for one it cannot, the
//! concealed not-found); a read-only journal lookup replays a settled identical call
//! (after fresh authorization), answers `outcome-unknown` for a pending one and
//! `INVOCATION_CONFLICT` for the same id with another capability or input; otherwise the
//! runtime runs the call, and its admission step claims the journal only once the call
//! resolved, passed its schema and was not hidden by policy, within the namespace's storage
//! budget (`507 STORAGE_QUOTA_EXCEEDED` past it). So nothing concealed and nothing invalid
//! is ever stored. A failure or cancellation after the procedure was entered leaves the
//! receipt pending and answers `outcome-unknown`: the effect may have happened.
//!
//! `resumeApproval` re-checks the current invocation-phase policies with the caller's
//! current identity and context before the approval is consumed (the runtime does it).
//!
//! Timing: the execution gets `request_timeout − audit_drain_timeout`; then its
//! cancellation token fires (it also fires when the client goes away), and the audit is
//! drained in the time that is left. The execution itself runs on its own task, so a
//! dropped request still settles (or deliberately leaves pending) its receipt. Lookups run
//! under tower-http's timeout layer, and every body under its body-limit layer.
//!
//! Nothing here decides approvals: that is [`crate::approvals_api`], for humans.
//!
//! The module has the shape of every door: `options` ([`GatewayOptions`]), `router`
//! ([`capability_router`] and the route's shared state), `handlers` (one short function
//! per route, over the extractors of [`crate::door`]), plus what `invoke` needs beyond a
//! handler: `admission` (what a request is before it runs: preflight, journal claim) and
//! `execution` (the run and its receipt). `/healthz` and `/readyz` are their own door,
//! [`crate::health`].

mod admission;
mod execution;
mod handlers;
mod options;
mod router;

pub use options::{
    DEFAULT_AUDIT_DRAIN_TIMEOUT, DEFAULT_MAX_BODY_BYTES, DEFAULT_REQUEST_TIMEOUT, GatewayOptions,
    GatewayOptionsError,
};
pub use router::capability_router;

pub(crate) use router::Gateway;

const LOG: &str = "capgate::gateway";
