//! Spec: DefaultResponseStallTimeoutMS, ResolveStallTimeoutMS, ValidateStallTimeoutMS,
//! NodeProviderConf.EffectiveResponseStallTimeoutMS, the timeout carried on RunRequest and
//! ProviderTunnelRequest, and the wire boundary's normalisation.

use crate::common;

use capgate_core::prelude::*;
use capgate_provider::prelude::*;
use capgate_provider::provider::{ProviderTunnelRequest, TunnelOutcome};
use capgate_provider::stall::{
    MAX_SAFE_STALL_TIMEOUT_MS, StallTimeoutError, normalize_wire_request,
    normalize_wire_stall_timeout,
};
use common::*;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

#[test]
fn default_response_stall_timeout_ms_is_300000() {
    assert_eq!(DEFAULT_RESPONSE_STALL_TIMEOUT_MS, 300_000);
}

#[test]
fn resolve_stall_timeout_ms_validates_then_maps_zero_to_the_default() {
    let table: [(i64, Result<u64, ()>); 9] = [
        (0, Ok(300_000)),
        (1, Ok(1)),
        (250, Ok(250)),
        (300_000, Ok(300_000)),
        (
            MAX_SAFE_STALL_TIMEOUT_MS,
            Ok(MAX_SAFE_STALL_TIMEOUT_MS as u64),
        ),
        (-1, Err(())),
        (i64::MIN, Err(())),
        (MAX_SAFE_STALL_TIMEOUT_MS + 1, Err(())),
        (i64::MAX, Err(())),
    ];
    for (ms, want) in table {
        assert_eq!(resolve_stall_timeout_ms(ms).map_err(|_| ()), want, "{ms}");
    }
    assert!(matches!(
        resolve_stall_timeout_ms(-5),
        Err(StallTimeoutError::Negative(_))
    ));
    assert!(matches!(
        resolve_stall_timeout_ms(i64::MAX),
        Err(StallTimeoutError::Overflow(_))
    ));
}

#[test]
fn validate_stall_timeout_ms_rejects_negative_and_over_max_values_and_allows_zero() {
    for (ms, ok) in [
        (0, true),
        (1, true),
        (MAX_SAFE_STALL_TIMEOUT_MS, true),
        (-1, false),
        (i64::MIN, false),
        (MAX_SAFE_STALL_TIMEOUT_MS + 1, false),
        (i64::MAX, false),
    ] {
        assert_eq!(validate_stall_timeout_ms(ms).is_ok(), ok, "{ms}");
    }
    // The maximum is safe: converting it to nanoseconds cannot overflow 64 bits.
    assert!(MAX_SAFE_STALL_TIMEOUT_MS.checked_mul(1_000_000).is_some());
    assert!(
        (MAX_SAFE_STALL_TIMEOUT_MS + 1)
            .checked_mul(1_000_000)
            .is_none()
    );
}

#[test]
fn node_provider_conf_effective_response_stall_timeout_ms_returns_the_effective_timeout() {
    for (configured, want) in [
        (0, Ok(300_000)),
        (45_000, Ok(45_000)),
        (-1, Err(())),
        (i64::MAX, Err(())),
    ] {
        assert_eq!(
            conf(configured)
                .effective_response_stall_timeout_ms()
                .map_err(|_| ()),
            want,
            "{configured}"
        );
    }
}

/// A provider recording the timeout it was handed.
fn recording(target: &str) -> (Scripted, Arc<Mutex<Vec<i64>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let mut p = Scripted::new(target, move |run| {
        let s = s.clone();
        async move {
            s.lock()
                .unwrap()
                .push(run.request.response_stall_timeout_ms);
            Ok(ExecutionOutcome::new(json!("ok")))
        }
    });
    let ts = seen.clone();
    p.tunnel = Some(Arc::new(Tunnel(Arc::new(move |run| {
        let ts = ts.clone();
        Box::pin(async move {
            ts.lock()
                .unwrap()
                .push(run.request.response_stall_timeout_ms);
            Ok(TunnelOutcome::default())
        })
    }))));
    (p, seen)
}

#[tokio::test(start_paused = true)]
async fn run_request_and_provider_tunnel_request_carry_the_selected_providers_effective_timeout() {
    // Through the capability pipeline: the selected provider's configuration decides.
    for (configured, carried) in [(0i64, 300_000i64), (1_234, 1_234)] {
        let (p, seen) = recording("sel");
        let id = p.identity().clone();
        let rt = runtime_of(vec![(Arc::new(p), conf(configured))]);
        let registry = Registry::builder()
            .capability(
                CapabilityDef::new(
                    "x.run",
                    CapabilityMeta::new("run", SideEffect::Read, Risk::Low)
                        .exposed_on([Surface::Direct]),
                )
                .procedure(ProviderProcedure::new(rt.clone(), id.clone())),
            )
            .build()
            .unwrap();
        let core = Runtime::builder(registry).build().expect("a valid runtime");
        let r = core
            .invoke(InvokeRequest::new(
                Surface::Direct,
                "x.run",
                json!({}),
                Actor::user("u", json!({})),
            ))
            .await;
        assert_eq!(r.status(), "completed");
        // And a tunnel request with zero carries the default once admitted.
        rt.tunnel(&id, ProviderTunnelRequest::default(), RunOptions::default())
            .await
            .unwrap();
        let tunnel_req = ProviderTunnelRequest {
            response_stall_timeout_ms: configured,
            ..Default::default()
        };
        rt.tunnel(&id, tunnel_req, RunOptions::default())
            .await
            .unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            vec![carried, 300_000, carried],
            "{configured}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_node_wire_boundary_normalizes_zero_and_rejects_negative_or_overflow_before_provider_invocation()
 {
    let (p, seen) = recording("wire");
    let calls = p.calls();
    let id = p.identity().clone();
    let rt = runtime_of(vec![(Arc::new(p), conf(0))]);
    let unregistered = ProviderIdentity::new("test", "nowhere");

    let table: Vec<(&str, Option<Value>, Result<i64, ()>)> = vec![
        ("absent", None, Ok(300_000)),
        ("null", Some(Value::Null), Ok(300_000)),
        ("zero", Some(json!(0)), Ok(300_000)),
        ("positive", Some(json!(1500)), Ok(1500)),
        (
            "max safe",
            Some(json!(MAX_SAFE_STALL_TIMEOUT_MS)),
            Ok(MAX_SAFE_STALL_TIMEOUT_MS),
        ),
        ("negative", Some(json!(-1)), Err(())),
        ("most negative", Some(json!(i64::MIN)), Err(())),
        (
            "over max",
            Some(json!(MAX_SAFE_STALL_TIMEOUT_MS + 1)),
            Err(()),
        ),
        ("i64 max", Some(json!(i64::MAX)), Err(())),
        ("beyond i64", Some(json!(u64::MAX)), Err(())),
        (
            "beyond u64",
            Some(serde_json::from_str("1e30").unwrap()),
            Err(()),
        ),
        (
            "negative beyond i64",
            Some(serde_json::from_str("-1e30").unwrap()),
            Err(()),
        ),
        ("fraction", Some(json!(1.5)), Err(())),
        ("string", Some(json!("5000")), Err(())),
    ];
    for (name, value, want) in table {
        let mut raw = json!({ "run_id": format!("run_{name}"), "agent": agent("exe_1") });
        if let Some(v) = &value {
            raw["response_stall_timeout_ms"] = v.clone();
        }
        // The pure boundary.
        assert_eq!(
            normalize_wire_stall_timeout(value.as_ref())
                .map(|v| v as i64)
                .map_err(|_| ()),
            want,
            "{name}"
        );
        let before = calls.load(Ordering::SeqCst);
        let r = rt
            .execute_wire(&id, raw.clone(), RunOptions::default())
            .await;
        match want {
            Ok(ms) => {
                assert!(r.is_ok(), "{name}: {r:?}");
                assert_eq!(seen.lock().unwrap().last().copied(), Some(ms), "{name}");
                assert_eq!(calls.load(Ordering::SeqCst), before + 1);
            }
            Err(()) => {
                assert!(
                    matches!(r, Err(ProviderFailure::InvalidStallTimeout(_))),
                    "{name}: {r:?}"
                );
                assert_eq!(
                    calls.load(Ordering::SeqCst),
                    before,
                    "{name}: provider was invoked"
                );
                // Rejected before the router: even an unknown provider reports the timeout.
                let r = rt
                    .execute_wire(&unregistered, raw.clone(), RunOptions::default())
                    .await;
                assert!(
                    matches!(r, Err(ProviderFailure::InvalidStallTimeout(_))),
                    "{name}"
                );
                let r = rt
                    .tunnel_wire(&id, raw.clone(), RunOptions::default())
                    .await;
                assert!(
                    matches!(r, Err(ProviderFailure::InvalidStallTimeout(_))),
                    "{name}"
                );
            }
        }
    }

    // The in-memory request path applies the same rule before lookup.
    let r = rt
        .execute(&unregistered, request("run_neg", -1), RunOptions::default())
        .await;
    assert!(matches!(r, Err(ProviderFailure::InvalidStallTimeout(_))));

    // Normalisation rewrites zero on the request itself.
    let mut raw = json!({ "response_stall_timeout_ms": 0 });
    assert_eq!(normalize_wire_request(&mut raw), Ok(300_000));
    assert_eq!(raw["response_stall_timeout_ms"], json!(300_000));
}
