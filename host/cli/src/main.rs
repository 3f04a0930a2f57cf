//! `capgate`: the operator's binary. `serve` runs a deployment (HTTP gateway, MCP, human
//! approvals); `mcp --stdio` serves one MCP session; `check` validates a deployment file and
//! reports every problem with its place; `plugin test` is a plugin author's inner loop;
//! `migrate`, `audit tail`, `approvals` and `invocations` operate the store; `contract`
//! exports what models and hosts may call and `contract diff` compares two revisions of it;
//! `inspect` prints a deployment's inventory for review; `test` runs governance scenarios
//! against a deployment without a model.

/// Request threads allocate what the Wasm reaper thread frees; mimalloc's per-thread heaps
/// make that cross-thread free cheap (glibc's arena lock did not).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

// The commands' code is the `capgate` library (src/lib.rs), so the fuzz targets
// (host/fuzz) can reach the configuration loader that `check` runs.
use capgate::{
    diff, inspect, oci, ops, runtime, scenario, serve, store, table, telemetry, validate,
};

use anyhow::Context;
use capgate::args;
use capgate_contract::tools::ToolFormat;
use capgate_core::actor::Surface;
use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "capgate",
    version,
    about = "A governed capability runtime for AI agents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a deployment: a capability gateway per configured route, MCP at /mcp, the
    /// human approvals API at /approvals, /healthz and /readyz.
    ///
    /// Example: capgate serve --config examples/customer-support/capgate.toml
    Serve {
        /// The configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Listen address (overrides gateway.listen; `127.0.0.1:0` picks a free port).
        #[arg(long)]
        listen: Option<String>,
        /// Serve the metrics on this address of their own (overrides [telemetry.metrics]
        /// listen, which must be on; `127.0.0.1:0` picks a free port).
        #[arg(long, value_name = "ADDR")]
        metrics_listen: Option<String>,
        /// Store URL (overrides store.url), e.g. postgres://user:pass@host/db for replicas. A
        /// relative sqlite:// path is relative to the current directory.
        #[arg(long, env = "CAPGATE_STORE")]
        store: Option<String>,
    },
    /// Serve one MCP session over stdin/stdout as the configured service actor
    /// (`[mcp] stdioActor`, `stdioNamespace`).
    ///
    /// Example: capgate mcp --stdio --config examples/customer-support/capgate.toml
    Mcp {
        /// Serve over stdio (the only transport of this command; HTTP is `serve`'s /mcp).
        #[arg(long, required = true)]
        stdio: bool,
        /// The configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Store URL (overrides store.url; a relative sqlite:// path is relative to the current
        /// directory, and created if missing).
        #[arg(long, env = "CAPGATE_STORE")]
        store: Option<String>,
    },
    /// The portable contract: what a surface offers, with its digest.
    Contract {
        #[command(subcommand)]
        command: ContractCommand,
    },
    /// Human approvals, from the operator's shell (the same rules as the approvals API).
    Approvals {
        #[command(subcommand)]
        command: ApprovalsCommand,
    },
    /// Invocation receipts of the gateway journal.
    Invocations {
        #[command(subcommand)]
        command: InvocationsCommand,
    },
    /// Validate a configuration file: exactly what `serve` (and every command with --config)
    /// refuses — unknown keys, bad references and values, schemas, plugin digests and exports,
    /// retries (SI-11), upstreams, routes, capabilities that cannot finish inside the gateway's
    /// time budget.
    ///
    /// Every problem is reported with file:line:column and its key path, all at once.
    ///
    /// Example: capgate check --config examples/customer-support/capgate.toml
    Check {
        /// The configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// The inventory a reviewer reads in a pull request: per capability its surfaces, side
    /// effect, risk, policies, redactors, static approval, timeout and retry, sorted by id.
    ///
    /// Reads the file as `check` does first (every problem located) but loads no plugin.
    ///
    /// Example: capgate inspect --config examples/customer-support/capgate.toml
    Inspect {
        /// The configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// `table` for people, `json` for programs (shape: README "Reviewing a change").
        #[arg(long, value_enum, default_value = "table")]
        format: table::Format,
    },
    /// Run governance scenarios against a deployment, without a model: each scenario is a
    /// call (actor, surface, capability, input, context, optionally a stubbed procedure),
    /// approval steps (decide, move the clock, resume) and what must come out (envelope
    /// status, error code, output fields, policy stances, audit event types in order).
    ///
    /// Every scenario runs the deployment's real pipeline and Wasm plugins on a fresh
    /// in-memory store, in parallel; no configured procedure runs unless `--live`. Exit status: 0 all passed, 1 some failed, 2 the
    /// configuration or a scenario file was refused (every problem located) or nothing ran.
    /// Format: README "Testing a deployment".
    ///
    /// Example: capgate test --config examples/customer-support/capgate.toml examples/customer-support/scenarios
    Test {
        /// The configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Scenario files, or directories of them (their *.toml files). Default: the
        /// `scenarios` directory beside the configuration file.
        paths: Vec<PathBuf>,
        /// Only scenarios whose name contains this text (case-insensitive).
        #[arg(long)]
        filter: Option<String>,
        /// `text` for people; `junit` writes JUnit XML to stdout for CI (the summary line
        /// goes to stderr).
        #[arg(long, value_enum, default_value = "text")]
        format: scenario::Format,
        /// How many scenarios run at once.
        #[arg(long, default_value_t = 8)]
        jobs: usize,
        /// Call the configured procedure of a scenario that has no stub for real: an HTTP
        /// upstream is sent the request with its configured credential headers, a Wasm
        /// procedure runs. Without it, no configured procedure runs: a scenario that reaches
        /// one without a stub fails and nothing reaches the backend.
        #[arg(long)]
        live: bool,
    },
    /// Plugin author tools.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
    /// Apply the store's migrations (SQLite is also migrated automatically at start).
    ///
    /// Example: capgate migrate --store postgres://postgres:postgres@127.0.0.1:5432/capgate
    Migrate {
        /// Store URL (`sqlite://FILE`, created if missing and relative to the current directory,
        /// or `postgres://…`).
        #[arg(long, env = "CAPGATE_STORE")]
        store: String,
    },
    /// Read the audit trail.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// API key helpers.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
}

#[derive(Subcommand)]
enum ContractCommand {
    /// Print the PortableCapabilityDescriptor[] of a surface as JSON.
    ///
    /// Example: capgate contract export --config examples/customer-support/capgate.toml --surface aiSdk
    Export {
        /// The configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// The surface (aiSdk, mcp, workflow).
        #[arg(long, default_value = "aiSdk")]
        surface: Surface,
    },
    /// Print tool definitions for an agent framework.
    ///
    /// Example: capgate contract tools --config examples/customer-support/capgate.toml --format openai
    Tools {
        /// The configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// The surface (aiSdk, mcp, workflow).
        #[arg(long, default_value = "aiSdk")]
        surface: Surface,
        /// `ai-sdk` or `openai`.
        #[arg(long, default_value = "ai-sdk")]
        format: ToolFormat,
    },
    /// Compare two contracts: added, removed and changed capabilities, each change breaking
    /// (a call that worked may fail now) or additive.
    ///
    /// OLD and NEW are contract files (`contract export` output) or .toml deployment files.
    /// Exit status: 0 nothing breaking, 1 something breaking (0 with --allow-breaking), 2 bad
    /// input.
    ///
    /// Example: capgate contract diff contract.json examples/customer-support/capgate.toml
    Diff {
        /// The contract before (a .json contract file or a .toml deployment file).
        old: PathBuf,
        /// The contract after (a .json contract file or a .toml deployment file).
        new: PathBuf,
        /// Compare this surface only (aiSdk, mcp, workflow). Default: every one of them for
        /// two deployment files, else aiSdk (what `contract export` writes by default).
        #[arg(long)]
        surface: Option<Surface>,
        /// `table` for people, `json` for programs (shape: README "Reviewing a change").
        #[arg(long, value_enum, default_value = "table")]
        format: table::Format,
        /// Exit 0 even when a change is breaking (the report still says which).
        #[arg(long)]
        allow_breaking: bool,
    },
}

#[derive(Subcommand)]
enum ApprovalsCommand {
    /// List approvals (default: pending), newest first.
    ///
    /// Example: capgate approvals list --config examples/customer-support/capgate.toml
    List {
        /// The configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// pending, approved, rejected, expired or consumed; `all` for every status.
        #[arg(long, default_value = "pending")]
        status: args::StatusFilter,
        /// Only this capability.
        #[arg(long)]
        capability: Option<String>,
        /// Store URL (overrides store.url; a relative sqlite:// path is relative to the current
        /// directory). The database must exist.
        #[arg(long, env = "CAPGATE_STORE")]
        store: Option<String>,
    },
    /// Show one approval with its (redacted) input.
    Show {
        /// The approval id.
        id: String,
        /// The configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Store URL (overrides store.url; a relative sqlite:// path is relative to the current
        /// directory). The database must exist.
        #[arg(long, env = "CAPGATE_STORE")]
        store: Option<String>,
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
#[derive(clap::Args)]
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
    /// The configuration file.
    #[arg(long, short)]
    config: PathBuf,
    /// Store URL (overrides store.url; a relative sqlite:// path is relative to the current
    /// directory). The database must exist.
    #[arg(long, env = "CAPGATE_STORE")]
    store: Option<String>,
}

#[derive(Subcommand)]
enum InvocationsCommand {
    /// Show a receipt with its private record (claim token, state, outcome).
    ///
    /// Example: capgate invocations show call_1 --namespace org_1 --actor user:u_dana --surface aiSdk --store sqlite://capgate.db
    Show {
        /// The invocation id.
        id: String,
        #[command(flatten)]
        scope: ops::ScopeArgs,
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
        scope: ops::ScopeArgs,
    },
    /// Delete settled receipts older than the replay horizon; pending receipts are kept.
    /// `capgate serve` does this every hour with `gateway.replayHorizonHours`.
    ///
    /// Example: capgate invocations purge --older-than-hours 168 --store sqlite://capgate.db
    Purge {
        /// Keep receipts settled within this many hours (a retry or lookup after that sees
        /// nothing).
        #[arg(long, default_value_t = 168)]
        older_than_hours: u64,
        /// Store URL (a relative sqlite:// path is relative to the current directory); the
        /// database must exist.
        #[arg(long, env = "CAPGATE_STORE")]
        store: String,
    },
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Run a plugin against request → expected decision/output cases; prints a pass/fail
    /// table with the plugin's time per case and exits non-zero on any failure.
    ///
    /// Example: capgate plugin test plugins/js/dist/refund-limit.wasm --cases plugins/conformance/refund-limit.toml
    Test {
        /// The component file.
        plugin: PathBuf,
        /// The case file (format: plugins/conformance/README.md).
        #[arg(long)]
        cases: PathBuf,
    },
    /// Publish a Wasm component to an OCI registry as a Wasm artifact (an OCI image
    /// manifest with config `application/vnd.wasm.config.v0+json` and one
    /// `application/wasm` layer) and print the `oci://…@sha256:…` reference to put in a
    /// plugin's `path`. Credentials: CAPGATE_REGISTRY_USERNAME/CAPGATE_REGISTRY_PASSWORD or
    /// the docker config's `auths`.
    ///
    /// Example: capgate plugin push plugins/target/wasm32-wasip2/release/refund_limit.wasm oci://127.0.0.1:5000/capgate/refund-limit:v1 --sign-key release.pem
    Push {
        /// The component file.
        plugin: PathBuf,
        /// Where: oci://REGISTRY/REPOSITORY[:TAG] (loopback registries over plain HTTP).
        target: String,
        /// Also sign it (cosign's layout, tag `sha256-DIGEST.sig`) with this Ed25519
        /// private key (PEM PKCS#8, `openssl genpkey -algorithm ed25519`).
        #[arg(long)]
        sign_key: Option<PathBuf>,
        /// Speak plain HTTP to this non-loopback registry.
        #[arg(long)]
        insecure: bool,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Print the last events as JSON lines, oldest first; `--follow` keeps printing new ones.
    ///
    /// Example: capgate audit tail --store sqlite://capgate.db -n 20
    Tail {
        /// Store URL (a relative sqlite:// path is relative to the current directory); the
        /// database must exist.
        #[arg(long, env = "CAPGATE_STORE")]
        store: String,
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
        /// Store URL (a relative sqlite:// path is relative to the current directory); the
        /// database must exist.
        #[arg(long, env = "CAPGATE_STORE")]
        store: String,
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
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Print the SHA-256 of an API key, the form `[[gateway.apiKeys]] sha256` stores. The
    /// key is read from standard input (one line; the line break is not part of it), never
    /// from the command line, where shell history and process listings would keep it.
    ///
    /// Example: printf '%s' "$NEW_KEY" | capgate keys hash
    Hash {
        /// Refused: a key on the command line is visible to every local user (`ps`) and
        /// kept in shell history. Pipe it on standard input instead.
        #[arg(hide = true)]
        key: Option<String>,
    },
}

fn main() -> ExitCode {
    telemetry::init_logging();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => match e.downcast_ref::<validate::Refused>() {
            // The same lines and the same exit status as `capgate check`.
            Some(refused) => {
                refused.report();
                ExitCode::from(1)
            }
            None => {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

/// Every command with `--config` starts here: the one validation path of `check`.
fn load(path: &std::path::Path) -> anyhow::Result<validate::Checked> {
    Ok(validate::validate(path)?)
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve {
            config,
            listen,
            metrics_listen,
            store,
        } => {
            let checked = load(&config)?;
            let rt = runtime()?;
            let served = rt.block_on(serve::serve(
                checked,
                store,
                serve::Listen {
                    gateway: listen,
                    metrics: metrics_listen,
                },
            ));
            // Calls still running past the drain time are abandoned (their receipts stay
            // pending), and a Wasm call on a blocking thread does not hold the exit.
            rt.shutdown_timeout(serve::ABANDON_TIMEOUT);
            served?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Mcp {
            stdio: _,
            config,
            store,
        } => {
            let checked = load(&config)?;
            runtime()?.block_on(ops::mcp_stdio(checked, store))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Inspect { config, format } => {
            let inventory = inspect::inspect(&config)?;
            match format {
                table::Format::Table => print!("{}", inventory.render_table()),
                table::Format::Json => {
                    println!("{}", serde_json::to_string_pretty(&inventory)?)
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Contract { command } => match command {
            ContractCommand::Export { config, surface } => {
                ops::contract(&load(&config)?, surface, None)?;
                Ok(ExitCode::SUCCESS)
            }
            ContractCommand::Tools {
                config,
                surface,
                format,
            } => {
                ops::contract(&load(&config)?, surface, Some(format))?;
                Ok(ExitCode::SUCCESS)
            }
            ContractCommand::Diff {
                old,
                new,
                surface,
                format,
                allow_breaking,
            } => contract_diff(&old, &new, surface, format, allow_breaking),
        },
        Command::Approvals { command } => {
            let rt = runtime()?;
            match command {
                ApprovalsCommand::List {
                    config,
                    status,
                    capability,
                    store,
                } => rt.block_on(ops::approvals_list(
                    &load(&config)?,
                    store.as_deref(),
                    status,
                    capability,
                ))?,
                ApprovalsCommand::Show { id, config, store } => {
                    rt.block_on(ops::approvals_show(&load(&config)?, store.as_deref(), &id))?
                }
                ApprovalsCommand::Approve(args) => decide(&rt, args, true)?,
                ApprovalsCommand::Reject(args) => decide(&rt, args, false)?,
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Invocations { command } => {
            let rt = runtime()?;
            match command {
                InvocationsCommand::Show { id, scope } => {
                    rt.block_on(ops::invocations_show(&scope, &id))?
                }
                InvocationsCommand::Reconcile {
                    id,
                    claim,
                    outcome,
                    scope,
                } => rt.block_on(ops::invocations_reconcile(&scope, &id, &claim, &outcome))?,
                InvocationsCommand::Purge {
                    older_than_hours,
                    store,
                } => rt.block_on(ops::invocations_purge(&store, older_than_hours))?,
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { config } => Ok(check(&config)),
        Command::Test {
            config,
            paths,
            filter,
            format,
            jobs,
            live,
        } => scenario::main(scenario::Options {
            config,
            paths,
            filter,
            format,
            jobs,
            live,
        }),
        Command::Plugin {
            command: PluginCommand::Test { plugin, cases },
        } => plugin_test(&plugin, &cases),
        Command::Plugin {
            command:
                PluginCommand::Push {
                    plugin,
                    target,
                    sign_key,
                    insecure,
                },
        } => plugin_push(&plugin, &target, sign_key.as_deref(), insecure),
        Command::Migrate { store } => runtime()?.block_on(migrate(&store)),
        Command::Audit {
            command:
                AuditCommand::Tail {
                    store,
                    lines,
                    follow,
                },
        } => runtime()?.block_on(audit_tail(&store, lines, follow)),
        Command::Audit {
            command:
                AuditCommand::Query {
                    store,
                    execution,
                    capability,
                    actor,
                    event_type,
                    since,
                    until,
                    limit,
                },
        } => {
            let query = capgate_store::AuditQuery {
                execution_id: execution,
                capability_id: capability,
                actor_id: actor,
                event_type,
                since,
                until,
                limit: Some(limit),
                ..Default::default()
            };
            runtime()?.block_on(audit_query(&store, &query))
        }
        Command::Keys {
            command: KeysCommand::Hash { key },
        } => {
            if key.is_some() {
                eprintln!(
                    "error: `capgate keys hash` reads the key from standard input, not the command line \
                     (where `ps` and shell history would show it): printf '%s' \"$KEY\" | capgate keys hash"
                );
                return Ok(ExitCode::from(2));
            }
            let key = match ops::read_key(std::io::stdin().lock()) {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(ExitCode::from(2));
                }
            };
            // The very function the gateway hashes a presented key with.
            println!("{}", capgate_gateway::auth::hash_api_key(&key));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `capgate contract diff`: 0 when nothing is breaking (or `--allow-breaking`), 1 when
/// something is, 2 when an input is unreadable or not a contract (a refused deployment file
/// has its located problems printed first).
fn contract_diff(
    old: &std::path::Path,
    new: &std::path::Path,
    surface: Option<Surface>,
    format: table::Format,
    allow_breaking: bool,
) -> anyhow::Result<ExitCode> {
    let report = match diff_report(old, new, surface) {
        Ok(r) => r,
        Err(e) => {
            if let diff::DiffError::Refused(refused) = &e {
                for p in &refused.problems {
                    eprintln!("{p}");
                }
                eprintln!();
            }
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    match format {
        table::Format::Table => print!("{}", report.render_table(table::render)),
        table::Format::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(match (report.breaking, allow_breaking) {
        (false, _) => ExitCode::SUCCESS,
        (true, true) => {
            eprintln!("breaking changes allowed by --allow-breaking");
            ExitCode::SUCCESS
        }
        (true, false) => {
            eprintln!(
                "error: {} breaking change(s); review them, then pass --allow-breaking to accept them",
                report.summary.breaking_changes
            );
            ExitCode::from(1)
        }
    })
}

fn diff_report(
    old: &std::path::Path,
    new: &std::path::Path,
    surface: Option<Surface>,
) -> Result<diff::Report, diff::DiffError> {
    let (a, b) = (diff::Side::read(old)?, diff::Side::read(new)?);
    let surfaces = diff::surfaces(surface, &a, &b)?;
    Ok(diff::diff(
        &a.contract(&surfaces)?,
        &b.contract(&surfaces)?,
        &old.display().to_string(),
        &new.display().to_string(),
    ))
}

/// `capgate approvals approve|reject`.
fn decide(rt: &tokio::runtime::Runtime, a: DecideArgs, approve: bool) -> anyhow::Result<()> {
    rt.block_on(ops::approvals_decide(
        &load(&a.config)?,
        a.store.as_deref(),
        &a.id,
        approve,
        &a.approver,
        a.comment,
    ))
}

/// `capgate check`: exit 0 when `serve` would accept the file, 1 with every located problem
/// otherwise (exactly what `serve` prints and refuses).
fn check(path: &std::path::Path) -> ExitCode {
    match validate::validate(path) {
        Ok(checked) => {
            for w in &checked.warnings {
                eprintln!("warning: {w}");
            }
            println!("{}: ok", path.display());
            ExitCode::SUCCESS
        }
        Err(refused) => {
            refused.report();
            ExitCode::from(1)
        }
    }
}

fn plugin_test(plugin: &std::path::Path, cases: &std::path::Path) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(cases)
        .with_context(|| format!("cannot read the case file {}", cases.display()))?;
    let host = capgate_wasm::WasmHost::shared().context("could not start the Wasm engine")?;
    let report = capgate::plugin_test::run_file(&host, plugin, &text)
        .with_context(|| format!("cannot test {}", plugin.display()))?;
    print!("{}", report.render());
    Ok(if report.all_passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn plugin_push(
    plugin: &std::path::Path,
    target: &str,
    sign_key: Option<&std::path::Path>,
    insecure: bool,
) -> anyhow::Result<ExitCode> {
    let size = std::fs::metadata(plugin)
        .with_context(|| format!("cannot read {}", plugin.display()))?
        .len();
    anyhow::ensure!(
        size <= oci::MAX_PLUGIN_BYTES,
        "{} is larger than {} bytes",
        plugin.display(),
        oci::MAX_PLUGIN_BYTES
    );
    let wasm =
        std::fs::read(plugin).with_context(|| format!("cannot read {}", plugin.display()))?;
    let key = sign_key
        .map(oci::sign::load_signing_key)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let insecure: Vec<String> = if insecure {
        oci::Reference::parse(target)
            .map(|r| vec![r.registry])
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let pushed = runtime()?
        .block_on(oci::push(&wasm, target, &insecure, key.as_ref()))
        .with_context(|| format!("cannot push {} to {target}", plugin.display()))?;
    eprintln!(
        "pushed {} (Wasm sha256 {}){}",
        plugin.display(),
        pushed.wasm_sha256,
        if pushed.signed { ", signed" } else { "" }
    );
    println!("{}", pushed.reference);
    Ok(ExitCode::SUCCESS)
}

async fn migrate(url: &str) -> anyhow::Result<ExitCode> {
    let url = store::StoreUrl::from_command_line(url)?;
    url.require(store::Access::Create)?;
    let report = capgate_store::migrate_url(url.url())
        .await
        .with_context(|| format!("could not migrate {}", url.display()))?;
    if report.applied.is_empty() {
        println!(
            "{}: up to date ({} migrations)",
            url.display(),
            report.status.len()
        );
    }
    for m in &report.applied {
        println!("applied {} {}", m.version, m.description);
    }
    Ok(ExitCode::SUCCESS)
}

async fn audit_tail(url: &str, lines: u32, follow: bool) -> anyhow::Result<ExitCode> {
    let store = store::StoreUrl::from_command_line(url)?
        .open(store::Access::Existing)
        .await?;
    let log = store.audit_log();
    let mut last = 0i64;
    let print =
        |rows: Vec<capgate_store::StoredAuditEvent>, last: &mut i64| -> anyhow::Result<()> {
            for row in rows {
                *last = (*last).max(row.id);
                match row.event {
                    Ok(e) => println!("{}", serde_json::to_string(&e)?),
                    Err(bad) => eprintln!("warning: {bad}"),
                }
            }
            Ok(())
        };
    print(log.tail(lines).await?, &mut last)?;
    if !follow {
        return Ok(ExitCode::SUCCESS);
    }
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        print(log.follow(last, 1000).await?, &mut last)?;
    }
}

async fn audit_query(url: &str, query: &capgate_store::AuditQuery) -> anyhow::Result<ExitCode> {
    let store = store::StoreUrl::from_command_line(url)?
        .open(store::Access::Existing)
        .await?;
    let rows = store.audit_log().query(query).await?;
    for row in rows {
        match row.event {
            Ok(e) => println!("{}", serde_json::to_string(&e)?),
            Err(bad) => eprintln!("warning: {bad}"),
        }
    }
    store.close().await;
    Ok(ExitCode::SUCCESS)
}
