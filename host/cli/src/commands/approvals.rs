//! `capgate approvals list|show|approve|reject`: human approvals from the operator's shell,
//! under the same rules as the approvals API (a decision is recorded `via: operator`).
//!
//! They need the store and nothing else of the deployment: no plugin is loaded, no secret
//! but `store.url` is read (none with `--store`). See [`crate::validate::StoreOnly`]: the
//! input of a capability with redactors is withheld, since its redactors are plugins.

use super::shared::{ConfigArg, OutputArg, StoreOverride, print_json};
use crate::args::StatusFilter;
use crate::build::OperatorDeployment;
use crate::exit::{Exit, Status};
use crate::runtime;
use capgate_core::actor::{ActorKind, ActorRef};
use capgate_core::approval::{ApprovalFilter, ApprovalRecord, ApprovalStoreError, DecisionStatus};
use capgate_core::runtime::{ApprovalsError, DecideRequest, Decider};
use std::collections::BTreeSet;
use std::process::ExitCode;

/// Human approvals, from the operator's shell (the same rules as the approvals API). They
/// need only the store: no plugin is loaded and no secret but `store.url` is read (none
/// with `--store`), so the input of a capability with redactors is withheld.
#[derive(clap::Args, Debug)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    command: ApprovalsCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ApprovalsCommand {
    /// List approvals (default: pending), newest first, one JSON object per line
    /// (`{"approval", "requestedBy", "input"}`) whatever `--output`.
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
        #[command(flatten)]
        output: OutputArg,
    },
    /// Show one approval with its (redacted) input, as JSON (`--output json`: on one line).
    Show {
        /// The approval id.
        id: String,
        #[command(flatten)]
        config: ConfigArg,
        #[command(flatten)]
        store: StoreOverride,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Approve (executes nothing: the requester's host resumes). Prints the decided
    /// approval's summary as one JSON line; what happens next goes to stderr. Exits 1
    /// when the rules refuse the decision (a self-decision, not pending, no such approval).
    ///
    /// Example: capgate approvals approve apr_… --as u_priya --comment "checked" --config capgate.toml
    Approve(DecideArgs),
    /// Reject. Prints the decided approval's summary as one JSON line; exits 1 when the
    /// rules refuse the decision.
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
    #[command(flatten)]
    output: OutputArg,
}

/// `capgate approvals …`: 0 when done, 1 when a decision is refused or no such approval.
pub fn run(args: ApprovalsArgs) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    match args.command {
        ApprovalsCommand::List {
            config,
            status,
            capability,
            store,
            output: _,
        } => rt.block_on(list(&config, &store, status, capability))?,
        ApprovalsCommand::Show {
            id,
            config,
            store,
            output,
        } => rt.block_on(show(&config, &store, &id, output))?,
        ApprovalsCommand::Approve(args) => rt.block_on(decide(args, true))?,
        ApprovalsCommand::Reject(args) => rt.block_on(decide(args, false))?,
    }
    Ok(Status::Ok.code())
}

/// Says on stderr, once per capability, that the input of these records is withheld.
fn note_withheld<'a>(
    d: &OperatorDeployment,
    records: impl IntoIterator<Item = &'a ApprovalRecord>,
) {
    let withheld: BTreeSet<&str> = records
        .into_iter()
        .map(|r| r.request.capability_id.as_str())
        .filter(|c| d.store_only.withholds_input(c))
        .collect();
    for c in withheld {
        eprintln!(
            "note: the input of `{c}` approvals is withheld (null): its redactors are plugins, \
             which operator commands do not load; the approvals API of `capgate serve` shows it redacted"
        );
    }
}

/// `capgate approvals list`: one JSON line per approval (the same with `--output json`).
async fn list(
    config: &ConfigArg,
    store: &StoreOverride,
    status: StatusFilter,
    capability: Option<String>,
) -> anyhow::Result<()> {
    let filter = ApprovalFilter {
        status: status.0,
        capability_id: capability,
        ..Default::default()
    };
    let d = store.operator(config).await?;
    let list = d.runtime.approvals().list(&filter).await?;
    if list.is_empty() {
        eprintln!("no {status} approvals");
    }
    let now = d.runtime.now();
    for r in &list {
        print_json(&serde_json::json!({
            "approval": r.summary(now),
            "requestedBy": r.request.actor,
            "input": r.request.input,
        }))?;
    }
    note_withheld(&d, &list);
    d.close().await;
    Ok(())
}

/// `capgate approvals show`.
async fn show(
    config: &ConfigArg,
    store: &StoreOverride,
    id: &str,
    output: OutputArg,
) -> anyhow::Result<()> {
    let d = store.operator(config).await?;
    let record = d.runtime.approvals().get(id).await?.ok_or_else(|| {
        Exit::refusal(format!(
            "no approval `{id}` (`capgate approvals list --status all` lists them)"
        ))
    })?;
    if output.json() {
        print_json(&serde_json::to_value(&record)?)?;
    } else {
        println!("{}", serde_json::to_string_pretty(&record)?);
    }
    note_withheld(&d, [&record]);
    d.close().await;
    Ok(())
}

/// `capgate approvals approve|reject`: the summary on stdout, prose on stderr.
async fn decide(args: DecideArgs, approve: bool) -> anyhow::Result<()> {
    let d = args.store.operator(&args.config).await?;
    let id = &args.id;
    let decided = d
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
        .await;
    let record = match decided {
        Ok(record) => record,
        Err(e) => {
            d.close().await;
            let message = format!("could not decide `{id}`: {e}");
            return Err(match e {
                // The rules' answer, not a failure: exit 1.
                ApprovalsError::Forbidden(_)
                | ApprovalsError::Invalid(_)
                | ApprovalsError::Store(
                    ApprovalStoreError::NotFound(_) | ApprovalStoreError::WrongStatus { .. },
                ) => Exit::refusal(message),
                other => anyhow::Error::new(other).context(format!("could not decide `{id}`")),
            });
        }
    };
    d.runtime.drain_audit().await.ok();
    print_json(&serde_json::to_value(record.summary(d.runtime.now()))?)?;
    if approve {
        eprintln!(
            "approved; nothing ran. The requester's host continues with resumeApproval and the original invocation id."
        );
    }
    d.close().await;
    Ok(())
}
