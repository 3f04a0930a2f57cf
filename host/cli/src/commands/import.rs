//! `capgate import openapi FILE` and `capgate import mcp --upstream NAME`: capability entries for capgate.toml from a description of
//! an existing service, printed for the operator to review and paste (`capgate-import` does
//! the work; this is presentation). Each source is one variant of `Import`.

use anyhow::Context;
use capgate_import::openapi;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

/// Print capability entries for an existing service, ready to review and paste into
/// capgate.toml (every entry is exposed nowhere, `expose = {}`, until you say where).
#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    #[command(subcommand)]
    source: Import,
}

/// What to import from.
#[derive(clap::Subcommand, Debug)]
enum Import {
    /// Import the operations of an OpenAPI 3.0/3.1 document (JSON or YAML): one
    /// `[[capabilities]]` entry per operation, its procedure an HTTP upstream that calls the
    /// service as its own clients do (method, path, query, headers, JSON body), its schemas
    /// from the parameters, request body and success response (local `$ref`s inlined),
    /// `sideEffect`/`idempotent`/`risk` from the method, declared 4xx responses as `errors`.
    /// Entries go to standard output; skipped operations and why to standard error.
    ///
    /// Example: capgate import openapi petstore.yaml --base-url http://127.0.0.1:8080/v1 --prefix petstore
    Openapi(OpenapiArgs),
    /// Import the tools of a configured MCP upstream (`[upstreams.mcp.NAME]`): one
    /// `[[capabilities]]` entry per tool, its procedure `{ mcp = { upstream, tool,
    /// toolSha256 } }` pinned to the SHA-256 of the definition it was printed from, its
    /// schemas the tool's `inputSchema`/`outputSchema` (without one, the output is
    /// `{"text": …}`), `sideEffect`/`risk`/`idempotent` from the tool's annotations (none: a
    /// high-risk write). With `--diff`, nothing is printed to paste: each pinned tool of the
    /// configuration is compared with the upstream's definition now (exit status 1 when any
    /// changed or vanished), and tools nobody imported are listed.
    ///
    /// Example: capgate import mcp --config capgate.toml --upstream everything --tool echo
    Mcp(McpArgs),
}

/// `capgate import mcp`'s arguments.
#[derive(clap::Args, Debug)]
struct McpArgs {
    #[command(flatten)]
    config: crate::commands::shared::ConfigArg,
    /// The `[upstreams.mcp.NAME]` entry to list.
    #[arg(long, value_name = "NAME")]
    upstream: String,
    /// The capability id prefix: ids are PREFIX.TOOL (default: the upstream's name).
    #[arg(long, value_name = "ID_PREFIX")]
    prefix: Option<String>,
    /// Import only this tool; repeat for more.
    #[arg(long = "tool", value_name = "TOOL")]
    tools: Vec<String>,
    /// Compare the configuration's pins with the upstream's definitions now instead.
    #[arg(long)]
    diff: bool,
}

/// `capgate import openapi`'s arguments.
#[derive(clap::Args, Debug)]
struct OpenapiArgs {
    /// The OpenAPI document (JSON or YAML; `-` reads standard input).
    file: PathBuf,
    /// The service's base URL the operations' paths are appended to (default: the
    /// document's first `servers[].url`).
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// The capability id prefix: ids are PREFIX.operationId (default: from `info.title`).
    #[arg(long, value_name = "ID_PREFIX")]
    prefix: Option<String>,
    /// Import only this operation (its operationId); repeat for more.
    #[arg(long = "operation", value_name = "OPERATION_ID")]
    operations: Vec<String>,
}

/// `capgate import …`: 0 with the entries printed, 1 when no operation could be imported.
pub fn run(args: ImportArgs) -> anyhow::Result<ExitCode> {
    match args.source {
        Import::Openapi(a) => import_openapi(a),
        Import::Mcp(a) => import_mcp(a),
    }
}

fn import_mcp(args: McpArgs) -> anyhow::Result<ExitCode> {
    let checked = args.config.load()?;
    let Some(upstream) = checked.mcp_upstreams.get(&args.upstream).cloned() else {
        anyhow::bail!(
            "{} declares no [upstreams.mcp.{}] (it has: {})",
            args.config.config.display(),
            args.upstream,
            checked
                .mcp_upstreams
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    eprintln!("listing the tools of MCP upstream `{}`…", args.upstream);
    let listing = crate::runtime()?
        .block_on(async {
            let listed = upstream.list().await;
            upstream.close().await;
            listed
        })
        .with_context(|| format!("MCP upstream `{}`", args.upstream))?;
    if args.diff {
        let d = capgate_import::mcp::diff(
            &args.config.config,
            &args.upstream,
            &listing,
            &checked
                .mcp_pins()
                .iter()
                .map(|p| capgate_import::mcp::Pinned {
                    upstream: p.upstream.clone(),
                    capability: p.capability.clone(),
                    tool: p.tool.clone(),
                    sha256: p.sha256.clone(),
                    description: p.description.clone(),
                    input_schema: p.input_schema.clone(),
                    output_schema: p.output_schema.clone(),
                })
                .collect::<Vec<_>>(),
        );
        print!("{}", d.text);
        eprintln!(
            "{} pinned tool(s) of `{}` changed or gone",
            d.drifted, args.upstream
        );
        return Ok(if d.drifted == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let entries = capgate_import::mcp::entries(
        &args.upstream,
        &listing,
        args.prefix.as_deref(),
        &args.tools,
    )?;
    print!("{}", capgate_import::to_toml(&entries));
    eprintln!(
        "imported {} tool(s); each is exposed nowhere (`expose = {{}}`) until you turn a surface on",
        if args.tools.is_empty() {
            listing.tools.len()
        } else {
            args.tools.len()
        }
    );
    Ok(ExitCode::SUCCESS)
}

fn import_openapi(args: OpenapiArgs) -> anyhow::Result<ExitCode> {
    let bytes = read_bounded(&args.file)?;
    let doc = openapi::parse(&bytes).with_context(|| format!("{}", args.file.display()))?;
    let imported = openapi::import(
        &doc,
        &openapi::Options {
            base_url: args.base_url,
            prefix: args.prefix,
            operations: args.operations,
        },
    )
    .with_context(|| format!("{}", args.file.display()))?;
    for w in &imported.warnings {
        eprintln!("warning: {w}");
    }
    if imported.entries.is_empty() {
        eprintln!(
            "error: no operation of {} could be imported",
            args.file.display()
        );
        return Ok(ExitCode::from(1));
    }
    print!("{}", capgate_import::to_toml(&imported.entries));
    eprintln!(
        "imported {} operation(s); each is exposed nowhere (`expose = {{}}`) until you turn a surface on",
        imported.entries.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// The file (or standard input), refused past [`openapi::MAX_DOCUMENT_BYTES`] without
/// reading more than one byte beyond it.
fn read_bounded(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    let limit = openapi::MAX_DOCUMENT_BYTES as u64 + 1;
    let mut bytes = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .take(limit)
            .read_to_end(&mut bytes)
            .context("reading standard input")?;
    } else {
        std::fs::File::open(path)
            .with_context(|| format!("cannot open {}", path.display()))?
            .take(limit)
            .read_to_end(&mut bytes)
            .with_context(|| format!("cannot read {}", path.display()))?;
    }
    Ok(bytes)
}
