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
use capgate_gateway::gateway::{GatewayConfig, capability_router};
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
        GatewayConfig::new(Surface::AiSdk, "test-rev-1", runtime, journal, keeper)
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
