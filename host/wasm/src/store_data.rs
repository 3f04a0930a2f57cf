//! Per-store state: the (empty) WASI context, built on the guest's first WASI call, the
//! resource limiter, and the host imports `log` (capped in size and rate) and `progress`.

use crate::lazy::CallDocs;
use crate::limits::Limits;
use crate::wit::{self, LogLevel};
use capgate_core::procedure::ProgressFn;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// What a plugin's store carries. One per instance.
pub(crate) struct StoreData {
    /// Built on the first WASI call: components built for `wasm32-wasip2` import WASI but a
    /// policy rarely calls it, and building the context was 2.5 % of a fresh governed
    /// invoke (three stores per invoke).
    wasi: Option<WasiCtx>,
    table: ResourceTable,
    pub(crate) limiter: Limiter,
    pub(crate) log: LogCtx,
    pub(crate) progress: Option<ProgressFn>,
    /// What the guest may read through `capgate:plugin/request` (see [`crate::lazy`]).
    pub(crate) docs: CallDocs,
}

impl StoreData {
    pub(crate) fn new(limits: &Limits, log: LogCtx, config: Arc<serde_json::Value>) -> Self {
        StoreData {
            wasi: None,
            table: ResourceTable::new(),
            limiter: Limiter::new(limits),
            log,
            progress: None,
            docs: CallDocs {
                values: None,
                config,
            },
        }
    }

    /// Reset the per-call state (a pooled instance serves many calls).
    pub(crate) fn begin_call(&mut self) {
        self.limiter.memory_cap_hit = false;
        self.log.lines_this_call = 0;
        self.log.last_error = None;
        self.progress = None;
        self.docs.values = None;
    }
}

/// No filesystem, environment, arguments, stdio, sockets or name lookup; clocks frozen at
/// zero. Components built for `wasm32-wasip2` import `wasi:cli` and friends even when they
/// never use them, so the imports must exist, but they give nothing away.
fn empty_wasi() -> WasiCtx {
    let mut b = WasiCtx::builder();
    b.allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .wall_clock(FrozenClock)
        .monotonic_clock(FrozenClock);
    b.build()
}

struct FrozenClock;

impl wasmtime_wasi::HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

impl WasiView for StoreData {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: self.wasi.get_or_insert_with(empty_wasi),
            table: &mut self.table,
        }
    }
}

/// The binding's caps, enforced as the guest grows memory and tables.
pub(crate) struct Limiter {
    memory_cap: usize,
    table_cap: usize,
    instances: usize,
    /// Set when a growth was refused, so the trap that follows is reported as the cap.
    pub(crate) memory_cap_hit: bool,
}

impl Limiter {
    fn new(l: &Limits) -> Self {
        Limiter {
            memory_cap: l.memory_bytes,
            table_cap: l.table_elements,
            instances: l.instances,
            memory_cap_hit: false,
        }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_cap {
            self.memory_cap_hit = true;
            return Ok(false);
        }
        Ok(true)
    }
    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= self.table_cap)
    }
    fn instances(&self) -> usize {
        self.instances
    }
    fn tables(&self) -> usize {
        self.instances
    }
    fn memories(&self) -> usize {
        self.instances
    }
}

/// A token bucket shared by every call of one binding.
#[derive(Debug)]
pub(crate) struct LogBucket {
    per_second: f64,
    state: Mutex<(f64, Instant)>,
}

impl LogBucket {
    pub(crate) fn new(per_second: u32) -> Self {
        let per_second = f64::from(per_second);
        LogBucket {
            per_second,
            state: Mutex::new((per_second, Instant::now())),
        }
    }
    fn take(&self) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        let now = Instant::now();
        let refill = now.duration_since(s.1).as_secs_f64() * self.per_second;
        s.0 = (s.0 + refill).min(self.per_second);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Per-store logging state.
pub(crate) struct LogCtx {
    pub(crate) plugin: Arc<str>,
    pub(crate) bucket: Arc<LogBucket>,
    pub(crate) max_line: usize,
    pub(crate) max_lines: u32,
    pub(crate) lines_this_call: u32,
    /// The last `error` line (the SDK logs panic messages there before trapping).
    pub(crate) last_error: Option<String>,
}

impl wit::capgate::plugin::host::Host for StoreData {
    fn log(&mut self, level: LogLevel, mut message: String) {
        if matches!(level, LogLevel::Error) {
            let mut kept = message.clone();
            truncate(&mut kept, self.log.max_line);
            self.log.last_error = Some(kept);
        }
        self.log.lines_this_call = self.log.lines_this_call.saturating_add(1);
        if self.log.lines_this_call > self.log.max_lines || !self.log.bucket.take() {
            return;
        }
        truncate(&mut message, self.log.max_line);
        let plugin = &*self.log.plugin;
        match level {
            LogLevel::Trace => tracing::trace!(target: "capgate::plugin", plugin, "{message}"),
            LogLevel::Debug => tracing::debug!(target: "capgate::plugin", plugin, "{message}"),
            LogLevel::Info => tracing::info!(target: "capgate::plugin", plugin, "{message}"),
            LogLevel::Warn => tracing::warn!(target: "capgate::plugin", plugin, "{message}"),
            LogLevel::Error => tracing::error!(target: "capgate::plugin", plugin, "{message}"),
        }
    }
}

impl wit::capgate::plugin::progress::Host for StoreData {
    fn report(&mut self, value: String) {
        if let Some(p) = &self.progress {
            let v = serde_json::from_str(&value).unwrap_or(serde_json::Value::String(value));
            p(v);
        }
    }
}

impl wit::capgate::plugin::types::Host for StoreData {}

fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while cut > 0 && !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
}
