//! The bridge to core's stage 11: native handlers (and, by the same path, Wasm procedure
//! components whose `progress` import calls `ProcedureCall::report_progress`) run under the
//! provider runtime; a stall reaches the caller as a TIMEOUT cancelled envelope with its
//! metadata only in audit; other errors keep the core's mapping. Paused clock throughout.

use crate::common;

use capgate_core::prelude::*;
use capgate_core::procedure::ProgressFn;
use capgate_provider::health::{ObservationScope, Session};
use capgate_provider::prelude::*;
use common::*;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::sleep;

fn core_runtime(
    provider: ProcedureProvider,
    stall_ms: i64,
    sink: Arc<MemorySink>,
    scope: ObservationScope,
) -> Runtime {
    let id = provider.identity().clone();
    let providers = runtime_of(vec![(Arc::new(provider), conf(stall_ms))]);
    let registry = Registry::builder()
        .capability(
            CapabilityDef::new(
                "reports.build",
                CapabilityMeta::new("Build a report", SideEffect::Read, Risk::Low)
                    .exposed_on([Surface::Mcp])
                    .with_timeout_ms(600_000),
            )
            .procedure(ProviderProcedure::new(providers, id).with_scope(scope)),
        )
        .build()
        .expect("registry");
    Runtime::builder(registry)
        .audit_sink(sink)
        .build()
        .expect("a valid runtime")
}

fn call(progress: Option<ProgressFn>) -> InvokeRequest {
    let mut r = InvokeRequest::new(
        Surface::Mcp,
        "reports.build",
        json!({}),
        Actor::user("u_dana", json!({})),
    );
    r.progress = progress;
    r
}

fn collector() -> (ProgressFn, Arc<Mutex<Vec<Value>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    (Arc::new(move |v| g.lock().unwrap().push(v)), got)
}

#[tokio::test(start_paused = true)]
async fn a_procedure_that_streams_progress_keeps_running_past_the_stall_timeout_and_is_cut_when_it_stops()
 {
    // Progressing: 20 reports 500 ms apart (10 s) against a 1 s stall timeout.
    let steady = native_handler("reports", |call| async move {
        for i in 0..20 {
            sleep(Duration::from_millis(500)).await;
            call.report_progress(json!({ "pct": i * 5 }));
        }
        Ok(json!({ "report": "ready" }))
    });
    let sink = Arc::new(MemorySink::new());
    let (progress, got) = collector();
    let rt = core_runtime(steady, 1_000, sink.clone(), ObservationScope::Internal);
    let r = rt.invoke(call(Some(progress))).await;
    assert_eq!(r.status(), "completed", "{r:?}");
    assert_eq!(
        got.lock().unwrap().len(),
        20,
        "every report became caller progress"
    );

    // Stops progressing after three reports: cut one stall timeout after the last.
    let stops = native_handler("reports", |call| async move {
        for i in 0..3 {
            sleep(Duration::from_millis(500)).await;
            call.report_progress(json!({ "pct": i }));
        }
        call.cancel.cancelled().await; // cooperative: confirms the fence
        Err(ProcedureError::internal("stopped"))
    });
    let sink = Arc::new(MemorySink::new());
    let (progress, got) = collector();
    let rt = core_runtime(stops, 1_000, sink.clone(), ObservationScope::Internal);
    let started = tokio::time::Instant::now();
    let r = rt.invoke(call(Some(progress))).await;
    assert_eq!(started.elapsed(), Duration::from_millis(2_500));
    assert_eq!(r.status(), "cancelled", "{r:?}");
    let err = r.error().unwrap();
    assert_eq!(err.code(), ErrorCode::Timeout);
    assert!(err.retryable());
    assert_eq!(got.lock().unwrap().len(), 3);
    let public = serde_json::to_value(&r).unwrap();
    assert_eq!(
        public["error"],
        json!({ "code": "TIMEOUT", "message": "The operation timed out.", "retryable": true })
    );
    assert!(!public.to_string().contains("response_stalled"));

    let cancelled = sink
        .events()
        .into_iter()
        .find(|e| e.type_name() == "capability.cancelled")
        .expect("capability.cancelled");
    let data = serde_json::to_value(&cancelled).unwrap()["data"].clone();
    assert_eq!(
        data["metadata"],
        json!({
            "code": "response_stalled",
            "provider_health": "health_unknown",
            "liveness_classification": "unknown",
            "idle_ms": 1000,
            "run_id": r.execution_id(),
            "attempt_id": format!("{}/attempt-1", r.execution_id()),
            "close_fence": "confirmed",
            "adapter": "native",
            "target": "reports",
        })
    );
}

#[tokio::test(start_paused = true)]
async fn a_procedure_that_ignores_cancellation_is_abandoned_and_not_retryable() {
    let deaf = native_handler("reports", |_call| async move {
        sleep(Duration::from_secs(3_600)).await;
        Ok(json!("too late"))
    });
    let sink = Arc::new(MemorySink::new());
    let rt = core_runtime(deaf, 1_000, sink, ObservationScope::Internal);
    let started = tokio::time::Instant::now();
    let r = rt.invoke(call(None)).await;
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(3_000),
        "stall + the fixed 2 s grace"
    );
    assert_eq!(r.status(), "cancelled");
    assert!(!r.error().unwrap().retryable(), "fence not confirmed");
}

#[tokio::test(start_paused = true)]
async fn connection_bound_procedures_number_their_stall_observations() {
    let session = Session::new();
    let sink = Arc::new(MemorySink::new());
    let silent = native_handler("reports", |call| async move {
        call.cancel.cancelled().await;
        Err(ProcedureError::internal("stopped"))
    });
    let rt = core_runtime(
        silent,
        1_000,
        sink.clone(),
        ObservationScope::Connection(session),
    );
    for _ in 0..2 {
        assert_eq!(rt.invoke(call(None)).await.status(), "cancelled");
    }
    let seqs: Vec<Value> = sink
        .events()
        .into_iter()
        .filter(|e| e.type_name() == "capability.cancelled")
        .map(|e| {
            serde_json::to_value(&e).unwrap()["data"]["metadata"]["health_observation_seq"].clone()
        })
        .collect();
    assert_eq!(seqs, vec![json!(1), json!(2)]);
}

#[tokio::test(start_paused = true)]
async fn native_handler_errors_keep_the_cores_stage_11_mapping() {
    let table: Vec<(ProcedureError, ErrorCode, bool)> = vec![
        (
            ProcedureError::defined("NOT_REFUNDABLE", "Already refunded."),
            ErrorCode::ExecutionFailed,
            true,
        ),
        (
            ProcedureError::Unauthorized("expired".into()),
            ErrorCode::Unauthenticated,
            true,
        ),
        (
            ProcedureError::Forbidden("scope".into()),
            ErrorCode::Forbidden,
            true,
        ),
        (
            ProcedureError::internal("db down"),
            ErrorCode::ExecutionFailed,
            false,
        ),
        (
            ProcedureError::TimedOut("upstream".into()),
            ErrorCode::Timeout,
            true,
        ),
    ];
    for (error, code, exposed) in table {
        let e = error.clone();
        let p = native_handler("reports", move |_call| {
            let e = e.clone();
            async move { Err(e) }
        });
        let rt = core_runtime(
            p,
            0,
            Arc::new(MemorySink::new()),
            ObservationScope::Internal,
        );
        let r = rt.invoke(call(None)).await;
        let err = r.error().expect("an error");
        assert_eq!(err.code(), code, "{error:?}");
        assert_eq!(err.expose_to_model(), exposed, "{error:?}");
    }
    // A panicking handler is a hidden internal failure, not a crash.
    let p = native_handler("reports", |_call| async move {
        if true {
            panic!("handler bug");
        }
        Ok(json!(null))
    });
    let rt = core_runtime(
        p,
        0,
        Arc::new(MemorySink::new()),
        ObservationScope::Internal,
    );
    let r = rt.invoke(call(None)).await;
    assert_eq!(r.error().unwrap().code(), ErrorCode::ExecutionFailed);
    assert!(!r.error().unwrap().expose_to_model());
}

#[tokio::test(start_paused = true)]
async fn a_procedure_provider_needs_the_agent_info() {
    let p = native_handler("reports", |_call| async move { Ok(json!(1)) });
    let id = p.identity().clone();
    let rt = runtime_of(vec![(Arc::new(p), conf(0))]);
    let mut req = request("run_1", 0);
    req.agent = None;
    let r = rt.execute(&id, req, RunOptions::default()).await;
    assert!(matches!(
        r,
        Err(ProviderFailure::Procedure(ProcedureError::Internal(_)))
    ));
}
