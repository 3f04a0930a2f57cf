//! Spec: the Node watchdog (admission, resets, stop, one typed stall terminal, no retry),
//! the `response_stalled` allowlisted metadata, the stall join (fence ∥ probe, each bounded)
//! and its three allowed pairs, late output fenced. All on tokio's paused clock.

use crate::common;

use capgate_core::procedure::ProcedureError;
use capgate_provider::events::{EventType, RuntimeEvent};
use capgate_provider::health::{
    ObservationScope, ProbeError, ProbeOutcome, ProbeStatus, ProbeTarget, Session,
};
use capgate_provider::prelude::*;
use capgate_provider::stall::{
    CloseFence, Observed, RESPONSE_STALLED, STALL_METADATA_KEYS, WatchdogPhase,
};
use common::*;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::{Instant, sleep};

const T: i64 = 1_000;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn stalled(r: Result<ExecutionOutcome, ProviderFailure>) -> StallTerminal {
    match r {
        Err(ProviderFailure::Stalled(t)) => *t,
        other => panic!("expected a stall, got {other:?}"),
    }
}

/// Run one attempt of `p` with timeout `T` and return the result plus elapsed virtual time.
async fn run_once(p: Scripted) -> (Result<ExecutionOutcome, ProviderFailure>, Duration) {
    let id = p.identity().clone();
    let rt = runtime_of(vec![(Arc::new(p), conf(T))]);
    let start = Instant::now();
    let r = rt
        .execute(&id, request("run_1", T), RunOptions::default())
        .await;
    (r, start.elapsed())
}

/// Run one attempt of `p` as `run_id` with timeout `T`, observed: the result plus the runtime
/// events the caller's observer received.
async fn run_observed(
    p: Scripted,
    run_id: &str,
) -> (Result<ExecutionOutcome, ProviderFailure>, Vec<RuntimeEvent>) {
    let id = p.identity().clone();
    let rt = runtime_of(vec![(Arc::new(p), conf(T))]);
    let rec = recorder();
    let r = rt
        .execute(
            &id,
            request(run_id, T),
            RunOptions {
                observer: Some(rec.observer()),
                ..Default::default()
            },
        )
        .await;
    (r, rec.events())
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_starts_from_attempt_admission() {
    // A provider that never says anything and stops when told.
    let (r, elapsed) = run_once(Scripted::new("silent", |run| wait_for_cancel(run.cancel))).await;
    let t = stalled(r);
    assert_eq!(t.idle_ms, T as u64, "idle since admission");
    assert_eq!(
        elapsed,
        ms(T as u64),
        "claimed exactly one timeout after admission"
    );

    // The bare watchdog: its clock starts when the attempt is admitted.
    let dog = StallWatchdog::admit(ms(500));
    sleep(ms(200)).await;
    let claim = dog.stalled().await.expect("claims");
    assert_eq!(claim.idle, ms(500));
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_resets_only_on_the_documented_progress_dispositions() {
    // (what the provider emits at t=600, when the stall is claimed)
    let table: Vec<(&str, Option<RuntimeEvent>, u64)> = vec![
        ("nothing", None, 1_000),
        ("start does not reset", Some(RuntimeEvent::start()), 1_000),
        (
            "empty delta does not reset",
            Some(RuntimeEvent::delta("")),
            1_000,
        ),
        (
            "unknown does not reset",
            Some(RuntimeEvent::of(EventType::Unknown)),
            1_000,
        ),
        ("delta resets", Some(RuntimeEvent::delta("tok")), 1_600),
        (
            "message resets",
            Some(RuntimeEvent::message("working")),
            1_600,
        ),
        (
            "usage resets",
            Some(RuntimeEvent::usage(TokenUsage::default())),
            1_600,
        ),
        (
            "structured progress resets",
            Some(RuntimeEvent::progress(json!({"pct": 5}))),
            1_600,
        ),
    ];
    for (name, event, claimed_at) in table {
        let p = Scripted::new("resets", move |run| {
            let event = event.clone();
            async move {
                sleep(ms(600)).await;
                if let Some(e) = event {
                    run.events.emit(e);
                }
                wait_for_cancel(run.cancel).await
            }
        });
        let (r, elapsed) = run_once(p).await;
        let t = stalled(r);
        assert_eq!(elapsed, ms(claimed_at), "{name}");
        assert_eq!(t.idle_ms, T as u64, "{name}");
    }

    // The bare watchdog agrees.
    let dog = StallWatchdog::admit(ms(100));
    assert_eq!(dog.observe(ProgressDisposition::Start), Observed::Ignored);
    assert_eq!(dog.observe(ProgressDisposition::None), Observed::Ignored);
    assert_eq!(dog.observe(ProgressDisposition::Progress), Observed::Reset);
}

#[tokio::test(start_paused = true)]
async fn progress_keeps_an_attempt_alive_past_the_stall_timeout() {
    let p = Scripted::new("steady", |run| async move {
        for i in 0..20 {
            sleep(ms(900)).await;
            run.events
                .emit(RuntimeEvent::progress(json!({ "step": i })));
        }
        Ok(ExecutionOutcome::new(json!("done")))
    });
    let (r, elapsed) = run_once(p).await;
    assert_eq!(r.expect("never stalls").output, json!("done"));
    assert_eq!(elapsed, ms(18_000), "ran 18x the stall timeout");
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_stops_on_the_provider_terminal() {
    // A terminal event stops the watchdog even though the provider returns much later.
    let p = Scripted::new("terminal", |run| async move {
        sleep(ms(500)).await;
        run.events.emit(RuntimeEvent::complete(None));
        sleep(ms(5_000)).await;
        Ok(ExecutionOutcome::new(json!("late but not stalled")))
    });
    let (r, elapsed) = run_once(p).await;
    assert_eq!(
        r.expect("no stall after the terminal").output,
        json!("late but not stalled")
    );
    assert_eq!(elapsed, ms(5_500));

    let dog = StallWatchdog::admit(ms(100));
    assert_eq!(
        dog.observe(ProgressDisposition::Terminal),
        Observed::Stopped
    );
    assert_eq!(dog.phase(), WatchdogPhase::Stopped);
    assert_eq!(dog.stalled().await, None, "a stopped watchdog never claims");
    assert_eq!(
        dog.observe(ProgressDisposition::Progress),
        Observed::AfterStop
    );
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_emits_one_typed_stall_terminal_and_does_not_retry_the_provider() {
    let p = Scripted::new("once", |run| async move {
        run.events.emit(RuntimeEvent::start());
        wait_for_cancel(run.cancel).await
    });
    let calls = p.calls();
    let (r, events) = run_observed(p, "run_1").await;
    let t = stalled(r);
    assert_eq!(t.metadata()["code"], json!(RESPONSE_STALLED));
    let terminals: Vec<&RuntimeEvent> = events
        .iter()
        .filter(|e| classify_runtime_event(e) == ProgressDisposition::Terminal)
        .collect();
    assert_eq!(terminals.len(), 1);
    assert_eq!(terminals[0].event_type, EventType::Error);
    assert_eq!(terminals[0].message, RESPONSE_STALLED);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "no provider retry");

    // A claim happens at most once per watchdog.
    let dog = StallWatchdog::admit(ms(10));
    assert!(dog.stalled().await.is_some());
    assert_eq!(dog.stalled().await, None);
    assert_eq!(
        dog.stop(),
        Err(WatchdogPhase::Stalled),
        "a late terminal is fenced"
    );
}

#[tokio::test(start_paused = true)]
async fn response_stalled_metadata_is_the_allowlist_only_and_caller_metadata_cannot_override_it() {
    let prober = FnProber::new(|t: ProbeTarget, _| async move {
        ProbeOutcome::status(&t, ProbeStatus::Unavailable)
    });
    let p = Scripted::new("meta", |run| async move {
        // The provider tries to smuggle a payload and a credential through its events.
        run.events.emit(RuntimeEvent::progress(
            json!({ "authorization": "Bearer provider-secret" }),
        ));
        wait_for_cancel(run.cancel).await
    })
    .with_prober(prober);
    let id = p.identity().clone();
    let rt = runtime_of(vec![(Arc::new(p), conf(T))]);
    let mut req = request("run_meta", T);
    for (k, v) in [
        ("code", json!("ok")),
        ("provider_health", json!("request_stalled")),
        ("liveness_classification", json!("available")),
        ("run_id", json!("run_spoofed")),
        ("close_fence", json!("confirmed")),
        ("health_observation_seq", json!(999)),
        ("authorization", json!("Bearer caller-secret")),
        ("retry", json!(true)),
        ("recovery", json!("resume")),
        ("payload", json!({ "raw": "body" })),
    ] {
        req.metadata.insert(k.into(), v);
    }
    let t = stalled(rt.execute(&id, req, RunOptions::default()).await);
    let meta = t.metadata();
    let obj = meta.as_object().unwrap();
    for k in obj.keys() {
        assert!(
            STALL_METADATA_KEYS.contains(&k.as_str()),
            "key {k} is not allowlisted"
        );
    }
    assert_eq!(
        meta,
        json!({
            "code": "response_stalled",
            "provider_health": "provider_unhealthy",
            "liveness_classification": "unavailable",
            "idle_ms": 1000,
            "run_id": "run_meta",
            "attempt_id": "run_meta/attempt-1",
            "close_fence": "confirmed",
            "adapter": "test",
            "target": "meta",
        }),
        "exact allowlisted values; internal path omits health_observation_seq"
    );
    let text = meta.to_string();
    assert!(!text.contains("secret") && !text.contains("raw") && !text.contains("resume"));
    // The governed error keeps it private.
    let err = t.to_capability_error();
    assert_eq!(err.private_details().unwrap()["adapterMetadata"], meta);
    let public = serde_json::to_string(&err).unwrap();
    assert!(!public.contains("response_stalled") && !public.contains("provider_unhealthy"));
}

#[tokio::test(start_paused = true)]
async fn retryable_means_only_that_the_local_close_fence_was_confirmed_within_the_grace() {
    // (provider behaviour after being told to stop, fence, retryable, time from claim)
    let cooperative = Scripted::new("coop", |run| wait_for_cancel(run.cancel));
    let slow_but_in_grace = Scripted::new("slow", |run| async move {
        run.cancel.cancelled().await;
        sleep(ms(1_999)).await;
        Ok(ExecutionOutcome::new(json!("late output")))
    });
    let deaf = Scripted::new("deaf", |_run| async move {
        sleep(ms(3_600_000)).await;
        Ok(ExecutionOutcome::new(json!("never seen")))
    });
    let table = vec![
        (
            "cooperative",
            cooperative,
            CloseFence::Confirmed,
            true,
            0u64,
        ),
        (
            "stops within the grace",
            slow_but_in_grace,
            CloseFence::Confirmed,
            true,
            1_999,
        ),
        (
            "ignores the stop",
            deaf,
            CloseFence::Unconfirmed,
            false,
            2_000,
        ),
    ];
    for (name, p, fence, retryable, after_claim) in table {
        let (r, elapsed) = run_once(p).await;
        let t = stalled(r);
        assert_eq!(t.close_fence, fence, "{name}");
        assert_eq!(t.retryable(), retryable, "{name}");
        assert_eq!(
            elapsed,
            ms(T as u64 + after_claim),
            "{name}: the grace bounds the fence"
        );
        // Retryable is only the fence: the probe's view (none here) does not enter it.
        assert_eq!(t.health, JoinedHealth::HealthUnknown, "{name}");
        assert_eq!(t.to_capability_error().retryable(), retryable, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_stall_join_runs_fence_and_probe_concurrently_without_extending_either_serially() {
    let hanging_probe = || FnProber::new(|_t, _c| std::future::pending::<ProbeOutcome>());
    // grace 2s ∥ probe bound 5s → 5s after the claim, not 7s.
    for (grace, want_after_claim) in [(2_000u64, 5_000u64), (7_000, 7_000)] {
        let p =
            Scripted::new("both-hang", |_run| std::future::pending()).with_prober(hanging_probe());
        let id = p.identity().clone();
        let rt = runtime_with_grace(vec![(Arc::new(p), conf(T))], ms(grace));
        let start = Instant::now();
        let t = stalled(
            rt.execute(&id, request("r", T), RunOptions::default())
                .await,
        );
        assert_eq!(
            start.elapsed(),
            ms(T as u64 + want_after_claim),
            "grace {grace}"
        );
        assert_eq!(t.close_fence, CloseFence::Unconfirmed);
        assert_eq!(
            t.health,
            JoinedHealth::HealthUnknown,
            "a timed-out probe is unknown"
        );
    }
    // A fast fence does not wait for a slow probe's bound beyond the probe, and vice versa.
    let p = Scripted::new("fast-fence", |run| wait_for_cancel(run.cancel)).with_prober(
        FnProber::new(|t: ProbeTarget, _| async move {
            sleep(ms(3_000)).await;
            ProbeOutcome::status(&t, ProbeStatus::Available)
        }),
    );
    let (r, elapsed) = run_once(p).await;
    let t = stalled(r);
    assert_eq!(elapsed, ms(T as u64 + 3_000));
    assert_eq!(
        (t.close_fence, t.health),
        (CloseFence::Confirmed, JoinedHealth::RequestStalled)
    );
}

#[tokio::test(start_paused = true)]
async fn the_joined_terminal_is_always_exactly_one_of_the_three_allowed_pairs() {
    type Probe = Option<Arc<FnProber>>;
    let answer = |status: ProbeStatus| -> Probe {
        Some(FnProber::new(move |t: ProbeTarget, _| async move {
            ProbeOutcome::status(&t, status)
        }))
    };
    let table: Vec<(&str, Probe, JoinedHealth)> = vec![
        (
            "available",
            answer(ProbeStatus::Available),
            JoinedHealth::RequestStalled,
        ),
        (
            "unavailable",
            answer(ProbeStatus::Unavailable),
            JoinedHealth::ProviderUnhealthy,
        ),
        (
            "unknown status",
            answer(ProbeStatus::Unknown),
            JoinedHealth::HealthUnknown,
        ),
        (
            "unsupported",
            answer(ProbeStatus::Unsupported),
            JoinedHealth::HealthUnknown,
        ),
        ("no prober", None, JoinedHealth::HealthUnknown),
        (
            "error with available status",
            Some(FnProber::new(|t: ProbeTarget, _| async move {
                ProbeOutcome {
                    status: ProbeStatus::Available,
                    ..ProbeOutcome::error(&t, ProbeError::HttpStatus(503))
                }
            })),
            JoinedHealth::HealthUnknown,
        ),
        (
            "hangs",
            Some(FnProber::new(|_t, _c| {
                std::future::pending::<ProbeOutcome>()
            })),
            JoinedHealth::HealthUnknown,
        ),
        (
            "other target",
            Some(FnProber::new(|t: ProbeTarget, _| async move {
                ProbeOutcome {
                    target: "someone-else".into(),
                    ..ProbeOutcome::status(&t, ProbeStatus::Unavailable)
                }
            })),
            JoinedHealth::HealthUnknown,
        ),
        (
            "panics",
            Some(FnProber::new(|_t, _c| async move { panic!("probe bug") })),
            JoinedHealth::HealthUnknown,
        ),
    ];
    let allowed = [
        (json!("request_stalled"), json!("available")),
        (json!("provider_unhealthy"), json!("unavailable")),
        (json!("health_unknown"), json!("unknown")),
    ];
    for (name, prober, want) in table {
        let mut p = Scripted::new("pairs", |run| wait_for_cancel(run.cancel));
        if let Some(pr) = prober {
            p = p.with_prober(pr);
        }
        let (r, _) = run_once(p).await;
        let t = stalled(r);
        assert_eq!(t.health, want, "{name}");
        let m = t.metadata();
        let pair = (
            m["provider_health"].clone(),
            m["liveness_classification"].clone(),
        );
        assert!(
            allowed.contains(&pair),
            "{name}: {pair:?} is not an allowed pair"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn provider_availability_is_evidence_only_and_late_provider_output_stays_fenced() {
    // The provider ignores the stop, keeps talking and finally returns a value; the probe
    // says the provider is fine. None of that changes the outcome.
    let prober = FnProber::new(|t: ProbeTarget, _| async move {
        ProbeOutcome::status(&t, ProbeStatus::Available)
    });
    let p = Scripted::new("late", |run| async move {
        sleep(ms(1_500)).await;
        for i in 0..3 {
            run.events
                .emit(RuntimeEvent::progress(json!({ "late": i })));
        }
        run.events.emit(RuntimeEvent::complete(None));
        Ok(ExecutionOutcome::new(json!("late output")))
    })
    .with_prober(prober.clone());
    let (r, events) = run_observed(p, "run_late").await;
    let t = stalled(r);
    assert_eq!(t.health, JoinedHealth::RequestStalled);
    assert_eq!(t.idle_ms, T as u64, "availability never reset progress");
    assert_eq!(
        t.close_fence,
        CloseFence::Confirmed,
        "it did finish inside the grace"
    );
    assert_eq!(prober.calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        events.len(),
        1,
        "only the stall terminal was delivered: {events:?}"
    );
    assert_eq!(events[0].message, RESPONSE_STALLED);
}

#[tokio::test(start_paused = true)]
async fn the_probe_is_rooted_outside_the_request_and_exactly_targeted() {
    // By the time the probe runs, the attempt's own token is cancelled; the probe's is not.
    let p = Scripted::new("rooted", |run| wait_for_cancel(run.cancel)).with_prober(FnProber::new(
        |t: ProbeTarget, c: tokio_util::sync::CancellationToken| async move {
            assert!(!c.is_cancelled(), "the probe's token is its own");
            assert_eq!((t.adapter.as_str(), t.target.as_str()), ("test", "rooted"));
            assert_eq!(
                t.instance_key.as_deref(),
                Some("inst-7"),
                "the pinned key is asked for"
            );
            sleep(ms(100)).await;
            ProbeOutcome {
                instance_key: Some("inst-7".into()),
                ..ProbeOutcome::status(&t, ProbeStatus::Available)
            }
        },
    ));
    let id = p.identity().clone();
    let mut c = conf(T);
    c.instance_key = Some("inst-7".into());
    let rt = runtime_of(vec![(Arc::new(p), c)]);
    let t = stalled(
        rt.execute(&id, request("r", T), RunOptions::default())
            .await,
    );
    assert_eq!(t.health, JoinedHealth::RequestStalled);
}

#[tokio::test(start_paused = true)]
async fn connection_bound_stalls_carry_health_observation_seq_and_internal_ones_omit_it() {
    let session = Session::new();
    let p = Scripted::new("seq", |run| wait_for_cancel(run.cancel));
    let mut tp = Scripted::new("seq-tunnel", |run| wait_for_cancel(run.cancel));
    tp.tunnel = Some(Arc::new(Tunnel(Arc::new(|run| {
        Box::pin(async move {
            run.cancel.cancelled().await;
            Err(ProcedureError::internal("stopped"))
        })
    }))));
    let id = p.identity().clone();
    let tid = tp.identity().clone();
    let rt = runtime_of(vec![(Arc::new(p), conf(T)), (Arc::new(tp), conf(T))]);
    let on = |s: &Arc<Session>| RunOptions {
        scope: ObservationScope::Connection(s.clone()),
        ..Default::default()
    };
    let first = stalled(rt.execute(&id, request("a", T), on(&session)).await);
    assert_eq!(
        first.health_observation_seq,
        Some(1),
        "a new connection's first observation is 1"
    );
    let tunnel = match rt
        .tunnel(
            &tid,
            capgate_provider::provider::ProviderTunnelRequest {
                response_stall_timeout_ms: T,
                ..Default::default()
            },
            RunOptions {
                scope: ObservationScope::Connection(session.clone()),
                ..Default::default()
            },
        )
        .await
    {
        Err(ProviderFailure::Stalled(t)) => *t,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        tunnel.health_observation_seq,
        Some(2),
        "tunnel observations share the source"
    );
    assert_eq!(tunnel.metadata()["health_observation_seq"], json!(2));

    // Another connection starts again at one.
    let other = Session::new();
    let t = stalled(rt.execute(&id, request("b", T), on(&other)).await);
    assert_eq!(t.health_observation_seq, Some(1));

    // Internal paths omit the key entirely.
    let t = stalled(
        rt.execute(&id, request("c", T), RunOptions::default())
            .await,
    );
    assert_eq!(t.health_observation_seq, None);
    assert!(t.metadata().get("health_observation_seq").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_bare_watchdog_progress_fn_feeds_the_watchdog_and_forwards_unfenced_progress() {
    let forwarded = Arc::new(std::sync::Mutex::new(Vec::new()));
    let f = forwarded.clone();
    let dog = StallWatchdog::admit(ms(1_000));
    let progress = dog.progress_fn(Some(Arc::new(move |v| f.lock().unwrap().push(v))));
    sleep(ms(900)).await;
    progress(json!({ "pct": 50 }));
    sleep(ms(900)).await;
    progress(json!(null)); // empty: no reset
    let claim = dog.stalled().await.expect("claims");
    assert_eq!(claim.idle, ms(1_000));
    progress(json!({ "pct": 99 })); // fenced: not forwarded
    assert_eq!(
        *forwarded.lock().unwrap(),
        vec![json!({ "pct": 50 }), json!(null)]
    );
}
