//! Operator commands over a deployment or its store: MCP over stdio, the portable contract,
//! approvals from the shell, and invocation receipts (show, reconcile).

use crate::build::build;
use crate::config::Config;
use anyhow::{Context, anyhow, bail};
use capgate_core::actor::{Actor, ActorKind, ActorRef, Surface};
use capgate_core::approval::{ApprovalFilter, ApprovalStatus, DecisionStatus};
use capgate_core::journal::{InvocationJournal, Settlement, scope_hash};
use capgate_core::runtime::{CapabilityDescriptor, DecideRequest, Decider};
use capgate_gateway::tools::{ToolFormat, export_tools_named};

fn surface(s: &str) -> anyhow::Result<Surface> {
    s.parse::<Surface>()
        .map_err(|_| anyhow!("unknown surface `{s}` (expected aiSdk, mcp or workflow)"))
}

/// `capgate mcp --stdio`.
pub async fn mcp_stdio(cfg: Config) -> anyhow::Result<()> {
    let (Some(actor), Some(namespace)) = (&cfg.mcp.stdio_actor, &cfg.mcp.stdio_namespace) else {
        bail!(
            "{}: `capgate mcp --stdio` runs as a configured service actor; add\n    [mcp]\n    stdioActor = {{ id = \"svc_agent\", kind = \"service\" }}\n    stdioNamespace = \"org_1\"",
            cfg.path.display()
        );
    };
    let actor = Actor {
        id: actor.id.clone(),
        kind: actor.kind,
        attributes: if actor.attributes.is_null() {
            serde_json::json!({})
        } else {
            actor.attributes.clone()
        },
    };
    let d = build(&cfg).await?;
    let options = capgate_gateway::mcp::McpOptions {
        approval_url: cfg.gateway.approval_console_url.clone(),
        ..Default::default()
    };
    let result = capgate_gateway::mcp::serve_stdio(
        d.runtime.clone(),
        actor,
        namespace.clone(),
        cfg.mcp.stdio_context.clone(),
        crate::serve::authorizer(&cfg, &d)?,
        options,
    )
    .await;
    let _ = d.runtime.drain_audit().await;
    d.store.close().await;
    result.map_err(Into::into)
}

/// `capgate contract export|tools`.
pub async fn contract(cfg: Config, surface_name: &str, format: Option<&str>) -> anyhow::Result<()> {
    let s = surface(surface_name)?;
    let d = build(&cfg).await?;
    let contract = capgate_gateway::contract::export_contract(&d.runtime, s, &cfg.revision);
    let out = match format {
        None => serde_json::to_value(&contract)?,
        Some(f) => {
            let format: ToolFormat = f
                .parse()
                .map_err(|_| anyhow!("unknown tool format `{f}` (expected ai-sdk or openai)"))?;
            let descriptors: Vec<CapabilityDescriptor> = contract
                .iter()
                .map(|p| CapabilityDescriptor {
                    id: p.id.clone(),
                    description: p.description.clone(),
                    input_schema: p.input_schema.clone(),
                    side_effect: p.side_effect,
                    risk: p.risk,
                    tags: p.tags.clone(),
                    requires_approval: Some(p.requires_approval),
                    discovery: p.discovery,
                })
                .collect();
            export_tools_named(&descriptors, format, |d| {
                contract
                    .iter()
                    .find(|p| p.id == d.id)
                    .map(|p| match s {
                        Surface::Mcp => p.tool_names.mcp.clone(),
                        _ => p.tool_names.ai_sdk.clone(),
                    })
                    .unwrap_or_else(|| capgate_core::meta::default_tool_name(&d.id))
            })
        }
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    d.store.close().await;
    Ok(())
}

fn status_filter(s: &str) -> anyhow::Result<Option<ApprovalStatus>> {
    if s == "all" {
        return Ok(None);
    }
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map(Some)
        .map_err(|_| {
            anyhow!("unknown status `{s}` (pending, approved, rejected, expired, consumed or all)")
        })
}

/// `capgate approvals list`.
pub async fn approvals_list(
    cfg: Config,
    status: &str,
    capability: Option<String>,
) -> anyhow::Result<()> {
    let filter = ApprovalFilter {
        status: status_filter(status)?,
        capability_id: capability,
        ..Default::default()
    };
    let d = build(&cfg).await?;
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
pub async fn approvals_show(cfg: Config, id: &str) -> anyhow::Result<()> {
    let d = build(&cfg).await?;
    let record = d.runtime.approvals().get(id).await?.ok_or_else(|| {
        anyhow!("no approval `{id}` (`capgate approvals list --status all` lists them)")
    })?;
    println!("{}", serde_json::to_string_pretty(&record)?);
    d.store.close().await;
    Ok(())
}

/// `capgate approvals approve|reject`.
pub async fn approvals_decide(
    cfg: Config,
    id: &str,
    approve: bool,
    approver: &str,
    comment: Option<String>,
) -> anyhow::Result<()> {
    let d = build(&cfg).await?;
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
    #[arg(long)]
    actor: String,
    /// The surface of the route it came through (aiSdk, mcp, workflow).
    #[arg(long)]
    surface: String,
    /// Store URL.
    #[arg(long, env = "CAPGATE_STORE")]
    store: String,
}

impl ScopeArgs {
    fn scope(&self) -> anyhow::Result<String> {
        let (kind, id) = self
            .actor
            .split_once(':')
            .ok_or_else(|| anyhow!("--actor must be KIND:ID, e.g. user:u_dana"))?;
        let kind: ActorKind = kind
            .parse()
            .map_err(|_| anyhow!("unknown actor kind `{kind}` (user, service, agent, system)"))?;
        Ok(scope_hash(
            &self.namespace,
            &ActorRef {
                id: id.to_string(),
                kind,
            },
            surface(&self.surface)?,
        )?)
    }
}

async fn journal(scope: &ScopeArgs) -> anyhow::Result<(capgate_store::Store, String)> {
    let store = capgate_store::Store::open(&scope.store)
        .await
        .with_context(|| {
            format!(
                "could not open the store {}",
                crate::redact_url(&scope.store)
            )
        })?;
    Ok((store, scope.scope()?))
}

/// `capgate invocations show`.
pub async fn invocations_show(scope: &ScopeArgs, id: &str) -> anyhow::Result<()> {
    let (store, hash) = journal(scope).await?;
    let record = store.journal().get(&hash, id).await?.ok_or_else(|| {
        anyhow!(
            "no invocation `{id}` for {} in {} on {}",
            scope.actor,
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
    let store = capgate_store::Store::open(url)
        .await
        .with_context(|| format!("could not open the store {}", crate::redact_url(url)))?;
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
