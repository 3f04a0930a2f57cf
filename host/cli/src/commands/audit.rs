//! `capgate audit tail|query|verify|export`: read the audit trail of a store as JSON lines,
//! verify its hash chains and signed checkpoints, and export it once (a backfill).

use super::shared::{OutputArg, StoreArg};
use crate::args;
use crate::exit::{Exit, Status};
use crate::runtime;
use capgate_store::StoredAuditEvent;
use chrono::{DateTime, Utc};
use std::process::ExitCode;

/// Read the audit trail.
#[derive(clap::Args, Debug)]
pub struct AuditArgs {
    #[command(subcommand)]
    command: AuditCommand,
}

#[derive(clap::Subcommand, Debug)]
enum AuditCommand {
    /// Print the last events as JSON lines, oldest first; `--follow` keeps printing new ones.
    ///
    /// Example: capgate audit tail --store sqlite://capgate.db -n 20
    Tail {
        #[command(flatten)]
        store: StoreArg,
        /// How many events.
        #[arg(short = 'n', default_value_t = 50)]
        lines: u32,
        /// Keep polling for new events.
        #[arg(long)]
        follow: bool,
    },
    /// Find events by execution, capability, actor, type and time, as JSON lines, oldest
    /// first.
    ///
    /// Example: capgate audit query --store sqlite://capgate.db --capability orders.refund --since 2026-11-29T00:00:00Z
    Query {
        #[command(flatten)]
        store: StoreArg,
        /// Events of one execution (`executionId`).
        #[arg(long)]
        execution: Option<String>,
        /// Events of one capability.
        #[arg(long)]
        capability: Option<String>,
        /// Events of one actor id (for decisions, the approver).
        #[arg(long)]
        actor: Option<String>,
        /// One event type, e.g. capability.started.
        #[arg(long = "type")]
        event_type: Option<String>,
        /// At or after this RFC 3339 time.
        #[arg(long, value_parser = args::rfc3339)]
        since: Option<DateTime<Utc>>,
        /// Before this RFC 3339 time.
        #[arg(long, value_parser = args::rfc3339)]
        until: Option<DateTime<Utc>>,
        /// At most this many events (1 to 10000).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
    },
    /// Verify the trail: every chain's links, hashes and `seq` without gaps, and the signed
    /// checkpoints (with `--public-key`: every chain must open on its signed start record,
    /// be covered by chained checkpoints and end on one). Names the first edited, deleted,
    /// inserted, reordered or unsigned event of each chain, a deleted checkpoint, and a tail
    /// truncated after a checkpoint; with `--checkpoints`, also what the store lost of the
    /// exported copy of the checkpoints. Exits 0 when intact, 1 when something was found.
    ///
    /// Example: capgate audit verify --store sqlite://capgate.db --public-key audit-key.pub.pem --checkpoints /var/lib/capgate/audit-export
    Verify {
        #[command(flatten)]
        store: StoreArg,
        /// An Ed25519 public key (PEM) checkpoints may be signed with; repeat for rotated
        /// keys. Without one, signatures are not checked (the report says so).
        #[arg(long = "public-key")]
        public_keys: Vec<std::path::PathBuf>,
        /// One chain only (its name, as the report prints it).
        #[arg(long)]
        chain: Option<String>,
        /// Start each chain at its first event at or after this RFC 3339 time.
        #[arg(long, value_parser = args::rfc3339)]
        since: Option<DateTime<Utc>>,
        /// The checkpoints as exported off the box: a JSON-lines file, or a directory of
        /// them (a `jsonl` export sink's); its `checkpoint` lines are read, other lines
        /// skipped. Every record in it must still be in the store (unless purged), with the
        /// events it vouches for. Repeat for several.
        #[arg(long = "checkpoints")]
        checkpoints: Vec<std::path::PathBuf>,
        /// Events at the end of a chain younger than this many seconds need no checkpoint
        /// yet (verifying a running deployment, whose writers sign about once a
        /// second). Default 0: every event must be covered.
        #[arg(long = "grace-seconds", default_value_t = 0)]
        grace_seconds: u64,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Export the stored trail once (a backfill): the events at or after `--since` and before
    /// `--until`, oldest first, then every signed record of the chains (start records and
    /// checkpoints, what `verify --checkpoints` reads), as JSON lines on stdout (`--format
    /// jsonl`, the lines of a `jsonl` sink) or as OTLP logs POSTed to a collector (`--format
    /// otlp`). Progress goes to stderr; a failed batch stops the export and says how to
    /// resume it (`--after-id`). Continuous export is `[audit.export.NAME]`.
    ///
    /// Example: capgate audit export --store sqlite://capgate.db --since 2026-11-01T00:00:00Z --format jsonl
    Export {
        #[command(flatten)]
        store: StoreArg,
        /// At or after this RFC 3339 time.
        #[arg(long, value_parser = args::rfc3339)]
        since: Option<DateTime<Utc>>,
        /// Before this RFC 3339 time.
        #[arg(long, value_parser = args::rfc3339)]
        until: Option<DateTime<Utc>>,
        /// `jsonl` (stdout) or `otlp` (to `--endpoint`).
        #[arg(long, value_enum, default_value_t = ExportFormat::Jsonl)]
        format: ExportFormat,
        /// `otlp`: the collector, a base URL (capgate adds `/v1/logs`) or a full URL. Default
        /// `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`, then `OTEL_EXPORTER_OTLP_ENDPOINT` +
        /// `/v1/logs`, then `http://localhost:4318/v1/logs`.
        #[arg(long)]
        endpoint: Option<String>,
        /// Start after this row id (what a stopped export printed).
        #[arg(long = "after-id", default_value_t = 0)]
        after_id: i64,
        /// Events per batch (1 to 10000).
        #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        batch: u32,
    },
}

/// What `capgate audit export` writes.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum ExportFormat {
    /// JSON lines on stdout.
    Jsonl,
    /// OTLP logs (HTTP, protobuf) to a collector.
    Otlp,
}

/// `capgate audit …`: 0 when done (`tail --follow` runs until interrupted).
pub fn run(args: AuditArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        AuditCommand::Tail {
            store,
            lines,
            follow,
        } => runtime()?.block_on(tail(&store, lines, follow)),
        AuditCommand::Query {
            store,
            execution,
            capability,
            actor,
            event_type,
            since,
            until,
            limit,
        } => {
            let query = capgate_store::AuditQuery {
                execution_id: execution,
                capability_id: capability,
                actor_id: actor,
                event_type,
                during: capgate_core::clock::TimeRange { since, until },
                limit: Some(limit),
                ..Default::default()
            };
            runtime()?.block_on(query_events(&store, &query))
        }
        AuditCommand::Verify {
            store,
            public_keys,
            chain,
            since,
            checkpoints,
            grace_seconds,
            output,
        } => {
            let mut keys = Vec::new();
            for path in &public_keys {
                let key = capgate_oci::sign::PublicKey::load(path).map_err(|message| Exit {
                    status: Status::Usage,
                    message,
                })?;
                // Checkpoints are signed with Ed25519 (the store's signer); a cosign P-256
                // key is for plugin signatures, not the audit chain.
                let Some(key) = key.ed25519() else {
                    return Err(anyhow::Error::new(Exit {
                        status: Status::Usage,
                        message: format!(
                            "{}: audit checkpoints are signed with Ed25519, and this is an ECDSA key",
                            path.display()
                        ),
                    }));
                };
                keys.push(key);
            }
            let mut copy = Vec::new();
            for path in &checkpoints {
                copy.extend(read_checkpoint_copy(path).map_err(|message| Exit {
                    status: Status::Usage,
                    message,
                })?);
            }
            let options = capgate_store::VerifyOptions {
                chain,
                since,
                keys,
                copy,
                grace: std::time::Duration::from_secs(grace_seconds),
            };
            runtime()?.block_on(verify(&store, &options, output))
        }
        AuditCommand::Export {
            store,
            since,
            until,
            format,
            endpoint,
            after_id,
            batch,
        } => {
            let range = Backfill {
                since,
                until,
                after_id,
                batch: batch as usize,
            };
            runtime()?.block_on(export(&store, range, format, endpoint))
        }
    }
}

/// The events `capgate audit export` reads.
struct Backfill {
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
    after_id: i64,
    batch: usize,
}

/// Where `capgate audit export` sends: a collector, or JSON lines on stdout.
enum BackfillOut {
    Otlp(capgate_export::OtlpSink),
    Stdout,
}

impl BackfillOut {
    /// A page of events.
    async fn events(&mut self, page: &[capgate_store::ExportedEvent]) -> anyhow::Result<()> {
        use capgate_export::ExportSink;
        match self {
            BackfillOut::Otlp(sink) => sink.deliver(page).await.map(drop).map_err(Into::into),
            BackfillOut::Stdout => write_lines(page.iter().map(capgate_export::jsonl_line)),
        }
    }

    /// A page of the chains' signed records.
    async fn records(&mut self, page: &[capgate_store::ExportedCheckpoint]) -> anyhow::Result<()> {
        use capgate_export::ExportSink;
        match self {
            BackfillOut::Otlp(sink) => sink
                .deliver_checkpoints(page)
                .await
                .map(drop)
                .map_err(Into::into),
            BackfillOut::Stdout => {
                write_lines(page.iter().map(capgate_export::jsonl_checkpoint_line))
            }
        }
    }
}

/// Write `lines` to stdout and flush.
fn write_lines(lines: impl Iterator<Item = Vec<u8>>) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for line in lines {
        out.write_all(&line)?;
    }
    out.flush()?;
    Ok(())
}

/// `capgate audit export`.
async fn export(
    store: &StoreArg,
    range: Backfill,
    format: ExportFormat,
    endpoint: Option<String>,
) -> anyhow::Result<ExitCode> {
    let mut out = match format {
        ExportFormat::Jsonl => BackfillOut::Stdout,
        ExportFormat::Otlp => {
            let env = |k: &str| std::env::var(k).ok();
            let endpoint =
                capgate_server::resolve::telemetry::logs_endpoint(endpoint.as_deref(), None, env)
                    .map_err(|message| Exit {
                    status: Status::Usage,
                    message,
                })?;
            eprintln!("exporting to {endpoint}");
            BackfillOut::Otlp(capgate_export::OtlpSink::new(capgate_export::OtlpTarget {
                endpoint,
                headers: Vec::new(),
                service_name: capgate_server::resolve::telemetry::logs_service_name(None, env),
                ca_pem: None,
                timeout: std::time::Duration::from_secs(30),
            })?)
        }
    };
    let progress = matches!(out, BackfillOut::Otlp(_));
    let store = store.open_existing().await?;
    let log = store.audit_log();
    let (mut after, mut total) = (range.after_id, 0u64);
    loop {
        let page = log
            .export_page(range.since, range.until, after, range.batch)
            .await?;
        let Some(last) = page.last().map(|e| e.id) else {
            break;
        };
        if let Err(e) = out.events(&page).await {
            store.close().await;
            return Err(e.context(format!(
                "exported {total} events; resume with --after-id {after}"
            )));
        }
        total += page.len() as u64;
        after = last;
        if progress {
            eprintln!("exported {total} events (last id {after})");
        }
    }
    // Then the chains' signed records, so the copy is one `verify --checkpoints` can check
    // the store against (a repeat of any of them is harmless to it).
    let (mut after_record, mut records) = (0i64, 0u64);
    loop {
        let page = log
            .export_checkpoint_page(after_record, range.batch)
            .await?;
        let Some(&(last, _)) = page.last() else {
            break;
        };
        let page: Vec<_> = page.into_iter().map(|(_, c)| c).collect();
        if let Err(e) = out.records(&page).await {
            store.close().await;
            return Err(e.context(format!(
                "exported {total} events and {records} signed records; run the export again to send the signed records"
            )));
        }
        records += page.len() as u64;
        after_record = last;
    }
    store.close().await;
    eprintln!("exported {total} events and {records} signed records");
    Ok(ExitCode::SUCCESS)
}

/// The `checkpoint` lines of a JSON-lines file, or of every `*.jsonl` file of a directory
/// (in name order); other lines are skipped, a malformed checkpoint line is an error.
fn read_checkpoint_copy(
    path: &std::path::Path,
) -> Result<Vec<capgate_store::ExportedCheckpoint>, String> {
    let files = if path.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut records = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let mut value: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| format!("{}:{}: not a JSON line: {e}", file.display(), n + 1))?;
            // Only checkpoint lines are read; event lines carry `event`.
            if value.get("checkpoint").is_none() {
                continue;
            }
            let record = serde_json::from_value(value["checkpoint"].take())
                .map_err(|e| format!("{}:{}: not a checkpoint: {e}", file.display(), n + 1))?;
            records.push(record);
        }
    }
    Ok(records)
}

/// `capgate audit verify`.
async fn verify(
    store: &StoreArg,
    options: &capgate_store::VerifyOptions,
    output: OutputArg,
) -> anyhow::Result<ExitCode> {
    let store = store.open_existing().await?;
    let report = store.audit_log().verify(options).await;
    store.close().await;
    let report = report.map_err(|e| anyhow::anyhow!("cannot read the audit trail: {e}"))?;
    if output.json() {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        for c in &report.chains {
            let purged = if c.purged_through > 0 {
                format!(", purged through seq {}", c.purged_through)
            } else {
                String::new()
            };
            let legacy = if c.legacy {
                " (unchained checkpoints, written before they were chained)"
            } else {
                ""
            };
            println!(
                "chain {}: {} events (last seq {}), {} checkpoints{purged}{legacy}",
                c.chain, c.events, c.last_seq, c.checkpoints
            );
        }
        if report.unchained_before > 0 {
            println!(
                "{} older events predate the chain and cannot be verified",
                report.unchained_before
            );
        }
        if !report.signatures_checked {
            println!("checkpoint signatures not checked (no --public-key)");
        }
        if report.copy_checkpoints > 0 {
            println!(
                "{} checkpoints of the exported copy checked against the store",
                report.copy_checkpoints
            );
        }
        for f in &report.findings {
            println!(
                "{}: {} (chain {}, event {}, seq {})",
                f.kind.as_str(),
                f.detail,
                f.chain.as_deref().unwrap_or("none"),
                f.event_id.map_or("-".to_string(), |i| i.to_string()),
                f.seq.map_or("-".to_string(), |s| s.to_string()),
            );
        }
        println!(
            "{}",
            if report.is_intact() {
                "intact"
            } else {
                "TAMPERED"
            }
        );
    }
    Ok(if report.is_intact() {
        ExitCode::SUCCESS
    } else {
        Status::Failed.code()
    })
}

/// Prints each event as a JSON line (one the store cannot read as a warning on stderr)
/// and returns the highest row id seen, at least `last`.
fn print_events(rows: Vec<StoredAuditEvent>, mut last: i64) -> anyhow::Result<i64> {
    for row in rows {
        last = last.max(row.id);
        match row.event {
            Ok(e) => println!("{}", serde_json::to_string(&e)?),
            Err(bad) => eprintln!("warning: {bad}"),
        }
    }
    Ok(last)
}

/// `capgate audit tail`.
async fn tail(store: &StoreArg, lines: u32, follow: bool) -> anyhow::Result<ExitCode> {
    let store = store.open_existing().await?;
    let log = store.audit_log();
    let mut last = print_events(log.tail(lines).await?, 0)?;
    if !follow {
        return Ok(ExitCode::SUCCESS);
    }
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        last = print_events(log.follow(last, 1000).await?, last)?;
    }
}

/// `capgate audit query`.
async fn query_events(
    store: &StoreArg,
    query: &capgate_store::AuditQuery,
) -> anyhow::Result<ExitCode> {
    let store = store.open_existing().await?;
    let rows = store.audit_log().query(query).await?;
    print_events(rows, 0)?;
    store.close().await;
    Ok(ExitCode::SUCCESS)
}
