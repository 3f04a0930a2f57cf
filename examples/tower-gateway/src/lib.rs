//! The tower-layer example: a plain axum shop (`POST /orders/refund`, `GET /orders/{id}`,
//! `GET /health`) whose refund route capgate governs through [`capgate_tower`], behind the
//! shop's own authentication. A refund over $500 is held for a human's approval; the
//! other routes never meet capgate.
//!
//! [`plain_app`] is the shop as it was; [`app`] mounts the gate in front of it in a few
//! lines; `src/main.rs` serves it. `host/tower/tests/all/example.rs` drives it over HTTP.

use axum::extract::{Path, Request};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use capgate_core::prelude::*;
use capgate_tower::{Gate, GateError, Governed, Layer, Principal};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// The shop's refund ledger: every refund its handler issued, with who asked and who
/// approved, so a test can see what ran and how often.
#[derive(Clone, Default)]
pub struct Shop {
    refunds: Arc<Mutex<Vec<Value>>>,
}

impl Shop {
    /// The refunds issued so far, oldest first.
    pub fn refunds(&self) -> Vec<Value> {
        self.refunds.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// The shop as it was before capgate: three routes and no idea of governance.
pub fn plain_app(shop: Shop) -> Router {
    Router::new()
        .route("/orders/refund", post(refund))
        .route("/orders/{id}", get(order))
        .route("/health", get(|| async { "ok" }))
        .with_state(shop)
}

/// Issue a refund. An unknown order is a `404` whose text names the shop's internals.
async fn refund(
    axum::extract::State(shop): axum::extract::State<Shop>,
    governed: Option<Extension<Governed>>,
    Json(body): Json<Value>,
) -> Response {
    if body["orderId"] == "ord_missing" {
        return (
            StatusCode::NOT_FOUND,
            "no row ord_missing in table orders_v2 (shard eu-3)",
        )
            .into_response();
    }
    let approver =
        governed.and_then(|Extension(g)| g.0.approval.as_ref().map(|a| a.approver.id.clone()));
    let Ok(mut refunds) = shop.refunds.lock() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    refunds.push(body.clone());
    let refund_id = format!("ref_{}", refunds.len());
    Json(json!({
        "refundId": refund_id,
        "orderId": body["orderId"],
        "amount": body["amount"],
        "status": "issued",
        "approvedBy": approver,
    }))
    .into_response()
}

/// Look up an order (never governed).
async fn order(Path(id): Path<String>) -> Response {
    let mut response = Json(json!({ "id": id, "status": "shipped" })).into_response();
    response
        .headers_mut()
        .insert("x-shop", HeaderValue::from_static("plain"));
    response
}

/// The shop's own authentication: `Authorization: Bearer dana-key` is Dana, a support
/// agent allowed to refund. It sets the [`Principal`] the gate reads; it never refuses,
/// so ungoverned routes stay as open as they were.
async fn authenticate(mut request: Request, next: Next) -> Response {
    let bearer = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok());
    if bearer == Some("Bearer dana-key") {
        let dana = Actor::user(
            "u_dana",
            json!({ "orgId": "org_1", "permissions": ["orders:refund"] }),
        );
        request.extensions_mut().insert(Principal::new(dana));
    }
    next.run(request).await
}

/// `orders.refund`: an order id and a positive amount; over $500 a human approves.
fn refund_capability() -> CapabilityDef {
    CapabilityDef::new(
        "orders.refund",
        CapabilityMeta::new("Refund an order", SideEffect::Write, Risk::High)
            .exposed_on([Surface::AiSdk]),
    )
    .input_schema(json!({
        "type": "object",
        "properties": {
            "orderId": {"type": "string", "minLength": 1},
            "amount": {"type": "number", "exclusiveMinimum": 0}
        },
        "required": ["orderId", "amount"],
        "additionalProperties": false
    }))
    .policy(policy_sync("refund-limit", |req| {
        let amount = req.input.and_then(|i| i["amount"].as_f64()).unwrap_or(0.0);
        Ok(if amount > 500.0 {
            PolicyDecision::require_approval(format!("Refund of ${amount} exceeds $500"))
        } else {
            PolicyDecision::allow()
        })
    }))
}

/// Why the governed shop could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The registry refused a capability.
    #[error("registry: {0}")]
    Registry(#[from] capgate_core::registry::RegistryError),
    /// The runtime refused its configuration.
    #[error("runtime: {0}")]
    Runtime(#[from] RuntimeBuildError),
    /// A governed route does not match the registry.
    #[error("gate: {0}")]
    Gate(#[from] GateError),
}

/// The shop with its refund route governed: the application, and the runtime the shop's
/// approvers decide through and its requesters resume through. Audit goes to `audit`.
pub fn app(shop: Shop, audit: Arc<dyn AuditSink>) -> Result<(Router, Runtime), AppError> {
    // Refund requests are small: a body over 64 KiB is refused (413) before it is read.
    let mut gate = Gate::new(Surface::AiSdk).max_body_bytes(64 * 1024);
    let registry = Registry::builder()
        .capability(gate.route(
            axum::http::Method::POST,
            "/orders/refund",
            refund_capability(),
        ))
        .build()?;
    let runtime = Runtime::builder(registry).audit_sink(audit).build()?;
    let governed = gate.into_layer(runtime.clone())?.layer(plain_app(shop));
    let app = Router::new()
        .fallback_service(governed)
        .layer(middleware::from_fn(authenticate));
    Ok((app, runtime))
}
