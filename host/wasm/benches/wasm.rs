//! Wasm plugin costs next to their native equivalents:
//! - one policy call: Wasm fresh, Wasm pooled, native;
//! - one governed invoke with two policies + a redactor + audit: Wasm fresh, pooled, native;
//! - cold load of a plugin from the compiled cache.
//!
//! Needs the plugins: `cargo xtask build-plugins`, then
//! `cargo bench -p capgate-wasm --bench wasm -- --warm-up-time 1 --measurement-time 3`.

use capgate_core::prelude::*;
use capgate_wasm::{Binding, Isolation, PluginDir};
use support::*;

mod support;
// The allocator the `capgate` binary runs with (see host/cli/src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

fn policy_call(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let call = RefundCall::new();
    let req = call.request();
    let p = plugin("refund_limit");
    let config = json!({"maxAmount": 500});
    let fresh = p
        .policy(Binding::new("refundLimit").config(config.clone()))
        .expect("bind");
    let pooled = p
        .policy(
            Binding::new("refundLimit")
                .config(config)
                .isolation(Isolation::pooled()),
        )
        .expect("bind");
    let native = refund_limit_native();
    let mut g = c.benchmark_group("policy_call");
    g.bench_function("wasm_fresh", |b| {
        b.iter(|| {
            rt.block_on(fresh.evaluate(
                &req,
                tokio::time::Instant::now() + std::time::Duration::from_secs(5),
            ))
        })
    });
    g.bench_function("wasm_pooled", |b| {
        b.iter(|| {
            rt.block_on(pooled.evaluate(
                &req,
                tokio::time::Instant::now() + std::time::Duration::from_secs(5),
            ))
        })
    });
    g.bench_function("native", |b| {
        b.iter(|| {
            rt.block_on(native.evaluate(
                &req,
                tokio::time::Instant::now() + std::time::Duration::from_secs(5),
            ))
        })
    });
    g.finish();
}

fn governed_invoke(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let request = || {
        InvokeRequest::new(
            Surface::AiSdk,
            "orders.refund",
            json!({"orderId": "ord_1", "amount": 20}),
            Actor::user("u_dana", json!({"orgId": "org_1"})),
        )
        .context(json!({"orgId": "org_1"}))
    };
    let mut g = c.benchmark_group("governed_invoke");
    for (name, runtime) in [
        ("wasm_fresh", wasm_runtime(Isolation::Fresh)),
        ("wasm_pooled", wasm_runtime(Isolation::pooled())),
        ("native", native_runtime()),
    ] {
        let r = rt.block_on(runtime.invoke(request()));
        assert_eq!(r.status(), "completed", "{name}: {r:?}");
        g.bench_function(name, |b| b.iter(|| rt.block_on(runtime.invoke(request()))));
    }
    g.finish();
}

fn cold_load(c: &mut Criterion) {
    let cache = tempfile::tempdir().expect("tempdir");
    let dir = PluginDir::open(wasm_dir())
        .and_then(|d| d.with_cache(cache.path()))
        .expect("dir");
    let (file, digest) = pinned("refund_limit");
    host().load(&dir, &file, &digest).expect("warm the cache");
    let mut g = c.benchmark_group("load");
    g.sample_size(20);
    g.bench_function("from_compiled_cache", |b| {
        b.iter(|| {
            let p = host().load(&dir, &file, &digest).expect("load");
            assert_eq!(p.load_source(), capgate_wasm::LoadSource::Cache);
            p
        })
    });
    g.finish();
}

criterion_group!(benches, policy_call, governed_invoke, cold_load);
criterion_main!(benches);
