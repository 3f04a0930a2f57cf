//! One binding's call machinery: get an instance (fresh from the `InstancePre`, or warm from
//! the binding's per-namespace pool), arm fuel and the deadline, run the call, classify any
//! failure, and hand the finished store to the reaper.

use crate::error::CallError;
use crate::limits::{Isolation, Limits};
use crate::plugin::Plugin;
use crate::store::{LogBucket, LogCtx, StoreData};
use capgate_core::CancellationToken;
use capgate_core::procedure::ProgressFn;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasmtime::component::Instance;
use wasmtime::{Store, Trap, UpdateDeadline};

/// A binding's name, config, limits and instance pool.
pub(crate) struct Sandbox<I: Exports> {
    pub(crate) plugin: Arc<Plugin>,
    pub(crate) name: Arc<str>,
    pub(crate) limits: Limits,
    pub(crate) isolation: Isolation,
    pub(crate) indices: I,
    /// The binding's `config`, serialized once.
    pub(crate) config: String,
    bucket: Arc<LogBucket>,
    pool: Mutex<HashMap<String, Vec<Warm<I::Guest>>>>,
}

/// The exports a binding calls, looked up once per instance (a pooled instance keeps them,
/// so a warm call skips the lookup and type check).
pub(crate) trait Exports: Send + Sync {
    /// The typed export functions of one instance.
    type Guest: Clone + Send;
    /// Look them up in a fresh instance.
    fn load_guest(
        &self,
        store: &mut Store<StoreData>,
        instance: &Instance,
    ) -> wasmtime::Result<Self::Guest>;
}

macro_rules! exports {
    ($($m:ident),*) => {$(
        impl Exports for crate::bindings::$m::GuestIndices {
            type Guest = crate::bindings::$m::Guest;
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
    wit_policy,
    wit_redactor,
    wit_authorizer,
    wit_procedure,
    wit_health
);

impl<A: Exports, B: Exports> Exports for (A, Option<B>) {
    type Guest = (A::Guest, Option<B::Guest>);
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

impl<I: Exports> Sandbox<I> {
    pub(crate) fn new(
        plugin: Arc<Plugin>,
        name: &str,
        config: &serde_json::Value,
        limits: Limits,
        isolation: Isolation,
        indices: I,
    ) -> Self {
        Sandbox {
            bucket: Arc::new(LogBucket::new(limits.log_lines_per_second)),
            plugin,
            name: Arc::from(name),
            limits,
            isolation,
            indices,
            config: config.to_string(),
            pool: Mutex::new(HashMap::new()),
        }
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
            StoreData::new(&self.limits, log),
        );
        store.limiter(|d| &mut d.limiter);
        store
    }

    fn take_warm(&self, namespace: &str) -> Option<Warm<I::Guest>> {
        let mut pool = self.pool.lock().ok()?;
        pool.get_mut(namespace)?.pop()
    }

    fn give_back(&self, namespace: &str, warm: Warm<I::Guest>, max_uses: u32, max_idle: u32) {
        if warm.uses < max_uses
            && let Ok(mut pool) = self.pool.lock()
        {
            let slot = pool.entry(namespace.to_string()).or_default();
            if slot.len() < max_idle as usize {
                slot.push(warm);
                return;
            }
        }
        self.plugin.host.reap(Box::new(warm.store));
    }

    /// Idle pooled instances, per namespace (tests and metrics).
    pub(crate) fn idle(&self, namespace: &str) -> usize {
        self.pool
            .lock()
            .map(|p| p.get(namespace).map_or(0, Vec::len))
            .unwrap_or(0)
    }

    /// Run `body` in an instance under the binding's limits.
    pub(crate) fn call<R>(
        &self,
        opts: CallOpts<'_>,
        body: impl FnOnce(&mut Store<StoreData>, &I::Guest) -> Body<R>,
    ) -> Result<R, CallError> {
        let now = Instant::now();
        let budget = match opts.deadline {
            Some(d) => self.limits.timeout.min(d.saturating_duration_since(now)),
            None => self.limits.timeout,
        };
        if budget.is_zero() {
            return Err(CallError::Deadline(Duration::ZERO));
        }
        let fuel = self.limits.fuel.unwrap_or(u64::MAX);
        let host = &self.plugin.host;

        let warm = match self.isolation {
            Isolation::Pooled { .. } => self.take_warm(opts.namespace),
            Isolation::Fresh => None,
        };
        let reused = warm.is_some();
        let (mut store, guest, uses) = match warm {
            Some(w) => (w.store, Some(w.guest), w.uses),
            None => (self.new_store(), None, 0),
        };
        store.data_mut().begin_call();
        store.data_mut().progress = opts.progress;
        if let Err(e) = store.set_fuel(fuel) {
            return Err(CallError::Instantiate(e.to_string()));
        }
        match opts.cancel {
            Some(cancel) => {
                let end = now + budget;
                store.epoch_deadline_callback(move |_| {
                    if cancel.is_cancelled() {
                        Err(wasmtime::Error::new(CancelledByCaller))
                    } else if Instant::now() >= end {
                        Err(wasmtime::Error::from(Trap::Interrupt))
                    } else {
                        Ok(UpdateDeadline::Continue(1))
                    }
                });
                store.set_epoch_deadline(1);
            }
            None => {
                store.epoch_deadline_trap();
                store.set_epoch_deadline(host.ticks_for(budget));
            }
        }

        let guest = match guest {
            Some(g) => g,
            None => match self
                .plugin
                .pre
                .instantiate(&mut store)
                .and_then(|instance| self.indices.load_guest(&mut store, &instance))
            {
                Ok(g) => g,
                Err(e) => {
                    let err = self.classify(&e, &store, budget, true);
                    host.reap(Box::new(store));
                    return Err(err);
                }
            },
        };

        let outcome = body(&mut store, &guest);
        match outcome {
            Ok(result) => {
                match self.isolation {
                    Isolation::Pooled { max_uses, max_idle } => self.give_back(
                        opts.namespace,
                        Warm {
                            store,
                            guest,
                            uses: uses + 1,
                        },
                        max_uses,
                        max_idle,
                    ),
                    Isolation::Fresh => host.reap(Box::new(store)),
                }
                result
            }
            Err(e) => {
                // After a trap an instance can never be entered again: retire it.
                let err = self.classify(&e, &store, budget, false);
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

    /// Refuse a string over the binding's output cap.
    pub(crate) fn check_size(&self, s: &str) -> Result<(), CallError> {
        let cap = self.limits.max_output_bytes;
        if s.len() > cap {
            return Err(CallError::OutputTooLarge { size: s.len(), cap });
        }
        Ok(())
    }

    /// Parse a JSON document the plugin returned, within the output cap.
    pub(crate) fn parse_output(&self, s: &str) -> Result<serde_json::Value, CallError> {
        self.check_size(s)?;
        serde_json::from_str(s)
            .map_err(|e| CallError::Malformed(format!("output is not JSON: {e}")))
    }
}
