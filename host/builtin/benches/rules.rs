//! Per-call cost of a policy written as a CEL rule and as a Cedar policy set next to the same policy as a Rust Wasm
//! plugin (`refund-limit`) and natively (docs/guides/policies-without-a-plugin.md): one call in
//! flight, `Instant` around each evaluation, nearest-rank percentiles, warm-up excluded.
//!
//! ```sh
//! cargo xtask build-plugins
//! cargo bench -p capgate-builtin --bench rules                       # both cores
//! taskset -c 0 cargo bench -p capgate-builtin --bench rules          # pinned to one core
//! cargo bench -p capgate-builtin --bench rules -- --warmup 500 --calls 5000   # quicker
//! ```
//!
//! Figures compare only within one run on one machine: read the ratios to `native`.

use capgate_core::actor::{Actor, ActorKind, Surface};
use capgate_core::policy::{Phase, Policy, PolicyRequest, SharedJson};
use capgate_wasm::{Binding, Isolation, PluginDir, ReserveOptions, WasmHost};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let (warmup, calls) = (arg("--warmup", 2_000), arg("--calls", 20_000));
    let host = WasmHost::shared().expect("engine");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../plugins/target/wasm32-wasip2/release");
    let rust = std::fs::read(dir.join("refund_limit.wasm"))
        .expect("plugins/target/…/refund_limit.wasm (run `cargo xtask build-plugins`)");
    let cache = tempfile::tempdir().expect("tempdir");
    let pdir = PluginDir::open(&dir)
        .and_then(|d| d.with_cache(cache.path().join("c")))
        .expect("plugin dir");
    let rust = host
        .load(&pdir, "refund_limit.wasm", &capgate_wasm::sha256_hex(&rust))
        .expect("load refund_limit.wasm");
    let cel = &capgate_builtin::CEL;
    let cel = host
        .load_shipped(Some(&pdir), cel.name, cel.wasm, cel.sha256)
        .expect("load cel");
    let cedar = &capgate_builtin::CEDAR;
    let cedar = host
        .load_shipped(Some(&pdir), cedar.name, cedar.wasm, cedar.sha256)
        .expect("load cedar");
    let cedar_config = json!({"policies": "permit(principal, action, resource);\n\
        @stance(\"require-approval\")\n@type(\"manager\")\n\
        @reason(\"Refund of $${context.input.amount} exceeds $500\")\n\
        forbid(principal, action, resource)\n\
        when { context.phase != \"discovery\" && context.input.amount.greaterThan(decimal(\"500.0\")) };"});
    let rust_config = json!({"maxAmount": 500, "approvalType": "manager"});
    let cel_config = json!({"rules": [{
        "when": "phase != 'discovery' && input.amount > 500",
        "stance": "require-approval", "type": "manager",
        "reason": "Refund of $${input.amount} exceeds $500",
    }]});
    let bind = |p: &Arc<capgate_wasm::Plugin>, config: &serde_json::Value, isolation: Isolation| {
        let binding = Binding::new("refundLimit")
            .config(config.clone())
            .isolation(isolation);
        // Fresh calls here run back to back on one thread; the reserve would refill on the
        // same core between them, so it is off: every fresh call instantiates inline.
        let binding = binding.reserve(ReserveOptions::disabled());
        Arc::new(p.policy(binding).expect("bind")) as Arc<dyn Policy>
    };
    let rows: Vec<(&str, Arc<dyn Policy>)> = vec![
        (
            "native",
            Arc::new(capgate_testkit::walkthrough::refund_limit(
                "refundLimit",
                None,
            )),
        ),
        (
            "rust plugin, pooled",
            bind(&rust, &rust_config, Isolation::pooled()),
        ),
        ("cel, pooled", bind(&cel, &cel_config, Isolation::pooled())),
        (
            "cedar, pooled",
            bind(&cedar, &cedar_config, Isolation::pooled()),
        ),
        (
            "rust plugin, fresh",
            bind(&rust, &rust_config, Isolation::Fresh),
        ),
        ("cel, fresh", bind(&cel, &cel_config, Isolation::Fresh)),
        (
            "cedar, fresh",
            bind(&cedar, &cedar_config, Isolation::Fresh),
        ),
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let capability = capgate_testkit::walkthrough::refund_info();
    let actor = Actor {
        id: "u_dana".into(),
        kind: ActorKind::User,
        attributes: json!({"orgId": "org_1"}),
    };
    let context = json!({"orgId": "org_1"});
    println!(
        "{warmup} warm-up + {calls} timed calls each, one in flight; input amount varies per call"
    );
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>8}",
        "policy", "p50", "p99", "p99.9", "p50/native"
    );
    let mut base = None;
    for (name, policy) in rows {
        let mut times = Vec::with_capacity(calls);
        for i in 0..warmup + calls {
            let input = json!({"orderId": "ord_42", "amount": 400 + (i % 200) as i64});
            let shared = SharedJson::default();
            let request = PolicyRequest {
                phase: Phase::Invocation,
                capability: &capability,
                surface: Surface::AiSdk,
                namespace: "org_1",
                actor: &actor,
                context: &context,
                input: Some(&input),
                execution_id: "exe_1",
                approval: None,
                shared: &shared,
            };
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            let started = Instant::now();
            let decision = rt.block_on(policy.evaluate(&request, deadline));
            let took = started.elapsed();
            assert!(decision.is_ok(), "{name}: {decision:?}");
            if i >= warmup {
                times.push(took);
            }
        }
        times.sort();
        let at =
            |q: f64| times[((q * times.len() as f64).ceil() as usize).clamp(1, times.len()) - 1];
        let (p50, p99, p999) = (at(0.50), at(0.99), at(0.999));
        let base = *base.get_or_insert(p50);
        println!(
            "{name:<22} {:>8.1}µs {:>8.1}µs {:>8.1}µs {:>9.1}×",
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            p999.as_secs_f64() * 1e6,
            p50.as_secs_f64() / base.as_secs_f64()
        );
    }
}
