//! Per-call latency with its tail, the way issue 15 measures it: one call in flight on a
//! current-thread runtime, `Instant` around each await, nearest-rank percentiles.
//!
//! For each of native plugins, Wasm fresh isolation and Wasm pooled isolation, two
//! workloads of the customer-support example (2 policies + output redactor + audit):
//! - `invoke`: one governed invoke that completes;
//! - `approval`: invoke → approval-required, a human decides, resume → completed.
//!
//! ```sh
//! cargo xtask build-plugins
//! cargo bench -p capgate-wasm --bench percall                    # both cores
//! taskset -c 0 cargo bench -p capgate-wasm --bench percall       # pinned to one core
//! cargo bench -p capgate-wasm --bench percall -- --warmup 2000 --calls 10000   # quicker
//! ```
//!
//! Figures compare only within one run on one machine: read the ratios to `native`.

mod support;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use capgate_core::prelude::*;
use capgate_wasm::Isolation;
use serde_json::json;
use std::time::{Duration, Instant};
use support::*;

/// How many calls to make.
struct Plan {
    warmup: usize,
    calls: usize,
}

impl Plan {
    /// `--warmup N --calls N` (defaults 20 000 and 100 000); `--bench`, which cargo passes,
    /// is ignored.
    fn from_args() -> Result<Plan, String> {
        let mut plan = Plan {
            warmup: 20_000,
            calls: 100_000,
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
                "--bench" => {}
                other => {
                    return Err(format!(
                        "unknown argument `{other}` (expected --warmup N, --calls N)"
                    ));
                }
            }
        }
        Ok(plan)
    }
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// p50, p99, p99.9 and max, in µs.
struct Summary {
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    Summary {
        p50: us(percentile(&samples, 50.0)),
        p99: us(percentile(&samples, 99.0)),
        p999: us(percentile(&samples, 99.9)),
        max: us(*samples.last().unwrap_or(&Duration::ZERO)),
    }
}

fn small_refund() -> InvokeRequest {
    InvokeRequest::new(
        Surface::AiSdk,
        "orders.refund",
        json!({"orderId": "ord_1", "amount": 20}),
        Actor::user("u_dana", json!({"orgId": "org_1"})),
    )
    .context(json!({"orgId": "org_1"}))
}

fn big_refund() -> InvokeRequest {
    InvokeRequest::new(
        Surface::AiSdk,
        "orders.refund",
        json!({"orderId": "ord_42", "amount": 649}),
        Actor::user("u_dana", json!({"orgId": "org_1"})),
    )
    .context(json!({"orgId": "org_1"}))
}

/// One governed invoke that must complete.
async fn invoke(rt: &Runtime) {
    let r = rt.invoke(small_refund()).await;
    assert_eq!(r.status(), "completed", "{r:?}");
}

/// Invoke → approval-required → a manager approves → resume → completed.
async fn approval_round_trip(rt: &Runtime) {
    let held = rt.invoke(big_refund()).await;
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

async fn measure(plan: &Plan, rt: &Runtime, call: impl AsyncFn(&Runtime)) -> Summary {
    for _ in 0..plan.warmup {
        call(rt).await;
    }
    let mut samples = Vec::with_capacity(plan.calls);
    for _ in 0..plan.calls {
        let start = Instant::now();
        call(rt).await;
        samples.push(start.elapsed());
    }
    summarize(samples)
}

fn main() {
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
        "per-call latency, µs (nearest rank; {} warm-up, {} timed, one in flight)",
        plan.warmup, plan.calls
    );
    println!(
        "{:<10} {:<8} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "workload", "plugins", "p50", "p99", "p99.9", "max", "p50/native"
    );
    for workload in ["invoke", "approval"] {
        let mut native_p50 = None;
        for (plugins, runtime) in [
            ("native", native_runtime()),
            ("fresh", wasm_runtime(Isolation::Fresh)),
            ("pooled", wasm_runtime(Isolation::pooled())),
        ] {
            let s = rt.block_on(async {
                match workload {
                    "invoke" => measure(&plan, &runtime, invoke).await,
                    _ => measure(&plan, &runtime, approval_round_trip).await,
                }
            });
            let base = *native_p50.get_or_insert(s.p50);
            println!(
                "{workload:<10} {plugins:<8} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}×",
                s.p50,
                s.p99,
                s.p999,
                s.max,
                s.p50 / base
            );
        }
    }
}
