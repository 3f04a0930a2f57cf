//! The per-namespace storage budget's usage (`capgate_journal_usage`), shared by
//! everything that counts against it: invocation receipts, approval records and console
//! sessions. Database triggers keep the counts in the same transaction as each row's
//! insert and delete; each writer's conditional insert reads them. Here: what those
//! writers share (the bounds as the statements compare them, the Postgres row to lock,
//! and which bound refused a write).

use crate::Store;
use crate::db::{Backend, Via};
use capgate_core::error::BoxError;
use capgate_core::journal::JournalBudget;

/// Postgres: make sure the namespace has a usage row to lock (`FOR UPDATE`) before its
/// first budgeted insert; SQLite serialises writers and needs none.
const ENSURE_USAGE: &str =
    "INSERT INTO capgate_journal_usage (namespace) VALUES ($1) ON CONFLICT (namespace) DO NOTHING";

/// A namespace's usage, to say which bound refused a write.
const USAGE: &str = "SELECT row_count, byte_count FROM capgate_journal_usage WHERE namespace = $1";

/// A budget's bounds as the statements compare them: (rows, bytes).
pub(crate) fn limits(budget: JournalBudget) -> (i64, i64) {
    (
        i64::try_from(budget.max_rows).unwrap_or(i64::MAX),
        i64::try_from(budget.max_bytes).unwrap_or(i64::MAX),
    )
}

/// The bytes a JSON value counts for (its text, as the triggers measure it).
pub(crate) fn json_size(value: &serde_json::Value) -> i64 {
    serde_json::to_string(value).map_or(i64::MAX, |t| i64::try_from(t.len()).unwrap_or(i64::MAX))
}

/// Postgres: the namespace's usage row exists, so a budgeted insert can lock it.
pub(crate) async fn ensure_row(store: &Store, namespace: &str) -> Result<(), BoxError> {
    if store.backend() == Backend::Postgres {
        store
            .execute(Via::Group, ENSURE_USAGE, &[&namespace])
            .await?;
    }
    Ok(())
}

/// Which bound of `budget` the namespace is at for a write of `size` more bytes, if any
/// (`rows` or `bytes`): said to whoever was refused.
pub(crate) async fn bound_reached(
    store: &Store,
    namespace: &str,
    budget: JournalBudget,
    size: i64,
) -> Result<Option<&'static str>, BoxError> {
    let (max_rows, max_bytes) = limits(budget);
    if size > max_bytes {
        return Ok(Some("bytes"));
    }
    let usage = store
        .fetch_optional(Via::Readers, USAGE, &[&namespace], |row| {
            Ok::<_, String>((row.int("row_count")?, row.int("byte_count")?))
        })
        .await?;
    let Some(Ok((rows, bytes))) = usage else {
        return Ok(None);
    };
    Ok(if rows >= max_rows {
        Some("rows")
    } else if bytes.saturating_add(size) > max_bytes {
        Some("bytes")
    } else {
        None
    })
}
