//! Idle pooled instances are capped across every namespace (and binding) of a host, the
//! oldest evicted first (issue 33): enough tenants can no longer park every slot of the
//! pooling allocator.

use crate::common;

use capgate_core::prelude::*;
use capgate_wasm::{Binding, HostOptions, Isolation, WasmHost};
use common::*;

#[test]
fn idle_pooled_instances_are_capped_across_namespaces_and_the_oldest_evicted() {
    let host = WasmHost::new(HostOptions {
        max_instances: 32,
        max_idle_pooled: 3,
        ..HostOptions::default()
    })
    .expect("host");
    let plugin = load_on(&host, "hostile_counter");
    let policy = plugin
        .policy(Binding::new("counter").isolation(Isolation::Pooled {
            max_uses: 1_000,
            max_idle: 8,
        }))
        .expect("bind");
    let ask = RefundAsk::by_dana();
    let input = serde_json::json!({"amount": 1});
    let call = |tenant: &str| {
        let shared = SharedJson::default();
        let req = PolicyRequest {
            namespace: tenant,
            ..ask.request(Some(&input), "exe_1", &shared)
        };
        match futures::executor::block_on(policy.evaluate_raw(&req, None)) {
            Ok(PolicyDecision::Deny { code: Some(c), .. }) => c,
            other => panic!("unexpected {other:?}"),
        }
    };
    let tenants: Vec<String> = (0..10).map(|t| format!("tenant-{t}")).collect();
    for t in &tenants {
        assert_eq!(call(t), "calls=1");
    }
    assert_eq!(
        host.idle_pooled(),
        3,
        "the host-wide cap, not 10 × max_idle"
    );
    assert_eq!(host.idle_evictions(), 7);
    for (i, t) in tenants.iter().enumerate() {
        let kept = usize::from(i >= 7);
        assert_eq!(policy.idle_instances_in(t), kept, "{t}");
    }
    // A kept tenant reuses its instance; an evicted one starts fresh and takes the place
    // of the least recently used (tenant-7).
    assert_eq!(call(&tenants[9]), "calls=2");
    assert_eq!(call(&tenants[0]), "calls=1");
    assert_eq!(host.idle_pooled(), 3);
    let idle: Vec<usize> = [0, 7, 8, 9]
        .iter()
        .map(|i| policy.idle_instances_in(&tenants[*i]))
        .collect();
    assert_eq!(idle, [1, 0, 1, 1]);
}

#[test]
fn the_default_idle_cap_leaves_most_slots_for_calls() {
    let d = HostOptions::default();
    assert!(d.max_idle_pooled > 0);
    assert!(d.max_idle_pooled <= d.max_instances as usize / 2, "{d:?}");
}
