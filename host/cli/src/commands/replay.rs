//! `capgate replay`: recorded calls decided again under another configuration (the
//! replay itself is `capgate_server::replay`; this is its presentation).

use super::shared::{ConfigArg, OutputArg, StoreOverride};
use crate::exit::Status;
use crate::runtime;
use crate::store::Access;
use capgate_server::replay::{self, Options, Report};
use chrono::{DateTime, Utc};
use std::process::ExitCode;

/// Decide the recorded calls of the invocation journal again under another configuration,
/// before you deploy it: which outcomes would change (allow → require-approval,
/// require-approval → allow, → deny, …), per capability and per policy.
///
/// Each call is read from the journal with its input (so only calls within its horizon,
/// `[gateway] replayHorizonHours`) and decided by the new configuration's real policies in
/// their sandboxes; no procedure runs, nothing is recorded, no approval is created. What
/// the call got is read from its audit events (else the journal record). The journal holds
/// the gateway routes' calls (MCP tool calls carry no invocation id and are not replayed).
/// Who called is matched against the API keys the new file declares
/// (`[[gateway.apiKeys]]`); calls by others are counted as skipped. The store is
/// `--store`, else the new file's `store.url`.
///
/// Exit status: 0 done (1 with `--fail-on-change` when an outcome would change). `--output
/// json` prints one document: `{"since", "until", "revision", "calls", "replayed",
/// "changed", "unknownRecorded", "truncated", "skipped", "procedureCalls", "capabilities", "policies",
/// "changes"}` (docs/guides/reviewing-changes.md "Replaying recorded calls under a new
/// configuration").
///
/// Example: capgate replay --config capgate.next.toml --since 7d
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    #[command(flatten)]
    config: ConfigArg,
    #[command(flatten)]
    store: StoreOverride,
    /// Calls recorded since: a duration back from now (`7d`, `36h`, `90m`) or an RFC 3339
    /// time.
    #[arg(long, value_parser = crate::args::since, default_value = "7d")]
    since: DateTime<Utc>,
    /// Calls recorded before: a duration back from now or an RFC 3339 time (default now).
    #[arg(long, value_parser = crate::args::since)]
    until: Option<DateTime<Utc>>,
    /// Only this capability (repeat for more).
    #[arg(long = "capability")]
    capabilities: Vec<String>,
    /// Stop after this many calls.
    #[arg(long, default_value_t = 1_000_000)]
    limit: u64,
    /// Exit with status 1 when any outcome would change (a gate for a release pipeline).
    #[arg(long)]
    fail_on_change: bool,
    #[command(flatten)]
    output: OutputArg,
}

/// `capgate replay`.
pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let checked = args.config.load()?;
    let options = Options {
        since: args.since,
        until: args.until.unwrap_or_else(Utc::now),
        capabilities: args.capabilities,
        limit: args.limit.max(1),
        progress: true,
    };
    let report = runtime()?.block_on(async {
        let url = super::shared::store_url(args.store.store.as_deref(), checked.store())?;
        let store = url.open(Access::Existing).await?;
        replay::replay(&checked, &store, &options).await
    })?;
    if args.output.json() {
        super::shared::print_json(&serde_json::to_value(&report)?)?;
    } else {
        print!("{}", table(&report));
    }
    Ok(if args.fail_on_change && report.changed > 0 {
        Status::Failed.code()
    } else {
        Status::Ok.code()
    })
}

/// The report for people: the capabilities' transitions, the policies' changed
/// stances, then every changed call.
fn table(report: &Report) -> String {
    let mut out = format!(
        "{} calls recorded from {} to {}: {} decided again, {} would change{}\n",
        report.calls,
        report
            .since
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        report
            .until
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        report.replayed,
        report.changed,
        match (report.skipped.unknown_actor, report.skipped.pending) {
            (0, 0) => String::new(),
            (a, p) => format!(
                " ({a} skipped: by an identity the configuration does not declare; {p} still pending)"
            ),
        },
    );
    if report.truncated {
        out.push_str("(stopped at --limit: later calls of the window were not read)\n");
    }
    let rows: Vec<Vec<String>> = report
        .capabilities
        .iter()
        .flat_map(|c| {
            c.transitions.iter().map(|t| {
                vec![
                    c.capability_id.clone(),
                    format!("{} → {}", t.from, t.to),
                    t.count.to_string(),
                    if t.from == t.to { "" } else { "changed" }.to_string(),
                ]
            })
        })
        .collect();
    out.push('\n');
    out.push_str(&crate::table::render(
        &["CAPABILITY", "OUTCOME", "CALLS", ""],
        &rows,
    ));
    if !report.policies.is_empty() {
        let rows: Vec<Vec<String>> = report
            .policies
            .iter()
            .flat_map(|p| {
                p.transitions.iter().map(|t| {
                    vec![
                        p.policy.clone(),
                        p.capability_id.clone(),
                        p.phase.as_str().to_string(),
                        format!("{} → {}", t.from, t.to),
                        t.count.to_string(),
                    ]
                })
            })
            .collect();
        out.push('\n');
        out.push_str(&crate::table::render(
            &["POLICY", "CAPABILITY", "PHASE", "STANCE", "CALLS"],
            &rows,
        ));
    }
    if !report.changes.is_empty() {
        let rows: Vec<Vec<String>> = report
            .changes
            .iter()
            .map(|c| {
                vec![
                    c.recorded_at
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    c.invocation_id.clone(),
                    c.namespace.clone(),
                    format!("{}:{}", c.actor.kind.as_str(), c.actor.id),
                    c.capability_id.clone(),
                    format!("{} → {}", c.from, c.to),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&crate::table::render(
            &[
                "RECORDED",
                "INVOCATION",
                "NAMESPACE",
                "ACTOR",
                "CAPABILITY",
                "OUTCOME",
            ],
            &rows,
        ));
    }
    out
}
