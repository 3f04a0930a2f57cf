//! Per-call latency with its tail (the per-call Wasm figures of docs/contributing/benchmarks.md):
//! one call in flight on a current-thread runtime, `Instant` around each await, nearest-rank
//! percentiles.
//!
//! Plugins: `native` (the same logic as Rust closures), `fresh` (Wasm, a fresh instance per
//! call, taken from the binding's reserve), `fresh-inline` (fresh, reserve off: every call
//! instantiates on the request path, as before the reserve) and `pooled` (Wasm, warm
//! instances reused). Workloads of the customer-support example:
//! - `policy`: one `refundLimit` policy evaluation; for `fresh`, each timed call waits
//!   (untimed) until the reserve holds a ready instance: the request-path cost when warm;
//! - `invoke`: one governed invoke that completes — the workload of the spec's reference
//!   runtime comparison: policies `orgIsolation` + `refundLimit`, a redactor dropping
//!   `/gatewayRef` (native and Wasm doing the same), input and output schemas, every audit
//!   event collected ([`support::CollectingSink`]), the input varying per call;
//! - `approval`: invoke → approval-required, a human decides, resume → completed.
//!
//! Back to back, a call's background work (refilling the reserve, retiring instances)
//! competes with the next call for the core; `--think-us N` idles N µs between calls
//! (untimed), as a server that is not saturated does.
//!
//! ```sh
//! cargo xtask build-plugins
//! cargo bench -p capgate-wasm --bench percall                    # both cores
//! taskset -c 0 cargo bench -p capgate-wasm --bench percall       # pinned to one core
//! cargo bench -p capgate-wasm --bench percall -- --warmup 2000 --calls 10000   # quicker
//! cargo bench -p capgate-wasm --bench percall -- --only invoke --think-us 200
//! cargo bench -p capgate-wasm --bench percall -- --only policy --plugins native --plugins pooled
//! ```
//!
//! Figures compare only within one run on one machine: read the ratios to `native`.

mod support;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use capgate_core::policy::{CapabilityInfo, PolicyRequest};
use capgate_core::prelude::*;
use capgate_wasm::{Isolation, ReserveOptions};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

/// How many calls to make.
struct Plan {
    warmup: usize,
    calls: usize,
    /// Idle time between calls (untimed).
    think: Duration,
    /// Run only these workloads (all when empty).
    only: Vec<String>,
    /// Run only these plugin kinds (all when empty; the first row is the ratios' base).
    plugins: Vec<String>,
}

impl Plan {
    /// `--warmup N --calls N` (defaults 20 000 and 100 000); `--bench`, which cargo passes,
    /// is ignored.
    fn from_args() -> Result<Plan, String> {
        let mut plan = Plan {
            warmup: 20_000,
            calls: 100_000,
            think: Duration::ZERO,
            only: Vec::new(),
            plugins: Vec::new(),
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut number = |name: &str| -> Result<usize, String> {
                args.next()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| format!("{name} needs a number"))
            };
            match a.as_str() {
                "--warmup" => plan.warmup = number("--warmup")?,
                "--calls" => plan.calls = number("--calls")?.max(1),
                "--think-us" => plan.think = Duration::from_micros(number("--think-us")? as u64),
                "--only" => {
                    let w = args.next().ok_or("--only needs a workload")?;
                    if !WORKLOADS.contains(&w.as_str()) {
                        return Err(format!(
                            "unknown workload `{w}` (expected one of {WORKLOADS:?})"
                        ));
                    }
                    plan.only.push(w);
                }
                "--plugins" => {
                    let p = args.next().ok_or("--plugins needs a kind")?;
                    if !PLUGINS.contains(&p.as_str()) {
                        return Err(format!(
                            "unknown plugins `{p}` (expected one of {PLUGINS:?})"
                        ));
                    }
                    plan.plugins.push(p);
                }
                "--bench" => {}
                other => {
                    return Err(format!(
                        "unknown argument `{other}` (expected --warmup N, --calls N, --think-us N, --only WORKLOAD, --plugins KIND)"
                    ));
                }
            }
        }
        Ok(plan)
    }
}

const WORKLOADS: [&str; 3] = ["policy", "invoke", "approval"];
const PLUGINS: [&str; 4] = ["native", "fresh", "fresh-inline", "pooled"];

/// The `i`th refund under the limit (the input varies per call, as the reference's does).
fn small_refund(i: usize) -> InvokeRequest {
    InvokeRequest::new(
        Surface::AiSdk,
        "orders.refund",
        json!({"orderId": format!("ord_{i}"), "amount": 1 + (i % 499)}),
        Actor::user("u_dana", json!({"orgId": "org_1"})),
    )
    .context(json!({"orgId": "org_1"}))
}

/// The `i`th refund over the limit.
fn big_refund(i: usize) -> InvokeRequest {
    InvokeRequest::new(
        Surface::AiSdk,
        "orders.refund",
        json!({"orderId": format!("ord_{i}"), "amount": 501 + (i % 1000)}),
        Actor::user("u_dana", json!({"orgId": "org_1"})),
    )
    .context(json!({"orgId": "org_1"}))
}

/// One governed invoke that must complete.
async fn invoke(rt: &Runtime, i: usize) {
    let r = rt.invoke(small_refund(i)).await;
    assert_eq!(r.status(), "completed", "{r:?}");
}

/// Invoke → approval-required → a manager approves → resume → completed.
async fn approval_round_trip(rt: &Runtime, i: usize) {
    let held = rt.invoke(big_refund(i)).await;
    let Some(approval) = held.approval() else {
        panic!("expected approval-required: {held:?}")
    };
    let id = approval.id.clone();
    rt.approvals()
        .decide(
            &id,
            DecideRequest {
                status: DecisionStatus::Approved,
                approver: ActorRef {
                    id: "u_priya".into(),
                    kind: ActorKind::User,
                },
                comment: None,
                decider: Decider::Approver {
                    namespace: String::new(),
                    roles: vec!["manager".into()],
                },
            },
        )
        .await
        .unwrap_or_else(|e| panic!("decide {id}: {e}"));
    let done = rt
        .resume(
            &id,
            ResumeOptions {
                context: json!({"orgId": "org_1"}),
                ..ResumeOptions::default()
            },
        )
        .await;
    assert_eq!(done.status(), "completed", "{done:?}");
}

/// Warm up, then time each call; `before` runs untimed before every call.
async fn measure<T>(
    plan: &Plan,
    on: &T,
    before: impl Fn(),
    call: impl AsyncFn(&T, usize),
) -> Summary {
    let audit = collect_audit();
    for i in 0..plan.warmup {
        before();
        audit.trim();
        call(on, i).await;
    }
    let mut samples = Vec::with_capacity(plan.calls);
    for i in 0..plan.calls {
        if !plan.think.is_zero() {
            std::thread::sleep(plan.think);
        }
        before();
        audit.trim();
        let start = Instant::now();
        call(on, plan.warmup + i).await;
        samples.push(start.elapsed());
    }
    summarize(samples)
}

/// The refund's capability, actor, context and input, for the `policy` workload.
struct PolicyCall {
    info: CapabilityInfo,
    actor: Actor,
    context: serde_json::Value,
    input: serde_json::Value,
}

impl PolicyCall {
    fn new() -> PolicyCall {
        PolicyCall {
            info: CapabilityInfo {
                id: "orders.refund".into(),
                side_effect: SideEffect::Write,
                risk: Risk::High,
                tags: vec![],
            },
            actor: Actor::user("u_dana", json!({"orgId": "org_1"})),
            context: json!({"orgId": "org_1"}),
            input: json!({"orderId": "ord_1", "amount": 20}),
        }
    }

    async fn evaluate(&self, policy: &dyn Policy) {
        let shared = SharedJson::default();
        let req = PolicyRequest {
            phase: capgate_core::policy::Phase::Invocation,
            capability: &self.info,
            surface: Surface::AiSdk,
            namespace: "",
            actor: &self.actor,
            context: &self.context,
            input: Some(&self.input),
            execution_id: "exe_1",
            approval: None,
            shared: &shared,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let d = policy.evaluate(&req, deadline).await;
        assert!(matches!(d, Ok(PolicyDecision::Allow)), "{d:?}");
    }
}

/// One policy of each kind, and for Wasm a way to wait for a warm reserve.
fn one_policy(plugins: &str) -> (Arc<dyn Policy>, Option<Arc<capgate_wasm::WasmPolicy>>) {
    let bind = refund_limit_wasm;
    let wasm = match plugins {
        "native" => return (Arc::new(refund_limit_native()), None),
        "fresh" => bind(Isolation::Fresh, ReserveOptions::default()),
        "fresh-inline" => bind(Isolation::Fresh, ReserveOptions::disabled()),
        _ => bind(Isolation::pooled(), ReserveOptions::default()),
    };
    (wasm.clone(), Some(wasm))
}

/// Wait (untimed) until a fresh binding's reserve has a ready instance.
fn wait_warm(policy: &Option<Arc<capgate_wasm::WasmPolicy>>) {
    let Some(p) = policy else { return };
    let started = Instant::now();
    while p.reserve_stats().ready == 0 && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_micros(20));
    }
}

fn main() {
    // Every audit event is collected, as the reference runtime's harness does.
    let _ = collect_audit();
    let plan = match Plan::from_args() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("percall: {e}");
            std::process::exit(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("percall: cannot start a Tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "per-call latency, µs (nearest rank; {} warm-up, {} timed, one in flight, {} µs between calls)",
        plan.warmup,
        plan.calls,
        plan.think.as_micros()
    );
    println!(
        "{:<10} {:<13} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}",
        "workload", "plugins", "p50", "p99", "p99.9", "max", "p50/native", "reserve hit"
    );
    for workload in WORKLOADS {
        if !plan.only.is_empty() && !plan.only.iter().any(|w| w == workload) {
            continue;
        }
        let mut native_p50 = None;
        for plugins in PLUGINS {
            if !plan.plugins.is_empty() && !plan.plugins.iter().any(|p| p == plugins) {
                continue;
            }
            let (s, stats) = rt.block_on(async {
                if workload == "policy" {
                    let (policy, wasm) = one_policy(plugins);
                    let warm = if plugins == "fresh" {
                        wasm.clone()
                    } else {
                        None
                    };
                    let call = PolicyCall::new();
                    let s = measure(
                        &plan,
                        &call,
                        || wait_warm(&warm),
                        async |c: &PolicyCall, _| c.evaluate(&*policy).await,
                    )
                    .await;
                    return (s, wasm.map(|w| w.reserve_stats()));
                }
                let (runtime, probe) = match plugins {
                    "native" => (native_runtime(), None),
                    "fresh" => {
                        let (r, p) =
                            wasm_runtime_probed(Isolation::Fresh, ReserveOptions::default());
                        (r, Some(p))
                    }
                    "fresh-inline" => (
                        wasm_runtime_with(Isolation::Fresh, ReserveOptions::disabled()),
                        None,
                    ),
                    _ => (wasm_runtime(Isolation::pooled()), None),
                };
                let s = match workload {
                    "invoke" => measure(&plan, &runtime, || {}, invoke).await,
                    _ => measure(&plan, &runtime, || {}, approval_round_trip).await,
                };
                (s, probe.map(|p| p.stats()))
            });
            let base = *native_p50.get_or_insert(s.p50);
            let hits = match stats {
                Some(st) if plugins == "fresh" && st.hits + st.misses > 0 => format!(
                    "{:>9.1}%",
                    100.0 * st.hits as f64 / (st.hits + st.misses) as f64
                ),
                _ => format!("{:>10}", "-"),
            };
            println!(
                "{workload:<10} {plugins:<13} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}× {hits}",
                s.p50,
                s.p99,
                s.p999,
                s.max,
                s.p50 / base
            );
        }
    }
}
