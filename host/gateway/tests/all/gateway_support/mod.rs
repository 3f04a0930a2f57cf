//! A real gateway for the HTTP tests: a small native registry, a SQLite (or Postgres)
//! store, API-key authentication and a recording authorizer, served on 127.0.0.1:0.
//!
//! | capability | what it pins |
//! |---|---|
//! | `orders.lookup` | read-only, completes |
//! | `orders.refund` | write; `refund-limit` requires approval above 500; echoes the idempotency key |
//! | `orders.flaky` | enters the procedure, then fails: effect unknown |
//! | `jobs.slow` | enters, then waits for cancellation: effect unknown |
//! | `internal.export` | exposed on `direct` only: not in the aiSdk contract |
//!
//! Bearer tokens: `tok-dana`, `tok-eve` (users of `org_1`), `tok-dana-org2` (the same
//! actor id in `org_2`), `tok-priya` (approver role), `tok-anon` (anonymous actor),
//! `tok-nons` (empty namespace).
//!
//! The approval console is served at `/console` over the same approvals API.

#![allow(dead_code)]

use async_trait::async_trait;
use capgate_client::CapabilityClient;
use capgate_core::actor::{Actor, ActorKind, Surface};
use capgate_core::authz::{AuthorizeError, AuthorizeRequest, Authorizer, Operation};
use capgate_core::journal::InvocationJournal;
use capgate_core::meta::{CapabilityMeta, Risk, SideEffect};
use capgate_core::procedure::{ProcedureError, handler};
use capgate_core::registry::{CapabilityDef, Registry};
use capgate_core::runtime::Runtime;
use capgate_gateway::approvals_api::{
    ApprovalsRouter, ExecutionHistory, ExecutionOutcome, approvals_router,
};
use capgate_gateway::auth::{
    ApiKeyEntry, ApiKeys, Authenticator, BuiltinAuthenticator, hash_api_key,
};
use capgate_gateway::console::{ConsoleOptions, console_router};
use capgate_gateway::door::Doorkeeper;
use capgate_gateway::health::{JournalProbe, health_router};
use capgate_gateway::routes::{GatewayOptions, capability_router};
use capgate_store::{AuditSinkOptions, Store};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The namespace of the fixture users.
pub const NAMESPACE: &str = "org_1";
/// The deployment revision.
pub const REVISION: &str = "test-rev-1";

/// Executions per capability, shared by every replica of a test.
#[derive(Clone, Default)]
pub struct Counters {
    pub lookup: Arc<AtomicUsize>,
    pub refund: Arc<AtomicUsize>,
    pub flaky: Arc<AtomicUsize>,
    pub slow: Arc<AtomicUsize>,
    /// Set when a `jobs.slow` run ended after its cancellation token fired.
    pub slow_cancelled: Arc<AtomicBool>,
}

impl Counters {
    pub fn refunds(&self) -> usize {
        self.refund.load(Ordering::SeqCst)
    }
}

pub fn registry(c: &Counters) -> Registry {
    let ai = [Surface::AiSdk];
    let (lookup, refund, flaky, slow, cancelled) = (
        c.lookup.clone(),
        c.refund.clone(),
        c.flaky.clone(),
        c.slow.clone(),
        c.slow_cancelled.clone(),
    );
    let built = Registry::builder()
        .capability(
            CapabilityDef::new(
                "orders.lookup",
                CapabilityMeta::new("Look up an order.", SideEffect::Read, Risk::Low)
                    .exposed_on(ai)
                    .tagged(["support"]),
            )
            .input_schema(json!({
                "type": "object",
                "properties": { "orderId": { "type": "string" } },
                "required": ["orderId"],
                "additionalProperties": false
            }))
            .procedure(handler(move |call| {
                let lookup = lookup.clone();
                async move {
                    lookup.fetch_add(1, Ordering::SeqCst);
                    Ok(json!({ "orderId": call.input["orderId"], "status": "shipped" }))
                }
            })),
        )
        .capability(
            CapabilityDef::new(
                "orders.refund",
                CapabilityMeta::new("Refund an order.", SideEffect::Write, Risk::High)
                    .exposed_on(ai)
                    .tagged(["support", "payments"]),
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
            .policy(capgate_testkit::walkthrough::refund_limit(
                "refund-limit",
                Some("manager"),
            ))
            .procedure(handler(move |call| {
                let refund = refund.clone();
                async move {
                    refund.fetch_add(1, Ordering::SeqCst);
                    Ok(json!({
                        "refundId": "ref_77",
                        "amount": call.input["amount"],
                        "actor": call.agent.actor.id,
                        "approver": call.agent.approval.as_ref().map(|a| a.approver.id.clone()),
                        "idempotencyKey": call.agent.idempotency_key,
                        "correlationId": call.agent.correlation_id,
                    }))
                }
            })),
        )
        .capability(
            CapabilityDef::new(
                "orders.flaky",
                CapabilityMeta::new("Charge a card.", SideEffect::Write, Risk::Medium)
                    .exposed_on(ai),
            )
            .procedure(handler(move |_call| {
                let flaky = flaky.clone();
                async move {
                    flaky.fetch_add(1, Ordering::SeqCst);
                    Err(ProcedureError::internal(
                        "connection reset after the charge was sent",
                    ))
                }
            })),
        )
        .capability(
            CapabilityDef::new(
                "jobs.slow",
                CapabilityMeta::new("A long job.", SideEffect::Write, Risk::Low)
                    .exposed_on(ai)
                    .with_timeout_ms(60_000),
            )
            .procedure(handler(move |call| {
                let (slow, cancelled) = (slow.clone(), cancelled.clone());
                async move {
                    slow.fetch_add(1, Ordering::SeqCst);
                    // The runtime may stop the attempt by dropping it: record that the
                    // run ended with its cancellation token fired, however it ended.
                    let _stopped = StopFlag(call.cancel.clone(), cancelled);
                    call.cancel.cancelled().await;
                    Err(ProcedureError::internal("stopped"))
                }
            })),
        )
        .capability(
            CapabilityDef::new(
                "internal.export",
                CapabilityMeta::new("Export everything.", SideEffect::Read, Risk::Low)
                    .exposed_on([Surface::Direct]),
            )
            .procedure(handler(|_| async { Ok(json!({})) })),
        )
        .build();
    match built {
        Ok(r) => r,
        Err(e) => panic!("fixture registry: {e:?}"),
    }
}

/// Sets its flag when dropped after its token fired.
struct StopFlag(capgate_core::CancellationToken, Arc<AtomicBool>);

impl Drop for StopFlag {
    fn drop(&mut self) {
        if self.0.is_cancelled() {
            self.1.store(true, Ordering::SeqCst);
        }
    }
}

fn key(keys: &mut ApiKeys, token: &str, id: &str, kind: ActorKind, ns: &str, roles: &[&str]) {
    keys.insert_hashed(
        hash_api_key(token),
        ApiKeyEntry::new(
            Actor::new(id, kind),
            ns,
            roles.iter().map(|r| r.to_string()).collect(),
            vec![Surface::AiSdk, Surface::Mcp, Surface::Workflow],
            json!({ "namespace": ns }),
        ),
    );
}

/// A human's key: no model door, so it opens the requester door (a console credential).
fn human_key(keys: &mut ApiKeys, token: &str, id: &str, ns: &str) {
    keys.insert_hashed(
        hash_api_key(token),
        ApiKeyEntry::new(
            Actor::new(id, ActorKind::User),
            ns,
            vec![],
            vec![],
            json!({ "namespace": ns }),
        ),
    );
}

pub fn authenticator() -> Arc<dyn Authenticator> {
    let mut keys = ApiKeys::new();
    human_key(&mut keys, "tok-dana-console", "u_dana", NAMESPACE);
    human_key(&mut keys, "tok-dana-org2-console", "u_dana", "org_2");
    key(
        &mut keys,
        "tok-dana",
        "u_dana",
        ActorKind::User,
        NAMESPACE,
        &[],
    );
    key(
        &mut keys,
        "tok-eve",
        "u_eve",
        ActorKind::User,
        NAMESPACE,
        &[],
    );
    key(
        &mut keys,
        "tok-dana-org2",
        "u_dana",
        ActorKind::User,
        "org_2",
        &[],
    );
    key(
        &mut keys,
        "tok-priya",
        "u_priya",
        ActorKind::User,
        NAMESPACE,
        &["approver"],
    );
    key(
        &mut keys,
        "tok-anon",
        "anon",
        ActorKind::Anonymous,
        NAMESPACE,
        &[],
    );
    key(&mut keys, "tok-nons", "u_nons", ActorKind::User, "", &[]);
    Arc::new(BuiltinAuthenticator {
        api_keys: keys,
        jwt: None,
    })
}

/// One authorization question as the gateway asked it.
#[derive(Debug, Clone, PartialEq)]
pub struct Asked {
    pub actor: String,
    pub operation: Operation,
    pub capability_id: Option<String>,
    pub input: Option<Value>,
}

/// Allows everything except reading receipts of `ord_secret` orders (which proves the
/// authorizer sees the stored input), and records every question.
#[derive(Default)]
pub struct RecordingAuthorizer {
    pub asked: Mutex<Vec<Asked>>,
}

impl RecordingAuthorizer {
    pub fn asked(&self) -> Vec<Asked> {
        self.asked.lock().map(|a| a.clone()).unwrap_or_default()
    }
}

#[async_trait]
impl Authorizer for RecordingAuthorizer {
    async fn authorize(&self, request: &AuthorizeRequest<'_>) -> Result<(), AuthorizeError> {
        let AuthorizeRequest {
            principal,
            operation,
            capability_id,
            input,
            ..
        } = *request;
        if let Ok(mut a) = self.asked.lock() {
            a.push(Asked {
                actor: principal.actor.id.clone(),
                operation,
                capability_id: capability_id.map(str::to_string),
                input: input.cloned(),
            });
        }
        let secret =
            input.and_then(|i| i.get("orderId")).and_then(Value::as_str) == Some("ord_secret");
        if operation == Operation::GetInvocation && secret {
            return Err(AuthorizeError::denied(
                "receipts of secret orders are not readable",
            ));
        }
        Ok(())
    }
}

/// A running gateway.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`
    pub origin: String,
    pub counters: Counters,
    pub authorizer: Arc<RecordingAuthorizer>,
    pub runtime: Runtime,
    pub store: Store,
    task: tokio::task::JoinHandle<()>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    /// A SQLite store in a fresh temporary directory.
    pub async fn sqlite() -> TestServer {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let url = format!("sqlite://{}", dir.path().join("capgate.db").display());
        let mut s = TestServer::start(&url, Counters::default()).await;
        s._dir = Some(dir);
        s
    }

    /// A server on `url` (migrated), counting into `counters`.
    pub async fn start(url: &str, counters: Counters) -> TestServer {
        let store = Store::open(url)
            .await
            .unwrap_or_else(|e| panic!("store: {e}"));
        store
            .migrate()
            .await
            .unwrap_or_else(|e| panic!("migrate: {e}"));
        let audit = store
            .audit_sink(AuditSinkOptions::default())
            .unwrap_or_else(|e| panic!("audit sink: {e}"));
        let runtime = Runtime::builder(registry(&counters))
            .approvals(Arc::new(store.approvals()))
            .audit_sink(Arc::new(audit))
            .strict_audit(true)
            .build()
            .expect("a valid runtime");
        let journal: Arc<dyn InvocationJournal> = Arc::new(store.journal());
        let authorizer = Arc::new(RecordingAuthorizer::default());
        let keeper = Doorkeeper::new(authenticator(), authorizer.clone());
        let config = GatewayOptions::new(
            Surface::AiSdk,
            REVISION,
            runtime.clone(),
            journal.clone(),
            keeper.clone(),
        )
        .with_max_body_bytes(64 * 1024)
        .unwrap_or_else(|e| panic!("config: {e}"));
        // The same gateway with a 1.5 s ceiling (1 s of work, 0.5 s of audit drain).
        let short = config
            .clone()
            .with_timeouts(Duration::from_millis(1_500), Duration::from_millis(500))
            .unwrap_or_else(|e| panic!("config: {e}"));
        let app = axum::Router::new()
            .nest(
                "/capgate",
                capability_router(config).unwrap_or_else(|e| panic!("router: {e}")),
            )
            .nest(
                "/short",
                capability_router(short).unwrap_or_else(|e| panic!("router: {e}")),
            )
            .merge(approvals_router(
                runtime.clone(),
                keeper.clone(),
                "approver",
            ))
            .merge(
                console_router(
                    ApprovalsRouter::new(runtime.clone(), keeper.clone())
                        .history(Arc::new(AuditTrail(store.audit_log())))
                        .build(),
                    keeper,
                    ConsoleOptions::default(),
                )
                .unwrap_or_else(|e| panic!("console: {e}")),
            )
            .merge(health_router(JournalProbe(journal.clone())));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local addr: {e}"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TestServer {
            origin: format!("http://{addr}"),
            counters,
            authorizer,
            runtime,
            store,
            task,
            _dir: None,
        }
    }

    /// The gateway mount.
    pub fn url(&self) -> String {
        format!("{}/capgate", self.origin)
    }

    /// A client of the gateway with a bearer token.
    pub fn client(&self, token: &str) -> CapabilityClient {
        CapabilityClient::new(self.url()).bearer(token)
    }

    /// A client of the short-timeout gateway.
    pub fn short_client(&self, token: &str) -> CapabilityClient {
        CapabilityClient::new(format!("{}/short", self.origin)).bearer(token)
    }
}

/// The approvals API's execution history over the test store's audit log (the `capgate`
/// binary wires its own the same way).
struct AuditTrail(capgate_store::AuditLog);

#[async_trait::async_trait]
impl ExecutionHistory for AuditTrail {
    async fn outcome(&self, execution_id: &str) -> Result<Option<ExecutionOutcome>, String> {
        let rows = self
            .0
            .for_execution(execution_id)
            .await
            .map_err(|e| e.to_string())?;
        Ok(ExecutionOutcome::from_trail(
            execution_id,
            rows.into_iter().filter_map(|r| r.event.ok()),
        ))
    }
}
