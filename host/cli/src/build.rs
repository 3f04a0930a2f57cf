//! From a [`Checked`] configuration and an open store to a running deployment. Everything
//! the configuration can get wrong was refused by [`crate::validate`]; what can still fail
//! here is the store (migrations) and the audit file.

use crate::validate::Checked;
use anyhow::{Context, bail};
use capgate_core::approval::ApprovalCoordinator;
use capgate_core::audit::{AuditConfig, AuditSink, JsonLinesSink};
use capgate_core::journal::InvocationJournal;
use capgate_core::runtime::Runtime;
use capgate_store::{AuditSinkOptions, SqlAuditSink, Store, Traced};
use std::sync::Arc;
use std::time::Duration;

/// What `serve`, `mcp` and the approvals commands run: one runtime over one store.
pub struct Deployment {
    /// The governed runtime.
    pub runtime: Runtime,
    /// The store (approvals, audit, journal).
    pub store: Store,
    /// The invocation journal of the gateway.
    pub journal: Arc<dyn InvocationJournal>,
    /// The store's audit sink, for its loss counters.
    pub audit: Arc<SqlAuditSink>,
}

/// Build the deployment a checked configuration describes, over `store` (`what` names the
/// store in messages).
pub async fn build(checked: &Checked, store: Store, what: &str) -> anyhow::Result<Deployment> {
    let cfg = &checked.config;
    let pending: Vec<String> = store
        .migration_status()
        .await
        .context("could not read the store's migration status")?
        .into_iter()
        .filter(|m| !m.applied)
        .map(|m| format!("{} {}", m.version, m.description))
        .collect();
    if !pending.is_empty() {
        bail!(
            "the store {what} is missing migrations ({}); run `capgate migrate --store {what}` once, then start again",
            pending.join(", "),
        );
    }
    let audit = Arc::new(
        store
            .audit_sink(AuditSinkOptions::default())
            .context("the audit sink")?,
    );
    let mut sinks: Vec<Arc<dyn AuditSink>> = vec![audit.clone()];
    if let Some(jsonl) = &cfg.audit.jsonl {
        let path = cfg.relative(jsonl);
        sinks.push(Arc::new(JsonLinesSink::append_to(&path).with_context(
            || format!("cannot open the audit file {}", path.display()),
        )?));
    }
    let approvals: Arc<dyn ApprovalCoordinator> =
        Arc::new(Traced::new(store.approvals(), store.backend()));
    let runtime = checked
        .runtime(
            approvals,
            AuditConfig {
                sinks,
                strict: cfg.audit.strict,
                verbose: cfg.audit.verbose,
                on_sink_error: None,
            },
        )
        .context("the capability registry")?;
    let journal: Arc<dyn InvocationJournal> = Arc::new(Traced::new(
        store.journal().with_replay_horizon(Duration::from_secs(
            cfg.gateway.replay_horizon_hours.saturating_mul(3600),
        )),
        store.backend(),
    ));
    Ok(Deployment {
        runtime,
        store,
        journal,
        audit,
    })
}
