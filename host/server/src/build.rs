//! From a [`Checked`] configuration and an open store to a running deployment (and from a
//! [`StoreOnly`] one to what the operator commands over approvals run). Everything the
//! configuration can get wrong was refused by [`crate::validate`]; what can still fail here
//! is the store (migrations) and the audit file.

use crate::validate::{Checked, StoreOnly};
use anyhow::{Context, bail};
use capgate_core::approval::ApprovalCoordinator;
use capgate_core::audit::{AuditConfig, AuditSink, JsonLinesSink};
use capgate_core::journal::InvocationJournal;
use capgate_core::runtime::Runtime;
use capgate_store::{AuditSinkOptions, CheckpointSigner, SqlAuditSink, Store, Traced};
use std::sync::Arc;

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
    /// The approval coordinator on the store (a reload builds its runtime over it).
    pub approvals: Arc<dyn ApprovalCoordinator>,
    /// Every audit sink (the store's, plus `[audit] jsonl`), kept across reloads.
    pub sinks: Vec<Arc<dyn AuditSink>>,
    /// The state of every running `[audit.export.NAME]` exporter (`serve` starts them;
    /// `/readyz` checks each), kept across reloads.
    pub exports: Vec<Arc<capgate_export::ExportStatus>>,
}

impl Deployment {
    /// The same store, journal, approvals and audit sinks under a runtime built from
    /// another checked configuration: what a configuration reload swaps in.
    pub fn rebuilt(&self, checked: &Checked) -> anyhow::Result<Deployment> {
        Ok(Deployment {
            runtime: runtime_over(checked, self.approvals.clone(), self.sinks.clone())?,
            store: self.store.clone(),
            journal: self.journal.clone(),
            audit: self.audit.clone(),
            approvals: self.approvals.clone(),
            sinks: self.sinks.clone(),
            exports: self.exports.clone(),
        })
    }
}

/// The governed runtime of `checked` over these approvals and audit sinks.
fn runtime_over(
    checked: &Checked,
    approvals: Arc<dyn ApprovalCoordinator>,
    sinks: Vec<Arc<dyn AuditSink>>,
) -> anyhow::Result<Runtime> {
    checked
        .runtime(approvals, audit_config(checked.audit(), sinks))
        .context("the capability registry")
}

/// The audit settings every runtime of this binary runs with: `[audit]` over these sinks.
pub(crate) fn audit_config(
    audit: &crate::resolve::AuditSettings,
    sinks: Vec<Arc<dyn AuditSink>>,
) -> AuditConfig {
    AuditConfig {
        sinks,
        strict: audit.strict(),
        verbose: audit.verbose(),
        on_sink_error: None,
    }
}

/// Refuse a store that is missing migrations, saying how to apply them (`what` names the
/// store).
pub async fn require_migrated(store: &Store, what: &str) -> anyhow::Result<()> {
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
    Ok(())
}

/// The store's audit sink (for its loss counters) and every audit sink of a deployment.
type Sinks = (Arc<SqlAuditSink>, Vec<Arc<dyn AuditSink>>);

/// `[audit] checkpointKey` as the signer of checkpoints and purge records, if set.
pub fn checkpoint_signer(
    audit: &crate::resolve::AuditSettings,
) -> anyhow::Result<Option<CheckpointSigner>> {
    audit.checkpoint_signer().context("[audit] checkpointKey")
}

/// The store's audit sink and every sink of `[audit]` (the store's, plus `jsonl`).
fn audit_sinks(
    audit_settings: &crate::resolve::AuditSettings,
    store: &Store,
) -> anyhow::Result<Sinks> {
    let audit = Arc::new(
        store
            .audit_sink(AuditSinkOptions {
                // Best effort runs the call even when its `capability.started` failed:
                // keep that record for the store's return. Strict refused the call.
                keep_failed_write_through: !audit_settings.strict(),
                checkpoints: checkpoint_signer(audit_settings)?,
                ..AuditSinkOptions::default()
            })
            .context("the audit sink")?,
    );
    let mut sinks: Vec<Arc<dyn AuditSink>> = vec![audit.clone()];
    if let Some(path) = audit_settings.jsonl() {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open the audit file {}", path.display()))?;
        sinks.push(Arc::new(JsonLinesSink::new(file)));
    }
    Ok((audit, sinks))
}

/// Build the deployment a checked configuration describes, over `store` (`what` names the
/// store in messages).
pub async fn build(checked: &Checked, store: Store, what: &str) -> anyhow::Result<Deployment> {
    require_migrated(&store, what).await?;
    let (audit, sinks) = audit_sinks(checked.audit(), &store)?;
    // One storage budget per namespace: its receipts and its approvals (each holds a call's
    // whole input, at every door, /mcp included) count against it together.
    let budget = checked.journal().budget();
    let approvals: Arc<dyn ApprovalCoordinator> = Arc::new(Traced::new(
        store.approvals().with_budget(budget),
        store.backend(),
    ));
    let runtime = runtime_over(checked, approvals.clone(), sinks.clone())?;
    let journal: Arc<dyn InvocationJournal> = Arc::new(Traced::new(
        store
            .journal()
            .with_replay_horizon(checked.journal().replay_horizon())
            .with_budget(budget),
        store.backend(),
    ));
    Ok(Deployment {
        runtime,
        store,
        journal,
        audit,
        approvals,
        sinks,
        exports: Vec::new(),
    })
}

/// What the operator commands over approvals run: the deployment's rules of who may decide
/// what over its store, its approvals and its audit sinks, with no plugin, upstream or
/// secret (see [`crate::validate::StoreOnly`]).
pub struct OperatorDeployment {
    /// The runtime that reads and decides approvals (it invokes nothing).
    pub runtime: Runtime,
    /// The store.
    pub store: Store,
    /// The file it was built from (which capabilities' approval input is withheld:
    /// [`StoreOnly::withholds_input`]).
    pub store_only: StoreOnly,
    audit: Arc<capgate_store::SqlAuditSink>,
}

impl OperatorDeployment {
    /// Close it: the audit writer first (what the command recorded is written and its
    /// chain's end recorded), then the store.
    pub async fn close(&self) {
        self.audit.close().await;
        self.store.close().await;
    }
}

/// Build the operator commands' deployment of `config` over `store` (`what` names the
/// store in messages).
pub async fn build_operator(
    config: StoreOnly,
    store: Store,
    what: &str,
) -> anyhow::Result<OperatorDeployment> {
    let audit_settings = config.audit();
    require_migrated(&store, what).await?;
    let (audit, sinks) = audit_sinks(&audit_settings, &store)?;
    let approvals: Arc<dyn ApprovalCoordinator> =
        Arc::new(Traced::new(store.approvals(), store.backend()));
    let runtime = config
        .runtime(approvals, audit_config(&audit_settings, sinks))
        .context("the capability registry")?;
    Ok(OperatorDeployment {
        runtime,
        store,
        store_only: config,
        audit,
    })
}
