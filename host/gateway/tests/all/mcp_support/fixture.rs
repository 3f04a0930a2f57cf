//! The runtime the MCP tests drive (also served over stdio by `examples/mcp_stdio.rs`):
//!
//! | capability | MCP tool | what it pins |
//! |---|---|---|
//! | `orders.lookup` | `orders_lookup` | read-only, idempotent: readOnlyHint, idempotentHint |
//! | `orders.refund` | `orders_refund` | write; `refund-limit` requires approval above 500 |
//! | `orders.purge` | `orders_purge` | destructive; a discovery policy shows it to admins only |
//! | `jobs.slow` | `jobs_wait` (configured name) | reports progress, then waits for cancellation |
//! | `internal.export` | – | not exposed on MCP: absent |
//! | `vault.read` | – | hidden by policy: absent, and CAPABILITY_NOT_FOUND when called |
//!
//! Bearer tokens: `tok-dana` (user `u_dana`), `tok-admin` (user `u_admin`, admin), and
//! `tok-expired` (expired credential).

#![allow(dead_code)]

use async_trait::async_trait;
use axum::http::HeaderMap;
use capgate_core::actor::{Actor, Surface};
use capgate_core::approval::ApprovalCoordinator;
use capgate_core::audit::AuditSink;
use capgate_core::authz::Principal;
use capgate_core::meta::{AdapterNames, CapabilityMeta, Risk, SideEffect};
use capgate_core::policy::{Phase, PolicyDecision, policy_sync};
use capgate_core::procedure::{ProcedureError, handler};
use capgate_core::registry::{CapabilityDef, Registry};
use capgate_core::runtime::Runtime;
use capgate_gateway::auth::{AuthError, Authenticated, Authenticator, bearer};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The namespace of every fixture principal.
pub const NAMESPACE: &str = "org_1";

fn is_admin(actor: &Actor) -> bool {
    actor.attributes.get("admin").and_then(Value::as_bool) == Some(true)
}

/// The fixture registry.
pub fn registry() -> Registry {
    let mcp = [Surface::Mcp, Surface::AiSdk, Surface::Direct];
    Registry::builder()
        .capability(
            CapabilityDef::new(
                "orders.lookup",
                CapabilityMeta::new("Look up an order.", SideEffect::Read, Risk::Low)
                    .exposed_on(mcp)
                    .idempotent(true),
            )
            .input_schema(json!({
                "type": "object",
                "properties": { "orderId": { "type": "string" } },
                "required": ["orderId"],
                "additionalProperties": false
            }))
            .procedure(handler(|call| async move {
                Ok(json!({
                    "orderId": call.input["orderId"],
                    "status": "shipped",
                    "actor": call.agent.actor.id,
                }))
            })),
        )
        .capability(
            CapabilityDef::new(
                "orders.refund",
                CapabilityMeta::new("Refund an order.", SideEffect::Write, Risk::High)
                    .exposed_on(mcp),
            )
            .input_schema(json!({
                "type": "object",
                "properties": {
                    "orderId": { "type": "string" },
                    "amount": { "type": "number", "exclusiveMinimum": 0 }
                },
                "required": ["orderId", "amount"],
                "additionalProperties": false
            }))
            .policy(capgate_testkit::walkthrough::refund_limit("refund-limit", None))
            .procedure(handler(|call| async move {
                Ok(json!({
                    "refundId": format!("ref_{}", call.input["orderId"].as_str().unwrap_or("?")),
                    "amount": call.input["amount"],
                    "approvedBy": call.agent.approval.as_ref().map(|a| a.approver.id.clone()),
                }))
            })),
        )
        .capability(
            CapabilityDef::new(
                "orders.purge",
                CapabilityMeta::new("Purge an order.", SideEffect::Destructive, Risk::Critical)
                    .exposed_on(mcp),
            )
            .input_schema(json!({
                "type": "object",
                "properties": { "orderId": { "type": "string" } },
                "required": ["orderId"]
            }))
            .policy(
                policy_sync("admins-only", |req| {
                    Ok(if is_admin(req.actor) {
                        PolicyDecision::allow()
                    } else {
                        PolicyDecision::hide()
                    })
                })
                .with_phases([Phase::Discovery, Phase::Invocation]),
            )
            .procedure(handler(|call| async move {
                Ok(json!({ "purged": call.input["orderId"] }))
            })),
        )
        .capability(
            CapabilityDef::new("jobs.slow", {
                let mut m = CapabilityMeta::new(
                    "Wait until cancelled, reporting progress.",
                    SideEffect::None,
                    Risk::Low,
                )
                .exposed_on(mcp)
                .with_timeout_ms(60_000);
                m.adapters = Some(AdapterNames {
                    ai_sdk: None,
                    mcp: Some("jobs_wait".into()),
                });
                m
            })
            .input_schema(json!({
                "type": "object",
                "properties": { "seconds": { "type": "number", "minimum": 0, "maximum": 30 } }
            }))
            .procedure(handler(|call| async move {
                call.report_progress(json!({ "progress": 1, "total": 2, "message": "started" }));
                let seconds = call.input["seconds"].as_f64().unwrap_or(30.0);
                tokio::select! {
                    _ = call.cancel.cancelled() => Err(ProcedureError::internal("cancelled")),
                    _ = tokio::time::sleep(Duration::from_secs_f64(seconds)) => {
                        call.report_progress(json!({ "progress": 2, "total": 2, "message": "done" }));
                        Ok(json!({ "waited": seconds }))
                    }
                }
            })),
        )
        .capability(
            CapabilityDef::new(
                "internal.export",
                CapabilityMeta::new("Export everything.", SideEffect::Read, Risk::Medium)
                    .exposed_on([Surface::Direct]),
            )
            .procedure(handler(|_call| async move { Ok(json!({ "rows": [] })) })),
        )
        .capability(
            CapabilityDef::new(
                "vault.read",
                CapabilityMeta::new("Read the vault.", SideEffect::Read, Risk::Critical)
                    .exposed_on(mcp),
            )
            .policy(
                policy_sync("vault-hidden", |_req| Ok(PolicyDecision::hide()))
                    .with_phases([Phase::Discovery, Phase::Invocation]),
            )
            .procedure(handler(|_call| async move { Ok(json!({ "secret": "s3cr3t" })) })),
        )
        .build()
        .unwrap_or_else(|e| panic!("fixture registry: {e}"))
}

/// The fixture runtime over the given approvals and audit sink.
pub fn runtime(approvals: Arc<dyn ApprovalCoordinator>, audit: Arc<dyn AuditSink>) -> Runtime {
    Runtime::builder(registry())
        .approvals(approvals)
        .audit_sink(audit)
        .build()
        .expect("a valid runtime")
}

/// The actor of a fixture token.
pub fn actor_of(token: &str) -> Option<Actor> {
    match token {
        "tok-dana" | "tok-expired" => Some(Actor::user("u_dana", json!({ "orgId": NAMESPACE }))),
        "tok-admin" => Some(Actor::user(
            "u_admin",
            json!({ "orgId": NAMESPACE, "admin": true }),
        )),
        _ => None,
    }
}

/// Bearer tokens → fixture actors.
pub struct FixtureAuth;

#[async_trait]
impl Authenticator for FixtureAuth {
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Authenticated, AuthError> {
        let token = bearer(headers).ok_or(AuthError::Missing)?;
        let actor = actor_of(token).ok_or_else(|| AuthError::Invalid("unknown token".into()))?;
        let expires_at =
            (token == "tok-expired").then(|| chrono::Utc::now() - chrono::Duration::seconds(1));
        Ok(Authenticated {
            principal: Principal {
                actor,
                namespace: NAMESPACE.into(),
            },
            context: json!({ "namespace": NAMESPACE, "via": "bearer" }),
            roles: vec![],
            surfaces: vec![capgate_core::actor::Surface::Mcp],
            expires_at,
            requester_door: false,
            operator: false,
            credential: capgate_gateway::auth::Credential::Token,
        })
    }
}

/// Allows every operation (these tests are about the MCP adapter, not authorization).
pub struct AllowAll;

#[async_trait]
impl capgate_core::authz::Authorizer for AllowAll {
    async fn authorize(
        &self,
        _request: &capgate_core::authz::AuthorizeRequest<'_>,
    ) -> Result<(), capgate_core::authz::AuthorizeError> {
        Ok(())
    }
}
