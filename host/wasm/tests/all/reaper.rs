//! Where finished fresh instances are dropped: queued for the upkeep thread, or, with
//! `reaper_queue = 0` (the default on one CPU), on the thread that finished the call, so no
//! store outlives its call holding a pool slot.

use crate::common;

use capgate_core::prelude::*;
use capgate_wasm::{Binding, CallError, HostOptions, ReserveOptions, WasmHost, WasmPolicy};
use common::*;
use std::time::Duration;

/// A host of two instance slots whose upkeep thread wakes only when asked (or after 10 s),
/// and refund-limit bound fresh on it without a reserve.
fn two_slot_policy(reaper_queue: usize) -> (WasmHost, WasmPolicy) {
    let host = WasmHost::new(HostOptions {
        max_instances: 2,
        max_reserved: 0,
        reaper_queue,
        reaper_period: Duration::from_secs(10),
        ..HostOptions::default()
    })
    .expect("host");
    let policy = load_on(&host, "refund_limit")
        .policy(
            Binding::new("refundLimit")
                .config(serde_json::json!({"maxAmount": 500, "amountPath": "/amount"}))
                .reserve(ReserveOptions::disabled()),
        )
        .expect("bind");
    (host, policy)
}

/// Call the policy `n` times in a row; the first failure, if any, with its index.
fn calls(policy: &WasmPolicy, n: usize) -> Result<(), (usize, CallError)> {
    let ask = RefundAsk::by_dana();
    let input = serde_json::json!({"amount": 20});
    for i in 0..n {
        let shared = SharedJson::default();
        let req = ask.request(Some(&input), "exe_1", &shared);
        match futures::executor::block_on(policy.evaluate_raw(&req, None)) {
            Ok(PolicyDecision::Allow) => {}
            Ok(other) => panic!("call {i}: {other:?}"),
            Err(e) => return Err((i, e)),
        }
    }
    Ok(())
}

#[test]
fn with_a_zero_reaper_queue_each_fresh_instance_is_dropped_before_its_call_returns() {
    let (_host, policy) = two_slot_policy(0);
    calls(&policy, 50).expect("50 fresh calls on two slots");

    // The control: with drops queued (and the upkeep thread not woken for 10 s), the two
    // finished stores keep both slots and the third call finds none.
    let (_host, policy) = two_slot_policy(8);
    let (at, refusal) = calls(&policy, 50).expect_err("queued stores hold the slots");
    assert_eq!(at, 2, "{refusal}");
    assert!(matches!(refusal, CallError::Instantiate(_)), "{refusal}");
}
