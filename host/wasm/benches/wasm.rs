//! Wasm plugin costs next to their native equivalents:
//! - one policy call: Wasm fresh, Wasm pooled, native;
//! - one governed invoke with two policies + a redactor + audit: Wasm fresh, pooled, native;
//! - cold load of a plugin from the compiled cache.
//!
//! Needs the plugins: `cargo xtask build-plugins`, then
//! `cargo bench -p capgate-wasm --bench wasm -- --warm-up-time 1 --measurement-time 3`.

use capgate_core::audit::{AuditEvent, AuditSink, AuditSinkError};
use capgate_core::policy::CapabilityInfo;
use capgate_core::prelude::*;
use capgate_wasm::{Binding, Isolation, PluginDir, WasmHost, sha256_hex};
// The allocator the `capgate` binary runs with (see host/cli/src/main.rs).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;

fn wasm_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../plugins/target/wasm32-wasip2/release")
}

fn pinned(name: &str) -> (String, String) {
    let file = format!("{name}.wasm");
    let path = wasm_dir().join(&file);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run `cargo xtask build-plugins` first",
            path.display()
        )
    });
    (file, sha256_hex(&bytes))
}

fn host() -> WasmHost {
    WasmHost::shared().expect("host")
}

fn plugin(name: &str) -> Arc<capgate_wasm::Plugin> {
    let (file, digest) = pinned(name);
    let dir = PluginDir::open(wasm_dir()).expect("plugin dir");
    host().load(&dir, &file, &digest).expect("load")
}

/// An audit sink that records nothing but still receives every event.
struct NullSink;

#[async_trait::async_trait]
impl AuditSink for NullSink {
    fn name(&self) -> &str {
        "null"
    }
    async fn emit(&self, _event: &AuditEvent) -> Result<(), AuditSinkError> {
        Ok(())
    }
}

fn refund_limit_native() -> impl Policy {
    policy_sync("refundLimit", |req| {
        let amount = req.input.and_then(|i| i["amount"].as_f64()).unwrap_or(0.0);
        Ok(if amount > 500.0 {
            PolicyDecision::require_approval(format!("Refund of ${amount} exceeds $500"))
        } else {
            PolicyDecision::allow()
        })
    })
}

fn policy_call(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let info = CapabilityInfo {
        id: "orders.refund".into(),
        side_effect: SideEffect::Write,
        risk: Risk::High,
        tags: vec![],
    };
    let actor = Actor::user("u_dana", json!({"orgId": "org_1"}));
    let input = json!({"orderId": "ord_42", "amount": 649});
    let ctx = serde_json::Value::Null;
    let req = PolicyRequest {
        phase: Phase::Invocation,
        capability: &info,
        surface: Surface::AiSdk,
        namespace: "",
        actor: &actor,
        context: &ctx,
        input: Some(&input),
        execution_id: "exe_1",
        approval: None,
    };
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

fn runtime(policies: Vec<Arc<dyn Policy>>, redactor: Arc<dyn Redactor>) -> Runtime {
    let mut def = CapabilityDef::new(
        "orders.refund",
        CapabilityMeta::new("Refund an order", SideEffect::Write, Risk::High).exposed_on([Surface::AiSdk]),
    )
    .input_schema(json!({
        "type": "object",
        "properties": {"orderId": {"type": "string"}, "amount": {"type": "number"}},
        "required": ["orderId", "amount"]
    }))
    .redactor_arc(redactor)
    .procedure(handler(|call| async move {
        Ok(json!({"refundId": "ref_77", "amount": call.input["amount"], "gatewayRef": "gw_1", "email": "dana@example.com"}))
    }));
    for p in policies {
        def = def.policy_arc(p);
    }
    Runtime::builder(
        Registry::builder()
            .capability(def)
            .build()
            .expect("registry"),
    )
    .audit_sink(Arc::new(NullSink))
    .build()
    .expect("a valid runtime")
}

fn wasm_runtime(isolation: Isolation) -> Runtime {
    let org = plugin("org_isolation")
        .policy(
            Binding::new("orgIsolation")
                .config(json!({"contextPath": "/orgId"}))
                .isolation(isolation),
        )
        .expect("bind");
    let limit = plugin("refund_limit")
        .policy(
            Binding::new("refundLimit")
                .config(json!({"maxAmount": 500}))
                .isolation(isolation),
        )
        .expect("bind");
    let red = plugin("pii_redactor")
        .redactor(
            Binding::new("pii")
                .config(json!({"paths": ["/gatewayRef"]}))
                .isolation(isolation),
        )
        .expect("bind");
    runtime(vec![Arc::new(org), Arc::new(limit)], Arc::new(red))
}

fn native_runtime() -> Runtime {
    let org: Arc<dyn Policy> = Arc::new(policy_sync("orgIsolation", |req| {
        Ok(if req.actor.attributes["orgId"] == req.context["orgId"] {
            PolicyDecision::allow()
        } else {
            PolicyDecision::deny("other org")
        })
    }));
    let red: Arc<dyn Redactor> = Arc::new(redactor_fn("pii", |mut out| {
        if let Some(o) = out.as_object_mut() {
            o.remove("gatewayRef");
        }
        Ok(out)
    }));
    runtime(vec![org, Arc::new(refund_limit_native())], red)
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
