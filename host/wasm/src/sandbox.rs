//! One binding's call machinery: get an instance (a ready one from the binding's reserve, a
//! warm one from its per-namespace pool, or instantiated now), arm fuel and the deadline, run
//! the call off the caller's thread once it outlives the inline slice, classify any failure,
//! and hand the finished store to the upkeep thread.

use crate::binding::Binding;
use crate::error::{CallError, LoadError};
use crate::host::Refill;
use crate::limits::{Isolation, Limits, ReserveOptions};
use crate::plugin::Plugin;
use crate::store_data::{LogBucket, LogCtx, StoreData};
use capgate_core::CancellationToken;
use capgate_core::procedure::ProgressFn;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use wasmtime::component::Instance;
use wasmtime::{Store, Trap, UpdateDeadline};

/// A binding's name, config, limits, instance pool and (fresh isolation) instance reserve.
pub(crate) struct Sandbox<I: Exports> {
    pub(crate) plugin: Arc<Plugin>,
    pub(crate) name: Arc<str>,
    pub(crate) limits: Limits,
    pub(crate) isolation: Isolation,
    pub(crate) indices: I,
    /// The binding's `config`, serialized once.
    pub(crate) config: String,
    /// The binding's `config` as the value a guest reads through `request.get`.
    config_value: Arc<serde_json::Value>,
    /// Whether the component imports `capgate:plugin/request` (0.3.0): only then does a call
    /// lend it the request's values.
    pub(crate) reads_lazily: bool,
    bucket: Arc<LogBucket>,
    pool: Mutex<HashMap<String, Vec<Warm<I::Guest>>>>,
    reserve: Reserve<I::Guest>,
}

/// The exports a binding calls, looked up once per instance (a pooled or reserved instance
/// keeps them, so its call skips the lookup and type check).
pub(crate) trait Exports: Send + Sync + 'static {
    /// The typed export functions of one instance.
    type Guest: Clone + Send + 'static;
    /// Find them in `plugin`'s component: [`LoadError::MissingExport`] when it does not
    /// export the interface, [`LoadError::Invalid`] when the export has the wrong shape.
    fn resolve(plugin: &Plugin) -> Result<Self, LoadError>
    where
        Self: Sized;
    /// Look them up in a fresh instance.
    fn load_guest(
        &self,
        store: &mut Store<StoreData>,
        instance: &Instance,
    ) -> wasmtime::Result<Self::Guest>;
}

/// [`Exports`] of one generated interface module, exported under `name`.
macro_rules! exports {
    ($($m:ident => $name:ident),* $(,)?) => {$(
        impl Exports for crate::wit::$m::GuestIndices {
            type Guest = crate::wit::$m::Guest;
            fn resolve(plugin: &Plugin) -> Result<Self, LoadError> {
                plugin.require(crate::wit::names::$name)?;
                Self::new(&plugin.pre).map_err(|e| plugin.invalid(e))
            }
            fn load_guest(
                &self,
                store: &mut Store<StoreData>,
                instance: &Instance,
            ) -> wasmtime::Result<Self::Guest> {
                self.load(store, instance)
            }
        }
    )*};
}
exports!(
    wit_policy => POLICY,
    wit_redactor => REDACTOR,
    wit_authorizer => AUTHORIZER,
    wit_authorizer_v1 => AUTHORIZER_V1,
    wit_procedure => PROCEDURE,
    wit_health => HEALTH,
);

/// An interface and an optional second one (a procedure and its `health`): the second is
/// bound when the component exports it, and refused only when that export is malformed.
impl<A: Exports, B: Exports> Exports for (A, Option<B>) {
    type Guest = (A::Guest, Option<B::Guest>);
    fn resolve(plugin: &Plugin) -> Result<Self, LoadError> {
        let a = A::resolve(plugin)?;
        let b = match B::resolve(plugin) {
            Ok(b) => Some(b),
            Err(LoadError::MissingExport { .. }) => None,
            Err(e) => return Err(e),
        };
        Ok((a, b))
    }
    fn load_guest(
        &self,
        store: &mut Store<StoreData>,
        instance: &Instance,
    ) -> wasmtime::Result<Self::Guest> {
        let a = self.0.load_guest(store, instance)?;
        let b = match &self.1 {
            Some(b) => Some(b.load_guest(store, instance)?),
            None => None,
        };
        Ok((a, b))
    }
}

struct Warm<G> {
    store: Store<StoreData>,
    guest: G,
    uses: u32,
    /// Its entry in the host's idle ledger while it is parked.
    seq: u64,
}

/// The pool partition of one call: the tenant namespace the call was made in, so pooled
/// guest state never crosses tenants; the binding's own namespace when the embedder has
/// none.
pub(crate) fn pool_key<'a>(binding: &'a str, call: &'a str) -> &'a str {
    if call.is_empty() { binding } else { call }
}

/// How one call is bounded.
#[derive(Default)]
pub(crate) struct CallOpts<'a> {
    /// Pool partition (pooled isolation never crosses it).
    pub(crate) namespace: &'a str,
    /// An outer deadline (core's policy batch deadline).
    pub(crate) deadline: Option<Instant>,
    /// Progress reports go here.
    pub(crate) progress: Option<ProgressFn>,
    /// The caller's cancellation (checked every epoch tick).
    pub(crate) cancel: Option<CancellationToken>,
    /// The request's input, context and attributes, lent to the guest for this call only
    /// (`request.get`); set only when the component reads lazily.
    pub(crate) values: Option<Arc<capgate_core::policy::SharedValues>>,
}

/// Marker error raised from the epoch callback when the caller cancels.
#[derive(Debug)]
struct CancelledByCaller;

impl std::fmt::Display for CancelledByCaller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cancelled by the caller")
    }
}

impl std::error::Error for CancelledByCaller {}

/// What a call body returns: `Err` (outer) is a trap or host failure, which retires the
/// instance; `Err` (inner) is a well-formed refusal by a healthy instance.
pub(crate) type Body<R> = wasmtime::Result<Result<R, CallError>>;

/// What a call body is: a future borrowing the store and the guest's exports.
pub(crate) type BodyFuture<'a, R> = Pin<Box<dyn Future<Output = Body<R>> + Send + 'a>>;

/// Pre-instantiated, never-called instances of a fresh-isolation binding, refilled by the
/// host's upkeep thread so a call takes a ready instance instead of instantiating on the
/// request path. Each is called once and retired: isolation is the same as instantiating.
struct Reserve<G> {
    ready: Mutex<Vec<Ready<G>>>,
    options: ReserveOptions,
    /// Set when a refill was asked for and not yet done (one wake per refill, not per call).
    refill_asked: AtomicBool,
    /// When a background instantiation last failed: refills pause for a second, and calls
    /// instantiate inline (and report the failure themselves).
    failed_at: Mutex<Option<Instant>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

struct Ready<G> {
    store: Store<StoreData>,
    guest: G,
}

/// Counters of a fresh-isolation binding's reserve: calls that took a ready instance, and
/// calls that had to instantiate inline (the reserve was empty or is disabled). Pooled
/// bindings count neither.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReserveStats {
    /// Calls served by a pre-instantiated instance.
    pub hits: u64,
    /// Calls that instantiated on the request path.
    pub misses: u64,
    /// Ready instances right now.
    pub ready: usize,
}

/// How one instance ran: it could not be instantiated, or the body ran to an outcome.
enum Ran<G, R> {
    NotInstantiated(Store<StoreData>, wasmtime::Error),
    Done(Store<StoreData>, G, Body<R>),
}

/// Set on drop: a caller that stops waiting (the batch deadline passed, the request was
/// dropped) makes its guest stop at the next epoch tick, wherever it runs.
struct AbandonOnDrop(Arc<AtomicBool>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl<I: Exports> Sandbox<I> {
    /// The sandbox of `binding` on `plugin`, calling the exports `indices` found.
    pub(crate) fn new(plugin: Arc<Plugin>, binding: &Binding, indices: I) -> Arc<Self> {
        let (name, config) = (binding.name.as_str(), &binding.config);
        let (limits, isolation) = (binding.limits.clone(), binding.isolation);
        let plugin_reads_lazily = plugin.reads_lazily;
        let reserve = match isolation {
            Isolation::Fresh => binding.reserve,
            Isolation::Pooled { .. } => ReserveOptions::disabled(),
        };
        let sandbox = Arc::new(Sandbox {
            bucket: Arc::new(LogBucket::new(limits.log_lines_per_second)),
            plugin,
            name: Arc::from(name),
            limits,
            isolation,
            indices,
            config: config.to_string(),
            config_value: Arc::new(config.clone()),
            reads_lazily: plugin_reads_lazily,
            pool: Mutex::new(HashMap::new()),
            reserve: Reserve {
                ready: Mutex::new(Vec::new()),
                options: reserve,
                refill_asked: AtomicBool::new(false),
                failed_at: Mutex::new(None),
                hits: AtomicU64::new(0),
                misses: AtomicU64::new(0),
            },
        });
        if sandbox.reserve.options.size > 0 {
            let weak: Weak<dyn Refill> = Arc::downgrade(&(sandbox.clone() as Arc<dyn Refill>));
            sandbox.plugin.host.register(weak);
            sandbox.ask_refill();
        }
        let weak: Weak<dyn crate::metrics::Gauges> =
            Arc::downgrade(&(sandbox.clone() as Arc<dyn crate::metrics::Gauges>));
        crate::metrics::register(weak);
        sandbox
    }

    fn new_store(&self) -> Store<StoreData> {
        let log = LogCtx {
            plugin: self.name.clone(),
            bucket: self.bucket.clone(),
            max_line: self.limits.log_line_bytes,
            max_lines: self.limits.log_lines_per_call,
            lines_this_call: 0,
            last_error: None,
        };
        let mut store = Store::new(
            &self.plugin.host.inner.engine,
            StoreData::new(&self.limits, log, self.config_value.clone()),
        );
        store.limiter(|d| &mut d.limiter);
        store
    }

    fn take_warm(&self, namespace: &str) -> Option<Warm<I::Guest>> {
        let mut pool = self.pool.lock().ok()?;
        let slot = pool.get_mut(namespace)?;
        let warm = slot.pop()?;
        // An emptied namespace leaves no entry behind (tenants come and go).
        if slot.is_empty() {
            pool.remove(namespace);
        }
        self.plugin.host.inner.idle.forget(warm.seq);
        Some(warm)
    }

    /// Park a finished instance for its namespace's next call (up to `max_idle` there and
    /// the host's `max_idle_pooled` across everything; the oldest idle instance anywhere
    /// is retired to make room), or retire it.
    fn give_back(
        self: &Arc<Self>,
        namespace: &str,
        mut warm: Warm<I::Guest>,
        max_uses: u32,
        max_idle: u32,
    ) {
        let host = &self.plugin.host;
        if warm.uses < max_uses
            && let Ok(mut pool) = self.pool.lock()
        {
            let slot = pool.entry(namespace.to_string()).or_default();
            if slot.len() < max_idle as usize {
                warm.seq = host.inner.idle.next_seq();
                let me: Weak<dyn crate::idle::Evict> =
                    Arc::downgrade(&(self.clone() as Arc<dyn crate::idle::Evict>));
                host.inner.idle.track(warm.seq, me, namespace);
                slot.push(warm);
                drop(pool);
                host.inner.idle.enforce(host.inner.options.max_idle_pooled);
                return;
            }
        }
        host.reap(Box::new(warm.store));
    }

    /// Idle pooled instances, per namespace (tests and metrics).
    /// Warm pooled instances across every namespace.
    fn idle_total(&self) -> usize {
        self.pool
            .lock()
            .map(|p| p.values().map(Vec::len).sum())
            .unwrap_or(0)
    }

    pub(crate) fn idle(&self, namespace: &str) -> usize {
        self.pool
            .lock()
            .map(|p| p.get(namespace).map_or(0, Vec::len))
            .unwrap_or(0)
    }

    /// The reserve's counters.
    pub(crate) fn reserve_stats(&self) -> ReserveStats {
        ReserveStats {
            hits: self.reserve.hits.load(Ordering::Relaxed),
            misses: self.reserve.misses.load(Ordering::Relaxed),
            ready: self.reserve.ready.lock().map_or(0, |r| r.len()),
        }
    }

    /// Take a ready instance, asking for a refill when the reserve falls to its mark.
    fn take_ready(&self) -> Option<Ready<I::Guest>> {
        let options = self.reserve.options;
        if options.size == 0 {
            self.reserve.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let (ready, left) = match self.reserve.ready.lock() {
            Ok(mut r) => {
                let ready = r.pop();
                (ready, r.len())
            }
            Err(_) => (None, 0),
        };
        if ready.is_some() {
            self.plugin.host.reserved_released(1);
            self.reserve.hits.fetch_add(1, Ordering::Relaxed);
        } else {
            self.reserve.misses.fetch_add(1, Ordering::Relaxed);
        }
        if left <= options.refill_at as usize {
            self.ask_refill();
        }
        ready
    }

    fn ask_refill(&self) {
        if !self.reserve.refill_asked.swap(true, Ordering::AcqRel) {
            self.plugin.host.want_refill();
        }
    }

    /// Instantiate one instance for the reserve (on the upkeep thread), bounded by the
    /// binding's fuel and deadline like any instantiation.
    fn instantiate_ready(&self) -> Result<Ready<I::Guest>, wasmtime::Error> {
        let mut store = self.new_store();
        store.set_fuel(self.limits.fuel.unwrap_or(u64::MAX))?;
        store.epoch_deadline_trap();
        store.set_epoch_deadline(self.plugin.host.ticks_for(self.limits.timeout));
        let instance = self.plugin.pre.instantiate(&mut store)?;
        let guest = self.indices.load_guest(&mut store, &instance)?;
        Ok(Ready { store, guest })
    }

    /// Run `body` in an instance under the binding's limits, without holding the caller's
    /// thread: the guest runs inline for at most the host's inline slice, then yields and
    /// finishes on the host's slow lane. It is stopped at the earlier of the binding's
    /// timeout and `opts.deadline`, when the caller's cancellation fires, or at the next
    /// epoch tick after the caller stops waiting.
    pub(crate) async fn call<R, B>(
        self: &Arc<Self>,
        opts: CallOpts<'_>,
        body: B,
    ) -> Result<R, CallError>
    where
        R: Send + 'static,
        B: for<'a> FnOnce(&'a mut Store<StoreData>, &'a I::Guest) -> BodyFuture<'a, R>
            + Send
            + 'static,
    {
        let now = Instant::now();
        let budget = match opts.deadline {
            Some(d) => self.limits.timeout.min(d.saturating_duration_since(now)),
            None => self.limits.timeout,
        };
        if budget.is_zero() {
            crate::metrics::plugin_call(&self.name, "deadline", 0);
            return Err(CallError::Deadline(Duration::ZERO));
        }
        let fuel = self.limits.fuel.unwrap_or(u64::MAX);
        let host = &self.plugin.host;

        let (store, guest, uses) = match self.isolation {
            Isolation::Pooled { .. } => match self.take_warm(opts.namespace) {
                Some(w) => (Some(w.store), Some(w.guest), w.uses),
                None => (None, None, 0),
            },
            Isolation::Fresh => match self.take_ready() {
                Some(r) => (Some(r.store), Some(r.guest), 0),
                None => (None, None, 0),
            },
        };
        let reused = uses > 0;
        let mut store = store.unwrap_or_else(|| self.new_store());
        store.data_mut().begin_call();
        store.data_mut().progress = opts.progress;
        store.data_mut().docs.values = opts.values;
        if let Err(e) = store.set_fuel(fuel) {
            host.reap(Box::new(store));
            return Err(CallError::Instantiate(e.to_string()));
        }

        // Every epoch tick past the inline slice yields (the caller then moves the call to
        // the slow lane); the budget's end traps; cancellation and abandonment stop it.
        let end = now + budget;
        let inline_until = now + host.inner.options.inline_slice;
        let abandoned = Arc::new(AtomicBool::new(false));
        let stop = abandoned.clone();
        let cancel = opts.cancel;
        store.epoch_deadline_callback(move |_| {
            if stop.load(Ordering::Relaxed) || cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
                return Err(wasmtime::Error::new(CancelledByCaller));
            }
            let t = Instant::now();
            if t >= end {
                Err(wasmtime::Error::from(Trap::Interrupt))
            } else if t >= inline_until {
                Ok(UpdateDeadline::Yield(1))
            } else {
                Ok(UpdateDeadline::Continue(1))
            }
        });
        store.set_epoch_deadline(1);
        let _abandon = AbandonOnDrop(abandoned);

        let me = self.clone();
        let work = async move {
            let guest = match guest {
                Some(g) => g,
                None => {
                    let loaded = match me.plugin.pre.instantiate_async(&mut store).await {
                        Ok(instance) => me.indices.load_guest(&mut store, &instance),
                        Err(e) => Err(e),
                    };
                    match loaded {
                        Ok(g) => g,
                        Err(e) => return Ran::NotInstantiated(store, e),
                    }
                }
            };
            let outcome = body(&mut store, &guest).await;
            // The request's values are lent for this call only.
            store.data_mut().docs.values = None;
            Ran::Done(store, guest, outcome)
        };
        let ran = host.run_off_worker(work).await?;

        match ran {
            Ran::NotInstantiated(store, e) => {
                let err = self.classify(&e, &store, budget, true);
                self.observe(&store, fuel, Err(&err));
                host.reap(Box::new(store));
                Err(err)
            }
            Ran::Done(store, guest, Ok(result)) => {
                self.observe(&store, fuel, result.as_ref().map(|_| ()));
                // The stage span (policy evaluation, redaction, procedure attempt) declares
                // `capgate.fuel_used`; without a trace exporter this records nothing.
                if let Ok(left) = store.get_fuel() {
                    let used = fuel.saturating_sub(left);
                    tracing::Span::current().record("capgate.fuel_used", used);
                }
                match self.isolation {
                    Isolation::Pooled { max_uses, max_idle } => self.give_back(
                        opts.namespace,
                        Warm {
                            store,
                            guest,
                            uses: uses + 1,
                            seq: 0,
                        },
                        max_uses,
                        max_idle,
                    ),
                    Isolation::Fresh => host.reap(Box::new(store)),
                }
                result
            }
            Ran::Done(store, _, Err(e)) => {
                // After a trap an instance can never be entered again: retire it.
                let err = self.classify(&e, &store, budget, false);
                self.observe(&store, fuel, Err(&err));
                tracing::debug!(
                    target: "capgate::plugin",
                    plugin = &*self.name,
                    reused,
                    "plugin call failed: {err}"
                );
                host.reap(Box::new(store));
                Err(err)
            }
        }
    }

    /// Count the call by result and the fuel it burned (`capgate_plugin_*` metrics).
    fn observe(&self, store: &Store<StoreData>, fuel: u64, result: Result<(), &CallError>) {
        let used = fuel.saturating_sub(store.get_fuel().unwrap_or(0));
        crate::metrics::plugin_call(&self.name, crate::metrics::result_label(result), used);
    }

    fn classify(
        &self,
        e: &wasmtime::Error,
        store: &Store<StoreData>,
        budget: Duration,
        instantiating: bool,
    ) -> CallError {
        let data = store.data();
        if data.limiter.memory_cap_hit {
            return CallError::MemoryCap(self.limits.memory_bytes);
        }
        if e.downcast_ref::<CancelledByCaller>().is_some() {
            return CallError::Cancelled;
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => CallError::Deadline(budget),
            Some(Trap::OutOfFuel) => CallError::FuelExhausted(self.limits.fuel.unwrap_or(0)),
            Some(Trap::StackOverflow) => CallError::StackOverflow,
            Some(trap) => match &data.log.last_error {
                Some(msg) => CallError::Trap(format!("{trap} ({msg})")),
                None => CallError::Trap(trap.to_string()),
            },
            None if instantiating => CallError::Instantiate(format!("{e:#}")),
            None => CallError::Trap(format!("{e:#}")),
        }
    }

    /// Parse a JSON document the plugin returned, within the output cap.
    pub(crate) fn parse_output(&self, s: &str) -> Result<serde_json::Value, CallError> {
        crate::decode::plugin_json(s, self.limits.max_output_bytes)
    }
}

impl<I: Exports> crate::metrics::Gauges for Sandbox<I> {
    fn report(&self) {
        let r = self.reserve_stats();
        crate::metrics::report(&self.name, r.ready, self.idle_total(), r.hits, r.misses);
    }
}

impl<I: Exports> Refill for Sandbox<I> {
    fn top_up(&self, room: &dyn Fn() -> bool) {
        let paused = self
            .reserve
            .failed_at
            .lock()
            .ok()
            .and_then(|f| *f)
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1));
        // Cleared first: a call that takes the last instance while this runs asks again.
        self.reserve.refill_asked.store(false, Ordering::Release);
        if paused {
            return;
        }
        let size = self.reserve.options.size as usize;
        loop {
            let have = self.reserve.ready.lock().map_or(size, |r| r.len());
            if have >= size || !room() {
                return;
            }
            match self.instantiate_ready() {
                Ok(ready) => match self.reserve.ready.lock() {
                    Ok(mut r) => r.push(ready),
                    Err(_) => return,
                },
                Err(e) => {
                    self.plugin.host.reserved_released(1);
                    tracing::debug!(
                        target: "capgate::plugin",
                        plugin = &*self.name,
                        "reserve instantiation failed, pausing refills: {e:#}"
                    );
                    if let Ok(mut f) = self.reserve.failed_at.lock() {
                        *f = Some(Instant::now());
                    }
                    return;
                }
            }
        }
    }
}

impl<I: Exports> crate::idle::Evict for Sandbox<I> {
    fn evict(&self, namespace: &str, seq: u64) {
        let evicted = self.pool.lock().ok().and_then(|mut pool| {
            let slot = pool.get_mut(namespace)?;
            let at = slot.iter().position(|w| w.seq == seq)?;
            let warm = slot.remove(at);
            if slot.is_empty() {
                pool.remove(namespace);
            }
            Some(warm)
        });
        if let Some(warm) = evicted {
            self.plugin.host.reap(Box::new(warm.store));
        }
    }
}

impl<I: Exports> Drop for Sandbox<I> {
    fn drop(&mut self) {
        let ready = self.reserve.ready.get_mut().map_or(0, |r| r.len());
        self.plugin.host.reserved_released(ready);
        if let Ok(pool) = self.pool.get_mut() {
            for warm in pool.values().flatten() {
                self.plugin.host.inner.idle.forget(warm.seq);
            }
        }
    }
}
