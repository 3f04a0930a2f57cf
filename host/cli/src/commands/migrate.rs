//! `capgate migrate`: apply the store's migrations.

use super::shared::{StoreArg, reword};
use crate::runtime;
use crate::store::Access;
use anyhow::Context;
use std::process::ExitCode;

/// Apply the store's migrations (SQLite is also migrated automatically at start).
///
/// Example: capgate migrate --store postgres://postgres:postgres@127.0.0.1:5432/capgate
#[derive(clap::Args, Debug)]
#[command(mut_arg(
    "store",
    reword(
        "Store URL (`sqlite://FILE`, created if missing and relative to the current directory, \
         or `postgres://…`)"
    )
))]
pub struct MigrateArgs {
    #[command(flatten)]
    store: StoreArg,
}

/// `capgate migrate`: 0 with every applied migration listed (or the store up to date).
pub fn run(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(migrate(&args.store))
}

async fn migrate(store: &StoreArg) -> anyhow::Result<ExitCode> {
    let url = store.url()?;
    url.require(Access::Create)?;
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
