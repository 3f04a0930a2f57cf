//! `capgate serve`: the configured deployment behind one HTTP listener — a capability
//! gateway per route (each with its fixed surface), MCP at `/mcp`, the human approvals API
//! at `/approvals`, the approval console at `/console`, `POST /admin/reload` when
//! `[gateway.admin] reload = true`, and `/healthz` + `/readyz`.
//!
//! The application is rebuilt whole on a configuration reload ([`crate::reload`]) and
//! swapped behind one outer service: every request runs on the application current when it
//! arrived, to the end.

mod adapters;
mod housekeeping;
mod shutdown;

use adapters::{AuditTrail, StoreProbe, StoredMcpSessions, StoredMcpTasks, StoredSessions};
use housekeeping::{
    purge_audit, purge_receipts, purge_shared, reload_on_hangup, sweep_expired_approvals,
};
pub use shutdown::{ABANDON_TIMEOUT, TRACES_FLUSH_TIMEOUT};
use shutdown::{EXPORT_STOP_TIMEOUT, Shutdown, Stops};

use crate::build::{Deployment, build};
use crate::reload::{Reloader, Trigger};
use crate::store::{Access, StoreUrl};
use crate::validate::Checked;
use anyhow::Context;
use arc_swap::ArcSwap;
use axum::extract::Request;
use capgate_config::RateLimitScope;
/// How a reload ended ([`Served::reload`]): re-exported so an embedder needs no other crate.
pub use capgate_gateway::admin::ReloadAnswer;
use capgate_gateway::app::{AppBuilder, AppError, Kept};
use capgate_gateway::approvals_api::ApprovalsOptions;
use capgate_gateway::console::ConsoleSessions;
use capgate_gateway::door::{Doorkeeper, Quotas};
use capgate_gateway::health::{FnProbe, ReadinessProbe};
use capgate_gateway::mcp::McpSessions;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Build the whole HTTP application of a deployment: its configured doors, as the gateway's
/// application builder mounts and layers them, over what `kept` keeps across reloads.
pub fn app(checked: &Checked, d: &Deployment, kept: &Kept) -> anyhow::Result<axum::Router> {
    let mut app = AppBuilder::new(kept, d.runtime.clone(), doorkeeper(checked, d))
        .mcp(mcp_options(checked, d))
        .approvals(ApprovalsOptions {
            role: APPROVER_ROLE.into(),
            history: Some(Arc::new(AuditTrail(d.store.audit_log()))),
        })
        .admin(checked.gateway().admin_reload())
        .http_metrics(checked.metrics().is_some());
    for (name, probe) in readiness_checks(checked, d)
        .into_iter()
        .chain(crate::upstreams::readiness(&checked.mcp_upstreams))
    {
        app = app.readiness(name, probe);
    }
    for r in checked.gateway().routes() {
        let config = checked.gateway_config(
            r.surface,
            d.runtime.clone(),
            d.journal.clone(),
            app.doorkeeper().clone(),
        );
        app = app.route(&r.path, config);
    }
    if let Some(options) = checked.gateway().console() {
        let mut options = options.clone();
        options.sign_on = checked.sign_on.clone();
        app = app.console(options);
    }
    app.build().map_err(|e| match e {
        AppError::Console(e) => anyhow::Error::new(e).context("[gateway.console]"),
        other => other.into(),
    })
}

/// The MCP server's options for a deployment, `/mcp` and `capgate mcp --stdio` alike: `[mcp]`
/// with its tasks kept in the deployment's store, beside the approvals they wait for (and
/// counted against the same namespace budget), so any replica answers them and a restart
/// loses none.
pub fn mcp_options(checked: &Checked, d: &Deployment) -> capgate_gateway::mcp::McpOptions {
    let mut mcp = checked.mcp_options();
    mcp.tasks = checked.mcp_tasks(Arc::new(StoredMcpTasks(
        d.store.mcp_tasks().with_budget(checked.journal().budget()),
    )));
    mcp
}

/// Where `gateway.rateLimit`'s buckets live: as configured, else in the store when it is
/// Postgres (replicas share it, and the quota is the deployment's) and in this process on
/// SQLite (one process; a write per request would queue behind the journal's).
pub(crate) fn rate_limit_scope(
    gateway: &crate::resolve::GatewaySettings,
    store: &capgate_store::Store,
) -> RateLimitScope {
    gateway.rate_limit_scope().unwrap_or(match store.backend() {
        capgate_store::Backend::Postgres => RateLimitScope::Store,
        capgate_store::Backend::Sqlite => RateLimitScope::Replica,
    })
}

/// The deployment's doorkeeper, its rate-limit buckets where [`rate_limit_scope`] says.
fn doorkeeper(checked: &Checked, d: &Deployment) -> Doorkeeper {
    let keeper = checked.doorkeeper(&d.runtime);
    match rate_limit_scope(checked.gateway(), &d.store) {
        RateLimitScope::Replica => keeper,
        RateLimitScope::Store => {
            let (principal, namespace) = keeper.quotas.rates();
            let shared = Quotas::shared(principal, namespace, Arc::new(d.store.quotas()));
            keeper.quotas(Arc::new(shared))
        }
    }
}

/// The outer service of `serve`: each request runs on a clone of the application current
/// when it arrived (cheap: a router is a handful of `Arc`s), so a reload never cuts a call
/// in flight and every later request sees the new application. `in_flight` counts the
/// requests being answered (what a shutdown that runs out of drain time reports).
fn swapped(current: Arc<ArcSwap<axum::Router>>, in_flight: Arc<AtomicUsize>) -> axum::Router {
    axum::Router::new().fallback(move |request: Request| {
        let app = axum::Router::clone(&current.load());
        let counted = InFlight::enter(&in_flight);
        async move {
            let response = match tower::ServiceExt::oneshot(app, request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            drop(counted);
            response
        }
    })
}

/// One request in flight, counted until it is answered or dropped.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn enter(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        InFlight(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The role the approvals API and the console ask of an approver.
pub use capgate_gateway::approvals_api::APPROVER_ROLE;

/// What `/readyz` checks besides the process not shutting down (the application's own
/// check): the store answers and takes writes, the audit writer runs and holds no failed batch, and (with plugins) the Wasm host
/// still bounds calls.
fn readiness_checks(checked: &Checked, d: &Deployment) -> Vec<(String, Arc<dyn ReadinessProbe>)> {
    let audit = d.audit.clone();
    let mut checks: Vec<(String, Arc<dyn ReadinessProbe>)> = vec![
        (
            "store".into(),
            Arc::new(StoreProbe {
                journal: capgate_gateway::health::JournalProbe(d.journal.clone()),
                store: d.store.clone(),
            }),
        ),
        (
            "audit".into(),
            Arc::new(FnProbe(move || {
                if !audit.is_writing() {
                    Err("the audit writer has stopped".to_owned())
                } else if !audit.is_healthy() {
                    Err("audit events are held: the store refuses writes".to_owned())
                } else {
                    Ok(())
                }
            })),
        ),
    ];
    for status in &d.exports {
        let status = status.clone();
        checks.push((
            format!("export:{}", status.sink()),
            Arc::new(FnProbe(move || status.check())),
        ));
    }
    if checked.loads_plugins() {
        checks.push((
            "plugins".into(),
            Arc::new(FnProbe(|| {
                capgate_wasm::WasmHost::shared()
                    .map_err(|e| e.to_string())
                    .and_then(|h| h.is_healthy())
            })),
        ));
    }
    checks
}

/// `[telemetry.metrics]`, when on: the router serving the exposition, and the layer that
/// counts HTTP requests.
fn metrics_router(checked: &Checked, d: &Deployment) -> anyhow::Result<Option<axum::Router>> {
    let Some(m) = checked.metrics() else {
        return Ok(None);
    };
    let source = crate::metrics::Exposition::install(d)?;
    Ok(Some(capgate_gateway::metrics::metrics_router(
        m.path(),
        source,
        m.bearer_token_sha256().map(str::to_string),
    )))
}

/// `capgate serve`'s listen addresses given on the command line (each overrides the
/// configuration's).
#[derive(Debug, Default)]
pub struct Listen {
    /// `--listen`: the gateway (`[gateway] listen`).
    pub gateway: Option<String>,
    /// `--metrics-listen`: the metrics' own listener (`[telemetry.metrics] listen`).
    pub metrics: Option<String>,
}

/// `capgate serve`: a [`Checked`] deployment over its store (created if missing), behind
/// one listener (two when the metrics have their own), until SIGTERM or Ctrl-C; SIGHUP
/// reloads the configuration. An embedder that owns its process's signals uses [`start`].
pub async fn serve(checked: Checked, store: Option<String>, listen: Listen) -> anyhow::Result<()> {
    for w in &checked.warnings {
        eprintln!("capgate: warning: {w}");
    }
    let addr = listen
        .gateway
        .clone()
        .unwrap_or_else(|| checked.gateway().listen().to_string());
    if let Err(e) = capgate_config::values::check_listen(&addr) {
        anyhow::bail!("--listen: {e}");
    }
    let prepared = Prepared::new(checked, store, &listen, &addr).await?;
    // Before announcing the listener: SIGHUP's and SIGTERM's default actions would end the
    // process.
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("cannot listen for SIGHUP")?;
    let stops = Stops::signals()?;
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {addr} (is another process using it? try --listen 127.0.0.1:0)"
            )
        })?;
    let local = listener.local_addr().context("listener address")?;
    prepared.announce(local);
    let reloads = tokio::spawn(reload_on_hangup(hangups, prepared.reloader.clone()));
    let served = prepared.run(listener, stops).await;
    reloads.abort();
    served
}

/// A deployment served in process by the program embedding this crate ([`start`]): its
/// address, a reload on demand, and a stop that drains as SIGTERM does for `capgate serve`.
pub struct Served {
    addr: std::net::SocketAddr,
    reloader: Arc<Reloader>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Served {
    /// Where it listens.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// Read the configuration file again and swap it in, or keep the current one and say
    /// why (as SIGHUP and `POST /admin/reload` do; audited with the trigger `embedder`).
    pub async fn reload(&self) -> ReloadAnswer {
        self.reloader.reload(Trigger::Embedder).await
    }

    /// Stop: `/readyz` turns unready, the listener closes after the configured unready
    /// delay, calls in flight get the drain time, then the sinks flush and the store
    /// closes. The server's own failure, if it had one.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(result) => result,
            Err(e) => Err(anyhow::anyhow!("the server task failed: {e}")),
        }
    }
}

/// Serve a [`Checked`] deployment in this process on `listener`, over its store (the
/// configuration's, or `store`; created if missing), with everything `capgate serve` runs
/// beside it (export, the background jobs, the metrics), but no signal handling: the
/// embedder reloads with [`Served::reload`] and stops with [`Served::stop`].
///
/// ```no_run
/// # async fn example() -> anyhow::Result<()> {
/// let checked = capgate_server::validate::validate("capgate.toml".as_ref())?;
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// let served = capgate_server::serve::start(checked, None, listener).await?;
/// // … later: served.reload().await; served.stop().await?;
/// # served.stop().await
/// # }
/// ```
pub async fn start(
    checked: Checked,
    store: Option<String>,
    listener: tokio::net::TcpListener,
) -> anyhow::Result<Served> {
    let addr = listener.local_addr().context("listener address")?;
    let prepared = Prepared::new(checked, store, &Listen::default(), &addr.to_string()).await?;
    let reloader = prepared.reloader.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(prepared.run(listener, Stops::Embedder(Some(stopped))));
    Ok(Served {
        addr,
        reloader,
        stop: Some(stop),
        task,
    })
}

/// Everything built before the listener opens: the deployment, its exporters, the reloader
/// and its application, the metrics, and what the background jobs and shutdown need.
struct Prepared {
    traces: Option<crate::telemetry::Traces>,
    reloader: Arc<Reloader>,
    app: axum::Router,
    in_flight: Arc<AtomicUsize>,
    kept: Arc<Kept>,
    exporters: Vec<capgate_export::ExportHandle>,
    metrics_server: Option<tokio::task::JoinHandle<()>>,
    metrics_on_gateway: Option<String>,
    store: capgate_store::Store,
    audit_sink: Arc<capgate_store::SqlAuditSink>,
    sinks: Vec<Arc<dyn capgate_core::audit::AuditSink>>,
    journal: capgate_store::SqlInvocationJournal,
    pending_horizon: Option<Duration>,
    retain_days: Option<u64>,
    audit_signer: Option<capgate_store::CheckpointSigner>,
    export_sinks: Vec<String>,
    gateway: crate::resolve::GatewaySettings,
}

impl Prepared {
    /// Build the deployment of `checked` for a gateway listening on `addr`.
    async fn new(
        checked: Checked,
        store: Option<String>,
        listen: &Listen,
        addr: &str,
    ) -> anyhow::Result<Prepared> {
        let traces = crate::telemetry::start_traces(checked.telemetry())?;
        let url = StoreUrl::for_store(store.as_deref(), checked.store())?;
        let metrics_on = checked.metrics().is_some();
        // `check` refused a file that serves metrics unauthenticated off loopback; the
        // command line can move the listeners, so look again at where they will be.
        if let Some(m) = checked.metrics()
            && m.bearer_token_sha256().is_none()
        {
            let metrics_addr = listen
                .metrics
                .clone()
                .or_else(|| m.listen().map(str::to_string))
                .unwrap_or_else(|| addr.to_string());
            if !capgate_config::values::is_loopback_listen(&metrics_addr) {
                anyhow::bail!(
                    "/telemetry/metrics/bearerTokenSha256: required to serve metrics on `{metrics_addr}`, which is not a loopback address (they name every tenant's namespace); set it (`capgate keys hash` prints one) or listen on 127.0.0.1"
                );
            }
        }
        if let Some(m) = &listen.metrics {
            if let Err(e) = capgate_config::values::check_listen(m) {
                anyhow::bail!("--metrics-listen: {e}");
            }
            if !metrics_on {
                anyhow::bail!(
                    "--metrics-listen: metrics are off in {} (add a [telemetry.metrics] table)",
                    checked.path().display()
                );
            }
        }
        let mut deployment = build(
            &checked,
            url.open_with(Access::Create, checked.store().options())
                .await?,
            &url.display(),
        )
        .await?;
        // `[audit] retainDays` (a restart key): the purge keeps what export sinks have not
        // delivered, and signs its records with the checkpoint key (required with it).
        let (retain_days, audit_signer) = (
            checked.audit().retain_days(),
            crate::build::checkpoint_signer(checked.audit())?,
        );
        let export_sinks: Vec<String> = checked.audit().export_sinks().to_vec();
        // `[audit.export.NAME]`: restart keys, so started once per process.
        let exporters =
            crate::audit_export::start(checked.exports(), checked.telemetry(), &deployment.store)?;
        deployment.exports = exporters.iter().map(|h| h.status()).collect();
        let metrics = metrics_router(&checked, &deployment)?;
        let pending_horizon = checked.journal().pending_horizon();
        let journal = deployment
            .store
            .journal()
            .with_replay_horizon(checked.journal().replay_horizon());
        let gateway = checked.gateway().clone();
        let metrics_section = checked.metrics().cloned();
        let (store_handle, audit_sink, sinks) = (
            deployment.store.clone(),
            deployment.audit.clone(),
            deployment.sinks.clone(),
        );
        let kept = Arc::new(
            // Console sessions count against their namespace's storage budget (restart
            // keys, like the journal's and the approvals' own).
            Kept::new(ConsoleSessions::new(Arc::new(StoredSessions(
                deployment
                    .store
                    .console_sessions()
                    .with_budget(checked.journal().budget()),
            ))))
            .with_mcp_sessions(McpSessions::shared(Arc::new(StoredMcpSessions(
                deployment.store.mcp_sessions(),
            )))),
        );
        let current = Arc::new(ArcSwap::from_pointee(axum::Router::new()));
        let reloader = Reloader::new(checked, deployment, kept.clone(), current.clone())?;
        let _ = kept.set_reloader(reloader.clone());
        reloader.serve_first().await?;
        let in_flight = Arc::new(AtomicUsize::new(0));
        let mut app = swapped(current, in_flight.clone());
        let mut metrics_server = None;
        let mut metrics_on_gateway = None;
        if let Some(router) = metrics {
            let m = metrics_section.as_ref();
            let own = listen
                .metrics
                .as_deref()
                .or_else(|| m.and_then(|m| m.listen()));
            match own {
                None => {
                    app = app.merge(router);
                    metrics_on_gateway = m.map(|m| m.path().to_string());
                }
                Some(addr) => {
                    let listener = tokio::net::TcpListener::bind(addr)
                        .await
                        .with_context(|| format!("cannot listen for metrics on {addr} (is another process using it? change [telemetry.metrics] listen, or try --metrics-listen 127.0.0.1:0)"))?;
                    let local = listener.local_addr().context("metrics listener address")?;
                    println!(
                        "capgate: metrics on http://{local}{}",
                        m.map_or("", |m| m.path())
                    );
                    metrics_server = Some(tokio::spawn(async move {
                        if let Err(e) = axum::serve(
                            listener,
                            router.into_make_service_with_connect_info::<std::net::SocketAddr>(),
                        )
                        .await
                        {
                            tracing::error!("the metrics listener failed: {e}");
                        }
                    }));
                }
            }
        }
        Ok(Prepared {
            traces,
            reloader,
            app,
            in_flight,
            kept,
            exporters,
            metrics_server,
            metrics_on_gateway,
            store: store_handle,
            audit_sink,
            sinks,
            journal,
            pending_horizon,
            retain_days,
            audit_signer,
            export_sinks,
            gateway,
        })
    }

    /// `capgate serve`'s banner: where each door is.
    fn announce(&self, local: std::net::SocketAddr) {
        println!("capgate: listening on http://{local}");
        for r in self.gateway.routes() {
            println!(
                "capgate:   {} -> surface {} (describe, invoke, getInvocation, getApproval, resumeApproval, contract, tools)",
                r.path,
                r.surface.as_str()
            );
        }
        println!(
            "capgate:   /mcp -> MCP (streamable HTTP), /approvals -> human approvals (role approver)"
        );
        if let Some(console) = self.gateway.console() {
            println!(
                "capgate:   {} -> the approval console (sign in with an approver's or a human's console key, never an agent's) at http://{local}{}",
                console.prefix, console.prefix
            );
        }
        if self.gateway.admin_reload() {
            println!(
                "capgate:   /admin/reload -> reload the configuration (POST, an operator key)"
            );
        }
        if let Some(path) = &self.metrics_on_gateway {
            println!("capgate:   {path} -> Prometheus metrics");
        }
        println!("capgate:   /healthz, /readyz -> health (liveness, readiness with named checks)");
        println!("capgate:   SIGHUP -> reload the configuration");
        println!(
            "capgate:   SIGTERM, Ctrl-C -> drain ({} ms unready, then up to {} ms for calls in flight); a second one exits at once",
            self.gateway.unready_delay().as_millis(),
            self.gateway.drain().as_millis()
        );
    }

    /// Serve on `listener` with the background jobs until `stops` says stop, drain, then
    /// flush the sinks, stop the exporters and the traces, and close the store.
    async fn run(self, listener: tokio::net::TcpListener, mut stops: Stops) -> anyhow::Result<()> {
        let shutdown = Shutdown {
            unready_delay: self.gateway.unready_delay(),
            drain: self.gateway.drain(),
            probe: self.kept.shutdown().clone(),
            in_flight: self.in_flight.clone(),
        };
        let purger = tokio::spawn(purge_receipts(
            self.journal,
            self.store.approvals(),
            self.pending_horizon,
            self.sinks.clone(),
        ));
        let sweeper = tokio::spawn(sweep_expired_approvals(self.reloader.clone()));
        let audit_purger = match (self.retain_days, self.audit_signer) {
            (Some(days), Some(signer)) => Some(tokio::spawn(purge_audit(
                self.store.audit_log(),
                days,
                signer,
                self.export_sinks,
            ))),
            _ => None,
        };
        let shared_purger = tokio::spawn(purge_shared(self.store.clone()));
        let (stop_accepting, accepting_stopped) = tokio::sync::oneshot::channel::<()>();
        let served = axum::serve(
            listener,
            self.app
                .into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .with_graceful_shutdown(async {
            let _ = accepting_stopped.await;
        })
        .into_future();
        let served = shutdown.run(served, stop_accepting, &mut stops).await;
        purger.abort();
        sweeper.abort();
        if let Some(p) = audit_purger {
            p.abort();
        }
        shared_purger.abort();
        if let Some(m) = self.metrics_server {
            m.abort();
        }
        served.context("the server failed")?;
        for sink in &self.sinks {
            let _ = sink.flush().await;
        }
        // Exporters stop after the delivery in flight is acknowledged (bounded: a hung
        // collector is abandoned; those events go again at the next start).
        for exporter in self.exporters {
            exporter.abort_after(EXPORT_STOP_TIMEOUT).await;
        }
        if let Some(traces) = self.traces {
            traces.shutdown(TRACES_FLUSH_TIMEOUT).await;
        }
        let stats = self.audit_sink.stats();
        if stats.lost() > 0 {
            eprintln!(
                "capgate: {} audit event(s) were lost (queue full or store unavailable); see the log",
                stats.lost()
            );
        }
        self.audit_sink.close().await;
        self.store.close().await;
        Ok(())
    }
}
