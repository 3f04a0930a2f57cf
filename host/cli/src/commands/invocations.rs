//! `capgate invocations show|reconcile|purge`: the invocation receipts of the gateway
//! journal, for the operator who settles what a crash left pending.

use super::shared::{OutputArg, StoreArg, print_json};
use crate::exit::{Exit, Status};
use crate::runtime;
use anyhow::Context;
use capgate_core::actor::{ActorRef, Surface};
use capgate_core::journal::{InvocationJournal, ObservedClaim, Settlement, scope_hash};
use std::process::ExitCode;

/// Invocation receipts of the gateway journal. With `--output json`, each subcommand prints
/// one JSON document on stdout.
#[derive(clap::Args, Debug)]
pub struct InvocationsArgs {
    #[command(subcommand)]
    command: InvocationsCommand,
}

#[derive(clap::Subcommand, Debug)]
enum InvocationsCommand {
    /// Show a receipt with its private record (claim token, state, outcome).
    ///
    /// Example: capgate invocations show call_1 --namespace org_1 --actor user:u_dana --surface aiSdk --store sqlite://capgate.db
    Show {
        /// The invocation id.
        id: String,
        #[command(flatten)]
        scope: ScopeArgs,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Settle an orphaned pending receipt, after you verified what the domain effect did.
    /// Marks it reconciled; never run while the original execution may still be running.
    ///
    /// Example: capgate invocations reconcile call_1 --claim clm_… --outcome '{"status":"failed",…}' --namespace org_1 --actor user:u_dana --surface aiSdk --store sqlite://capgate.db
    Reconcile {
        /// The invocation id.
        id: String,
        /// The claim token `show` printed (the claim you verified).
        #[arg(long)]
        claim: String,
        /// The CapabilityOutcome JSON to record.
        #[arg(long)]
        outcome: String,
        #[command(flatten)]
        scope: ScopeArgs,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Delete settled receipts and approvals expired before the replay horizon; pending
    /// receipts are kept.
    /// `capgate serve` does this every hour with `gateway.replayHorizonHours`.
    ///
    /// Example: capgate invocations purge --older-than-hours 168 --store sqlite://capgate.db
    Purge {
        /// Keep receipts settled within this many hours (a retry or lookup after that sees
        /// nothing).
        #[arg(long, default_value_t = 168)]
        older_than_hours: u64,
        #[command(flatten)]
        store: StoreArg,
        #[command(flatten)]
        output: OutputArg,
    },
}

/// The scope of a journal record: who called, through which door.
#[derive(clap::Args, Debug)]
#[command(about = None, long_about = None)]
struct ScopeArgs {
    /// The caller's namespace.
    #[arg(long)]
    namespace: String,
    /// The caller as KIND:ID (e.g. user:u_dana).
    #[arg(long, value_parser = crate::args::actor_ref)]
    actor: ActorRef,
    /// The surface of the route it came through (aiSdk, mcp, workflow).
    #[arg(long)]
    surface: Surface,
    #[command(flatten)]
    store: StoreArg,
}

impl ScopeArgs {
    /// The journal's store and the scope hash its records are kept under.
    async fn journal(&self) -> anyhow::Result<(capgate_store::Store, String)> {
        let hash = scope_hash(&self.namespace, &self.actor, self.surface)?;
        let store = self.store.open_existing().await?;
        Ok((store, hash))
    }
}

/// `capgate invocations …`: 0 when done, 1 when `show` finds no such receipt, 2 for an
/// unusable `--outcome`.
pub fn run(args: InvocationsArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    match args.command {
        InvocationsCommand::Show { id, scope, output } => rt.block_on(show(&scope, &id, output))?,
        InvocationsCommand::Reconcile {
            id,
            claim,
            outcome,
            scope,
            output,
        } => rt.block_on(reconcile(&scope, &id, &claim, &outcome, output))?,
        InvocationsCommand::Purge {
            older_than_hours,
            store,
            output,
        } => rt.block_on(purge(&store, older_than_hours, output))?,
    }
    Ok(Status::Ok.code())
}

/// `capgate invocations show`.
async fn show(scope: &ScopeArgs, id: &str, output: OutputArg) -> anyhow::Result<()> {
    let (store, hash) = scope.journal().await?;
    let record = store.journal().get(&hash, id).await?.ok_or_else(|| {
        Exit::refusal(format!(
            "no invocation `{id}` for {}:{} in {} on {}",
            scope.actor.kind.as_str(),
            scope.actor.id,
            scope.namespace,
            scope.surface
        ))
    })?;
    let receipt = serde_json::json!({
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
    });
    if output.json() {
        print_json(&receipt)?;
    } else {
        println!("{}", serde_json::to_string_pretty(&receipt)?);
    }
    store.close().await;
    Ok(())
}

/// `capgate invocations reconcile`.
async fn reconcile(
    scope: &ScopeArgs,
    id: &str,
    claim: &str,
    outcome: &str,
    output: OutputArg,
) -> anyhow::Result<()> {
    let outcome: capgate_gateway::wire::CapabilityOutcome = serde_json::from_str(outcome)
        .map_err(|e| {
            Exit::usage(format!(
                "--outcome must be a CapabilityOutcome JSON object (status completed, failed or cancelled): {e}"
            ))
        })?;
    if outcome.invocation_id() != id {
        return Err(Exit::usage(format!(
            "--outcome carries invocationId `{}`, not `{id}`",
            outcome.invocation_id()
        )));
    }
    if matches!(
        outcome,
        capgate_gateway::wire::CapabilityOutcome::OutcomeUnknown { .. }
            | capgate_gateway::wire::CapabilityOutcome::ApprovalRequired { .. }
    ) {
        return Err(Exit::usage(
            "reconcile records what happened: completed, failed or cancelled",
        ));
    }
    let (store, hash) = scope.journal().await?;
    let record = store
        .journal()
        .reconcile(
            ObservedClaim {
                scope: &hash,
                invocation_id: id,
                claim_token: claim,
            },
            Settlement::final_outcome(serde_json::to_value(&outcome)?),
            chrono::Utc::now(),
        )
        .await
        .with_context(|| {
            format!(
                "could not reconcile `{id}` (run `capgate invocations show` for its current claim)"
            )
        })?;
    if output.json() {
        print_json(&serde_json::json!({
            "reconciled": record.invocation_id,
            "status": outcome.status(),
        }))?;
    } else {
        println!("reconciled {} ({})", record.invocation_id, outcome.status());
    }
    store.close().await;
    Ok(())
}

/// `capgate invocations purge`.
async fn purge(store: &StoreArg, older_than_hours: u64, output: OutputArg) -> anyhow::Result<()> {
    let store = store.open_existing().await?;
    let horizon = std::time::Duration::from_secs(older_than_hours.saturating_mul(3600));
    let journal = store.journal().with_replay_horizon(horizon);
    let now = chrono::Utc::now();
    let purged = journal
        .purge_expired(now)
        .await
        .context("could not purge receipts")?;
    let cutoff = journal
        .horizon_cutoff(now)
        .context("could not purge approvals")?;
    let approvals = store
        .approvals()
        .purge_expired_before(cutoff)
        .await
        .context("could not purge approvals")?;
    if output.json() {
        print_json(&serde_json::json!({
            "purged": purged,
            "approvalsPurged": approvals,
            "olderThanHours": older_than_hours,
        }))?;
    } else {
        println!(
            "purged {purged} settled receipt(s) and {approvals} approval(s) expired more than {older_than_hours} h ago; pending receipts are kept"
        );
    }
    store.close().await;
    Ok(())
}
