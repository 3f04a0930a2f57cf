//! Two ways to keep guest code off the Tokio workers, measured side by side in one run:
//! wasmtime's async support with epoch yielding (what capgate does), or a dedicated,
//! bounded pool of OS threads running plain synchronous calls. The plan was to measure
//! both and keep the faster; capgate shipped the first without measuring the second. This
//! measures what each adds to a short call, the common case (policies, redactors). It does
//! not measure long guests: a guest that loops holds a pool thread until its deadline, while
//! with epoch yielding it gives the executor back every tick.
//!
//! The workload is ONE `evaluate` of the example's real `refund_limit` policy plugin
//! (`plugins/target/wasm32-wasip2/release/refund_limit.wasm`, pinned by its SHA-256 as the
//! other benches do) on a warm, reused instance: the refund of $649 against
//! `{"maxAmount":500,"approvalType":"manager"}`, which must come back `require-approval`
//! (checked in full before timing and by kind on every timed call, so an error can never be
//! measured as a fast call). One call in flight, from a current-thread Tokio runtime, an
//! `Instant` around each await, nearest-rank percentiles. The variants take turns in blocks
//! of 1 000 calls, warm-up and timed alike, so a machine whose speed drifts during the run
//! (shared or virtual cores) shifts them all the same way. Variants:
//!
//! - `async-inline`: `call_async`, awaited on the caller's task, with capgate's per-call
//!   arming (fuel, and an epoch callback that yields once the 1 ms inline slice is over and
//!   traps at the deadline): what capgate does for a short call.
//! - `sync-inline`: plain `call` on the caller's thread. The floor, NOT an option: it holds
//!   the worker for as long as the guest runs.
//! - `sync-pool`: the same synchronous call shipped to a bounded pool of `--pool-threads` OS
//!   threads (default: the available cores), each owning a warm store and instance. Work goes
//!   over a bounded `std::sync::mpsc::sync_channel` (one shared receiver behind a mutex, so
//!   any idle thread takes the next call; no new dependency), the answer comes back over a
//!   Tokio oneshot that the caller awaits.
//! - `sync-spawn-blocking`: the same synchronous call through `tokio::task::spawn_blocking`,
//!   the store and instance moved to the blocking thread and back (for reference).
//!
//! Under the table, each off-thread variant shows where its time went (means over the timed
//! calls): caller → thread (the hand-over and the thread's wake-up), the call on the thread,
//! and thread → caller (the answer and the caller's wake-up).
//!
//! Every variant uses an engine configured like capgate's (`engine_config` in `src/host.rs`:
//! component model, pooling allocator, epoch interruption, fuel), with a 1 ms epoch ticker,
//! and the same per-call host work: the WIT request built from JSON values as `policy.rs`
//! builds it, fuel set, an epoch-deadline callback armed. In wasmtime 48
//! `Config::async_support` is a deprecated no-op: whether a store runs calls on a fiber is
//! decided per call (`call_async` vs `call`), so the synchronous variants use a second
//! engine of the same configuration with bindings generated without `async`. Both link
//! WASI p2 with `add_to_linker_sync`, as capgate's host does for its async calls too.
//!
//! ```sh
//! cargo xtask build-plugins
//! cargo bench -p capgate-wasm --bench exec_pool                      # all cores
//! taskset -c 0 cargo bench -p capgate-wasm --bench exec_pool         # pinned to one core
//! cargo bench -p capgate-wasm --bench exec_pool -- --warmup 2000 --calls 10000 --pool-threads 4
//! ```
//!
//! Figures compare only within one run on one machine: read the ratios to `sync-inline`.

mod support;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use support::{Summary, summarize};
use wasmtime::component::{Component, HasSelf, InstancePre, Linker, ResourceTable};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap,
    UpdateDeadline,
};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Bindings whose export calls are `async` (`call_async`); imports stay synchronous, as in
/// capgate's `src/wit.rs`.
mod async_bind {
    wasmtime::component::bindgen!({
        path: "../../wit",
        inline: "
            package capgate:bench;

            world policy-host {
                import capgate:plugin/host@0.1.0;
                export capgate:plugin/policy@0.1.0;
            }
        ",
        world: "capgate:bench/policy-host",
        exports: { default: async },
    });
}

/// Bindings whose export calls are plain synchronous `call`s.
mod sync_bind {
    wasmtime::component::bindgen!({
        path: "../../wit",
        inline: "
            package capgate:bench;

            world policy-host {
                import capgate:plugin/host@0.1.0;
                export capgate:plugin/policy@0.1.0;
            }
        ",
        world: "capgate:bench/policy-host",
    });
}

/// The binding's `config` (the example's).
const CONFIG: &str = r#"{"maxAmount":500,"approvalType":"manager"}"#;
/// The reason the plugin must give.
const REASON: &str = "Refund of $649 exceeds $500";
/// Fuel per call (capgate's default `Limits`).
const FUEL: u64 = 50_000_000;
/// Wall-clock budget per call (capgate's default `Limits`).
const TIMEOUT: Duration = Duration::from_millis(1_000);
/// How long an async call runs on the caller's task before it yields (capgate's default).
const INLINE_SLICE: Duration = Duration::from_millis(1);
/// Epoch tick (capgate's default).
const EPOCH_TICK: Duration = Duration::from_millis(1);

/// How many calls to make, and how big the pool is.
struct Plan {
    warmup: usize,
    calls: usize,
    pool_threads: usize,
}

impl Plan {
    /// `--warmup N --calls N --pool-threads N` (defaults 20 000, 100 000, the available
    /// cores); `--bench`, which cargo passes, is ignored.
    fn from_args() -> Result<Plan, String> {
        let mut plan = Plan {
            warmup: 20_000,
            calls: 100_000,
            pool_threads: std::thread::available_parallelism().map_or(1, usize::from),
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
                "--pool-threads" => plan.pool_threads = number("--pool-threads")?.max(1),
                "--bench" => {}
                other => {
                    return Err(format!(
                        "unknown argument `{other}` (expected --warmup N, --calls N, --pool-threads N)"
                    ));
                }
            }
        }
        Ok(plan)
    }
}

/// capgate's `engine_config`, sized for one bench (64 instances instead of 1 000).
fn engine() -> wasmtime::Result<Engine> {
    let max_instances = 64;
    let max_wasm_stack = 512 << 10;
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(max_instances)
        .total_core_instances(max_instances * 8)
        .total_memories(max_instances * 2)
        .total_tables(max_instances * 4)
        .total_stacks(max_instances)
        .max_memory_size(256 << 20)
        .max_core_instances_per_component(64)
        .max_memories_per_component(4)
        .max_tables_per_component(16)
        .max_component_instance_size(1 << 20)
        .linear_memory_keep_resident(2 << 20)
        .table_keep_resident(64 << 10)
        .pagemap_scan(Enabled::Auto);
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .consume_fuel(true)
        .concurrency_support(false)
        .max_wasm_stack(max_wasm_stack)
        .async_stack_size(max_wasm_stack + (512 << 10))
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config)
}

/// What a store carries: an empty WASI context.
struct Data {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl Data {
    fn new() -> Data {
        let mut b = WasiCtx::builder();
        b.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        Data {
            wasi: b.build(),
            table: ResourceTable::new(),
        }
    }
}

impl WasiView for Data {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

// The host import `capgate:plugin/host.log`: discarded.
impl async_bind::capgate::plugin0_1_0::host::Host for Data {
    fn log(&mut self, _level: async_bind::capgate::plugin0_1_0::host::LogLevel, _message: String) {}
}
impl async_bind::capgate::plugin0_1_0::types::Host for Data {}
impl sync_bind::capgate::plugin0_1_0::host::Host for Data {
    fn log(&mut self, _level: sync_bind::capgate::plugin0_1_0::host::LogLevel, _message: String) {}
}
impl sync_bind::capgate::plugin0_1_0::types::Host for Data {}

/// One engine's linker (WASI p2 + the capgate host import) and pre-instantiated plugin.
fn prepare<F>(engine: &Engine, bytes: &[u8], add_host: F) -> wasmtime::Result<InstancePre<Data>>
where
    F: FnOnce(&mut Linker<Data>) -> wasmtime::Result<()>,
{
    let mut linker: Linker<Data> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    add_host(&mut linker)?;
    let component = Component::new(engine, bytes)?;
    linker.instantiate_pre(&component)
}

/// The refund's request data, kept as JSON values: each call serializes them into the WIT
/// request, as `WasmPolicy::evaluate_raw` does.
struct Call {
    attributes: serde_json::Value,
    context: serde_json::Value,
    input: serde_json::Value,
    config: String,
}

impl Call {
    fn new() -> Call {
        Call {
            attributes: json!({"orgId": "org_1"}),
            context: json!({"orgId": "org_1"}),
            input: json!({"orderId": "ord_42", "amount": 649}),
            config: CONFIG.to_string(),
        }
    }
}

/// Build one module's WIT `policy-request` from a [`Call`].
macro_rules! wit_request {
    ($m:ident, $call:expr) => {{
        use $m::capgate::plugin0_1_0::types as t;
        let c: &Call = $call;
        $m::exports::capgate::plugin0_1_0::policy::PolicyRequest {
            phase: t::Phase::Invocation,
            surface: t::Surface::AiSdk,
            capability: t::CapabilityInfo {
                id: "orders.refund".to_string(),
                side_effect: t::SideEffect::Write,
                risk: t::Risk::High,
                tags: Vec::new(),
            },
            actor: t::Actor {
                id: "u_dana".to_string(),
                kind: t::ActorKind::User,
                attributes: c.attributes.to_string(),
            },
            input: Some(c.input.to_string()),
            context: c.context.to_string(),
            execution_id: "exe_1".to_string(),
            approval: None,
            config: c.config.clone(),
        }
    }};
}

/// Map one module's answer to a [`Decided`].
macro_rules! decided {
    ($m:ident, $answer:expr) => {{
        use $m::exports::capgate::plugin0_1_0::policy::Decision;
        match $answer {
            Ok(Ok(Decision::RequireApproval(r))) => Decided::RequireApproval {
                reason: r.reason,
                approval_type: r.approval_type,
            },
            Ok(Ok(other)) => Decided::Other(format!("{other:?}")),
            Ok(Err(guest)) => Decided::Other(format!("guest error: {guest}")),
            Err(trap) => Decided::Other(format!("trap: {trap:#}")),
        }
    }};
}

/// What a call decided: the expected `require-approval`, or anything else (described).
#[derive(Debug, PartialEq)]
enum Decided {
    RequireApproval {
        reason: String,
        approval_type: Option<String>,
    },
    Other(String),
}

/// Arm a store for one call as capgate's sandbox does: full fuel, and an epoch callback
/// that stops the guest when the caller gives up or the deadline passes and, for async
/// calls, yields to the executor once the inline slice is over.
fn arm(store: &mut Store<Data>, yields: bool) -> Arc<AtomicBool> {
    store.set_fuel(FUEL).expect("fuel is enabled");
    let now = Instant::now();
    let end = now + TIMEOUT;
    let inline_until = now + INLINE_SLICE;
    let abandoned = Arc::new(AtomicBool::new(false));
    let stop = abandoned.clone();
    store.epoch_deadline_callback(move |_| {
        if stop.load(Ordering::Relaxed) {
            return Err(wasmtime::Error::msg("cancelled by the caller"));
        }
        let t = Instant::now();
        if t >= end {
            Err(wasmtime::Error::from(Trap::Interrupt))
        } else if yields && t >= inline_until {
            Ok(UpdateDeadline::Yield(1))
        } else {
            Ok(UpdateDeadline::Continue(1))
        }
    });
    store.set_epoch_deadline(1);
    abandoned
}

/// A warm instance for `call_async`.
struct AsyncWorker {
    store: Store<Data>,
    guest: async_bind::exports::capgate::plugin0_1_0::policy::Guest,
}

impl AsyncWorker {
    async fn new(engine: &Engine, pre: &InstancePre<Data>) -> wasmtime::Result<AsyncWorker> {
        let indices = async_bind::exports::capgate::plugin0_1_0::policy::GuestIndices::new(pre)?;
        let mut store = Store::new(engine, Data::new());
        arm(&mut store, true);
        let instance = pre.instantiate_async(&mut store).await?;
        let guest = indices.load(&mut store, &instance)?;
        Ok(AsyncWorker { store, guest })
    }

    async fn evaluate(&mut self, call: &Call) -> Decided {
        let request = wit_request!(async_bind, call);
        let _abandoned = arm(&mut self.store, true);
        let answer = self
            .guest
            .call_evaluate(&mut self.store, &request)
            .await
            .map_err(|e| e.to_string());
        decided!(async_bind, answer)
    }
}

/// A warm instance for a synchronous `call`.
struct SyncWorker {
    store: Store<Data>,
    guest: sync_bind::exports::capgate::plugin0_1_0::policy::Guest,
}

impl SyncWorker {
    fn new(engine: &Engine, pre: &InstancePre<Data>) -> wasmtime::Result<SyncWorker> {
        let indices = sync_bind::exports::capgate::plugin0_1_0::policy::GuestIndices::new(pre)?;
        let mut store = Store::new(engine, Data::new());
        arm(&mut store, false);
        let instance = pre.instantiate(&mut store)?;
        let guest = indices.load(&mut store, &instance)?;
        Ok(SyncWorker { store, guest })
    }

    fn evaluate(
        &mut self,
        request: &sync_bind::exports::capgate::plugin0_1_0::policy::PolicyRequest,
    ) -> Decided {
        let _abandoned = arm(&mut self.store, false);
        let answer = self
            .guest
            .call_evaluate(&mut self.store, request)
            .map_err(|e| e.to_string());
        decided!(sync_bind, answer)
    }
}

/// Where an off-thread call's time went, summed over the timed calls: from the caller
/// handing it over to a thread starting it, the call on that thread, and from the thread
/// finishing it to the caller running again.
#[derive(Default)]
struct Handoff {
    to_thread: Duration,
    on_thread: Duration,
    back: Duration,
    calls: u32,
}

/// When an off-thread call was handed over, started and finished.
struct Stamps {
    sent: Instant,
    started: Instant,
    done: Instant,
}

impl Handoff {
    /// Add one call; `self` is the caller, running again now.
    fn add(&mut self, s: &Stamps) {
        self.to_thread += s.started.saturating_duration_since(s.sent);
        self.on_thread += s.done.saturating_duration_since(s.started);
        self.back += s.done.elapsed();
        self.calls += 1;
    }

    /// Means in µs: to the thread, on it, back.
    fn means(&self) -> (f64, f64, f64) {
        let n = f64::from(self.calls.max(1));
        let us = |d: Duration| d.as_secs_f64() * 1e6 / n;
        (us(self.to_thread), us(self.on_thread), us(self.back))
    }
}

/// One call for the pool: the request, when it was handed over, and where the answer goes.
struct Job {
    request: sync_bind::exports::capgate::plugin0_1_0::policy::PolicyRequest,
    sent: Instant,
    reply: tokio::sync::oneshot::Sender<(Decided, Stamps)>,
}

/// A bounded pool of OS threads, each with its own warm instance, fed by one bounded queue.
struct Pool {
    queue: Option<SyncSender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl Pool {
    fn new(threads: usize, engine: &Engine, pre: &InstancePre<Data>) -> wasmtime::Result<Pool> {
        // Bounded: a full queue refuses the call (backpressure) instead of blocking the
        // caller's worker.
        let (queue, jobs) = std::sync::mpsc::sync_channel::<Job>(threads * 4);
        let jobs: Arc<Mutex<Receiver<Job>>> = Arc::new(Mutex::new(jobs));
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let mut worker = SyncWorker::new(engine, pre)?;
            let jobs = jobs.clone();
            let handle = std::thread::Builder::new()
                .name(format!("exec-pool-{i}"))
                .spawn(move || {
                    loop {
                        // The guard is dropped at the end of this statement: the next idle
                        // thread waits for the next job while this one runs.
                        let job = jobs
                            .lock()
                            .map_err(|_| ())
                            .and_then(|q| q.recv().map_err(|_| ()));
                        let Ok(job) = job else { break };
                        let started = Instant::now();
                        let decided = worker.evaluate(&job.request);
                        let stamps = Stamps {
                            sent: job.sent,
                            started,
                            done: Instant::now(),
                        };
                        let _ = job.reply.send((decided, stamps));
                    }
                })
                .map_err(|e| wasmtime::Error::msg(format!("cannot start a pool thread: {e}")))?;
            handles.push(handle);
        }
        Ok(Pool {
            queue: Some(queue),
            threads: handles,
        })
    }

    async fn evaluate(&self, call: &Call, handoff: &mut Handoff) -> Decided {
        let request = wit_request!(sync_bind, call);
        let (reply, answer) = tokio::sync::oneshot::channel();
        let Some(queue) = &self.queue else {
            return Decided::Other("the pool is stopped".into());
        };
        let job = Job {
            request,
            sent: Instant::now(),
            reply,
        };
        match queue.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Decided::Other("the pool is busy".into()),
            Err(TrySendError::Disconnected(_)) => {
                return Decided::Other("the pool is stopped".into());
            }
        }
        match answer.await {
            Ok((decided, stamps)) => {
                handoff.add(&stamps);
                decided
            }
            Err(_) => Decided::Other("a pool thread died".into()),
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        drop(self.queue.take());
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The variants' state.
enum Variant {
    AsyncInline(AsyncWorker),
    SyncInline(SyncWorker),
    SyncPool(Pool, Handoff),
    SpawnBlocking(Option<SyncWorker>, Handoff),
}

impl Variant {
    async fn evaluate(&mut self, call: &Call) -> Decided {
        match self {
            Variant::AsyncInline(w) => w.evaluate(call).await,
            Variant::SyncInline(w) => w.evaluate(&wit_request!(sync_bind, call)),
            Variant::SyncPool(p, handoff) => p.evaluate(call, handoff).await,
            Variant::SpawnBlocking(slot, handoff) => {
                let request = wit_request!(sync_bind, call);
                let Some(mut w) = slot.take() else {
                    return Decided::Other("the instance was lost".into());
                };
                let sent = Instant::now();
                match tokio::task::spawn_blocking(move || {
                    let started = Instant::now();
                    let d = w.evaluate(&request);
                    let done = Instant::now();
                    (w, d, started, done)
                })
                .await
                {
                    Ok((w, d, started, done)) => {
                        handoff.add(&Stamps {
                            sent,
                            started,
                            done,
                        });
                        *slot = Some(w);
                        d
                    }
                    Err(e) => Decided::Other(format!("spawn_blocking: {e}")),
                }
            }
        }
    }
}

impl Variant {
    /// The off-thread variants' handoff sums.
    fn handoff(&mut self) -> Option<&mut Handoff> {
        match self {
            Variant::SyncPool(_, h) | Variant::SpawnBlocking(_, h) => Some(h),
            _ => None,
        }
    }
}

const VARIANTS: [&str; 4] = [
    "async-inline",
    "sync-inline",
    "sync-pool",
    "sync-spawn-blocking",
];

/// Calls one variant makes before the next variant's turn.
const BLOCK: usize = 1_000;

/// One variant's timed results: its percentiles and, off-thread, its handoff means.
type Measured = (Summary, Option<(f64, f64, f64)>);

/// Check each variant's decision in full once; then warm up and time them, interleaved in
/// blocks of [`BLOCK`] calls (so a machine that gets slower or faster during the run shifts
/// every variant alike), checking the decision's kind after every call.
async fn measure(plan: &Plan, variants: &mut [(&str, Variant)], call: &Call) -> Vec<Measured> {
    let expected = Decided::RequireApproval {
        reason: REASON.to_string(),
        approval_type: Some("manager".to_string()),
    };
    for (name, v) in variants.iter_mut() {
        let first = v.evaluate(call).await;
        assert_eq!(first, expected, "{name}: unexpected decision");
    }
    let mut left = plan.warmup;
    while left > 0 {
        let n = left.min(BLOCK);
        for (name, v) in variants.iter_mut() {
            for _ in 0..n {
                let d = v.evaluate(call).await;
                assert!(
                    matches!(d, Decided::RequireApproval { .. }),
                    "{name}: {d:?}"
                );
            }
        }
        left -= n;
    }
    for (_, v) in variants.iter_mut() {
        if let Some(h) = v.handoff() {
            *h = Handoff::default();
        }
    }
    let mut samples: Vec<Vec<Duration>> = variants
        .iter()
        .map(|_| Vec::with_capacity(plan.calls))
        .collect();
    let mut left = plan.calls;
    while left > 0 {
        let n = left.min(BLOCK);
        for ((name, v), samples) in variants.iter_mut().zip(samples.iter_mut()) {
            for _ in 0..n {
                let start = Instant::now();
                let d = v.evaluate(call).await;
                samples.push(start.elapsed());
                assert!(
                    matches!(d, Decided::RequireApproval { .. }),
                    "{name}: {d:?}"
                );
            }
        }
        left -= n;
    }
    variants
        .iter_mut()
        .zip(samples)
        .map(|((_, v), samples)| (summarize(samples), v.handoff().map(|h| h.means())))
        .collect()
}

/// The CPUs this process may run on (`Cpus_allowed_list` of /proc/self/status).
fn cpus_allowed() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn main() {
    let plan = match Plan::from_args() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("exec_pool: {e}");
            std::process::exit(2);
        }
    };
    let (file, digest) = support::pinned("refund_limit");
    let bytes = std::fs::read(support::wasm_dir().join(&file)).expect("read the plugin");
    assert_eq!(
        capgate_wasm::sha256_hex(&bytes),
        digest,
        "{file} changed while loading"
    );

    let async_engine = engine().expect("async engine");
    let sync_engine = engine().expect("sync engine");
    let async_pre = prepare(&async_engine, &bytes, |l| {
        async_bind::capgate::plugin0_1_0::host::add_to_linker::<Data, HasSelf<Data>>(l, |d| d)
    })
    .expect("link the async engine");
    let sync_pre = prepare(&sync_engine, &bytes, |l| {
        sync_bind::capgate::plugin0_1_0::host::add_to_linker::<Data, HasSelf<Data>>(l, |d| d)
    })
    .expect("link the sync engine");

    // One epoch ticker for both engines, on its own thread, as capgate's host has.
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (a, s, stop) = (async_engine.weak(), sync_engine.weak(), stop.clone());
        std::thread::Builder::new()
            .name("exec-pool-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    for e in [&a, &s] {
                        if let Some(e) = e.upgrade() {
                            e.increment_epoch();
                        }
                    }
                }
            })
            .expect("epoch ticker")
    };

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let command: Vec<String> = std::env::args().collect();
    let cpus = cpus_allowed();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!("command: {}", command.join(" "));
    println!(
        "cpus allowed: {cpus} ({cores} available: {}); pool threads: {}; plugin: {file} sha256 {}…",
        if cores == 1 { "pinned" } else { "not pinned" },
        plan.pool_threads,
        &digest[..12]
    );
    println!(
        "one refund_limit evaluate on a warm instance, µs (nearest rank; {} warm-up, {} timed per variant, interleaved in blocks of {BLOCK}, one in flight, current-thread runtime)",
        plan.warmup, plan.calls
    );
    println!(
        "{:<20} {:>9} {:>9} {:>9} {:>9} {:>15}",
        "variant", "p50", "p99", "p99.9", "max", "p50/sync-inline"
    );
    let call = Call::new();
    let results: Vec<(&str, Measured)> = rt.block_on(async {
        let mut variants = Vec::new();
        for name in VARIANTS {
            let v = match name {
                "async-inline" => Variant::AsyncInline(
                    AsyncWorker::new(&async_engine, &async_pre)
                        .await
                        .expect("instantiate"),
                ),
                "sync-inline" => Variant::SyncInline(
                    SyncWorker::new(&sync_engine, &sync_pre).expect("instantiate"),
                ),
                "sync-pool" => Variant::SyncPool(
                    Pool::new(plan.pool_threads, &sync_engine, &sync_pre).expect("pool"),
                    Handoff::default(),
                ),
                _ => Variant::SpawnBlocking(
                    Some(SyncWorker::new(&sync_engine, &sync_pre).expect("instantiate")),
                    Handoff::default(),
                ),
            };
            variants.push((name, v));
        }
        let measured = measure(&plan, &mut variants, &call).await;
        VARIANTS.into_iter().zip(measured).collect()
    });
    let base = results
        .iter()
        .find(|(n, _)| *n == "sync-inline")
        .map_or(1.0, |(_, (s, _))| s.p50);
    for (name, (s, _)) in &results {
        println!(
            "{name:<20} {:>9.2} {:>9.2} {:>9.2} {:>9.1} {:>14.2}×",
            s.p50,
            s.p99,
            s.p999,
            s.max,
            s.p50 / base
        );
    }
    for (name, (_, handoff)) in &results {
        if let Some((to, on, back)) = handoff {
            println!(
                "{name}: mean µs per timed call: caller → thread {to:.2}, evaluate on the thread {on:.2}, thread → caller {back:.2}"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = ticker.join();
}
