//! Spec "Health probe contract": ProviderHealth, LivenessClassification, ProbeOutcome with
//! ClassifyProbeOutcome / NormalizeProbeOutcome, error precedence, the ProbeHealth
//! coordinator (own 5-second bound, deadline re-check, exact identity), ResolveProbeFunc,
//! and the connection-scoped health_observation_seq.

use crate::common;

use capgate_provider::health::*;
use capgate_provider::provider::{ExecutionOutcome, Provider};
use common::*;
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::{Instant, sleep};

fn target() -> ProbeTarget {
    ProbeTarget {
        adapter: "http".into(),
        target: "orders-backend".into(),
        instance_key: None,
    }
}

fn pinned() -> ProbeTarget {
    ProbeTarget {
        instance_key: Some("inst-1".into()),
        ..target()
    }
}

#[test]
fn provider_health_is_request_stalled_provider_unhealthy_or_health_unknown_by_default() {
    assert_eq!(ProviderHealth::default(), ProviderHealth::HealthUnknown);
    for (h, s) in [
        (ProviderHealth::RequestStalled, "request_stalled"),
        (ProviderHealth::ProviderUnhealthy, "provider_unhealthy"),
        (ProviderHealth::HealthUnknown, "health_unknown"),
    ] {
        assert_eq!(h.as_str(), s);
        assert_eq!(serde_json::to_value(h).unwrap(), json!(s));
    }
}

#[test]
fn liveness_classification_is_the_stable_seven_value_vocabulary() {
    let names: Vec<&str> = LivenessClassification::ALL
        .iter()
        .map(|c| c.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "available",
            "unavailable",
            "timeout",
            "error",
            "unsupported",
            "unknown",
            "identity_mismatch"
        ]
    );
    for c in LivenessClassification::ALL {
        assert_eq!(serde_json::to_value(c).unwrap(), json!(c.as_str()));
    }
}

#[test]
fn classify_and_normalize_probe_outcome_follow_exactly_the_spec_mapping() {
    use LivenessClassification as L;
    use ProviderHealth as H;
    let ok = |status| ProbeOutcome::status(&target(), status);
    let with = |f: &dyn Fn(&mut ProbeOutcome)| {
        let mut o = ok(ProbeStatus::Available);
        f(&mut o);
        o
    };
    let table: Vec<(&str, ProbeTarget, ProbeOutcome, L, H)> = vec![
        (
            "available",
            target(),
            ok(ProbeStatus::Available),
            L::Available,
            H::RequestStalled,
        ),
        (
            "validated matching unavailable",
            target(),
            ok(ProbeStatus::Unavailable),
            L::Unavailable,
            H::ProviderUnhealthy,
        ),
        (
            "unknown status",
            target(),
            ok(ProbeStatus::Unknown),
            L::Unknown,
            H::HealthUnknown,
        ),
        (
            "unsupported adapter",
            target(),
            ok(ProbeStatus::Unsupported),
            L::Unsupported,
            H::HealthUnknown,
        ),
        (
            "error",
            target(),
            ProbeOutcome::error(&target(), ProbeError::Network("reset".into())),
            L::Error,
            H::HealthUnknown,
        ),
        (
            "timeout",
            target(),
            ProbeOutcome::error(&target(), ProbeError::Timeout),
            L::Timeout,
            H::HealthUnknown,
        ),
        (
            "empty adapter",
            target(),
            with(&|o| o.adapter.clear()),
            L::IdentityMismatch,
            H::HealthUnknown,
        ),
        (
            "empty target",
            target(),
            with(&|o| o.target.clear()),
            L::IdentityMismatch,
            H::HealthUnknown,
        ),
        (
            "mismatched adapter",
            target(),
            with(&|o| o.adapter = "wasm".into()),
            L::IdentityMismatch,
            H::HealthUnknown,
        ),
        (
            "mismatched target",
            target(),
            with(&|o| o.target = "billing".into()),
            L::IdentityMismatch,
            H::HealthUnknown,
        ),
        (
            "expected identity empty",
            ProbeTarget::default(),
            ProbeOutcome::status(&ProbeTarget::default(), ProbeStatus::Available),
            L::IdentityMismatch,
            H::HealthUnknown,
        ),
        (
            "pinned instance matches",
            pinned(),
            ProbeOutcome::status(&pinned(), ProbeStatus::Unavailable),
            L::Unavailable,
            H::ProviderUnhealthy,
        ),
        (
            "pinned instance mismatch",
            pinned(),
            with(&|o| o.instance_key = Some("inst-2".into())),
            L::IdentityMismatch,
            H::HealthUnknown,
        ),
        (
            "pinned instance missing",
            pinned(),
            ok(ProbeStatus::Available),
            L::IdentityMismatch,
            H::HealthUnknown,
        ),
        (
            "unpinned ignores instance",
            target(),
            with(&|o| o.instance_key = Some("any".into())),
            L::Available,
            H::RequestStalled,
        ),
    ];
    for (name, expected, outcome, class, health) in table {
        assert_eq!(classify_probe_outcome(&expected, &outcome), class, "{name}");
        assert_eq!(
            normalize_probe_outcome(&expected, &outcome),
            health,
            "{name}"
        );
    }
}

#[test]
fn a_returned_error_takes_precedence_over_any_reported_status() {
    let errors = [
        ProbeError::Endpoint("bad url".into()),
        ProbeError::Network("connection refused".into()),
        ProbeError::HttpStatus(404),
        ProbeError::HttpStatus(503),
        ProbeError::Decode("expected value".into()),
        ProbeError::Timeout,
    ];
    for e in errors {
        for status in [
            ProbeStatus::Available,
            ProbeStatus::Unavailable,
            ProbeStatus::Unknown,
            ProbeStatus::Unsupported,
        ] {
            let outcome = ProbeOutcome {
                status,
                ..ProbeOutcome::error(&target(), e.clone())
            };
            let class = classify_probe_outcome(&target(), &outcome);
            let want = if e == ProbeError::Timeout {
                LivenessClassification::Timeout
            } else {
                LivenessClassification::Error
            };
            assert_eq!(class, want, "{e:?} / {status:?}");
            assert_eq!(
                normalize_probe_outcome(&target(), &outcome),
                ProviderHealth::HealthUnknown,
                "{e:?} / {status:?}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn probe_health_holds_its_five_second_bound_even_when_the_probe_hangs() {
    assert_eq!(PROBE_TIMEOUT, Duration::from_secs(5));
    let handed = Arc::new(std::sync::Mutex::new(
        None::<tokio_util::sync::CancellationToken>,
    ));
    let h = handed.clone();
    let prober = FnProber::new(move |_t, cancel: tokio_util::sync::CancellationToken| {
        *h.lock().unwrap() = Some(cancel);
        std::future::pending::<ProbeOutcome>()
    });
    let start = Instant::now();
    let report = probe_health(Some(prober.clone()), &target()).await;
    assert_eq!(start.elapsed(), PROBE_TIMEOUT);
    assert_eq!(report.classification, LivenessClassification::Timeout);
    assert_eq!(report.health, ProviderHealth::HealthUnknown);
    let token = handed.lock().unwrap().clone().expect("the probe ran");
    assert!(
        token.is_cancelled(),
        "the probe's own token fired at the bound"
    );

    // A probe that ignores cancellation entirely is cut at the same bound.
    let deaf = FnProber::new(|_t, _c| std::future::pending::<ProbeOutcome>());
    let start = Instant::now();
    let report = probe_health(Some(deaf), &target()).await;
    assert_eq!(start.elapsed(), PROBE_TIMEOUT);
    assert_eq!(report.health, ProviderHealth::HealthUnknown);
}

#[tokio::test(start_paused = true)]
async fn probe_health_rechecks_its_deadline_after_the_probe_returns() {
    // Returns a positive answer exactly at the deadline: too late, so timeout.
    let at_deadline = FnProber::new(|t: ProbeTarget, _| async move {
        sleep(PROBE_TIMEOUT).await;
        ProbeOutcome::status(&t, ProbeStatus::Available)
    });
    let report = probe_health(Some(at_deadline), &target()).await;
    assert_eq!(report.classification, LivenessClassification::Timeout);
    assert_eq!(report.health, ProviderHealth::HealthUnknown);

    // Just inside the deadline: accepted.
    let inside = FnProber::new(|t: ProbeTarget, _| async move {
        sleep(PROBE_TIMEOUT - Duration::from_millis(1)).await;
        ProbeOutcome::status(&t, ProbeStatus::Available)
    });
    let report = probe_health(Some(inside), &target()).await;
    assert_eq!(report.classification, LivenessClassification::Available);
    assert_eq!(report.health, ProviderHealth::RequestStalled);
}

#[tokio::test(start_paused = true)]
async fn probe_health_validates_exact_adapter_and_target_identity_and_a_pinned_instance_key() {
    let answering = |adapter: &'static str, tgt: &'static str, inst: Option<&'static str>| {
        FnProber::new(move |_t, _| async move {
            ProbeOutcome {
                adapter: adapter.into(),
                target: tgt.into(),
                instance_key: inst.map(Into::into),
                status: ProbeStatus::Unavailable,
                error: None,
            }
        })
    };
    let table = vec![
        (
            "exact",
            target(),
            answering("http", "orders-backend", None),
            ProviderHealth::ProviderUnhealthy,
        ),
        (
            "other adapter",
            target(),
            answering("wasm", "orders-backend", None),
            ProviderHealth::HealthUnknown,
        ),
        (
            "other target",
            target(),
            answering("http", "billing", None),
            ProviderHealth::HealthUnknown,
        ),
        (
            "empty target",
            target(),
            answering("http", "", None),
            ProviderHealth::HealthUnknown,
        ),
        (
            "pinned match",
            pinned(),
            answering("http", "orders-backend", Some("inst-1")),
            ProviderHealth::ProviderUnhealthy,
        ),
        (
            "pinned mismatch",
            pinned(),
            answering("http", "orders-backend", Some("inst-9")),
            ProviderHealth::HealthUnknown,
        ),
        (
            "pinned absent",
            pinned(),
            answering("http", "orders-backend", None),
            ProviderHealth::HealthUnknown,
        ),
    ];
    for (name, expected, prober, want) in table {
        assert_eq!(
            probe_health(Some(prober), &expected).await.health,
            want,
            "{name}"
        );
    }
}

#[tokio::test]
async fn resolve_probe_func_returns_none_without_a_prober_and_probe_health_then_fails_closed_without_invoking_anything()
 {
    let bare = Scripted::new("bare", |_| async { Ok(ExecutionOutcome::new(json!(1))) });
    assert!(resolve_probe_func(&bare).is_none());
    let report = probe_health(resolve_probe_func(&bare), &target()).await;
    assert_eq!(report.classification, LivenessClassification::Unsupported);
    assert_eq!(report.health, ProviderHealth::HealthUnknown);

    let prober = FnProber::new(|t: ProbeTarget, _| async move {
        ProbeOutcome::status(&t, ProbeStatus::Available)
    });
    let with = Scripted::new("with", |_| async { Ok(ExecutionOutcome::new(json!(1))) })
        .with_prober(prober.clone());
    let resolved = resolve_probe_func(&with).expect("a prober");
    assert_eq!(
        prober.calls.load(Ordering::SeqCst),
        0,
        "resolving calls nothing"
    );
    let report = probe_health(Some(resolved), &target()).await;
    assert_eq!(report.health, ProviderHealth::RequestStalled);
    assert_eq!(prober.calls.load(Ordering::SeqCst), 1);
    let _ = with.identity();
}

#[test]
fn health_observation_seq_starts_at_one_on_a_new_connection() {
    let a = Session::new();
    assert_eq!(a.next_health_observation_seq(), 1);
    assert_eq!(a.next_health_observation_seq(), 2);
    let b = Session::new();
    assert_eq!(
        b.next_health_observation_seq(),
        1,
        "per connection, not process-global"
    );
    assert_eq!(
        ObservationScope::Internal.next_seq(),
        None,
        "internal paths omit it"
    );
    assert_eq!(ObservationScope::Connection(b).next_seq(), Some(2));
}

#[test]
fn concurrent_observations_get_unique_increasing_sequence_numbers() {
    let session = Session::new();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let s = session.clone();
            std::thread::spawn(move || {
                (0..500)
                    .map(|_| s.next_health_observation_seq())
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in threads {
        let mine = t.join().unwrap();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "increasing as each observer sees them"
        );
        all.extend(mine);
    }
    let unique: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "unique");
    all.sort_unstable();
    assert_eq!(all, (1..=4_000).collect::<Vec<u64>>(), "dense from 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn normalized_and_tunnel_observations_on_one_connection_share_the_source_under_concurrency() {
    // Run stalls and tunnel stalls racing on one connection draw unique values.
    let session = Session::new();
    let mut p = Scripted::new("mix", |run| wait_for_cancel(run.cancel));
    p.tunnel = Some(Arc::new(Tunnel(Arc::new(|run| {
        Box::pin(async move {
            run.cancel.cancelled().await;
            Err(capgate_core::procedure::ProcedureError::internal("stopped"))
        })
    }))));
    let id = p.identity().clone();
    let rt = runtime_of(vec![(Arc::new(p), conf(20))]);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (rt, id, s) = (rt.clone(), id.clone(), session.clone());
        tasks.push(tokio::spawn(async move {
            let opts_scope = ObservationScope::Connection(s);
            let r = if i % 2 == 0 {
                rt.execute(
                    &id,
                    request(&format!("run_{i}"), 20),
                    capgate_provider::runtime::RunOptions {
                        scope: opts_scope,
                        ..Default::default()
                    },
                )
                .await
                .map(|_| ())
            } else {
                rt.tunnel(
                    &id,
                    capgate_provider::provider::ProviderTunnelRequest {
                        run_id: format!("tun_{i}"),
                        response_stall_timeout_ms: 20,
                        ..Default::default()
                    },
                    capgate_provider::runtime::RunOptions {
                        scope: opts_scope,
                        ..Default::default()
                    },
                )
                .await
                .map(|_| ())
            };
            match r {
                Err(capgate_provider::provider::ProviderFailure::Stalled(t)) => {
                    t.health_observation_seq
                }
                other => panic!("{other:?}"),
            }
        }));
    }
    let mut seqs = Vec::new();
    for t in tasks {
        seqs.push(t.await.unwrap().expect("connection-bound"));
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=16).collect::<Vec<u64>>());
}
