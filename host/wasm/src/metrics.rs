//! The sandbox's metrics, through the [`metrics`] facade (recorded only once the embedder
//! installs a recorder). Label values are binding names from the configuration.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `capgate_plugin_calls_total` | counter | `plugin`, `result` (`ok`, `error`, `malformed`, `trap`, `fuel`, `deadline`, `memory`, `cancelled`, `instantiate`) |
//! | `capgate_plugin_fuel_consumed_total` | counter | `plugin` |
//! | `capgate_plugin_instances` | gauge | `plugin`, `state` (`ready`: the fresh reserve; `idle`: warm pooled instances) |
//! | `capgate_plugin_reserve_total` | counter | `plugin`, `result` (`hit`, `miss`) |
//!
//! The gauges and the reserve counters are read from the sandboxes when [`record_gauges`]
//! runs (the `capgate` binary calls it before each scrape), so the call path pays nothing
//! for them.

use crate::error::CallError;
use capgate_core::metrics::Handles;
use std::sync::{Mutex, Weak};

/// Plugin calls by result.
pub const PLUGIN_CALLS: &str = "capgate_plugin_calls_total";
/// Fuel burned by plugin calls.
pub const PLUGIN_FUEL: &str = "capgate_plugin_fuel_consumed_total";
/// Instances held by a binding.
pub const PLUGIN_INSTANCES: &str = "capgate_plugin_instances";
/// Fresh calls served from the reserve (`hit`) or instantiated inline (`miss`).
pub const PLUGIN_RESERVE: &str = "capgate_plugin_reserve_total";

/// Tell the installed recorder what this crate's series mean (`# HELP` on `/metrics`).
pub fn describe() {
    metrics::describe_counter!(PLUGIN_CALLS, "Plugin calls, by plugin and result.");
    metrics::describe_counter!(PLUGIN_FUEL, "Fuel burned by plugin calls, by plugin.");
    metrics::describe_gauge!(
        PLUGIN_INSTANCES,
        "Plugin instances held, by plugin and state."
    );
    metrics::describe_counter!(
        PLUGIN_RESERVE,
        "Fresh plugin calls served from the reserve (hit) or instantiated inline (miss)."
    );
}

/// The `result` label of one call.
pub(crate) fn result_label(result: Result<(), &CallError>) -> &'static str {
    match result {
        Ok(()) => "ok",
        Err(CallError::Guest(_)) => "error",
        Err(CallError::Malformed(_) | CallError::OutputTooLarge { .. }) => "malformed",
        Err(CallError::Trap(_) | CallError::StackOverflow) => "trap",
        Err(CallError::FuelExhausted(_)) => "fuel",
        Err(CallError::Deadline(_)) => "deadline",
        Err(CallError::MemoryCap(_)) => "memory",
        Err(CallError::Cancelled) => "cancelled",
        Err(CallError::Instantiate(_)) => "instantiate",
    }
}

static CALLS: Handles<&str, metrics::Counter> = Handles::new();
static FUEL: Handles<(), metrics::Counter> = Handles::new();

pub(crate) fn plugin_call(plugin: &str, result: &'static str, fuel: u64) {
    CALLS
        .get(
            plugin,
            result,
            || metrics::counter!(PLUGIN_CALLS, "plugin" => plugin.to_owned(), "result" => result),
        )
        .increment(1);
    if fuel > 0 {
        FUEL.get(
            plugin,
            (),
            || metrics::counter!(PLUGIN_FUEL, "plugin" => plugin.to_owned()),
        )
        .increment(fuel);
    }
}

/// What a sandbox reports at scrape time.
pub(crate) trait Gauges: Send + Sync {
    fn report(&self);
}

static SANDBOXES: Mutex<Vec<Weak<dyn Gauges>>> = Mutex::new(Vec::new());

/// Remember a sandbox for [`record_gauges`] (dropped sandboxes fall out).
pub(crate) fn register(sandbox: Weak<dyn Gauges>) {
    if let Ok(mut all) = SANDBOXES.lock() {
        all.retain(|w| w.strong_count() > 0);
        all.push(sandbox);
    }
}

/// Set the instance gauges and reserve counters of every live binding. Cheap (a lock per
/// binding); call it before rendering a scrape.
pub fn record_gauges() {
    let live: Vec<_> = match SANDBOXES.lock() {
        Ok(mut all) => {
            all.retain(|w| w.strong_count() > 0);
            all.iter().filter_map(Weak::upgrade).collect()
        }
        Err(_) => return,
    };
    for s in live {
        s.report();
    }
}

pub(crate) fn report(plugin: &str, ready: usize, idle: usize, hits: u64, misses: u64) {
    let p = plugin.to_owned();
    metrics::gauge!(PLUGIN_INSTANCES, "plugin" => p.clone(), "state" => "ready").set(ready as f64);
    metrics::gauge!(PLUGIN_INSTANCES, "plugin" => p.clone(), "state" => "idle").set(idle as f64);
    metrics::counter!(PLUGIN_RESERVE, "plugin" => p.clone(), "result" => "hit").absolute(hits);
    metrics::counter!(PLUGIN_RESERVE, "plugin" => p, "result" => "miss").absolute(misses);
}
