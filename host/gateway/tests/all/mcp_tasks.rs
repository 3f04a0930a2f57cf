//! Held calls as MCP tasks (docs/gateway.md, "MCP tasks"), driven over real HTTP with raw
//! 2026-07-28 JSON-RPC, message by message as a client of the `io.modelcontextprotocol/tasks`
//! extension sends them: a held refund answers with a task; the client polls; a human
//! decides through the approvals API; the task ends as the spec says. Each answer is
//! checked against the wire shapes of the extension (`resultType: "task"`, `DetailedTask`).
//! The Python SDK's own client drives the same server in `mcp_python.rs`.

use crate::mcp_support::{self, CONSOLE, events_json, fixture, manager};
use capgate_core::actor::Surface;
use capgate_core::approval::{DecisionStatus, InMemoryApprovalCoordinator};
use capgate_core::audit::MemorySink;
use capgate_core::clock::ManualClock;
use capgate_core::meta::{CapabilityMeta, Risk, SideEffect};
use capgate_core::policy::{Phase, PolicyDecision, policy_sync};
use capgate_core::procedure::handler;
use capgate_core::registry::{CapabilityDef, Registry};
use capgate_core::runtime::{DecideRequest, Decider, Runtime};
use capgate_gateway::mcp::{McpOptions, McpTasks};
use capgate_testkit::mcp_tasks::{Client, assert_detailed, assert_task_handle, has_word};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The fixture's refund of `amount` on `ord_7`.
fn refund(amount: u32) -> Value {
    json!({"orderId": "ord_7", "amount": amount})
}

struct Served {
    url: String,
    runtime: Runtime,
    audit: Arc<MemorySink>,
}

async fn serve(runtime: Runtime, audit: Arc<MemorySink>, options: McpOptions) -> Served {
    let url = mcp_support::serve_http(runtime.clone(), options).await;
    Served {
        url,
        runtime,
        audit,
    }
}

async fn fixture_server(options: McpOptions) -> Served {
    let audit = Arc::new(MemorySink::new());
    let runtime = fixture::runtime(Arc::new(InMemoryApprovalCoordinator::new()), audit.clone());
    serve(runtime, audit, options).await
}

fn options() -> McpOptions {
    let mut o = mcp_support::options();
    if let Some(t) = o.tasks.as_mut() {
        t.poll_interval = Duration::from_millis(100);
    }
    o
}

impl Served {
    fn approval_of(&self, task_created: &Value) -> String {
        task_created["result"]["_meta"]["capgate/approval"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no approval in {task_created}"))
            .to_owned()
    }

    async fn try_decide(
        &self,
        approval_id: &str,
        status: DecisionStatus,
    ) -> Result<capgate_core::approval::ApprovalRecord, capgate_core::runtime::ApprovalsError> {
        self.runtime
            .approvals()
            .decide(
                approval_id,
                DecideRequest {
                    status,
                    approver: manager(),
                    comment: None,
                    decider: Decider::Approver {
                        namespace: fixture::NAMESPACE.into(),
                        roles: Vec::new(),
                    },
                },
            )
            .await
    }

    async fn decide(&self, approval_id: &str, status: DecisionStatus) {
        self.try_decide(approval_id, status)
            .await
            .unwrap_or_else(|e| panic!("decide {approval_id}: {e}"));
    }

    /// How many times the refund procedure was entered.
    fn refunds_started(&self) -> usize {
        events_json(&self.audit)
            .iter()
            .filter(|e| e["type"] == "capability.started" && e["capabilityId"] == "orders.refund")
            .count()
    }

    fn task_events(&self, task_id: &str) -> Vec<String> {
        events_json(&self.audit)
            .iter()
            .filter(|e| e["data"]["taskId"] == task_id)
            .filter_map(|e| e["type"].as_str().map(str::to_owned))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_refund_becomes_a_task_that_completes_once_after_a_human_approves() {
    let s = fixture_server(options()).await;
    let dana = Client::with_tasks(&s.url, "tok-dana", false);
    let created = dana.call("orders_refund", refund(649)).await;
    let task = assert_task_handle(&created);
    assert!(task.starts_with("tsk_"), "{created}");
    // What it waits for, never the input: the approval, its types and expiry.
    let approval = s.approval_of(&created);
    let status_message = created["result"]["statusMessage"].as_str().unwrap_or("");
    assert!(status_message.contains(&approval), "{created}");
    assert!(
        status_message.contains(&CONSOLE.replace("{id}", &approval)),
        "{created}"
    );
    assert!(
        !has_word(&created.to_string(), "649"),
        "the input leaked: {created}"
    );
    assert!(
        !created.to_string().contains("ord_7"),
        "the input leaked: {created}"
    );

    // Pending: the client is told to keep waiting, and nothing ran.
    let polled = dana.get(&task).await;
    assert_detailed(&polled, "working");
    assert_eq!(s.refunds_started(), 0);

    s.decide(&approval, DecisionStatus::Approved).await;
    let ended = dana.until_ended(&task).await;
    assert_detailed(&ended, "completed");
    let result = &ended["result"]["result"];
    assert_eq!(result["isError"], false, "{ended}");
    assert_eq!(
        result["structuredContent"]["status"], "completed",
        "{ended}"
    );
    assert_eq!(
        result["structuredContent"]["output"]["approvedBy"], "u_manager",
        "{ended}"
    );
    // Polled again (and again): the same answer, and the procedure ran exactly once.
    let again = dana.get(&task).await;
    assert_eq!(again["result"]["result"], ended["result"]["result"]);
    assert_eq!(s.refunds_started(), 1);
    assert_eq!(
        s.task_events(&task),
        ["capgate.mcp.task_created", "capgate.mcp.task_finished"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_extension_gets_the_approval_required_result_unchanged() {
    let s = fixture_server(options()).await;
    let plain = Client::new(&s.url, "tok-dana", json!({}));
    let answer = plain.call("orders_refund", refund(649)).await;
    let r = &answer["result"];
    assert_ne!(r["resultType"], "task", "{answer}");
    assert_eq!(
        r["structuredContent"]["status"], "approval-required",
        "{answer}"
    );
    // Nor does tasks/get exist for it: the extension's methods need the capability.
    let get = plain.get("tsk_0").await;
    assert_eq!(get["error"]["code"], -32021, "{get}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principal_cannot_see_or_cancel_the_task_it_reads_as_unknown() {
    let s = fixture_server(options()).await;
    let dana = Client::with_tasks(&s.url, "tok-dana", false);
    let admin = Client::with_tasks(&s.url, "tok-admin", false);
    let task = assert_task_handle(&dana.call("orders_refund", refund(649)).await);
    let theirs = admin.get(&task).await;
    let unknown = admin.get("tsk_00000000000000000000000000000000").await;
    assert_eq!(theirs["error"], unknown["error"], "{theirs} vs {unknown}");
    assert_eq!(theirs["error"]["code"], -32602, "{theirs}");
    let cancel = admin.rpc("tasks/cancel", json!({"taskId": task})).await;
    assert_eq!(cancel["error"], unknown["error"], "{cancel}");
    // Still Dana's, still working.
    assert_detailed(&dana.get(&task).await, "working");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_fails_the_task_with_the_public_error_and_nothing_runs() {
    let s = fixture_server(options()).await;
    let dana = Client::with_tasks(&s.url, "tok-dana", false);
    let created = dana.call("orders_refund", refund(649)).await;
    let task = assert_task_handle(&created);
    s.decide(&s.approval_of(&created), DecisionStatus::Rejected)
        .await;
    let ended = dana.until_ended(&task).await;
    assert_detailed(&ended, "failed");
    assert_eq!(
        ended["result"]["error"]["data"]["error"]["code"], "APPROVAL_REJECTED",
        "{ended}"
    );
    assert_eq!(s.refunds_started(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_withdraws_the_pending_approval_and_the_call_never_runs() {
    let s = fixture_server(options()).await;
    let dana = Client::with_tasks(&s.url, "tok-dana", false);
    let created = dana.call("orders_refund", refund(649)).await;
    let task = assert_task_handle(&created);
    let approval = s.approval_of(&created);
    let ack = dana.rpc("tasks/cancel", json!({"taskId": task})).await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    assert_detailed(&dana.get(&task).await, "cancelled");
    // The approval was withdrawn: no one can approve it any more.
    let record = s.runtime.approvals().get(&approval).await.ok().flatten();
    assert_eq!(
        record.map(|r| r.status.as_str()),
        Some("cancelled"),
        "the approval was not withdrawn"
    );
    let late = s.try_decide(&approval, DecisionStatus::Approved).await;
    assert!(late.is_err(), "a withdrawn approval was decided");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_detailed(&dana.get(&task).await, "cancelled");
    assert_eq!(s.refunds_started(), 0);
    assert_eq!(
        s.task_events(&task),
        ["capgate.mcp.task_created", "capgate.mcp.task_cancelled"]
    );
    let cancelled = events_json(&s.audit)
        .into_iter()
        .find(|e| e["type"] == "capgate.mcp.task_cancelled");
    assert_eq!(
        cancelled.map(|e| e["data"]["approvalWithdrawn"].clone()),
        Some(json!(true))
    );
    // A second cancel: the task has ended.
    let twice = dana.rpc("tasks/cancel", json!({"taskId": task})).await;
    assert!(twice["error"].is_object(), "{twice}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_approved_but_cancelled_before_anyone_polled_never_runs() {
    let s = fixture_server(options()).await;
    let dana = Client::with_tasks(&s.url, "tok-dana", false);
    let created = dana.call("orders_refund", refund(649)).await;
    let task = assert_task_handle(&created);
    let approval = s.approval_of(&created);
    s.decide(&approval, DecisionStatus::Approved).await;
    let ack = dana.rpc("tasks/cancel", json!({"taskId": task})).await;
    assert!(ack["result"].is_object(), "{ack}");
    for _ in 0..5 {
        assert_detailed(&dana.get(&task).await, "cancelled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        s.refunds_started(),
        0,
        "a decided call ran after its cancel"
    );
    let record = s.runtime.approvals().get(&approval).await.ok().flatten();
    assert_eq!(record.map(|r| r.status.as_str()), Some("cancelled"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_approval_fails_the_task_as_expired() {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let audit = Arc::new(MemorySink::new());
    let runtime = Runtime::builder(fixture::registry())
        .approvals(Arc::new(InMemoryApprovalCoordinator::new()))
        .audit_sink(audit.clone())
        .clock(clock.clone())
        .build()
        .expect("runtime");
    let s = serve(runtime, audit, options()).await;
    let dana = Client::with_tasks(&s.url, "tok-dana", false);
    let task = assert_task_handle(&dana.call("orders_refund", refund(649)).await);
    clock.advance(chrono::Duration::days(30));
    let ended = dana.until_ended(&task).await;
    assert_detailed(&ended, "failed");
    assert_eq!(
        ended["result"]["error"]["data"]["error"]["code"], "APPROVAL_EXPIRED",
        "{ended}"
    );
    assert_eq!(s.refunds_started(), 0);
}

/// A refund whose policies can change between the hold and the run: `FROZEN` denies it at
/// the execution-time re-check.
static FROZEN: AtomicBool = AtomicBool::new(false);

fn freezable() -> Registry {
    Registry::builder()
        .capability(
            CapabilityDef::new(
                "orders.refund",
                CapabilityMeta::new("Refund an order.", SideEffect::Write, Risk::High)
                    .exposed_on([Surface::Mcp]),
            )
            .input_schema(json!({
                "type": "object",
                "properties": {"orderId": {"type": "string"}, "amount": {"type": "number"}},
                "required": ["orderId", "amount"]
            }))
            .policy(capgate_testkit::walkthrough::refund_limit(
                "refund-limit",
                None,
            ))
            .policy(
                policy_sync("freeze", |_req| {
                    Ok(if FROZEN.load(Ordering::SeqCst) {
                        PolicyDecision::deny("refunds are frozen")
                    } else {
                        PolicyDecision::allow()
                    })
                })
                .with_phases([Phase::Invocation]),
            )
            .procedure(handler(|call| async move {
                Ok(json!({"refunded": call.input["amount"]}))
            })),
        )
        .build()
        .expect("registry")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_at_the_execution_time_recheck_fails_the_task_and_never_runs() {
    let audit = Arc::new(MemorySink::new());
    let runtime = Runtime::builder(freezable())
        .approvals(Arc::new(InMemoryApprovalCoordinator::new()))
        .audit_sink(audit.clone())
        .build()
        .expect("runtime");
    let s = serve(runtime, audit, options()).await;
    let dana = Client::with_tasks(&s.url, "tok-dana", false);
    let created = dana.call("orders_refund", refund(649)).await;
    let task = assert_task_handle(&created);
    FROZEN.store(true, Ordering::SeqCst);
    s.decide(&s.approval_of(&created), DecisionStatus::Approved)
        .await;
    let ended = dana.until_ended(&task).await;
    FROZEN.store(false, Ordering::SeqCst);
    assert_detailed(&ended, "failed");
    assert_eq!(
        ended["result"]["error"]["data"]["error"]["code"], "POLICY_DENIED",
        "{ended}"
    );
    assert_eq!(s.refunds_started(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_shows_urls_is_pointed_to_the_console_page_and_nothing_of_the_input() {
    let s = fixture_server(options()).await;
    let dana = Client::with_tasks(&s.url, "tok-dana", true);
    let created = dana.call("orders_refund", refund(649)).await;
    let task = assert_task_handle(&created);
    let approval = s.approval_of(&created);
    let asked = dana.get(&task).await;
    assert_detailed(&asked, "input_required");
    let request = &asked["result"]["inputRequests"]["capgate-approval"];
    assert_eq!(request["method"], "elicitation/create", "{asked}");
    assert_eq!(request["params"]["mode"], "url", "{asked}");
    assert_eq!(
        request["params"]["url"],
        CONSOLE.replace("{id}", &approval),
        "{asked}"
    );
    let text = asked.to_string();
    assert!(
        !has_word(&text, "649") && !text.contains("ord_7"),
        "the input leaked: {asked}"
    );
    // The client showed its user the page: it is not asked again.
    let ack = dana
        .rpc(
            "tasks/update",
            json!({"taskId": task, "inputResponses": {"capgate-approval": {"action": "accept"}}}),
        )
        .await;
    assert!(ack["result"].is_object(), "{ack}");
    assert_detailed(&dana.get(&task).await, "working");
    // Answering a request it never made is refused; nothing here decides anything.
    let forged = dana
        .rpc(
            "tasks/update",
            json!({"taskId": task, "inputResponses": {"approve": {"action": "accept"}}}),
        )
        .await;
    assert!(forged["error"].is_object(), "{forged}");
    assert_eq!(s.refunds_started(), 0);
    let record = s.runtime.approvals().get(&approval).await.ok().flatten();
    assert_eq!(record.map(|r| r.status.as_str()), Some("pending"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_bound_a_principal_gets_the_approval_required_result_instead_of_a_task() {
    let mut o = options();
    o.tasks = Some(McpTasks {
        max_per_principal: 1,
        ..McpTasks::default()
    });
    let s = fixture_server(o).await;
    let dana = Client::with_tasks(&s.url, "tok-dana", false);
    assert_task_handle(&dana.call("orders_refund", refund(649)).await);
    let second = dana.call("orders_refund", refund(700)).await;
    assert_ne!(second["result"]["resultType"], "task", "{second}");
    assert_eq!(
        second["result"]["structuredContent"]["status"], "approval-required",
        "{second}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tasks_off_every_client_gets_the_approval_required_result() {
    let mut o = options();
    o.tasks = None;
    let s = fixture_server(o).await;
    let dana = Client::with_tasks(&s.url, "tok-dana", false);
    let answer = dana.call("orders_refund", refund(649)).await;
    assert_eq!(
        answer["result"]["structuredContent"]["status"], "approval-required",
        "{answer}"
    );
}

/// `jobs.crunch`: declared to run as a task past 100 ms; reports progress, then waits the
/// seconds asked (or until cancelled); its own timeout is 2 s.
fn slow_registry() -> Registry {
    Registry::builder()
        .capability(
            CapabilityDef::new(
                "jobs.crunch",
                CapabilityMeta::new("Crunch for a while.", SideEffect::None, Risk::Low)
                    .exposed_on([Surface::Mcp])
                    .with_timeout_ms(2_000)
                    .run_as_task_after_ms(100),
            )
            .input_schema(json!({
                "type": "object",
                "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 30}}
            }))
            .procedure(handler(|call| async move {
                call.report_progress(json!({"progress": 1, "total": 2, "message": "crunching"}));
                let seconds = call.input["seconds"].as_f64().unwrap_or(0.0);
                tokio::select! {
                    () = call.cancel.cancelled() => {
                        Err(capgate_core::procedure::ProcedureError::internal("cancelled"))
                    }
                    () = tokio::time::sleep(Duration::from_secs_f64(seconds)) => {
                        Ok(json!({"crunched": seconds}))
                    }
                }
            })),
        )
        .build()
        .expect("registry")
}

async fn slow_server(options: McpOptions) -> Served {
    let audit = Arc::new(MemorySink::new());
    let runtime = Runtime::builder(slow_registry())
        .approvals(Arc::new(InMemoryApprovalCoordinator::new()))
        .audit_sink(audit.clone())
        .build()
        .expect("runtime");
    serve(runtime, audit, options).await
}

fn crunch(seconds: f64) -> Value {
    json!({"seconds": seconds})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_capability_declared_to_run_as_a_task_completes_through_polling() {
    let s = slow_server(options()).await;
    let dana = Client::with_tasks(&s.url, "tok-dana", false);
    // Quick enough: answered at once, as always.
    let quick = dana.call("jobs_crunch", crunch(0.0)).await;
    assert_eq!(
        quick["result"]["structuredContent"]["status"], "completed",
        "{quick}"
    );
    // Slow: a task, whose status says how far it got.
    let created = dana.call("jobs_crunch", crunch(1.0)).await;
    let task = assert_task_handle(&created);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let running = dana.get(&task).await;
    assert_detailed(&running, "working");
    assert!(
        running["result"]["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("crunching")),
        "progress in the status: {running}"
    );
    let ended = dana.until_ended(&task).await;
    assert_detailed(&ended, "completed");
    assert_eq!(
        ended["result"]["result"]["structuredContent"]["output"]["crunched"], 1.0,
        "{ended}"
    );
    // A client without tasks holds its request, as before.
    let plain = Client::new(&s.url, "tok-dana", json!({}));
    let held = plain.call("jobs_crunch", crunch(0.3)).await;
    assert_eq!(
        held["result"]["structuredContent"]["status"], "completed",
        "{held}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_keeps_its_timeout_and_is_cancelled_by_tasks_cancel() {
    let s = slow_server(options()).await;
    let dana = Client::with_tasks(&s.url, "tok-dana", false);
    // Past the capability's own 2 s timeout: TIMEOUT, as on any door.
    let late = assert_task_handle(&dana.call("jobs_crunch", crunch(10.0)).await);
    let ended = dana.until_ended(&late).await;
    assert_detailed(&ended, "failed");
    assert_eq!(
        ended["result"]["error"]["data"]["error"]["code"], "TIMEOUT",
        "{ended}"
    );
    // Cancelled by the requester: the procedure is told, and the task ends cancelled.
    let task = assert_task_handle(&dana.call("jobs_crunch", crunch(10.0)).await);
    let ack = dana.rpc("tasks/cancel", json!({"taskId": task})).await;
    assert!(ack["result"].is_object(), "{ack}");
    assert_detailed(&dana.get(&task).await, "cancelled");
    let audit = s.audit.clone();
    mcp_support::eventually("the procedure cancelled", move || {
        events_json(&audit).iter().any(|e| {
            e["type"] == "capability.cancelled"
                && e["capabilityId"] == "jobs.crunch"
                && e["data"]["code"] == "CANCELLED"
        })
    })
    .await;
    assert_detailed(&dana.get(&task).await, "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_replica_stopped_mid_run_fails_as_outcome_unknown_past_its_deadline() {
    use capgate_gateway::mcp::{InMemoryMcpTaskStore, McpTaskStore, StoredTask, TaskState};
    let store = Arc::new(InMemoryMcpTaskStore::new());
    let mut o = options();
    o.tasks = Some(McpTasks::new(store.clone()));
    let s = slow_server(o).await;
    // A run another replica claimed and never finished (it stopped), past its deadline.
    let now = chrono::Utc::now();
    let dana = capgate_core::authz::Principal {
        actor: fixture::actor_of("tok-dana").expect("dana"),
        namespace: fixture::NAMESPACE.into(),
    };
    let orphan = StoredTask {
        id: "tsk_orphan".into(),
        principal_sha256: capgate_gateway::mcp::tasks::principal_digest(&dana),
        namespace: fixture::NAMESPACE.into(),
        approval_id: None,
        capability_id: "jobs.crunch".into(),
        state: TaskState::Working,
        status_message: "Running.".into(),
        outcome: None,
        input_answered: false,
        claim: Some("run-on-a-dead-replica".into()),
        run_deadline: Some(now - chrono::Duration::seconds(1)),
        created_at: now - chrono::Duration::minutes(5),
        updated_at: now - chrono::Duration::minutes(5),
        purge_after: now + chrono::Duration::hours(1),
    };
    store.create(&orphan, 10).await.expect("create");
    let client = Client::with_tasks(&s.url, "tok-dana", false);
    let ended = client.get("tsk_orphan").await;
    assert_detailed(&ended, "failed");
    assert_eq!(
        ended["result"]["error"]["data"]["error"]["code"], "INTERNAL_ERROR",
        "{ended}"
    );
    assert!(
        ended["result"]["statusMessage"]
            .as_str()
            .is_some_and(|m| m.contains("outcome is unknown")),
        "{ended}"
    );
    assert_eq!(s.task_events("tsk_orphan"), ["capgate.mcp.task_finished"]);
}
