//! The operator API: `POST /admin/reload` asks the serving process to reload its
//! configuration. Off unless the deployment mounts it (`capgate serve` with
//! `[gateway.admin] reload = true`).
//!
//! The door is the same as every other ([`crate::door`]): the credential is authenticated
//! (`401`), the principal rate-limited (`429`), and it must be an operator principal —
//! a credential configured as an operator's (`[[gateway.operatorKeys]]`), outside every
//! tenant namespace ([`crate::auth::Authenticated::operator`]): a tenant's credential is
//! refused `403` whatever roles it holds in its namespace. The deployment's authorizer is
//! then asked (`reloadConfiguration`, told no surface, the principal's namespace being
//! [`crate::auth::OPERATOR_NAMESPACE`]): `403` when it refuses. An operator credential opens
//! no other door, and no model door (`/agent`, `/workflow`, `/mcp`) reaches this one. The
//! request body is ignored; what is reloaded is the file the process was started with,
//! never anything the caller sends.
//!
//! | answer | when |
//! |---|---|
//! | `200 {"status":"reloaded", "previous":{…}, "current":{…}}` | the new configuration serves new calls |
//! | `422 {"status":"refused", "problems":[…]}` | the file is refused (the located problems of `capgate check`); the previous one keeps serving |
//! | `500 {"status":"failed", "message":…}` | the new configuration passed its checks but could not be built; the previous one keeps serving |
//!
//! The shape of every door: `options` (the [`Reloader`] seam and what it answers),
//! `router` ([`admin_router`], under [`PREFIX`]), `handlers`.

mod handlers;
mod options;
mod router;

pub use options::{OPERATOR_ROLE, ReloadAnswer, ReloadRequester, Reloader};
pub use router::{PREFIX, admin_router};

const LOG: &str = "capgate::admin";
