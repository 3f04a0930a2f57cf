//! Operator commands over a deployment or its store: MCP over stdio, the portable contract,
//! approvals from the shell, and invocation receipts (show, reconcile).

use crate::args::StatusFilter;
use crate::build::{Deployment, build};
use crate::store::{Access, StoreUrl};
use crate::validate::Checked;
use anyhow::{Context, anyhow, bail};
use capgate_contract::tools::{ToolFormat, export_contract_tools};
use capgate_core::actor::{ActorKind, ActorRef, Surface};
use capgate_core::approval::{ApprovalFilter, DecisionStatus};
use capgate_core::journal::{InvocationJournal, Settlement, scope_hash};
use capgate_core::runtime::{DecideRequest, Decider};

/// The deployment of a command with a configuration file, over its store (`--store` when
/// given, else `store.url`).
async fn deployment(
    checked: &Checked,
    store: Option<&str>,
    access: Access,
) -> anyhow::Result<Deployment> {
    let cfg = &checked.config;
    let url = StoreUrl::for_config(store, &cfg.store.url, &cfg.path)?;
    build(checked, url.open(access).await?, &url.display()).await
}

/// `capgate mcp --stdio`.
pub async fn mcp_stdio(checked: Checked, store: Option<String>) -> anyhow::Result<()> {
    let (actor, namespace, context) = checked.stdio_identity()?;
    // Spans go to the collector over HTTP and the summary to stderr: stdout stays MCP's.
    let traces = crate::telemetry::start_traces(&checked.config.telemetry)?;
    let d = deployment(&checked, store.as_deref(), Access::Create).await?;
    let result = capgate_gateway::mcp::serve_stdio(
        d.runtime.clone(),
        actor,
        namespace,
        context,
        checked.authorizer(),
        checked.mcp_options(),
    )
    .await;
    let _ = d.runtime.drain_audit().await;
    if let Some(traces) = traces {
        traces.shutdown(crate::serve::TRACES_FLUSH_TIMEOUT).await;
    }
    d.store.close().await;
    result.map_err(Into::into)
}

/// `capgate contract export|tools`.
pub fn contract(checked: &Checked, s: Surface, format: Option<ToolFormat>) -> anyhow::Result<()> {
    // The contract is the configuration's alone: no store is opened.
    let runtime = checked
        .scratch_runtime()
        .context("the capability registry")?;
    let contract = capgate_contract::export_contract(&runtime, s, &checked.config.revision);
    let out = match format {
        None => serde_json::to_value(&contract)?,
        Some(format) => export_contract_tools(&contract, s, format),
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// `capgate approvals list`.
pub async fn approvals_list(
    checked: &Checked,
    store: Option<&str>,
    status: StatusFilter,
    capability: Option<String>,
) -> anyhow::Result<()> {
    let filter = ApprovalFilter {
        status: status.0,
        capability_id: capability,
        ..Default::default()
    };
    let d = deployment(checked, store, Access::Existing).await?;
    let list = d.runtime.approvals().list(&filter).await?;
    if list.is_empty() {
        eprintln!("no {status} approvals");
    }
    let now = d.runtime.now();
    for r in &list {
        println!(
            "{}",
            serde_json::to_string(&serde_json::json!({
                "approval": r.summary(now),
                "requestedBy": r.request.actor,
                "input": r.request.input,
            }))?
        );
    }
    d.store.close().await;
    Ok(())
}

/// `capgate approvals show`.
pub async fn approvals_show(
    checked: &Checked,
    store: Option<&str>,
    id: &str,
) -> anyhow::Result<()> {
    let d = deployment(checked, store, Access::Existing).await?;
    let record = d.runtime.approvals().get(id).await?.ok_or_else(|| {
        anyhow!("no approval `{id}` (`capgate approvals list --status all` lists them)")
    })?;
    println!("{}", serde_json::to_string_pretty(&record)?);
    d.store.close().await;
    Ok(())
}

/// `capgate approvals approve|reject`.
pub async fn approvals_decide(
    checked: &Checked,
    store: Option<&str>,
    id: &str,
    approve: bool,
    approver: &str,
    comment: Option<String>,
) -> anyhow::Result<()> {
    let d = deployment(checked, store, Access::Existing).await?;
    let record = d
        .runtime
        .approvals()
        .decide(
            id,
            DecideRequest {
                status: if approve {
                    DecisionStatus::Approved
                } else {
                    DecisionStatus::Rejected
                },
                approver: ActorRef {
                    id: approver.to_string(),
                    kind: ActorKind::User,
                },
                comment,
                decider: Decider::Operator,
            },
        )
        .await
        .with_context(|| format!("could not decide `{id}`"))?;
    d.runtime.drain_audit().await.ok();
    println!(
        "{}",
        serde_json::to_string(&record.summary(d.runtime.now()))?
    );
    if approve {
        println!(
            "approved; nothing ran. The requester's host continues with resumeApproval and the original invocation id."
        );
    }
    d.store.close().await;
    Ok(())
}

/// The scope of a journal record: who called, through which door.
#[derive(clap::Args, Debug)]
pub struct ScopeArgs {
    /// The caller's namespace.
    #[arg(long)]
    namespace: String,
    /// The caller as KIND:ID (e.g. user:u_dana).
    #[arg(long, value_parser = crate::args::actor_ref)]
    actor: ActorRef,
    /// The surface of the route it came through (aiSdk, mcp, workflow).
    #[arg(long)]
    surface: Surface,
    /// Store URL (a relative sqlite:// path is relative to the current directory); the
    /// database must exist.
    #[arg(long, env = "CAPGATE_STORE")]
    store: String,
}

impl ScopeArgs {
    fn scope(&self) -> anyhow::Result<String> {
        Ok(scope_hash(&self.namespace, &self.actor, self.surface)?)
    }
}

async fn journal(scope: &ScopeArgs) -> anyhow::Result<(capgate_store::Store, String)> {
    let hash = scope.scope()?;
    let store = StoreUrl::from_command_line(&scope.store)?
        .open(Access::Existing)
        .await?;
    Ok((store, hash))
}

/// `capgate invocations show`.
pub async fn invocations_show(scope: &ScopeArgs, id: &str) -> anyhow::Result<()> {
    let (store, hash) = journal(scope).await?;
    let record = store.journal().get(&hash, id).await?.ok_or_else(|| {
        anyhow!(
            "no invocation `{id}` for {}:{} in {} on {}",
            scope.actor.kind.as_str(),
            scope.actor.id,
            scope.namespace,
            scope.surface
        )
    })?;
    println!(
        "{}",
        serde_json::to_string_pretty(&serde_json::json!({
            "invocationId": record.invocation_id,
            "capabilityId": record.capability_id,
            "state": record.state.as_str(),
            "claimToken": record.claim_token,
            "approvalId": record.approval_id,
            "awaitingApproval": record.awaiting_approval,
            "idempotencyKey": record.idempotency_key,
            "reconciled": record.reconciled,
            "outcome": record.outcome,
            "createdAt": record.created_at,
            "updatedAt": record.updated_at,
        }))?
    );
    store.close().await;
    Ok(())
}

/// `capgate invocations reconcile`.
pub async fn invocations_reconcile(
    scope: &ScopeArgs,
    id: &str,
    claim: &str,
    outcome: &str,
) -> anyhow::Result<()> {
    let outcome: capgate_gateway::wire::CapabilityOutcome = serde_json::from_str(outcome).context(
        "--outcome must be a CapabilityOutcome JSON object (status completed, failed or cancelled)",
    )?;
    if outcome.invocation_id() != id {
        bail!(
            "--outcome carries invocationId `{}`, not `{id}`",
            outcome.invocation_id()
        );
    }
    if matches!(
        outcome,
        capgate_gateway::wire::CapabilityOutcome::OutcomeUnknown { .. }
            | capgate_gateway::wire::CapabilityOutcome::ApprovalRequired { .. }
    ) {
        bail!("reconcile records what happened: completed, failed or cancelled");
    }
    let (store, hash) = journal(scope).await?;
    let record = store
        .journal()
        .reconcile(
            &hash,
            id,
            claim,
            Settlement::final_outcome(serde_json::to_value(&outcome)?),
            chrono::Utc::now(),
        )
        .await
        .with_context(|| {
            format!(
                "could not reconcile `{id}` (run `capgate invocations show` for its current claim)"
            )
        })?;
    println!("reconciled {} ({})", record.invocation_id, outcome.status());
    store.close().await;
    Ok(())
}

/// `capgate invocations purge`.
pub async fn invocations_purge(url: &str, older_than_hours: u64) -> anyhow::Result<()> {
    let store = StoreUrl::from_command_line(url)?
        .open(Access::Existing)
        .await?;
    let horizon = std::time::Duration::from_secs(older_than_hours.saturating_mul(3600));
    let purged = store
        .journal()
        .with_replay_horizon(horizon)
        .purge_expired(chrono::Utc::now())
        .await
        .context("could not purge receipts")?;
    println!(
        "purged {purged} settled receipt(s) older than {older_than_hours} h; pending receipts are kept"
    );
    store.close().await;
    Ok(())
}

/// The longest API key `capgate keys hash` reads (a key is a few dozen characters; this
/// bounds a mistaken pipe of a whole file).
pub const MAX_KEY_BYTES: usize = 4096;

/// Why `capgate keys hash` could not read a key from standard input.
#[derive(Debug, thiserror::Error)]
pub enum KeyInputError {
    /// Standard input could not be read.
    #[error("cannot read the key from standard input: {0}")]
    Io(#[from] std::io::Error),
    /// Nothing but a line break (or nothing at all) arrived.
    #[error("no key on standard input: pipe it in, e.g. printf '%s' \"$KEY\" | capgate keys hash")]
    Empty,
    /// More than one line: a key is one line.
    #[error("the key must be one line (standard input held more than one)")]
    MultiLine,
    /// Longer than [`MAX_KEY_BYTES`].
    #[error("the key is longer than {MAX_KEY_BYTES} bytes")]
    TooLong,
    /// Not UTF-8.
    #[error("the key is not UTF-8 text")]
    NotUtf8,
}

/// The key of `capgate keys hash`, from standard input: one line, its line break (`\n` or
/// `\r\n`) not part of it, at most [`MAX_KEY_BYTES`]. Keys never come from the command line,
/// where process listings and shell history would keep them.
pub fn read_key(input: impl std::io::Read) -> Result<String, KeyInputError> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let limit = u64::try_from(MAX_KEY_BYTES + 3).unwrap_or(u64::MAX);
    input.take(limit).read_to_end(&mut bytes)?;
    let text = String::from_utf8(bytes).map_err(|_| KeyInputError::NotUtf8)?;
    let line = text
        .strip_suffix('\n')
        .map_or(text.as_str(), |l| l.strip_suffix('\r').unwrap_or(l));
    if line.contains(['\n', '\r']) {
        return Err(KeyInputError::MultiLine);
    }
    if line.len() > MAX_KEY_BYTES {
        return Err(KeyInputError::TooLong);
    }
    if line.is_empty() {
        return Err(KeyInputError::Empty);
    }
    Ok(line.to_string())
}

#[cfg(test)]
mod key_input_tests {
    use super::*;

    #[test]
    fn one_line_is_the_key_and_its_line_break_is_not() {
        assert_eq!(read_key(&b"k1"[..]).unwrap(), "k1");
        assert_eq!(read_key(&b"k1\n"[..]).unwrap(), "k1");
        assert_eq!(read_key(&b"k1\r\n"[..]).unwrap(), "k1");
        assert_eq!(read_key(&b" k 1 "[..]).unwrap(), " k 1 ");
    }

    #[test]
    fn empty_multi_line_long_and_binary_input_is_refused() {
        assert!(matches!(read_key(&b""[..]), Err(KeyInputError::Empty)));
        assert!(matches!(read_key(&b"\n"[..]), Err(KeyInputError::Empty)));
        assert!(matches!(
            read_key(&b"a\nb"[..]),
            Err(KeyInputError::MultiLine)
        ));
        assert!(matches!(
            read_key(&b"a\n\n"[..]),
            Err(KeyInputError::MultiLine)
        ));
        let long = vec![b'k'; MAX_KEY_BYTES + 1];
        assert!(matches!(read_key(&long[..]), Err(KeyInputError::TooLong)));
        let huge = vec![b'k'; MAX_KEY_BYTES * 4];
        assert!(matches!(read_key(&huge[..]), Err(KeyInputError::TooLong)));
        assert!(matches!(
            read_key(&[0xff, 0xfe][..]),
            Err(KeyInputError::NotUtf8)
        ));
    }
}
