//! `capgate replay`: the policy decisions of recorded calls, made again under another
//! configuration (docs/guides/reviewing-changes.md "Replaying recorded calls under a new
//! configuration").
//!
//! The calls are the invocation journal's records in a window, with their inputs (so only
//! within the journal's horizon, `[gateway] replayHorizonHours`). Each is decided again by
//! [`Runtime::simulate`] on a runtime of the new configuration: its real policies in their
//! sandboxes, no execution, no event, no approval, and every procedure replaced by a guard
//! that refuses and counts (nothing can reach one; the count in the report says so). What
//! each call got is read back from the audit trail of its execution (its stances too), or
//! from the journal record alone when the trail has no events for it.
//!
//! The journal holds the calls of the gateway's routes (`/agent`, `/workflow`: each carries
//! an invocation id); MCP tool calls carry none, are not journaled, and so are not
//! replayed. Who called is the journal's scope, a hash of namespace, actor and surface: it
//! is matched against the API keys the new configuration declares (`[[gateway.apiKeys]]`),
//! whose attributes and context the policies read. A call by an identity the file does not
//! declare (a JWT's, a removed key's) is skipped and counted, never decided with made-up
//! attributes.

use crate::validate::{Checked, TestHooks};
use anyhow::Context;
use async_trait::async_trait;
use capgate_core::actor::{Actor, ActorRef, Surface};
use capgate_core::approval::{ApprovalCoordinator, InMemoryApprovalCoordinator};
use capgate_core::audit::{AuditConfig, DenyReason, EventPayload};
use capgate_core::clock::SystemClock;
use capgate_core::error::ErrorCode;
use capgate_core::journal::{InvocationRecord, InvocationState, scope_hash};
use capgate_core::policy::{Phase, PolicyStance};
use capgate_core::procedure::{Procedure, ProcedureCall, ProcedureError};
use capgate_core::runtime::{Runtime, SimulateRequest, SimulatedOutcome};
use capgate_store::{RecordedInvocation, RecordedPage, Store};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Records read per page of the journal.
const PAGE: u32 = 500;
/// Calls decided at once.
const CONCURRENCY: usize = 8;
/// Progress goes to stderr every this many calls.
const PROGRESS_EVERY: u64 = 5_000;

/// What to replay.
pub struct Options {
    /// Records created at or after this.
    pub since: DateTime<Utc>,
    /// Records created before this.
    pub until: DateTime<Utc>,
    /// Only these capabilities (all when empty).
    pub capabilities: Vec<String>,
    /// Stop after this many records.
    pub limit: u64,
    /// Report progress on stderr.
    pub progress: bool,
}

/// One identity a configuration declares: who a journal scope stands for.
#[derive(Clone)]
struct Principal {
    actor: Actor,
    namespace: String,
    surface: Surface,
    context: Value,
}

/// Every API key's identity of `checked`, by the journal scope its calls through each of
/// its doors are recorded under.
fn principals(checked: &Checked) -> BTreeMap<String, Principal> {
    let mut out = BTreeMap::new();
    for key in checked.api_keys() {
        let actor = key.actor.clone();
        for &surface in &key.surfaces {
            if let Ok(scope) = scope_hash(&key.namespace, &ActorRef::from(&actor), surface) {
                out.entry(scope).or_insert_with(|| Principal {
                    actor: actor.clone(),
                    namespace: key.namespace.clone(),
                    surface,
                    context: key.context.clone(),
                });
            }
        }
    }
    out
}

/// The procedure of every capability of the replay's runtime: refuses, and counts.
#[derive(Default)]
struct NeverRun {
    reached: AtomicU64,
}

#[async_trait]
impl Procedure for NeverRun {
    async fn call(&self, _call: ProcedureCall) -> Result<Value, ProcedureError> {
        self.reached.fetch_add(1, Ordering::SeqCst);
        Err(ProcedureError::internal(
            "capgate replay never runs a procedure",
        ))
    }
}

/// What a recorded call got, and where that was read.
#[derive(Debug, Clone, PartialEq)]
struct Recorded {
    outcome: Option<SimulatedOutcome>,
    decisions: Vec<PolicyStance>,
    source: &'static str,
}

/// One replayed call whose outcome changed (or whose recorded outcome is unknown).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// The call's invocation id.
    pub invocation_id: String,
    /// Its namespace.
    pub namespace: String,
    /// The capability called.
    pub capability_id: String,
    /// The door it came through.
    pub surface: Surface,
    /// Who called.
    pub actor: ActorRef,
    /// When it was recorded.
    pub recorded_at: DateTime<Utc>,
    /// The digest of its input.
    pub input_hash: String,
    /// What it got.
    pub from: String,
    /// What it would get now.
    pub to: &'static str,
    /// Where `from` was read (the audit trail or the journal).
    pub recorded_from: &'static str,
    /// The approval types it would now wait for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub approval_types: Vec<String>,
    /// Every policy's stance on it now.
    pub policy_decisions: Vec<PolicyStance>,
}

/// `from → to` and how many calls made it.
#[derive(Debug, Serialize)]
pub struct Transition {
    /// The recorded outcome or stance.
    pub from: String,
    /// The one it would be now.
    pub to: String,
    /// How many calls.
    pub count: u64,
}

/// One capability's calls.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityReport {
    /// The capability.
    pub capability_id: String,
    /// Its calls decided again.
    pub calls: u64,
    /// How many would change.
    pub changed: u64,
    /// Its outcomes, recorded → now.
    pub transitions: Vec<Transition>,
}

/// One policy's changed stances on one capability.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyReport {
    /// The policy.
    pub policy: String,
    /// The capability.
    pub capability_id: String,
    /// The phase it decided in.
    pub phase: Phase,
    /// Its stances, recorded → now.
    pub transitions: Vec<Transition>,
}

/// Calls read but not decided again, by why.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    /// By an identity the configuration does not declare.
    pub unknown_actor: u64,
    /// Still pending: no recorded outcome to compare with.
    pub pending: u64,
}

/// What `capgate replay` prints (`--output json` as is).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The window's start.
    pub since: DateTime<Utc>,
    /// The window's end.
    pub until: DateTime<Utc>,
    /// The new configuration's revision.
    pub revision: String,
    /// Journal records read.
    pub calls: u64,
    /// Calls decided again.
    pub replayed: u64,
    /// Calls whose outcome would change.
    pub changed: u64,
    /// Calls whose recorded outcome could not be read (counted in `transitions` from
    /// `unknown`, never as changed).
    pub unknown_recorded: u64,
    /// Calls not decided again, and why.
    pub skipped: Skipped,
    /// `--limit` stopped the replay before the end of the window.
    pub truncated: bool,
    /// Procedures reached while replaying: always 0 (a procedure is never called).
    pub procedure_calls: u64,
    /// Each capability's outcome transitions.
    pub capabilities: Vec<CapabilityReport>,
    /// Each policy's changed stances.
    pub policies: Vec<PolicyReport>,
    /// Every call whose outcome would change.
    pub changes: Vec<Change>,
}

/// Replay the journal of `store` under `checked`.
pub async fn replay(checked: &Checked, store: &Store, options: &Options) -> anyhow::Result<Report> {
    let guard = Arc::new(NeverRun::default());
    let hooks = TestHooks {
        clock: Arc::new(SystemClock),
        observe: Box::new(|p| p),
        procedures: BTreeMap::new(),
        unstubbed: Some(guard.clone() as Arc<dyn Procedure>),
    };
    // No audit sink and in-memory approvals: the runtime records nothing anywhere (its
    // startup warnings say exactly that, so they are silenced).
    let runtime =
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
            checked.test_runtime(
                Arc::new(InMemoryApprovalCoordinator::new()),
                AuditConfig::default(),
                &hooks,
            )
        })
        .context("the runtime of the new configuration")?;
    let principals = principals(checked);
    let journal = store.journal();
    let readers = Readers {
        audit: store.audit_log(),
        approvals: store.approvals(),
    };
    let mut tally = Tally::default();
    let mut page = RecordedPage {
        since: options.since,
        after: None,
        until: options.until,
        limit: PAGE,
    };
    'pages: loop {
        let rows = journal
            .recorded(&page)
            .await
            .context("could not read the invocation journal")?;
        let Some(last) = rows.last() else { break };
        let next = page.next_after(&last.record);
        let wanted: Vec<RecordedInvocation> = rows
            .into_iter()
            .filter(|r| {
                options.capabilities.is_empty()
                    || options.capabilities.contains(&r.record.capability_id)
            })
            .collect();
        let mut decided = futures::stream::iter(wanted)
            .map(|row| {
                let principal = principals.get(&row.record.scope).cloned();
                let (runtime, readers) = (&runtime, &readers);
                async move { decide(runtime, readers, row, principal).await }
            })
            .buffered(CONCURRENCY);
        while let Some(outcome) = decided.next().await {
            if tally.calls >= options.limit {
                tally.truncated = true;
                eprintln!(
                    "capgate replay: stopped at --limit {} calls; narrow --since/--until for the rest",
                    options.limit
                );
                break 'pages;
            }
            tally.add(outcome?);
            if options.progress && tally.calls % PROGRESS_EVERY == 0 {
                eprintln!("capgate replay: {} calls decided again", tally.calls);
            }
        }
        page = next;
    }
    Ok(tally.report(options, checked, guard.reached.load(Ordering::SeqCst)))
}

/// What one call came to.
enum Decided {
    UnknownActor,
    Pending,
    Replayed(Box<Replayed>),
}

/// A call decided again: the record, who made it through which door, what it got then
/// and what it would get now.
struct Replayed {
    row: RecordedInvocation,
    actor: ActorRef,
    surface: Surface,
    recorded: Recorded,
    simulation: capgate_core::runtime::Simulation,
}

struct Readers {
    audit: capgate_store::AuditLog,
    approvals: capgate_store::SqlApprovalCoordinator,
}

async fn decide(
    runtime: &Runtime,
    readers: &Readers,
    row: RecordedInvocation,
    principal: Option<Principal>,
) -> anyhow::Result<Decided> {
    let Some(p) = principal else {
        return Ok(Decided::UnknownActor);
    };
    if row.record.state == InvocationState::Pending && row.record.approval_id.is_none() {
        return Ok(Decided::Pending);
    }
    let recorded = recorded(readers, &row.record).await?;
    let simulation = runtime
        .simulate(SimulateRequest {
            surface: p.surface,
            capability_id: row.record.capability_id.clone(),
            input: row.record.input.clone(),
            actor: Some(p.actor.clone()),
            namespace: row.namespace.clone().unwrap_or(p.namespace),
            context: p.context,
        })
        .await;
    Ok(Decided::Replayed(Box::new(Replayed {
        actor: ActorRef::from(&p.actor),
        surface: p.surface,
        row,
        recorded,
        simulation,
    })))
}

/// What `record` got: from the audit events of its execution (and, for a call held for
/// approval, of the execution that asked), else from the journal record alone.
async fn recorded(readers: &Readers, record: &InvocationRecord) -> anyhow::Result<Recorded> {
    let mut executions = Vec::new();
    if let Some(approval) = &record.approval_id
        && let Some(a) = readers
            .approvals
            .get(approval)
            .await
            .context("could not read the approvals")?
    {
        executions.push(a.request.execution_id);
    }
    if let Some(e) = record
        .outcome
        .as_ref()
        .and_then(|o| o["executionId"].as_str())
        .filter(|e| !e.is_empty())
    {
        executions.push(e.to_string());
    }
    for execution in executions {
        let events = readers
            .audit
            .for_execution(&execution)
            .await
            .context("could not read the audit trail")?;
        for event in events.into_iter().filter_map(|e| e.event.ok()) {
            if let Some(r) = from_event(event.payload) {
                return Ok(r);
            }
        }
    }
    Ok(from_journal(record))
}

/// The decision an audit event records, if it records one.
fn from_event(payload: EventPayload) -> Option<Recorded> {
    let audit = |outcome, decisions: Option<Vec<PolicyStance>>, phase| Recorded {
        outcome: Some(outcome),
        decisions: decisions
            .unwrap_or_default()
            .into_iter()
            .map(|mut s| {
                s.phase = s.phase.or(Some(phase));
                s
            })
            .collect(),
        source: "audit",
    };
    match payload {
        EventPayload::ApprovalRequested {
            policy_decisions, ..
        } => Some(audit(
            SimulatedOutcome::RequireApproval,
            policy_decisions,
            Phase::Invocation,
        )),
        EventPayload::Denied {
            reason,
            policy_decisions,
            ..
        } => {
            let outcome = match reason {
                DenyReason::Unknown | DenyReason::NotExposed => SimulatedOutcome::NotFound,
                DenyReason::Hidden => SimulatedOutcome::Hide,
                DenyReason::PolicyDenied => SimulatedOutcome::Deny,
                DenyReason::PolicyFailed => SimulatedOutcome::Error,
                // A reason this build does not know: read on to the next event.
                _ => return None,
            };
            Some(audit(outcome, policy_decisions, Phase::Invocation))
        }
        // A resume's start is not the call's decision: the call was held (its
        // `approval_requested` is in the execution that asked).
        EventPayload::Started {
            approval_id: None,
            policy_decisions,
            ..
        } => Some(audit(
            SimulatedOutcome::Allow,
            policy_decisions,
            Phase::Invocation,
        )),
        // Stage 9 refused it.
        EventPayload::Failed {
            code,
            policy_decisions: Some(decisions),
            approval_id: None,
            ..
        } => Some(audit(
            match code {
                ErrorCode::PolicyFailed => SimulatedOutcome::Error,
                ErrorCode::CapabilityNotFound => SimulatedOutcome::Hide,
                _ => SimulatedOutcome::Deny,
            },
            Some(decisions),
            Phase::Execution,
        )),
        EventPayload::Failed {
            code: ErrorCode::InputInvalid,
            ..
        } => Some(audit(
            SimulatedOutcome::InputInvalid,
            None,
            Phase::Invocation,
        )),
        _ => None,
    }
}

/// The decision the journal record alone shows: held when it names an approval, allowed
/// when it completed or was cancelled, refused when a policy refused it; else unknown.
fn from_journal(record: &InvocationRecord) -> Recorded {
    let outcome = if record.approval_id.is_some() {
        Some(SimulatedOutcome::RequireApproval)
    } else {
        let o = record.outcome.as_ref();
        match (
            o.and_then(|o| o["status"].as_str()),
            o.and_then(|o| o["error"]["code"].as_str()),
        ) {
            (Some("completed" | "cancelled"), _) => Some(SimulatedOutcome::Allow),
            (Some("failed"), Some("POLICY_DENIED")) => Some(SimulatedOutcome::Deny),
            (Some("failed"), Some("POLICY_FAILED")) => Some(SimulatedOutcome::Error),
            _ => None,
        }
    };
    Recorded {
        outcome,
        decisions: Vec::new(),
        source: "journal",
    }
}

/// `(from, to)` → how many calls (or stances) made that move.
type Transitions = BTreeMap<(String, String), u64>;

/// The counts the report is made of.
#[derive(Default)]
struct Tally {
    calls: u64,
    replayed: u64,
    changed: u64,
    unknown_recorded: u64,
    truncated: bool,
    skipped: Skipped,
    /// Capability → (calls, (from, to) → count).
    capabilities: BTreeMap<String, (u64, Transitions)>,
    /// (policy, capability, phase) → (from, to) → count, changed stances only.
    policies: BTreeMap<(String, String, Phase), Transitions>,
    changes: Vec<Change>,
}

impl Tally {
    fn add(&mut self, decided: Decided) {
        self.calls += 1;
        let (row, actor, surface, recorded, simulation) = match decided {
            Decided::UnknownActor => {
                self.skipped.unknown_actor += 1;
                return;
            }
            Decided::Pending => {
                self.skipped.pending += 1;
                return;
            }
            Decided::Replayed(r) => {
                let Replayed {
                    row,
                    actor,
                    surface,
                    recorded,
                    simulation,
                } = *r;
                (row, actor, surface, recorded, simulation)
            }
        };
        self.replayed += 1;
        let record = &row.record;
        let from = recorded
            .outcome
            .map_or("unknown", SimulatedOutcome::as_str)
            .to_string();
        let to = simulation.outcome.as_str();
        let changed = recorded.outcome.is_some_and(|o| o != simulation.outcome);
        if recorded.outcome.is_none() {
            self.unknown_recorded += 1;
        }
        let entry = self
            .capabilities
            .entry(record.capability_id.clone())
            .or_default();
        entry.0 += 1;
        *entry.1.entry((from.clone(), to.to_string())).or_default() += 1;
        if recorded.source == "audit" {
            self.stances(
                &record.capability_id,
                &recorded.decisions,
                &simulation.policy_decisions,
            );
        }
        if changed || recorded.outcome.is_none() {
            self.changed += u64::from(changed);
            self.changes.push(Change {
                invocation_id: record.invocation_id.clone(),
                namespace: row.namespace.clone().unwrap_or_default(),
                capability_id: record.capability_id.clone(),
                surface,
                actor,
                recorded_at: record.created_at,
                input_hash: record.input_hash.clone(),
                from,
                to,
                recorded_from: recorded.source,
                approval_types: simulation.approval_types,
                policy_decisions: simulation.policy_decisions,
            });
        }
    }

    /// Count each policy whose stance differs between the recorded and the new decision
    /// (`absent`: it did not run, or was not bound).
    fn stances(&mut self, capability: &str, before: &[PolicyStance], after: &[PolicyStance]) {
        let by_policy = |list: &[PolicyStance]| -> HashMap<(String, Phase), String> {
            list.iter()
                .map(|s| {
                    (
                        (s.policy.clone(), s.phase.unwrap_or(Phase::Invocation)),
                        s.kind.clone(),
                    )
                })
                .collect()
        };
        let (before, after) = (by_policy(before), by_policy(after));
        let mut keys: Vec<&(String, Phase)> = before.keys().chain(after.keys()).collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            let was = before.get(key).map_or("absent", String::as_str);
            let now = after.get(key).map_or("absent", String::as_str);
            if was != now {
                *self
                    .policies
                    .entry((key.0.clone(), capability.to_string(), key.1))
                    .or_default()
                    .entry((was.to_string(), now.to_string()))
                    .or_default() += 1;
            }
        }
    }

    fn report(self, options: &Options, checked: &Checked, procedure_calls: u64) -> Report {
        let transitions = |t: Transitions| {
            t.into_iter()
                .map(|((from, to), count)| Transition { from, to, count })
                .collect::<Vec<_>>()
        };
        Report {
            since: options.since,
            until: options.until,
            revision: checked.revision().to_string(),
            calls: self.calls,
            replayed: self.replayed,
            changed: self.changed,
            unknown_recorded: self.unknown_recorded,
            truncated: self.truncated,
            skipped: self.skipped,
            procedure_calls,
            capabilities: self
                .capabilities
                .into_iter()
                .map(|(capability_id, (calls, t))| CapabilityReport {
                    changed: t
                        .iter()
                        .filter(|((from, to), _)| from != "unknown" && from != to)
                        .map(|(_, n)| n)
                        .sum(),
                    capability_id,
                    calls,
                    transitions: transitions(t),
                })
                .collect(),
            policies: self
                .policies
                .into_iter()
                .map(|((policy, capability_id, phase), t)| PolicyReport {
                    policy,
                    capability_id,
                    phase,
                    transitions: transitions(t),
                })
                .collect(),
            changes: self.changes,
        }
    }
}
