//! capgate-tower: govern selected routes of an existing axum (or any tower) service as
//! capgate capabilities, in front of the application, without moving its handlers.
//!
//! An application that already serves `POST /orders/refund` over HTTP can put that route
//! under capgate's fixed pipeline (exposure, input schema, actor, policies, input-bound
//! human approval, timeout, output validation and redaction, audit) by wrapping its service
//! in a [`GateLayer`]. For a governed route, the request's JSON body is the capability's
//! input, the wrapped service is its procedure, and the principal is the embedder's own
//! authentication, handed over as a [`Principal`] request extension. Every other request
//! reaches the wrapped service untouched.
//!
//! ```
//! use axum::{Json, Router, routing::{get, post}};
//! use capgate_core::prelude::*;
//! use capgate_tower::{Gate, Principal};
//! use http::{Method, Request, StatusCode};
//! use serde_json::json;
//! use tower::{Layer, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The application as it was: plain axum handlers.
//! let app = Router::new()
//!     .route("/orders/refund", post(|Json(body): Json<serde_json::Value>| async move {
//!         Json(json!({ "refundId": "ref_77", "amount": body["amount"] }))
//!     }))
//!     .route("/health", get(|| async { "ok" }));
//!
//! // capgate: the route becomes `orders.refund`, held for approval over $500.
//! let mut gate = Gate::new(Surface::AiSdk);
//! let registry = Registry::builder()
//!     .capability(gate.route(
//!         Method::POST,
//!         "/orders/refund",
//!         CapabilityDef::new(
//!             "orders.refund",
//!             CapabilityMeta::new("Refund an order", SideEffect::Write, Risk::High)
//!                 .exposed_on([Surface::AiSdk]),
//!         )
//!         .input_schema(json!({"type": "object", "properties": {"amount": {"type": "number"}}, "required": ["amount"]}))
//!         .policy(policy_sync("refund-limit", |req| {
//!             let amount = req.input.and_then(|i| i["amount"].as_f64()).unwrap_or(0.0);
//!             Ok(if amount > 500.0 {
//!                 PolicyDecision::require_approval(format!("Refund of ${amount} exceeds $500"))
//!             } else {
//!                 PolicyDecision::allow()
//!             })
//!         })),
//!     ))
//!     .build()?;
//! let runtime = Runtime::builder(registry).build()?;
//! let governed = gate.into_layer(runtime)?.layer(app);
//!
//! // The embedder's authentication sets the principal (here by hand).
//! let mut refund = Request::post("/orders/refund")
//!     .header("content-type", "application/json")
//!     .body(axum::body::Body::from(r#"{"amount": 649}"#))?;
//! refund.extensions_mut().insert(Principal::new(Actor::user("u_dana", json!({}))));
//! let held = governed.clone().oneshot(refund).await?;
//! assert_eq!(held.status(), StatusCode::ACCEPTED); // approval-required: nothing ran
//!
//! let health = governed.oneshot(Request::get("/health").body(axum::body::Body::empty())?).await?;
//! assert_eq!(health.status(), StatusCode::OK); // not governed: the app answered
//! # Ok(()) }
//! ```
//!
//! # How a governed request is answered
//!
//! A request is governed when its method and path are exactly a declared route's. Another
//! spelling of a governed route that an application's router might send to the same
//! handler is refused and never reaches it: a `HEAD` of a governed `GET` (`405`), and a path
//! that is a governed one once percent-encoded unreserved characters are decoded, empty and
//! `.` segments dropped, `..` resolved and a trailing slash removed (`400`). Every other
//! request is the application's, untouched.
//!
//! In this order, each refusal before the runtime runs anything (the wrapped service is
//! never called for them), with the gateway's door-refusal body
//! `{"error": {"code", "message", "retryable"}}`:
//!
//! - a query string: `400 BAD_REQUEST` (the input is the body alone, so that a held call
//!   resumes with exactly what was approved);
//! - no [`Principal`] extension: `401 UNAUTHENTICATED`;
//! - a `Content-Type` other than JSON: `415 UNSUPPORTED_MEDIA_TYPE`;
//! - a body over [`Gate::max_body_bytes`] (default 1 MiB): `413 PAYLOAD_TOO_LARGE`;
//! - an empty body or one that is not JSON: `400 BAD_REQUEST`.
//!
//! Then [`Runtime::invoke`](capgate_core::runtime::Runtime::invoke) runs the call and
//! [`answer`] writes its envelope: `completed` is `200` with the validated, redacted
//! output (the application's own answer, as its clients know it); `approval-required` is
//! `202` with the envelope (`{"status", "executionId", "approval": {"id", …}}`); `failed`
//! and `cancelled` carry the envelope with its model-safe error under [`status_for`]. A
//! concealed call (`CAPABILITY_NOT_FOUND`: unexposed, or hidden by a policy) is answered by
//! the application itself as it answers a path it does not have (the gate asks it for one,
//! with the request's headers), so a hidden route cannot be told from an unknown one (SI-8).
//!
//! # The wrapped service as a procedure
//!
//! The procedure of a governed capability (what [`Gate::route`] sets) calls the wrapped
//! service with a request rebuilt from the *validated* input: the route's method and path,
//! `Content-Type: application/json`, the input as body, and two extensions: the
//! [`Principal`] the call runs as (the original requester, also after a resume) and
//! [`Governed`] (execution id, approval and approver). The original request's headers are
//! not passed on: they are not part of what policies saw or a human approved, and a resume
//! happens later without them. So a held call runs, once approved, when the embedder calls
//! [`Runtime::resume`](capgate_core::runtime::Runtime::resume), and [`answer`] maps that
//! result the same way.
//!
//! A `2xx` answer's body (at most [`Gate::max_output_bytes`], default 1 MiB) must be JSON
//! (an empty body is `null`); anything else fails the call. A non-`2xx` answer fails it as
//! `UNAUTHENTICATED` (`401`), `FORBIDDEN` (`403`), another `4xx` as the application's own
//! defined refusal (an exposed `EXECUTION_FAILED`, "The application refused the request
//! (409 Conflict).", answered with that same status), a `5xx` or anything else as a hidden
//! `EXECUTION_FAILED` (`500`): the wrapped service's body never reaches the caller (SI-9).
//!
//! The layer binds the one service it wraps: put it around the whole application
//! (`gate_layer.layer(app)` or `ServiceBuilder`), not through `Router::layer`, which wraps
//! each route separately ([`GateLayer`] is not `Clone`, so `Router::layer` does not
//! compile). A client that disconnects cancels its governed call (`CANCELLED` in the
//! audit trail), which runs on a task of its own so the pipeline always ends.
//!
//! There is no invocation journal here: a retried request is a new call. Callers that
//! need replay by invocation id and receipts use the gateway's `/agent` door instead.

mod answer;
mod gate;
mod route;

pub use answer::{answer, status_for};
pub use gate::{Gate, GateError, GateLayer, GateService};
pub use route::RouteProcedure;
/// tower's `Layer`, so an embedder calls [`GateLayer`]'s `layer` without a tower
/// dependency of its own.
pub use tower::Layer;

use capgate_core::actor::Actor;
use capgate_core::procedure::AgentInvocationInfo;
use std::sync::Arc;

/// Who a governed request runs as: the embedder's own authentication inserts it as a
/// request extension before the [`GateLayer`] sees the request (a request without one is
/// refused `401` and runs nothing). The gate never reads credentials itself, and the
/// model never names its actor (SI-3).
#[derive(Debug, Clone, PartialEq)]
pub struct Principal {
    /// The authenticated actor policies, approvals and audit see.
    pub actor: Actor,
    /// The tenant partition approvals are recorded in (empty when the embedder has none).
    pub namespace: String,
    /// Application context handed to policies and the procedure (`null` when unset).
    pub context: serde_json::Value,
}

impl Principal {
    /// A principal of the empty namespace with no context.
    pub fn new(actor: Actor) -> Self {
        Principal {
            actor,
            namespace: String::new(),
            context: serde_json::Value::Null,
        }
    }

    /// Set the tenant partition.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    capgate_core::setters! {
        /// Set the application context.
        context => context: serde_json::Value;
    }
}

/// The governance facts of the call, in the extensions of every request the gate sends
/// the wrapped service: the execution id (to correlate the handler's logs with audit),
/// the capability, the actor and, after a resume, the approval and who approved it.
#[derive(Debug, Clone)]
pub struct Governed(pub Arc<AgentInvocationInfo>);
