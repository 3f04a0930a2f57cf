//! `capgate serve`: the configured deployment behind one HTTP listener — a capability
//! gateway per route (each with its fixed surface), MCP at `/mcp`, the human approvals API
//! at `/approvals`, and `/healthz` + `/readyz`.

use crate::build::{Deployment, build};
use crate::store::{Access, StoreUrl};
use crate::validate::Checked;
use anyhow::Context;
use capgate_core::actor::Surface;
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
        .merge(capgate_gateway::approvals_api::approvals_router(
            d.runtime.clone(),
            keeper.clone(),
            "approver",
        ))
        // The doors above continue a caller's `traceparent`; health checks are not traced.
        .layer(axum::middleware::from_fn(
            capgate_gateway::trace_context::continue_trace,
        ))
        .merge(capgate_gateway::gateway::health_router(
            capgate_gateway::gateway::JournalProbe(d.journal.clone()),
        ));
    Ok(app)
}

/// `capgate serve`: a [`Checked`] deployment over its store (created if missing), behind
/// one listener.
pub async fn serve(
    checked: Checked,
    store: Option<String>,
    listen: Option<String>,
) -> anyhow::Result<()> {
    let cfg = &checked.config;
    let traces = crate::telemetry::start_traces(&cfg.telemetry)?;
    let url = StoreUrl::for_config(store.as_deref(), &cfg.store.url, &cfg.path)?;
    let addr = listen.unwrap_or_else(|| cfg.gateway.listen.clone());
    if let Err(e) = crate::values::check_listen(&addr) {
        anyhow::bail!("--listen: {e}");
    }
    let deployment = build(&checked, url.open(Access::Create).await?, &url.display()).await?;
    let app = app(&checked, &deployment)?;
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
const TRACES_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

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
