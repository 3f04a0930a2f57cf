//! `capgate serve`: the configured deployment behind one HTTP listener — a capability
//! gateway per route (each with its fixed surface), MCP at `/mcp`, the human approvals API
//! at `/approvals`, the approval console at `/console`, and `/healthz` + `/readyz`.

use crate::build::{Deployment, build};
use crate::store::{Access, StoreUrl};
use crate::validate::Checked;
use anyhow::Context;
use capgate_core::actor::Surface;
use capgate_gateway::approvals_api::{ApprovalsRouter, AuditTrail};
use capgate_gateway::console::ConsoleOptions;
use capgate_gateway::door::Doorkeeper;
use capgate_gateway::gateway::{FnProbe, ReadinessProbe};
use std::sync::Arc;
use std::time::Duration;

/// Build the whole HTTP application of a deployment.
pub fn app(checked: &Checked, d: &Deployment) -> anyhow::Result<axum::Router> {
    let cfg = &checked.config;
    let keeper = checked.doorkeeper(&d.runtime);
    let mut app = axum::Router::new();
    let gateway_for = |surface: Surface| {
        checked.gateway_config(
            surface,
            d.runtime.clone(),
            d.journal.clone(),
            keeper.clone(),
        )
    };
    for r in &cfg.gateway.routes {
        let router = capgate_gateway::gateway::capability_router(gateway_for(r.surface))
            .with_context(|| format!("gateway route {}", r.path))?;
        app = app.nest(&r.path, router);
    }
    app = app
        .nest_service(
            "/mcp",
            capgate_gateway::mcp::streamable_http_router(
                d.runtime.clone(),
                keeper.clone(),
                checked.mcp_options(),
            ),
        )
        .merge(approvals(d, &keeper).build());
    if cfg.gateway.console.enabled {
        app = app.merge(
            capgate_gateway::console::console_router(
                approvals(d, &keeper).build(),
                keeper.clone(),
                console_options(&cfg.gateway.console)?,
            )
            .context("[gateway.console]")?,
        );
    }
    app = app
        // The doors above continue a caller's `traceparent`; health checks are not traced.
        .layer(axum::middleware::from_fn(
            capgate_gateway::trace_context::continue_trace,
        ))
        .merge(capgate_gateway::gateway::readiness_router(
            readiness_checks(cfg, d),
        ));
    Ok(app)
}

/// The human approvals API of a deployment: role `approver`, outcomes from its audit log.
fn approvals(d: &Deployment, keeper: &Doorkeeper) -> ApprovalsRouter {
    ApprovalsRouter::new(d.runtime.clone(), keeper.clone())
        .role(APPROVER_ROLE)
        .history(Arc::new(AuditTrail(d.store.audit_log())))
}

/// The role the approvals API and the console ask of an approver.
pub(crate) const APPROVER_ROLE: &str = "approver";

fn console_options(c: &crate::config::ConsoleSection) -> anyhow::Result<ConsoleOptions> {
    Ok(ConsoleOptions {
        prefix: c.path.clone(),
        session_ttl: Duration::from_secs(c.session_minutes.saturating_mul(60)),
        secure_cookie: c
            .secure_cookie
            .resolve()
            .context("[gateway.console] secureCookie must be \"auto\", true or false")?,
        approver_role: APPROVER_ROLE.into(),
        ..ConsoleOptions::default()
    })
}

/// What `/readyz` checks: the store answers, the audit writer runs, and (with plugins) the
/// Wasm host still bounds calls.
fn readiness_checks(
    cfg: &crate::config::Config,
    d: &Deployment,
) -> Vec<(String, Arc<dyn ReadinessProbe>)> {
    let audit = d.audit.clone();
    let mut checks: Vec<(String, Arc<dyn ReadinessProbe>)> = vec![
        (
            "store".into(),
            Arc::new(capgate_gateway::gateway::JournalProbe(d.journal.clone())),
        ),
        (
            "audit".into(),
            Arc::new(FnProbe(move || {
                if audit.is_writing() {
                    Ok(())
                } else {
                    Err("the audit writer has stopped".to_owned())
                }
            })),
        ),
    ];
    if !cfg.plugins.is_empty() {
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
fn metrics_router(
    cfg: &crate::config::Config,
    d: &Deployment,
) -> anyhow::Result<Option<axum::Router>> {
    let Some(m) = cfg.telemetry.metrics.as_ref().filter(|m| m.enabled) else {
        return Ok(None);
    };
    let source = crate::metrics::Exposition::install(d)?;
    Ok(Some(capgate_gateway::metrics::metrics_router(
        &m.path,
        source,
        m.bearer_token_sha256.clone(),
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
/// one listener (two when the metrics have their own).
pub async fn serve(checked: Checked, store: Option<String>, listen: Listen) -> anyhow::Result<()> {
    let cfg = &checked.config;
    let traces = crate::telemetry::start_traces(&cfg.telemetry)?;
    let url = StoreUrl::for_config(store.as_deref(), &cfg.store.url, &cfg.path)?;
    let addr = listen.gateway.unwrap_or_else(|| cfg.gateway.listen.clone());
    if let Err(e) = crate::values::check_listen(&addr) {
        anyhow::bail!("--listen: {e}");
    }
    let metrics_on = cfg.telemetry.metrics.as_ref().is_some_and(|m| m.enabled);
    if let Some(m) = &listen.metrics {
        if let Err(e) = crate::values::check_listen(m) {
            anyhow::bail!("--metrics-listen: {e}");
        }
        if !metrics_on {
            anyhow::bail!(
                "--metrics-listen: metrics are off in {} (add a [telemetry.metrics] table)",
                cfg.path.display()
            );
        }
    }
    let deployment = build(&checked, url.open(Access::Create).await?, &url.display()).await?;
    let mut app = app(&checked, &deployment)?;
    let metrics = metrics_router(cfg, &deployment)?;
    let mut metrics_server = None;
    let mut metrics_on_gateway = None;
    if let Some(router) = metrics {
        app = app.layer(axum::middleware::from_fn(
            capgate_gateway::metrics::track_http,
        ));
        let m = cfg.telemetry.metrics.as_ref();
        let own = listen
            .metrics
            .as_deref()
            .or_else(|| m.and_then(|m| m.listen.as_deref()));
        match own {
            None => {
                app = app.merge(router);
                metrics_on_gateway = m.map(|m| m.path.clone());
            }
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen for metrics on {addr} (is another process using it? change [telemetry.metrics] listen, or try --metrics-listen 127.0.0.1:0)"))?;
                let local = listener.local_addr().context("metrics listener address")?;
                println!(
                    "capgate: metrics on http://{local}{}",
                    m.map_or("", |m| m.path.as_str())
                );
                metrics_server = Some(tokio::spawn(async move {
                    if let Err(e) = axum::serve(listener, router).await {
                        tracing::error!("the metrics listener failed: {e}");
                    }
                }));
            }
        }
    }
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {addr} (is another process using it? try --listen 127.0.0.1:0)"
            )
        })?;
    let local = listener.local_addr().context("listener address")?;
    println!("capgate: listening on http://{local}");
    for r in &cfg.gateway.routes {
        println!(
            "capgate:   {} -> surface {} (describe, invoke, getInvocation, getApproval, resumeApproval, contract, tools)",
            r.path,
            r.surface.as_str()
        );
    }
    println!(
        "capgate:   /mcp -> MCP (streamable HTTP), /approvals -> human approvals (role approver)"
    );
    if cfg.gateway.console.enabled {
        println!(
            "capgate:   {} -> the approval console (sign in with an approver's key) at http://{local}{}",
            cfg.gateway.console.path, cfg.gateway.console.path
        );
    }
    if let Some(path) = metrics_on_gateway {
        println!("capgate:   {path} -> Prometheus metrics");
    }
    println!("capgate:   /healthz, /readyz -> health (liveness, readiness with named checks)");
    let purger = tokio::spawn(purge_receipts(
        deployment
            .store
            .journal()
            .with_replay_horizon(Duration::from_secs(
                cfg.gateway.replay_horizon_hours.saturating_mul(3600),
            )),
    ));
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    purger.abort();
    if let Some(m) = metrics_server {
        m.abort();
    }
    served.context("the server failed")?;
    let _ = deployment.runtime.drain_audit().await;
    if let Some(traces) = traces {
        traces.shutdown(TRACES_FLUSH_TIMEOUT).await;
    }
    let stats = deployment.audit.stats();
    if stats.lost() > 0 {
        eprintln!(
            "capgate: {} audit event(s) were lost (queue full or store unavailable); see the log",
            stats.lost()
        );
    }
    deployment.store.close().await;
    Ok(())
}

/// How long `serve` waits at shutdown for the last spans to reach the collector.
pub(crate) const TRACES_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// How often `serve` deletes settled receipts past the replay horizon.
const PURGE_EVERY: Duration = Duration::from_secs(3600);

/// Keep the journal within its replay horizon: at start, then every [`PURGE_EVERY`]. Every
/// replica may run it; the DELETE is idempotent and never touches pending receipts.
async fn purge_receipts(journal: capgate_store::SqlInvocationJournal) {
    let mut every = tokio::time::interval(PURGE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        match journal.purge_expired(chrono::Utc::now()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                purged = n,
                "settled receipts past the replay horizon purged"
            ),
            Err(e) => tracing::warn!("purging settled receipts failed: {e}"),
        }
    }
}
