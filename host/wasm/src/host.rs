//! The process-wide Wasm host: one [`Engine`] (component model, pooling allocator, epoch
//! interruption, fuel), the epoch ticker thread, the upkeep thread (drops finished instances
//! and refills the bindings' reserves of ready instances, off the request path), the slow
//! lane (where a guest call that outlives its inline slice finishes, so it never holds a
//! request thread), and the linker every plugin is pre-linked against.

use crate::error::CallError;
use crate::error::LoadError;
use crate::store_data::StoreData;
use crate::wit;
use sha2::{Digest, Sha256};
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::Poll;
use std::thread::{JoinHandle, Thread};
use std::time::Duration;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// Engine-wide settings. Precompiled artifacts only load into an engine with the same
/// settings, so these feed the cache key (via the engine's compatibility hash).
#[derive(Debug, Clone, PartialEq)]
pub struct HostOptions {
    /// Epoch tick. A deadline is rounded up to whole ticks, plus one (the epoch is
    /// engine-wide, so the current tick may be nearly over when a call starts).
    pub epoch_tick: Duration,
    /// Component instances alive at once across the process (pool slots).
    pub max_instances: u32,
    /// Engine-wide ceiling of one linear memory; per-binding caps are lower.
    pub max_memory_bytes: usize,
    /// Wasm stack per call (stack overflow traps beyond it).
    pub max_wasm_stack: usize,
    /// Bytes of each linear memory kept resident (reset with `memset`, not `madvise`) when a
    /// slot is reused: the biggest win for fresh-instance calls.
    pub keep_resident_bytes: usize,
    /// Finished instances queued for the upkeep thread before drops happen inline. Small on
    /// purpose: each queued store still holds its pool slot, and when the upkeep thread is
    /// starved (one busy core) 256 held slots made new instances land on cold slots (32 cut
    /// the pinned fresh invoke's p50 by ~6 % and its p99 by ~20 % in `percall`).
    ///
    /// 0: every finished instance is dropped on the thread that finished it. The default
    /// when the process may run on one CPU only (`taskset`, a one-CPU container quota):
    /// there the upkeep thread can only run in the request thread's time, and draining a
    /// queue of stores in one go put that whole batch into one call's latency (one fresh
    /// policy call pinned, `percall`: p99 143–147 µs queued, 42 µs dropped inline, p50
    /// unchanged).
    pub reaper_queue: usize,
    /// How often the upkeep thread drops what was queued when nothing wakes it. Callers do
    /// not wake it per call (a futex wake per call cost more than the drop it saved): it
    /// wakes on this period, early when the queue is half full, and when a reserve falls to
    /// its refill mark.
    pub reaper_period: Duration,
    /// How long a guest call may run on the caller's thread. A call still running after it
    /// yields at the next epoch tick and finishes on the slow lane, so a Tokio worker is
    /// never held by guest code for much more than this.
    pub inline_slice: Duration,
    /// Threads of the slow lane (0: one per available core). Started on first use.
    pub slow_lane_threads: usize,
    /// Nice value of the slow lane's and the upkeep thread's threads (Linux; 0 leaves them
    /// at the process's priority). Above 0, a guest that loops, or a refill, yields the CPU
    /// to request threads whenever they are runnable.
    pub background_nice: i32,
    /// Most ready instances all reserves together may hold (each holds a pool slot).
    pub max_reserved: usize,
    /// Most idle pooled instances all pooled bindings together keep, across every
    /// namespace (each holds a pool slot and its guest's memory). Past it the oldest idle
    /// instance is retired, so no number of tenants can park every slot. 0: no instance is
    /// kept idle.
    pub max_idle_pooled: usize,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            epoch_tick: Duration::from_millis(1),
            max_instances: 1_000,
            max_memory_bytes: 256 << 20,
            max_wasm_stack: 512 << 10,
            keep_resident_bytes: 2 << 20,
            reaper_queue: if one_cpu() { 0 } else { 32 },
            reaper_period: Duration::from_millis(1),
            inline_slice: Duration::from_millis(1),
            slow_lane_threads: 0,
            background_nice: 10,
            max_reserved: 250,
            max_idle_pooled: 256,
        }
    }
}

/// Whether this process may run on one CPU only (its affinity mask or cgroup quota).
fn one_cpu() -> bool {
    std::thread::available_parallelism().is_ok_and(|n| n.get() == 1)
}

pub(crate) type Reaped = Box<dyn Send>;

/// A binding whose reserve the upkeep thread keeps full.
pub(crate) trait Refill: Send + Sync {
    /// Instantiate ready instances up to the binding's reserve size, while `room` (which
    /// counts each one against the host's `max_reserved`) allows.
    fn top_up(&self, room: &dyn Fn() -> bool);
}

/// Work for the upkeep thread: finished stores to drop, reserves to refill.
#[derive(Default)]
pub(crate) struct Upkeep {
    reaped: Mutex<Vec<Reaped>>,
    bindings: Mutex<Vec<Weak<dyn Refill>>>,
    refill: AtomicBool,
    reserved: AtomicUsize,
}

impl Upkeep {
    /// Everything queued so far (dropped by the caller, outside the lock).
    fn take(&self) -> Vec<Reaped> {
        match self.reaped.lock() {
            Ok(mut items) => std::mem::take(&mut *items),
            Err(_) => Vec::new(),
        }
    }

    /// Top up every registered reserve; forget bindings that were dropped.
    fn refill(&self, max_reserved: usize) {
        let bindings: Vec<Arc<dyn Refill>> = match self.bindings.lock() {
            Ok(mut b) => {
                b.retain(|w| w.strong_count() > 0);
                b.iter().filter_map(Weak::upgrade).collect()
            }
            Err(_) => return,
        };
        let room = || {
            self.reserved
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max_reserved).then_some(n + 1)
                })
                .is_ok()
        };
        for b in bindings {
            b.top_up(&room);
        }
    }
}

pub(crate) struct HostInner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<StoreData>,
    pub(crate) options: HostOptions,
    pub(crate) compat: String,
    pub(crate) idle: crate::idle::IdleLedger,
    upkeep: Arc<Upkeep>,
    upkeep_thread: Option<Thread>,
    slow_lane: OnceLock<Result<tokio::runtime::Runtime, String>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Drop for HostInner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = &self.upkeep_thread {
            t.unpark();
        }
        if let Some(Ok(rt)) = self.slow_lane.take() {
            rt.shutdown_background();
        }
        // The upkeep thread may hold the last reference (a binding it was refilling): it
        // must not join itself. It sees `stop` and ends on its own.
        let me = std::thread::current().id();
        for t in self.threads.drain(..) {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

/// The Wasm host. Cheap to clone; create one per process ([`WasmHost::shared`]) and load
/// every plugin through it.
#[derive(Clone)]
pub struct WasmHost {
    pub(crate) inner: Arc<HostInner>,
}

impl std::fmt::Debug for WasmHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmHost")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl WasmHost {
    /// The process-wide host with default options, created on first use.
    pub fn shared() -> Result<WasmHost, LoadError> {
        static SHARED: OnceLock<WasmHost> = OnceLock::new();
        if let Some(h) = SHARED.get() {
            return Ok(h.clone());
        }
        let host = WasmHost::new(HostOptions::default())?;
        Ok(SHARED.get_or_init(|| host).clone())
    }

    /// A host with its own engine. Prefer [`WasmHost::shared`]: engines do not share pool
    /// slots or compiled code.
    pub fn new(options: HostOptions) -> Result<WasmHost, LoadError> {
        let engine =
            Engine::new(&engine_config(&options)?).map_err(|e| LoadError::Engine(e.into()))?;
        let mut linker: Linker<StoreData> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| LoadError::Engine(e.into()))?;
        deny_stdio(&mut linker).map_err(|e| LoadError::Engine(e.into()))?;
        wit::capgate::plugin::host::add_to_linker::<StoreData, HasSelf<StoreData>>(
            &mut linker,
            |d| d,
        )
        .map_err(|e| LoadError::Engine(e.into()))?;
        wit::capgate::plugin::progress::add_to_linker::<StoreData, HasSelf<StoreData>>(
            &mut linker,
            |d| d,
        )
        .map_err(|e| LoadError::Engine(e.into()))?;
        wit::wit_request::add_to_linker::<StoreData, HasSelf<StoreData>>(&mut linker, |d| d)
            .map_err(|e| LoadError::Engine(e.into()))?;
        let compat = compatibility_hash(&engine);
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();

        // The epoch ticker: a dedicated thread, so a busy async runtime can never delay or
        // burst ticks (which would turn into false timeouts).
        let weak = engine.weak();
        let tick = options.epoch_tick;
        let stop_ticker = stop.clone();
        threads.push(
            std::thread::Builder::new()
                .name("capgate-wasm-epoch".into())
                .spawn(move || {
                    while !stop_ticker.load(Ordering::Relaxed) {
                        std::thread::sleep(tick);
                        match weak.upgrade() {
                            Some(engine) => engine.increment_epoch(),
                            None => break,
                        }
                    }
                })
                .map_err(|e| {
                    LoadError::Engine(format!("cannot start the epoch ticker: {e}").into())
                })?,
        );

        // The upkeep thread: dropping a store returns its slot to the pool (memory reset);
        // doing it here lets the caller have its answer first. It drains the queue on a
        // timer, so a call never pays for waking it, and refills reserves when asked.
        let upkeep = Arc::new(Upkeep::default());
        let work = upkeep.clone();
        let stop_upkeep = stop.clone();
        let period = options.reaper_period.max(Duration::from_micros(50));
        let nice = options.background_nice;
        let max_reserved = options.max_reserved;
        let upkeep_handle = std::thread::Builder::new()
            .name("capgate-wasm-upkeep".into())
            .spawn(move || {
                lower_priority(nice);
                loop {
                    let stopping = stop_upkeep.load(Ordering::Relaxed);
                    drop(work.take());
                    if stopping {
                        break;
                    }
                    if work.refill.swap(false, Ordering::AcqRel) {
                        work.refill(max_reserved);
                    }
                    std::thread::park_timeout(period);
                }
            })
            .map_err(|e| {
                LoadError::Engine(format!("cannot start the upkeep thread: {e}").into())
            })?;
        let upkeep_thread = Some(upkeep_handle.thread().clone());
        threads.push(upkeep_handle);

        Ok(WasmHost {
            inner: Arc::new(HostInner {
                engine,
                linker,
                options,
                compat,
                idle: crate::idle::IdleLedger::default(),
                upkeep,
                upkeep_thread,
                slow_lane: OnceLock::new(),
                stop,
                threads,
            }),
        })
    }

    /// The engine (for tools that need it, e.g. precompiling).
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// Whether the host can still bound calls: its epoch ticker (deadlines and the inline
    /// slice) and upkeep thread (retiring instances, refilling reserves) are running. A
    /// host whose threads died would let guests run past their deadlines: `/readyz` says
    /// so instead of serving.
    pub fn is_healthy(&self) -> Result<(), String> {
        let names = ["epoch ticker", "upkeep thread"];
        for (thread, name) in self.inner.threads.iter().zip(names) {
            if thread.is_finished() {
                return Err(format!("the Wasm host's {name} has stopped"));
            }
        }
        Ok(())
    }

    /// The options in force.
    pub fn options(&self) -> &HostOptions {
        &self.inner.options
    }

    /// Idle pooled instances kept right now, every binding and namespace together (at most
    /// [`HostOptions::max_idle_pooled`]).
    pub fn idle_pooled(&self) -> usize {
        self.inner.idle.len()
    }

    /// Idle pooled instances retired so far because the host-wide cap was reached.
    pub fn idle_evictions(&self) -> u64 {
        self.inner.idle.evicted()
    }

    /// Hex digest of the engine's precompilation compatibility hash: part of every cache key.
    pub fn compatibility_hash(&self) -> &str {
        &self.inner.compat
    }

    /// Hand something (a finished store) to the upkeep thread; drop it here if the queue is
    /// full so memory stays bounded.
    pub(crate) fn reap(&self, item: Reaped) {
        let limit = self.inner.options.reaper_queue;
        if limit == 0 {
            drop(item);
            return;
        }
        let Ok(mut queue) = self.inner.upkeep.reaped.lock() else {
            drop(item);
            return;
        };
        if queue.len() >= limit {
            drop(queue);
            drop(item);
            return;
        }
        queue.push(item);
        let half_full = queue.len() == limit.div_ceil(2);
        drop(queue);
        if half_full {
            self.wake_upkeep();
        }
    }

    fn wake_upkeep(&self) {
        if let Some(t) = &self.inner.upkeep_thread {
            t.unpark();
        }
    }

    /// Keep this binding's reserve full from now on.
    pub(crate) fn register(&self, binding: Weak<dyn Refill>) {
        if let Ok(mut b) = self.inner.upkeep.bindings.lock() {
            b.push(binding);
        }
    }

    /// A reserve fell to its refill mark.
    pub(crate) fn want_refill(&self) {
        self.inner.upkeep.refill.store(true, Ordering::Release);
        self.wake_upkeep();
    }

    /// `n` ready instances left a reserve (taken by a call, failed, or dropped).
    pub(crate) fn reserved_released(&self, n: usize) {
        let _ = self
            .inner
            .upkeep
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| {
                Some(r.saturating_sub(n))
            });
    }

    /// Ready instances held by all reserves together.
    pub fn reserved_instances(&self) -> usize {
        self.inner.upkeep.reserved.load(Ordering::Acquire)
    }

    /// Run a guest future on this thread for the inline slice; if it is still running (it
    /// yielded at an epoch tick past the slice), finish it on the slow lane so the caller's
    /// thread is free. The caller awaits it either way.
    pub(crate) async fn run_off_worker<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, CallError> {
        let mut work = Box::pin(work);
        let first = std::future::poll_fn(|cx| match work.as_mut().poll(cx) {
            Poll::Ready(v) => Poll::Ready(Some(v)),
            Poll::Pending => Poll::Ready(None),
        })
        .await;
        if let Some(v) = first {
            return Ok(v);
        }
        let lane = self
            .inner
            .slow_lane
            .get_or_init(|| slow_lane(&self.inner.options))
            .as_ref()
            .map_err(|e| CallError::Trap(format!("the slow lane is unavailable: {e}")))?;
        lane.spawn(work)
            .await
            .map_err(|e| CallError::Trap(format!("plugin call aborted on the slow lane: {e}")))
    }

    /// Whole ticks for a budget: rounded up, plus one for the tick in progress.
    pub(crate) fn ticks_for(&self, budget: Duration) -> u64 {
        let tick = self.inner.options.epoch_tick.as_nanos().max(1);
        let n = budget.as_nanos().div_ceil(tick);
        u64::try_from(n).unwrap_or(u64::MAX - 1).saturating_add(1)
    }
}

/// The slow lane: a small multi-thread runtime of background-priority threads.
fn slow_lane(o: &HostOptions) -> Result<tokio::runtime::Runtime, String> {
    let threads = match o.slow_lane_threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    };
    let nice = o.background_nice;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("capgate-wasm-slow")
        .on_thread_start(move || lower_priority(nice))
        .build()
        .map_err(|e| e.to_string())
}

/// Lower the calling thread's priority (Linux: a per-thread nice value).
fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        // SAFETY: `gettid` has no preconditions; `setpriority` on the calling thread's id
        // changes only that thread's nice value. A failure leaves the priority as it was.
        unsafe {
            let tid = libc::gettid();
            let _ = libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

fn engine_config(o: &HostOptions) -> Result<Config, LoadError> {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(o.max_instances)
        .total_core_instances(o.max_instances.saturating_mul(8))
        .total_memories(o.max_instances.saturating_mul(2))
        .total_tables(o.max_instances.saturating_mul(4))
        // One fiber stack per call in flight (every call is `call_async`).
        .total_stacks(o.max_instances)
        .max_memory_size(o.max_memory_bytes)
        // componentize-py components hold 38 core instances; leave room.
        .max_core_instances_per_component(64)
        .max_memories_per_component(4)
        .max_tables_per_component(16)
        .max_component_instance_size(1 << 20)
        .linear_memory_keep_resident(o.keep_resident_bytes)
        .table_keep_resident(64 << 10)
        .pagemap_scan(Enabled::Auto);
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .consume_fuel(true)
        .concurrency_support(false)
        .max_wasm_stack(o.max_wasm_stack)
        .async_stack_size(o.max_wasm_stack + (512 << 10))
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    // `CAPGATE_WASM_PROFILER=perfmap`: wasmtime writes /tmp/perf-PID.map, so `perf report`
    // names the guest's own functions instead of `[JIT]` addresses. Not part of the
    // compatibility hash: it changes no code, only what is published about it.
    if std::env::var_os("CAPGATE_WASM_PROFILER").is_some_and(|v| v == "perfmap") {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    Ok(config)
}

/// SHA-256 of everything the engine hashes into its compatibility check.
fn compatibility_hash(engine: &Engine) -> String {
    struct ShaHasher(Sha256);
    impl Hasher for ShaHasher {
        fn finish(&self) -> u64 {
            0
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
    }
    let mut h = ShaHasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut h);
    capgate_core::digest::Sha256Hex::finish(h.0).into_string()
}

/// Plugins get no stdio: `get-stdin`, `get-stdout` and `get-stderr` trap (the call then fails
/// closed). wasmtime-wasi's synchronous stream methods block on a Tokio runtime, which is
/// not allowed on the async worker thread a policy runs on; and `log` is the bounded,
/// rate-limited channel for plugin output anyway. A guest that panics or runs out of memory
/// still fails with its real cause: the sandbox reports the cap or trap it recorded first.
fn deny_stdio(linker: &mut Linker<StoreData>) -> wasmtime::Result<()> {
    use wasmtime::component::Resource;
    use wasmtime_wasi::p2::{DynInputStream, DynOutputStream};
    const VERSION: &str = "0.2.12";
    linker.allow_shadowing(true);
    linker
        .instance(&format!("wasi:cli/stdin@{VERSION}"))?
        .func_wrap(
            "get-stdin",
            |_, (): ()| -> wasmtime::Result<(Resource<DynInputStream>,)> {
                Err(wasmtime::Error::msg("plugins have no stdin"))
            },
        )?;
    for (iface, func) in [("stdout", "get-stdout"), ("stderr", "get-stderr")] {
        linker
            .instance(&format!("wasi:cli/{iface}@{VERSION}"))?
            .func_wrap(
                func,
                |_, (): ()| -> wasmtime::Result<(Resource<DynOutputStream>,)> {
                    Err(wasmtime::Error::msg(
                        "plugins have no stdout/stderr: write through the capgate `log` import",
                    ))
                },
            )?;
    }
    linker.allow_shadowing(false);
    Ok(())
}
