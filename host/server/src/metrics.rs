//! `[telemetry.metrics]`: the process's Prometheus recorder and what `/metrics` serves.
//!
//! The libraries record through the `metrics` facade (`capgate_core::metrics`,
//! `capgate_wasm::metrics`, `capgate_store::metrics`, `capgate_gateway::metrics` list their
//! series); `serve` installs one Prometheus recorder and, before each scrape, refreshes what
//! is read rather than counted (plugin instances, audit counters, pending approvals, the
//! Tokio runtime's live tasks and workers).

use crate::build::Deployment;
use anyhow::Context;
use async_trait::async_trait;
use capgate_gateway::metrics::MetricsSource;
use capgate_store::{SqlAuditSink, Store};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Latency buckets of every `_seconds` histogram: 0.5 ms to 30 s.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// How often histograms are compacted between scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The process's recorder (a process has one; installing twice is refused by `metrics`).
/// Deployments that start at once in one process (an embedder's, the tests') install it
/// one at a time: the second finds the first's.
fn recorder() -> anyhow::Result<PrometheusHandle> {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    let _installing = INSTALLING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(h) = HANDLE.get() {
        return Ok(h.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .context("metric buckets")?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    // Installed for good, before any call: the call path may keep its handles.
    capgate_core::metrics::cache_handles();
    describe();
    let handle = HANDLE.get_or_init(|| handle).clone();
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP_EVERY);
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// What `/metrics` renders for one deployment.
pub struct Exposition {
    handle: PrometheusHandle,
    store: Store,
    audit: Arc<SqlAuditSink>,
}

impl Exposition {
    /// Install the recorder (once per process) for `deployment`.
    pub fn install(deployment: &Deployment) -> anyhow::Result<Exposition> {
        Ok(Exposition {
            handle: recorder()?,
            store: deployment.store.clone(),
            audit: deployment.audit.clone(),
        })
    }
}

#[async_trait]
impl MetricsSource for Exposition {
    async fn render(&self) -> String {
        process().collect();
        capgate_wasm::metrics::record_gauges();
        record_runtime_gauges();
        self.audit.record_metrics();
        if let Err(e) = self.store.record_pending_approvals().await {
            tracing::warn!(target: "capgate::metrics", error = %e, "pending approvals could not be counted for this scrape");
        }
        self.handle.render()
    }
}

/// The build: `capgate_build_info{version="…"} 1`, the Prometheus convention for joining a
/// version onto other series.
pub const BUILD_INFO: &str = "capgate_build_info";
/// Audit events the retention purge removed.
pub const AUDIT_PURGED: &str = "capgate_audit_purged_events_total";
/// Configuration reloads, by result.
pub const CONFIG_RELOADS: &str = "capgate_config_reloads_total";

/// The process's own series (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
/// `process_open_fds`…), read at each scrape.
fn process() -> &'static metrics_process::Collector {
    static COLLECTOR: OnceLock<metrics_process::Collector> = OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}

/// Every series' `# HELP` (each crate describes its own) and the build info, once the
/// recorder is installed.
fn describe() {
    capgate_core::metrics::describe();
    capgate_gateway::metrics::describe();
    capgate_wasm::metrics::describe();
    capgate_store::metrics::describe();
    capgate_export::describe_metrics();
    capgate_provider::mcp::watch::describe();
    process().describe();
    ::metrics::describe_gauge!(BUILD_INFO, "capgate's version, as a label; always 1.");
    ::metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    ::metrics::describe_gauge!(
        RUNTIME_ALIVE_TASKS,
        "Live Tokio tasks of the serving runtime."
    );
    ::metrics::describe_gauge!(RUNTIME_WORKERS, "Worker threads of the serving runtime.");
    ::metrics::describe_counter!(AUDIT_PURGED, "Audit events the retention purge removed.");
    ::metrics::describe_counter!(CONFIG_RELOADS, "Configuration reloads, by result.");
}

/// Live Tokio tasks of the serving runtime (spawned and not yet finished): a leak of tasks
/// under long load (the soak, `cargo xtask soak`) shows as growth here.
pub const RUNTIME_ALIVE_TASKS: &str = "capgate_runtime_alive_tasks";
/// Worker threads of the serving runtime.
pub const RUNTIME_WORKERS: &str = "capgate_runtime_workers";

/// Read the current Tokio runtime's task and worker counts into their gauges (at scrape time;
/// outside a runtime there is nothing to read).
fn record_runtime_gauges() {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let m = runtime.metrics();
    ::metrics::gauge!(RUNTIME_ALIVE_TASKS).set(m.num_alive_tasks() as f64);
    ::metrics::gauge!(RUNTIME_WORKERS).set(m.num_workers() as f64);
}

/// Count one configuration reload of `capgate serve` by outcome (`reloaded`, `refused`,
/// `failed`): `capgate_config_reloads_total{result}`.
pub fn record_reload(result: &'static str) {
    ::metrics::counter!(CONFIG_RELOADS, "result" => result).increment(1);
}

#[cfg(test)]
mod tests {
    /// Two deployments starting at once in one process (an embedder's, or the tests') both
    /// get the one recorder; the second is never refused for the first's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn deployments_starting_at_once_share_the_one_recorder() {
        let starts: Vec<_> = (0..8)
            .map(|_| tokio::task::spawn_blocking(super::recorder))
            .collect();
        for start in starts {
            let handle = start.await.expect("joined");
            assert!(handle.is_ok(), "{:?}", handle.err());
        }
    }
}
