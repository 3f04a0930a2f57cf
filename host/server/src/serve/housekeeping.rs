//! `serve`'s background jobs: reload on SIGHUP, the hourly purges (settled receipts and
//! expired approvals past the replay horizon, pending receipts past theirs, the audit trail
//! past retention, what replicas share), and the approval sweep (escalation, expiry).

use super::adapters::MCP_SESSION_HORIZON;
use crate::metrics::AUDIT_PURGED;
use crate::reload::{Reloader, Trigger};
use std::sync::Arc;
use std::time::Duration;

/// Reload the configuration on every SIGHUP; the outcome goes to the log (a refused file
/// with each located problem, as `capgate check` prints them).
pub(super) async fn reload_on_hangup(
    mut hangups: tokio::signal::unix::Signal,
    reloader: Arc<Reloader>,
) {
    while hangups.recv().await.is_some() {
        tracing::info!(target: "capgate::reload", "SIGHUP: reloading the configuration");
        reloader.reload(Trigger::Signal).await;
    }
}

/// How often `serve` deletes settled receipts past the replay horizon.
const PURGE_EVERY: Duration = Duration::from_secs(3600);

/// Forget what replicas share and no longer need: rate-limit buckets that are full again
/// (the same as no bucket), MCP sessions past [`MCP_SESSION_HORIZON`](super::adapters::MCP_SESSION_HORIZON)
/// and MCP tasks past their approval's expiry plus the replay horizon.
pub(super) async fn purge_shared(store: capgate_store::Store) {
    let mut every = tokio::time::interval(PURGE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        if let Err(e) = store.quotas().purge_idle().await {
            tracing::warn!("purging idle rate-limit buckets failed: {e}");
        }
        if let Err(e) = store
            .mcp_sessions()
            .purge_before(chrono::Utc::now() - MCP_SESSION_HORIZON)
            .await
        {
            tracing::warn!("purging old MCP sessions failed: {e}");
        }
        if let Err(e) = store.mcp_tasks().purge(chrono::Utc::now()).await {
            tracing::warn!("purging MCP tasks past their horizon failed: {e}");
        }
    }
}

/// `[audit] retainDays`: purge the audit trail past retention every `PURGE_EVERY`
/// (docs/guides/operating.md "Retention"), keeping what an export sink has not delivered.
pub(super) async fn purge_audit(
    log: capgate_store::AuditLog,
    days: u64,
    signer: capgate_store::CheckpointSigner,
    keep_for: Vec<String>,
) {
    let mut every = tokio::time::interval(PURGE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let keep = chrono::Duration::days(i64::try_from(days).unwrap_or(i64::MAX / 86_400_000));
    loop {
        every.tick().await;
        let options = capgate_store::PurgeOptions {
            before: chrono::Utc::now() - keep,
            signer: signer.clone(),
            keep_for: keep_for.clone(),
        };
        match log.purge(&options).await {
            Ok(r) if r.events + r.unchained == 0 => {}
            Ok(r) => {
                metrics::counter!(AUDIT_PURGED).increment(r.events + r.unchained);
                tracing::info!(target: "capgate::audit", chains = r.chains, events = r.events, unchained = r.unchained, "audit events past retention purged");
            }
            Err(e) => {
                tracing::warn!(target: "capgate::audit", "purging the audit trail failed: {e}")
            }
        }
    }
}

/// How often `serve` marks approvals that expired undecided (one event, one metric and one
/// webhook notification per approval, whichever replica marks it).
const SWEEP_EVERY: Duration = Duration::from_secs(2);

/// Escalate approvals pending past `[approvals] escalateAfterMs` (read at each sweep: a
/// reload changes it) and mark approvals that expired undecided, every [`SWEEP_EVERY`],
/// through the runtime
/// serving at that moment (its coordinator and audit sinks are the ones every reload keeps;
/// holding none between sweeps lets a replaced configuration go).
pub(super) async fn sweep_expired_approvals(reloader: Arc<Reloader>) {
    let mut every = tokio::time::interval(SWEEP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let (runtime, escalation) = reloader.runtime().await;
        if let Some(e) = escalation {
            match runtime
                .approvals()
                .escalate_due(e.after(), e.to(), 100)
                .await
            {
                Ok(escalated) if !escalated.is_empty() => {
                    tracing::info!(target: "capgate::approvals", escalated = escalated.len(), "approvals escalated");
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(target: "capgate::approvals", "escalating approvals failed: {e}")
                }
            }
        }
        match runtime.approvals().expire_due(100).await {
            Ok(expired) if !expired.is_empty() => {
                tracing::info!(target: "capgate::approvals", expired = expired.len(), "approvals expired undecided");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(target: "capgate::approvals", "marking expired approvals failed: {e}")
            }
        }
    }
}

/// Settle the receipts pending longer than `horizon` as `outcome-unknown`, auditing each.
async fn abandon_pending(
    journal: &capgate_store::SqlInvocationJournal,
    horizon: Duration,
    now: chrono::DateTime<chrono::Utc>,
    sinks: &[Arc<dyn capgate_core::audit::AuditSink>],
) {
    let Some(cutoff) = chrono::Duration::from_std(horizon)
        .ok()
        .and_then(|h| now.checked_sub_signed(h))
    else {
        return;
    };
    let abandoned = match journal.abandon_pending_before(cutoff, now, 10_000).await {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!("settling receipts pending past the pending horizon failed: {e}");
            return;
        }
    };
    for a in &abandoned {
        let event = capgate_core::audit::AuditEvent {
            timestamp: now,
            surface: capgate_core::actor::Surface::Direct,
            actor: capgate_core::actor::ActorRef {
                id: "capgate".into(),
                kind: capgate_core::actor::ActorKind::Service,
            },
            execution_id: None,
            capability_id: Some(a.record.capability_id.clone()),
            correlation_id: a.record.correlation_id.clone(),
            input_hash: Some(a.record.input_hash.clone()),
            payload: capgate_core::audit::EventPayload::InvocationAbandoned {
                invocation_id: a.record.invocation_id.clone(),
                pending_since: a.record.created_at,
                namespace: a.namespace.clone(),
            },
        };
        for sink in sinks {
            if let Err(e) = sink.emit(&event).await {
                tracing::warn!(sink = %e.sink, error = %e.message, "an abandoned receipt could not be audited");
            }
        }
    }
    for sink in sinks {
        let _ = sink.flush().await;
    }
    if !abandoned.is_empty() {
        tracing::warn!(
            settled = abandoned.len(),
            "receipts pending past the pending horizon settled as outcome-unknown"
        );
    }
}

/// Settled receipts and expired approvals past the replay horizon, purged periodically
/// (approval records hold whole inputs and count against their namespace's budget); with
/// `pending_horizon`, receipts pending longer first settled as `outcome-unknown`, each
/// audited (`capgate.invocation.abandoned`) to `sinks`.
pub(super) async fn purge_receipts(
    journal: capgate_store::SqlInvocationJournal,
    approvals: capgate_store::SqlApprovalCoordinator,
    pending_horizon: Option<Duration>,
    sinks: Vec<Arc<dyn capgate_core::audit::AuditSink>>,
) {
    let mut every = tokio::time::interval(PURGE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let now = chrono::Utc::now();
        if let Some(horizon) = pending_horizon {
            abandon_pending(&journal, horizon, now, &sinks).await;
        }
        match journal.purge_expired(now).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                purged = n,
                "settled receipts past the replay horizon purged"
            ),
            Err(e) => tracing::warn!("purging settled receipts failed: {e}"),
        }
        let purged = match journal.horizon_cutoff(now) {
            Ok(cutoff) => approvals
                .purge_expired_before(cutoff)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match purged {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                purged = n,
                "approvals expired past the replay horizon purged"
            ),
            Err(e) => tracing::warn!("purging expired approvals failed: {e}"),
        }
    }
}
