//! What one binding of a plugin may consume per call, and how its instances are isolated.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Per-binding resource limits. Every call starts with the full budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Limits {
    /// Fuel per call (≈ one unit per Wasm instruction); `None` for no fuel limit (the deadline
    /// still applies). Deterministic, unlike the deadline.
    pub fuel: Option<u64>,
    /// Wall-clock budget of one call. For policies the effective deadline is the earlier of
    /// this and what is left of core's shared batch deadline.
    #[serde(with = "millis")]
    pub timeout: Duration,
    /// Cap on the linear memory of the instance, in bytes (enforced by a `ResourceLimiter`).
    pub memory_bytes: usize,
    /// Cap on the elements of any one table.
    pub table_elements: usize,
    /// Cap on core instances, tables and memories a component may create.
    pub instances: usize,
    /// Cap on any JSON document (or string) a plugin returns, in bytes.
    pub max_output_bytes: usize,
    /// Longest `log` line kept (longer ones are truncated).
    pub log_line_bytes: usize,
    /// `log` lines admitted per call (the binding also has a per-second rate).
    pub log_lines_per_call: u32,
    /// Sustained `log` lines per second across all calls of the binding.
    pub log_lines_per_second: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel: Some(50_000_000),
            timeout: Duration::from_millis(1_000),
            memory_bytes: 32 << 20,
            table_elements: 20_000,
            instances: 64,
            max_output_bytes: 1 << 20,
            log_line_bytes: 1_024,
            log_lines_per_call: 32,
            log_lines_per_second: 100,
        }
    }
}

impl Limits {
    /// Defaults for procedure adapters: a longer deadline (core's own per-attempt timeout
    /// stays the authority) and no fuel limit.
    pub fn procedure() -> Self {
        Limits {
            fuel: None,
            timeout: Duration::from_secs(30),
            ..Limits::default()
        }
    }
    capgate_core::setters! {
        /// Builder: fuel per call.
        with_fuel => fuel: Option<u64>;
        /// Builder: wall-clock budget per call.
        with_timeout => timeout: Duration;
        /// Builder: memory cap in bytes.
        with_memory_bytes => memory_bytes: usize;
        /// Builder: output cap in bytes.
        with_max_output_bytes => max_output_bytes: usize;
    }
}

/// How a binding gets an instance for a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase", tag = "mode")]
pub enum Isolation {
    /// A fresh instance per call from a pre-linked `InstancePre`: nothing survives between
    /// calls, actors or tenants. The default.
    #[default]
    Fresh,
    /// Reuse instances for speed. WEAKER: globals and heap of the guest survive between the
    /// calls that share an instance (one actor can influence the next call's plugin state,
    /// never its host state). Bounded by `max_uses`, recycled after any trap or sandbox
    /// failure, never shared across namespaces.
    Pooled {
        /// Calls an instance serves before it is retired.
        max_uses: u32,
        /// Idle instances kept per namespace.
        max_idle: u32,
    },
}

impl Isolation {
    /// Pooled isolation with the default bounds (1 000 uses, 8 idle per namespace).
    pub fn pooled() -> Self {
        Isolation::Pooled {
            max_uses: 1_000,
            max_idle: 8,
        }
    }
}

/// A fresh-isolation binding's reserve: instances instantiated ahead of time by the host's
/// upkeep thread, so a call takes one that is ready instead of instantiating on the request
/// path. Each serves exactly one call, as an instance made for it would. Pooled bindings
/// have none. A burst that empties it instantiates inline, as without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ReserveOptions {
    /// Ready instances kept (0: no reserve). Each holds a pool slot and the guest's
    /// initialised memory, so size it to the plugin: a JavaScript or Python component's
    /// memory is megabytes.
    pub size: u32,
    /// Refill when this many or fewer are left (one background refill per crossing).
    pub refill_at: u32,
}

impl Default for ReserveOptions {
    fn default() -> Self {
        ReserveOptions {
            size: 8,
            refill_at: 4,
        }
    }
}

impl ReserveOptions {
    /// No reserve: every fresh call instantiates on the request path.
    pub fn disabled() -> Self {
        ReserveOptions {
            size: 0,
            refill_at: 0,
        }
    }
    /// A reserve of `size`, refilled when half of it is used.
    pub fn of(size: u32) -> Self {
        ReserveOptions {
            size,
            refill_at: size / 2,
        }
    }
}

mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}
