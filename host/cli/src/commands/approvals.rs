//! `capgate approvals list|show|approve|reject`: human approvals from the operator's shell,
//! under the same rules as the approvals API (a decision is recorded `via: operator`).

use super::shared::{ConfigArg, StoreOverride};
use crate::args::StatusFilter;
use crate::runtime;
use crate::store::Access;
use crate::validate::Checked;
use anyhow::{Context, anyhow};
use capgate_core::actor::{ActorKind, ActorRef};
use capgate_core::approval::{ApprovalFilter, DecisionStatus};
use capgate_core::runtime::{DecideRequest, Decider};
use std::process::ExitCode;

/// Human approvals, from the operator's shell (the same rules as the approvals API).
#[derive(clap::Args, Debug)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    command: ApprovalsCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ApprovalsCommand {
    /// List approvals (default: pending), newest first.
    ///
    /// Example: capgate approvals list --config examples/customer-support/capgate.toml
    List {
        #[command(flatten)]
        config: ConfigArg,
        /// pending, approved, rejected, expired or consumed; `all` for every status.
        #[arg(long, default_value = "pending")]
        status: StatusFilter,
        /// Only this capability.
        #[arg(long)]
        capability: Option<String>,
        #[command(flatten)]
        store: StoreOverride,
    },
    /// Show one approval with its (redacted) input.
    Show {
        /// The approval id.
        id: String,
        #[command(flatten)]
        config: ConfigArg,
        #[command(flatten)]
        store: StoreOverride,
    },
    /// Approve (executes nothing: the requester's host resumes).
    ///
    /// Example: capgate approvals approve apr_… --as u_priya --comment "checked" --config capgate.toml
    Approve(DecideArgs),
    /// Reject.
    ///
    /// Example: capgate approvals reject apr_… --as u_priya --comment "not eligible" --config capgate.toml
    Reject(DecideArgs),
}

/// What deciding an approval takes, the same for approving and rejecting.
#[derive(clap::Args, Debug)]
struct DecideArgs {
    /// The approval id.
    id: String,
    /// The approver's user id, on whose behalf you decide. This is an operator action:
    /// it crosses namespaces, skips the approval-type role check, and is recorded in the
    /// decision and its audit event as `via: operator`. A self-decision (the requester's
    /// own id) is still refused.
    #[arg(long = "as")]
    approver: String,
    /// A comment for the audit trail.
    #[arg(long)]
    comment: Option<String>,
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    store: StoreOverride,
}

/// `capgate approvals …`: 0 when done.
pub fn run(args: ApprovalsArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    match args.command {
        ApprovalsCommand::List {
            config,
            status,
            capability,
            store,
        } => rt.block_on(list(&config.load()?, &store, status, capability))?,
        ApprovalsCommand::Show { id, config, store } => {
            rt.block_on(show(&config.load()?, &store, &id))?
        }
        ApprovalsCommand::Approve(args) => rt.block_on(decide(&args.config.load()?, args, true))?,
        ApprovalsCommand::Reject(args) => rt.block_on(decide(&args.config.load()?, args, false))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `capgate approvals list`.
async fn list(
    checked: &Checked,
    store: &StoreOverride,
    status: StatusFilter,
    capability: Option<String>,
) -> anyhow::Result<()> {
    let filter = ApprovalFilter {
        status: status.0,
        capability_id: capability,
        ..Default::default()
    };
    let d = store.deployment(checked, Access::Existing).await?;
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
async fn show(checked: &Checked, store: &StoreOverride, id: &str) -> anyhow::Result<()> {
    let d = store.deployment(checked, Access::Existing).await?;
    let record = d.runtime.approvals().get(id).await?.ok_or_else(|| {
        anyhow!("no approval `{id}` (`capgate approvals list --status all` lists them)")
    })?;
    println!("{}", serde_json::to_string_pretty(&record)?);
    d.store.close().await;
    Ok(())
}

/// `capgate approvals approve|reject`.
async fn decide(checked: &Checked, args: DecideArgs, approve: bool) -> anyhow::Result<()> {
    let d = args.store.deployment(checked, Access::Existing).await?;
    let id = &args.id;
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
                    id: args.approver,
                    kind: ActorKind::User,
                },
                comment: args.comment,
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
