//! The process-wide Wasm host: one [`Engine`] (component model, pooling allocator, epoch
//! interruption, fuel), the epoch ticker thread, the reaper thread that drops finished
//! instances off the request path, and the linker every plugin is pre-linked against.

use crate::bindings;
use crate::error::LoadError;
use crate::store::StoreData;
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
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
    /// Finished instances queued for the reaper thread before drops happen inline.
    pub reaper_queue: usize,
    /// How often the reaper drops what was queued. Callers never wake it (a futex wake per
    /// call cost more than the drop it saved); it wakes on this period, or early when the
    /// queue is half full.
    pub reaper_period: Duration,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            epoch_tick: Duration::from_millis(1),
            max_instances: 1_000,
            max_memory_bytes: 256 << 20,
            max_wasm_stack: 512 << 10,
            keep_resident_bytes: 2 << 20,
            reaper_queue: 256,
            reaper_period: Duration::from_millis(1),
        }
    }
}

pub(crate) type Reaped = Box<dyn Send>;

/// Finished stores waiting for the reaper thread.
#[derive(Default)]
pub(crate) struct ReapQueue {
    items: Mutex<Vec<Reaped>>,
}

impl ReapQueue {
    /// Everything queued so far (dropped by the caller, outside the lock).
    fn take(&self) -> Vec<Reaped> {
        match self.items.lock() {
            Ok(mut items) => std::mem::take(&mut *items),
            Err(_) => Vec::new(),
        }
    }
}

pub(crate) struct HostInner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<StoreData>,
    pub(crate) options: HostOptions,
    pub(crate) compat: String,
    reaper: Arc<ReapQueue>,
    reaper_thread: Option<Thread>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Drop for HostInner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = &self.reaper_thread {
            t.unpark();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
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
            Engine::new(&engine_config(&options)?).map_err(|e| LoadError::Engine(e.to_string()))?;
        let mut linker: Linker<StoreData> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| LoadError::Engine(e.to_string()))?;
        deny_stdio(&mut linker).map_err(|e| LoadError::Engine(e.to_string()))?;
        bindings::capgate::plugin::host::add_to_linker::<StoreData, HasSelf<StoreData>>(
            &mut linker,
            |d| d,
        )
        .map_err(|e| LoadError::Engine(e.to_string()))?;
        bindings::capgate::plugin::progress::add_to_linker::<StoreData, HasSelf<StoreData>>(
            &mut linker,
            |d| d,
        )
        .map_err(|e| LoadError::Engine(e.to_string()))?;
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
                .map_err(|e| LoadError::Engine(format!("cannot start the epoch ticker: {e}")))?,
        );

        // The reaper: dropping a store returns its slot to the pool (memory reset); doing it
        // here lets the caller have its answer first. It drains the queue on a timer, so a
        // call never pays for waking it.
        let reaper = Arc::new(ReapQueue::default());
        let queue = reaper.clone();
        let stop_reaper = stop.clone();
        let period = options.reaper_period.max(Duration::from_micros(50));
        let reaper_handle = std::thread::Builder::new()
            .name("capgate-wasm-reaper".into())
            .spawn(move || {
                loop {
                    let stopping = stop_reaper.load(Ordering::Relaxed);
                    drop(queue.take());
                    if stopping {
                        break;
                    }
                    std::thread::park_timeout(period);
                }
            })
            .map_err(|e| LoadError::Engine(format!("cannot start the reaper: {e}")))?;
        let reaper_thread = Some(reaper_handle.thread().clone());
        threads.push(reaper_handle);

        Ok(WasmHost {
            inner: Arc::new(HostInner {
                engine,
                linker,
                options,
                compat,
                reaper,
                reaper_thread,
                stop,
                threads,
            }),
        })
    }

    /// The engine (for tools that need it, e.g. precompiling).
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The options in force.
    pub fn options(&self) -> &HostOptions {
        &self.inner.options
    }

    /// Hex digest of the engine's precompilation compatibility hash: part of every cache key.
    pub fn compatibility_hash(&self) -> &str {
        &self.inner.compat
    }

    /// Hand something (a finished store) to the reaper thread; drop it here if the queue is
    /// full so memory stays bounded.
    pub(crate) fn reap(&self, item: Reaped) {
        let limit = self.inner.options.reaper_queue.max(1);
        let Ok(mut queue) = self.inner.reaper.items.lock() else {
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
        if half_full && let Some(t) = &self.inner.reaper_thread {
            t.unpark();
        }
    }

    /// Whole ticks for a budget: rounded up, plus one for the tick in progress.
    pub(crate) fn ticks_for(&self, budget: Duration) -> u64 {
        let tick = self.inner.options.epoch_tick.as_nanos().max(1);
        let n = budget.as_nanos().div_ceil(tick);
        u64::try_from(n).unwrap_or(u64::MAX - 1).saturating_add(1)
    }
}

fn engine_config(o: &HostOptions) -> Result<Config, LoadError> {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(o.max_instances)
        .total_core_instances(o.max_instances.saturating_mul(8))
        .total_memories(o.max_instances.saturating_mul(2))
        .total_tables(o.max_instances.saturating_mul(4))
        .total_stacks(0)
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
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
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
    hex::encode(h.0.finalize())
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
