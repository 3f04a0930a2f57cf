//! Spec-fidelity edges of the gateway (issue 33, item 8): a call cancelled before its
//! procedure was entered settles its receipt as cancelled instead of leaving it pending.

use crate::gateway_support;

use capgate_client::{CapabilityClient, InvocationOptions};
use capgate_core::actor::Surface;
use capgate_core::journal::{InvocationJournal, InvocationState};
use capgate_core::meta::{CapabilityMeta, Risk, SideEffect};
use capgate_core::policy::{Phase, PolicyDecision, policy_fn};
use capgate_core::procedure::handler;
use capgate_core::registry::{CapabilityDef, Registry};
use capgate_core::runtime::{Defaults, Runtime};
use capgate_gateway::door::Doorkeeper;
use capgate_gateway::routes::{GatewayOptions, capability_router};
use capgate_gateway::wire::CapabilityOutcome;
use capgate_store::{AuditSinkOptions, Store};
use gateway_support::{RecordingAuthorizer, authenticator};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn ok<T, E: std::fmt::Debug>(r: Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("unexpected error: {e:?}"),
    }
}

/// A gateway (1.5 s ceiling: 1 s of work, 0.5 s of audit drain) serving `jobs.held`, whose
/// execution-phase policy (stage 9: after the journal claim, before the procedure) holds the
/// call until `release` is notified, then allows it.
async fn held_gateway(
    release: Arc<tokio::sync::Notify>,
    runs: Arc<AtomicUsize>,
) -> (
    CapabilityClient,
    tokio::task::JoinHandle<()>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let url = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let store = ok(Store::open(&url).await);
    ok(store.migrate().await);
    let audit = ok(store.audit_sink(AuditSinkOptions::default()));
    let holds = policy_fn("holdsTheCall", move |_req| {
        let release = release.clone();
        Box::pin(async move {
            release.notified().await;
            Ok(PolicyDecision::allow())
        })
    })
    .with_phases([Phase::Execution]);
    let registry = ok(Registry::builder()
        .capability(
            CapabilityDef::new(
                "jobs.held",
                CapabilityMeta::new("A job a policy holds.", SideEffect::Write, Risk::Low)
                    .exposed_on([Surface::AiSdk]),
            )
            .policy(holds)
            .procedure(handler(move |_call| {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok(json!({}))
                }
            })),
        )
        .build());
    let runtime = ok(Runtime::builder(registry)
        .approvals(Arc::new(store.approvals()))
        .audit_sink(Arc::new(audit))
        .defaults(Defaults {
            // The policy outlives the gateway's budget, never its own deadline.
            policy_timeout_ms: 120_000,
            ..Defaults::default()
        })
        .build());
    let journal: Arc<dyn InvocationJournal> = Arc::new(store.journal());
    let keeper = Doorkeeper::new(authenticator(), Arc::new(RecordingAuthorizer::default()));
    let config = ok(
        GatewayOptions::new(Surface::AiSdk, "test-rev-1", runtime, journal, keeper)
            .with_timeouts(Duration::from_millis(1_500), Duration::from_millis(500)),
    );
    let app = axum::Router::new().nest("/capgate", ok(capability_router(config)));
    let listener = ok(tokio::net::TcpListener::bind("127.0.0.1:0").await);
    let addr = ok(listener.local_addr());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let client = CapabilityClient::new(format!("http://{addr}/capgate")).bearer("tok-dana");
    (client, task, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_cancelled_before_its_procedure_was_entered_settles_as_cancelled() {
    let release = Arc::new(tokio::sync::Notify::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let (dana, task, _dir) = held_gateway(release.clone(), runs.clone()).await;

    // The work budget runs out while the policy holds the call: the gateway cancels it and
    // stops waiting.
    let out = ok(dana
        .invoke("jobs.held", json!({}), InvocationOptions::new("inv-held"))
        .await);
    assert_eq!(out.status(), "outcome-unknown", "{out:?}");

    // The policy lets go; the cancelled call never enters its procedure and its receipt
    // settles as cancelled (with the effect-unknown rule it would stay pending forever).
    release.notify_one();
    let deadline = Instant::now() + Duration::from_secs(20);
    let receipt = loop {
        let receipt = ok(dana.get_invocation("inv-held").await)
            .unwrap_or_else(|| panic!("the claim has a receipt"));
        if receipt.state == InvocationState::Settled {
            break receipt;
        }
        assert!(
            Instant::now() < deadline,
            "the receipt stayed pending: {receipt:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    match receipt.outcome {
        Some(CapabilityOutcome::Cancelled { ref error, .. }) => {
            assert_eq!(error.code, "CANCELLED", "{receipt:?}")
        }
        ref other => panic!("expected a settled cancelled outcome, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing was entered");

    // The same invocation again replays the settled answer and runs nothing.
    let again = ok(dana
        .invoke("jobs.held", json!({}), InvocationOptions::new("inv-held"))
        .await);
    assert_eq!(again.status(), "cancelled", "{again:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    task.abort();
}

thread_local! {
    /// The audit trail of the gateway [`concealing_gateway`] builds on this thread.
    static TRAIL: Arc<capgate_core::audit::MemorySink> =
        Arc::new(capgate_core::audit::MemorySink::new());
}

/// An authorizer that refuses every operation to Eve and allows everything to others.
struct RefusesEve;

#[async_trait::async_trait]
impl capgate_core::authz::Authorizer for RefusesEve {
    async fn authorize(
        &self,
        request: &capgate_core::authz::AuthorizeRequest<'_>,
    ) -> Result<(), capgate_core::authz::AuthorizeError> {
        if request.principal.actor.id == "u_eve" {
            return Err(capgate_core::authz::AuthorizeError::denied(
                "Eve may do nothing",
            ));
        }
        Ok(())
    }
}

/// A gateway serving `jobs.secret` (hidden by an execution-phase policy: after the journal
/// claim, before the procedure) and `jobs.open` (allowed), with `authorizer`. Returns the
/// base URL, the server task, the procedure-run counter and the store's directory.
async fn concealing_gateway(
    authorizer: Arc<dyn capgate_core::authz::Authorizer>,
) -> (
    String,
    tokio::task::JoinHandle<()>,
    Arc<AtomicUsize>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let url = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let store = ok(Store::open(&url).await);
    ok(store.migrate().await);
    let runs = Arc::new(AtomicUsize::new(0));
    let counting = |runs: Arc<AtomicUsize>| {
        handler(move |_call| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok(json!({}))
            }
        })
    };
    let hides = policy_fn("hidesAtExecution", |_req| {
        Box::pin(async { Ok(PolicyDecision::Hide) })
    })
    .with_phases([Phase::Execution]);
    let meta =
        |d: &str| CapabilityMeta::new(d, SideEffect::Write, Risk::Low).exposed_on([Surface::AiSdk]);
    let registry = ok(Registry::builder()
        .capability(
            CapabilityDef::new("jobs.secret", meta("A job hidden when it runs."))
                .policy(hides)
                .procedure(counting(runs.clone())),
        )
        .capability(
            CapabilityDef::new("jobs.open", meta("A job anyone may run."))
                .procedure(counting(runs.clone())),
        )
        .build());
    let runtime = ok(Runtime::builder(registry)
        .approvals(Arc::new(store.approvals()))
        .audit_sink(TRAIL.with(Clone::clone))
        .build());
    let journal: Arc<dyn InvocationJournal> = Arc::new(store.journal());
    let keeper = Doorkeeper::new(authenticator(), authorizer);
    let config = GatewayOptions::new(Surface::AiSdk, "test-rev-1", runtime, journal, keeper);
    let app = axum::Router::new().nest("/capgate", ok(capability_router(config)));
    let listener = ok(tokio::net::TcpListener::bind("127.0.0.1:0").await);
    let addr = ok(listener.local_addr());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/capgate"), task, runs, dir)
}

/// POST `body` to `base/op` as `key`: the status and the body with every execution id
/// (`exe_…`) blanked, the one part of an answer that differs between any two calls.
async fn post(base: &str, op: &str, key: &str, body: serde_json::Value) -> (u16, String) {
    let r = ok(reqwest::Client::new()
        .post(format!("{base}/{op}"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await);
    let status = r.status().as_u16();
    let text = ok(r.text().await);
    let mut blanked = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find("exe_") {
        blanked.push_str(&rest[..at]);
        blanked.push_str("exe_*");
        let tail = &rest[at + 4..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(tail.len());
        rest = &tail[end..];
    }
    blanked.push_str(rest);
    (status, blanked)
}

/// Issue 55 (SI-8, second path): a call hidden by an execution-phase policy is answered,
/// stored and reusable exactly as a call of a name that does not exist: the invoke answers
/// the same, `getInvocation` answers the same (no capability id, no contract digest), and
/// reusing the invocation id runs the other call instead of answering
/// `INVOCATION_CONFLICT`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_hidden_at_the_execution_phase_is_stored_exactly_as_an_unknown_one() {
    let (base, task, runs, _dir) =
        concealing_gateway(Arc::new(RecordingAuthorizer::default())).await;
    let invoke =
        |name: &str, id: &str| json!({"capabilityId": name, "input": {}, "invocationId": id});
    let get = |id: &str| json!({"invocationId": id});

    let hidden = post(&base, "invoke", "tok-dana", invoke("jobs.secret", "inv-a")).await;
    let unknown = post(&base, "invoke", "tok-dana", invoke("jobs.nope", "inv-b")).await;
    assert_eq!(hidden.0, unknown.0);
    assert_eq!(
        hidden.1.replace("inv-a", "inv-*"),
        unknown.1.replace("inv-b", "inv-*")
    );
    assert!(hidden.1.contains("CAPABILITY_NOT_FOUND"), "{}", hidden.1);
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    let hidden_receipt = post(&base, "getInvocation", "tok-dana", get("inv-a")).await;
    let unknown_receipt = post(&base, "getInvocation", "tok-dana", get("inv-b")).await;
    assert_eq!(hidden_receipt, unknown_receipt);
    assert!(
        !hidden_receipt.1.contains("jobs.secret"),
        "{}",
        hidden_receipt.1
    );

    // Reusing either id for a real call runs it: no INVOCATION_CONFLICT tells them apart.
    for id in ["inv-a", "inv-b"] {
        let (status, body) = post(&base, "invoke", "tok-dana", invoke("jobs.open", id)).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"completed\""), "{id}: {body}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    task.abort();
}

/// Issue 55 (SI-8, seed 004): the authorizer is asked for every invocation, and a
/// principal it refuses everything cannot tell a real capability id from an unknown one:
/// both answer the same concealed not-found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_refused_everything_cannot_enumerate_capability_ids() {
    let (base, task, runs, _dir) = concealing_gateway(Arc::new(RefusesEve)).await;
    let invoke = |name: &str| json!({"capabilityId": name, "input": {}, "invocationId": "inv-e"});
    let real = post(&base, "invoke", "tok-eve", invoke("jobs.open")).await;
    let unknown = post(&base, "invoke", "tok-eve", invoke("jobs.nope")).await;
    assert_eq!(real, unknown);
    assert!(real.1.contains("CAPABILITY_NOT_FOUND"), "{}", real.1);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // Dana, whom it allows, runs the real one.
    let (status, body) = post(&base, "invoke", "tok-dana", invoke("jobs.open")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"completed\""), "{body}");
    task.abort();
}

/// The authorizer sees every invocation, unknown names included (seed 004).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_authorizer_is_asked_for_unknown_names_too() {
    let authorizer = Arc::new(RecordingAuthorizer::default());
    let (base, task, _runs, _dir) = concealing_gateway(authorizer.clone()).await;
    let body = json!({"capabilityId": "jobs.nope", "input": {"x": 1}, "invocationId": "inv-n"});
    let (_, answer) = post(&base, "invoke", "tok-dana", body).await;
    assert!(answer.contains("CAPABILITY_NOT_FOUND"), "{answer}");
    let asked = authorizer.asked();
    assert!(
        asked
            .iter()
            .any(|a| a.operation == capgate_core::authz::Operation::Invoke
                && a.capability_id.as_deref() == Some("jobs.nope")),
        "{asked:?}"
    );
    task.abort();
}

/// Issue 55: a refused invoke (the authorizer's refusal, concealed) records no
/// `capabilities.discovered`: the door's own check of what the caller could discover is no
/// discovery the caller made.
#[tokio::test(flavor = "current_thread")]
async fn a_refused_invoke_records_no_discovery() {
    let (base, task, _runs, _dir) = concealing_gateway(Arc::new(RefusesEve)).await;
    let trail = TRAIL.with(Clone::clone);
    let body = json!({"capabilityId": "jobs.open", "input": {}, "invocationId": "inv-d"});
    let (_, answer) = post(&base, "invoke", "tok-eve", body).await;
    assert!(answer.contains("CAPABILITY_NOT_FOUND"), "{answer}");
    let types = trail.types();
    assert!(types.contains(&"capability.denied"), "{types:?}");
    assert!(!types.contains(&"capabilities.discovered"), "{types:?}");
    task.abort();
}

/// Issue 55: a resume the door refuses after opening and auditing an execution for it
/// names that execution in its answer, never `executionId: ""`.
#[tokio::test(flavor = "current_thread")]
async fn a_refused_resume_names_the_execution_it_opened() {
    let (base, task, _runs, _dir) =
        concealing_gateway(Arc::new(RecordingAuthorizer::default())).await;
    let trail = TRAIL.with(Clone::clone);
    let body = json!({"approvalId": "apr_nope", "invocationId": "inv-r"});
    let r = ok(reqwest::Client::new()
        .post(format!("{base}/resumeApproval"))
        .bearer_auth("tok-dana")
        .json(&body)
        .send()
        .await);
    let answer: serde_json::Value = ok(r.json().await);
    let id = answer["executionId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(id.starts_with("exe_"), "{answer}");
    let audited = trail
        .events()
        .into_iter()
        .any(|e| e.execution_id.as_deref() == Some(id.as_str()));
    assert!(audited, "the execution is the trail's");
    task.abort();
}
