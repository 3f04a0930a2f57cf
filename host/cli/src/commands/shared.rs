//! The flags several commands take, declared once and flattened into each command's
//! arguments with `#[command(flatten)]`: `--config`/`-c`, the two shapes of `--store`
//! (an override of the file's `store.url`, or the store of a command without a file) and
//! `--output text|json`.
//!
//! Their doc comments are the help text; a command whose `--store` means something more
//! (created if missing, say) rewords it with [`reword`], keeping the flag's name, env var
//! and type declared here only. The structs set no `about` of their own (their doc comment
//! would otherwise become the about of the command that flattens them).

use crate::build::{Deployment, OperatorDeployment, build, build_operator};
use crate::exit::Exit;
use crate::store::{Access, StoreUrl};
use crate::validate::{self, Checked};
use std::path::PathBuf;

/// `--config`/`-c`: the deployment file of every command over a deployment.
#[derive(clap::Args, Debug, Clone)]
#[command(about = None, long_about = None)]
pub struct ConfigArg {
    /// The configuration file.
    #[arg(long, short)]
    pub config: PathBuf,
}

impl ConfigArg {
    /// Every command with `--config` starts here: the one validation path of `check`, so a
    /// refused file is reported exactly as `check` reports it.
    pub fn load(&self) -> anyhow::Result<Checked> {
        self.readable()?;
        Ok(validate::validate(&self.config)?)
    }

    /// The file is there to be read: a missing or unreadable `--config` is a runtime error
    /// (exit 3, as docs/reference/exit-codes.md says), not a refused configuration.
    pub fn readable(&self) -> anyhow::Result<()> {
        let path = &self.config;
        match std::fs::metadata(path) {
            Ok(m) if m.is_file() => Ok(()),
            Ok(_) => anyhow::bail!("cannot read {}: not a file", path.display()),
            Err(e) => anyhow::bail!("cannot read {}: {e}", path.display()),
        }
    }
}

/// `--store` of a command over a deployment: optional, it overrides the file's `store.url`.
#[derive(clap::Args, Debug, Clone)]
#[command(about = None, long_about = None)]
pub struct StoreOverride {
    /// Store URL (overrides store.url; a relative sqlite:// path is relative to the current
    /// directory). The database must exist.
    #[arg(long, env = "CAPGATE_STORE")]
    pub store: Option<String>,
}

impl StoreOverride {
    /// The deployment of a command with a configuration file, over its store (`--store`
    /// when given, else `store.url`).
    pub async fn deployment(
        &self,
        checked: &Checked,
        access: Access,
    ) -> anyhow::Result<Deployment> {
        let url = store_url(self.store.as_deref(), checked.store())?;
        build(checked, url.open(access).await?, &url.display()).await
    }

    /// The operator commands' deployment of `config` over its store (`--store` when given,
    /// else `store.url`, the one secret read then): no plugin, upstream or other secret
    /// (see [`validate::StoreOnly`]). The database must exist.
    pub async fn operator(&self, config: &ConfigArg) -> anyhow::Result<OperatorDeployment> {
        let secrets = match self.store {
            Some(_) => capgate_config::Secrets::None,
            None => capgate_config::Secrets::StoreOnly,
        };
        config.readable()?;
        let store_only = validate::validate_store_only(&config.config, secrets)?;
        let url = store_url(self.store.as_deref(), &store_only.store())?;
        let store = url.open(Access::Existing).await?;
        build_operator(store_only, store, &url.display()).await
    }
}

/// `--store URL` as given: a URL that cannot be used is a usage error (exit 2), said once.
fn command_line_store(url: &str) -> anyhow::Result<StoreUrl> {
    StoreUrl::from_command_line(url).map_err(|e| Exit::usage(format!("{e:#}")))
}

/// The store of a command with a configuration file: `--store` when given (a usage error
/// if it cannot be used), else the file's `store.url`.
pub fn store_url(
    command_line: Option<&str>,
    store: &capgate_server::resolve::StoreSettings,
) -> anyhow::Result<StoreUrl> {
    match command_line {
        Some(url) => command_line_store(url),
        None => StoreUrl::for_store(None, store),
    }
}

/// `--store` of a command over a store alone (no configuration file): required.
#[derive(clap::Args, Debug, Clone)]
#[command(about = None, long_about = None)]
pub struct StoreArg {
    /// Store URL (a relative sqlite:// path is relative to the current directory); the
    /// database must exist.
    #[arg(long, env = "CAPGATE_STORE")]
    pub store: String,
}

impl StoreArg {
    /// The URL as given on the command line (a relative sqlite:// path is relative to the
    /// current directory).
    pub fn url(&self) -> anyhow::Result<StoreUrl> {
        command_line_store(&self.store)
    }

    /// The store, which must exist: operator commands never create an empty one by mistake.
    pub async fn open_existing(&self) -> anyhow::Result<capgate_store::Store> {
        let url = self.url()?;
        let store = url.open(Access::Existing).await?;
        // A Postgres database nobody migrated is said as such, as `serve` says it, rather
        // than as the first statement's missing table.
        if let Err(e) = crate::build::require_migrated(&store, &url.display()).await {
            store.close().await;
            return Err(e);
        }
        Ok(store)
    }
}

/// A flattened flag's help in one command's own words (`#[command(mut_arg("store",
/// reword("…")))]`), for the flags whose meaning differs slightly per command. The text is
/// what clap shows: one paragraph, without its final period.
pub fn reword(help: &'static str) -> impl FnOnce(clap::Arg) -> clap::Arg {
    move |arg| arg.help(help)
}

/// What `--output` asks for.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Output {
    /// For people (each command's usual output).
    #[default]
    Text,
    /// For programs: stdout carries only JSON, every message goes to stderr.
    Json,
}

/// `--output text|json` of every command a script reads the result of.
#[derive(clap::Args, Debug, Clone, Copy)]
#[command(about = None, long_about = None)]
pub struct OutputArg {
    /// `json`: stdout carries only JSON (one document, or one per line for lists:
    /// docs/reference/exit-codes.md); every message goes to stderr.
    #[arg(long, value_enum, default_value = "text")]
    pub output: Output,
}

impl OutputArg {
    /// Whether stdout is JSON only.
    pub fn json(self) -> bool {
        self.output == Output::Json
    }
}

/// A located problem (or warning) of a configuration or scenario file as `--output json`
/// prints it: `{file, line, column, key, message}`.
pub fn problem_json(p: &capgate_config::located::Problem) -> serde_json::Value {
    serde_json::json!({
        "file": p.file.display().to_string(),
        "line": p.line,
        "column": p.column,
        "key": p.key,
        "message": p.message,
    })
}

/// Print one JSON document on stdout (compact, one line).
pub fn print_json(value: &serde_json::Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}
