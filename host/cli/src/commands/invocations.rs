//! `capgate invocations list|show|reconcile|purge`: the invocation receipts of the gateway
//! journal, for the operator who finds and settles what a crash left pending.

use super::shared::{OutputArg, StoreArg, print_json};
use crate::exit::{Exit, Status};
use crate::runtime;
use anyhow::Context;
use capgate_core::actor::{ActorRef, Surface};
use capgate_core::journal::{
    InvocationJournal, InvocationState, JournalError, ObservedClaim, Settlement, scope_hash,
};
use capgate_store::{InvocationFilter, RecordedInvocation};
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
    /// List receipts, oldest first: the pending calls a crash or a drain left to reconcile
    /// (`--status pending`), or any receipt by namespace or capability.
    ///
    /// Example: capgate invocations list --status pending --store sqlite://capgate.db
    List {
        /// Only receipts in this state.
        #[arg(long, value_enum)]
        status: Option<StateArg>,
        /// Only calls of this namespace.
        #[arg(long)]
        namespace: Option<String>,
        /// Only calls of this capability.
        #[arg(long)]
        capability: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
        #[command(flatten)]
        store: StoreArg,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Show a receipt with its private record (claim token, state, outcome). The id alone
    /// finds it; when callers in several scopes used the same id, add the scope flags.
    ///
    /// Example: capgate invocations show call_1 --store sqlite://capgate.db
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
    /// Example: capgate invocations reconcile call_1 --claim clm_… --outcome '{"status":"failed",…}' --store sqlite://capgate.db
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

/// A receipt's state, as `--status` takes it.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum StateArg {
    /// No authoritative result yet: the effect may or may not have happened.
    Pending,
    /// A result is recorded.
    Settled,
}

impl From<StateArg> for InvocationState {
    fn from(s: StateArg) -> InvocationState {
        match s {
            StateArg::Pending => InvocationState::Pending,
            StateArg::Settled => InvocationState::Settled,
        }
    }
}

/// Which caller's receipt an id names, when several callers used it: optional, since the
/// id alone usually finds it. The actor and the surface go together.
#[derive(clap::Args, Debug)]
#[command(about = None, long_about = None)]
struct ScopeArgs {
    /// The caller's namespace.
    #[arg(long)]
    namespace: Option<String>,
    /// The caller as KIND:ID (e.g. user:u_dana); with --namespace and --surface.
    #[arg(long, value_parser = crate::args::actor_ref, requires_all = ["namespace", "surface"])]
    actor: Option<ActorRef>,
    /// The surface of the route it came through (aiSdk, mcp, workflow); with --actor.
    #[arg(long, requires = "actor")]
    surface: Option<Surface>,
    #[command(flatten)]
    store: StoreArg,
}

/// The most receipts one id is looked up in (more are reported as ambiguous anyway).
const SAME_ID_SHOWN: u32 = 20;

impl ScopeArgs {
    /// The receipt `id` names: the one in the scope the flags give, else the only one with
    /// that id. None is a refusal (exit 1); several is a usage error listing them.
    async fn find(
        &self,
        store: &capgate_store::Store,
        id: &str,
    ) -> anyhow::Result<RecordedInvocation> {
        let scope = match (&self.actor, self.surface, &self.namespace) {
            (Some(actor), Some(surface), Some(namespace)) => {
                Some(scope_hash(namespace, actor, surface)?)
            }
            _ => None,
        };
        let mut found = store
            .journal()
            .list(&InvocationFilter {
                invocation_id: Some(id.to_string()),
                namespace: self.namespace.clone(),
                scope,
                limit: SAME_ID_SHOWN,
                ..InvocationFilter::default()
            })
            .await?;
        match found.len() {
            0 => Err(Exit::refusal(format!(
                "no invocation `{id}`{} (`capgate invocations list` shows what there is)",
                self.described()
            ))),
            1 => Ok(found.remove(0)),
            n => {
                let which: Vec<String> = found
                    .iter()
                    .map(|r| {
                        format!(
                            "  namespace {}, capability {}, created {}",
                            r.namespace.as_deref().unwrap_or("?"),
                            r.record.capability_id,
                            r.record.created_at.to_rfc3339()
                        )
                    })
                    .collect();
                Err(Exit::usage(format!(
                    "{n} callers used invocation id `{id}`{}; add --namespace, --actor and --surface to pick one:\n{}",
                    self.described(),
                    which.join("\n")
                )))
            }
        }
    }

    /// The flags given, in words, for messages.
    fn described(&self) -> String {
        match (&self.namespace, &self.actor, self.surface) {
            (Some(ns), Some(a), Some(s)) => {
                format!(" for {}:{} in {ns} on {s}", a.kind.as_str(), a.id)
            }
            (Some(ns), _, _) => format!(" in namespace {ns}"),
            _ => String::new(),
        }
    }
}

/// `capgate invocations …`: 0 when done, 1 when `show` or `reconcile` finds no such
/// receipt, 2 for an unusable `--outcome` or an id several callers used.
pub fn run(args: InvocationsArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    match args.command {
        InvocationsCommand::List {
            status,
            namespace,
            capability,
            limit,
            store,
            output,
        } => {
            let filter = InvocationFilter {
                state: status.map(Into::into),
                namespace,
                capability,
                limit,
                ..InvocationFilter::default()
            };
            rt.block_on(list(&store, &filter, output))?
        }
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

/// A receipt as the operator commands print it: never its input.
fn receipt(r: &RecordedInvocation) -> serde_json::Value {
    let record = &r.record;
    serde_json::json!({
        "invocationId": record.invocation_id,
        "capabilityId": record.capability_id,
        "namespace": r.namespace,
        "state": record.state.as_str(),
        "claimToken": record.claim_token,
        "approvalId": record.approval_id,
        "awaitingApproval": record.awaiting_approval,
        "idempotencyKey": record.idempotency_key,
        "reconciled": record.reconciled,
        "outcome": record.outcome,
        "createdAt": record.created_at,
        "updatedAt": record.updated_at,
    })
}

/// `capgate invocations list`.
async fn list(
    store: &StoreArg,
    filter: &InvocationFilter,
    output: OutputArg,
) -> anyhow::Result<()> {
    let store = store.open_existing().await?;
    let found = store.journal().list(filter).await;
    store.close().await;
    let found = found.context("could not list receipts")?;
    if output.json() {
        // JSON Lines, as `approvals list`: one receipt per line.
        for r in &found {
            println!("{}", serde_json::to_string(&receipt(r))?);
        }
        return Ok(());
    }
    let rows: Vec<Vec<String>> = found
        .iter()
        .map(|r| {
            let status = r
                .record
                .outcome
                .as_ref()
                .and_then(|o| o["status"].as_str())
                .unwrap_or("-")
                .to_string();
            vec![
                r.record.invocation_id.clone(),
                r.record.capability_id.clone(),
                r.namespace.clone().unwrap_or_else(|| "-".into()),
                r.record.state.as_str().to_string(),
                status,
                r.record.created_at.to_rfc3339(),
            ]
        })
        .collect();
    print!(
        "{}",
        crate::table::render(
            &[
                "INVOCATION",
                "CAPABILITY",
                "NAMESPACE",
                "STATE",
                "OUTCOME",
                "CREATED"
            ],
            &rows
        )
    );
    if found.len() == filter.limit as usize {
        eprintln!(
            "showing the first {} (raise --limit for more)",
            filter.limit
        );
    }
    Ok(())
}

/// `capgate invocations show`.
async fn show(scope: &ScopeArgs, id: &str, output: OutputArg) -> anyhow::Result<()> {
    let store = scope.store.open_existing().await?;
    let found = scope.find(&store, id).await;
    store.close().await;
    let receipt = receipt(&found?);
    if output.json() {
        print_json(&receipt)?;
    } else {
        println!("{}", serde_json::to_string_pretty(&receipt)?);
    }
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
    let store = scope.store.open_existing().await?;
    let settled = async {
        let found = scope.find(&store, id).await?;
        store
            .journal()
            .reconcile(
                ObservedClaim {
                    scope: &found.record.scope,
                    invocation_id: id,
                    claim_token: claim,
                },
                Settlement::final_outcome(serde_json::to_value(&outcome)?),
                chrono::Utc::now(),
            )
            .await
            .map_err(|e| match e {
                // The receipt moved on (settled, or reclaimed with another token): a refusal
                // the operator acts on, not a failure of the machine.
                JournalError::StaleClaim(_) | JournalError::NotPending(_) | JournalError::NotFound(_) => {
                    Exit::refusal(format!(
                        "could not reconcile `{id}`: {e} (run `capgate invocations show {id}` for its current state and claim)"
                    ))
                }
                e => anyhow::Error::from(e).context(format!("could not reconcile `{id}`")),
            })
    }
    .await;
    store.close().await;
    let record = settled?;
    if output.json() {
        print_json(&serde_json::json!({
            "reconciled": record.invocation_id,
            "status": outcome.status(),
        }))?;
    } else {
        println!("reconciled {} ({})", record.invocation_id, outcome.status());
    }
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
