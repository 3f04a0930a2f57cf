//! The batched INSERT of audit rows: statements of many rows, built once per size on
//! SQLite, chunked under each backend's parameter limit, committed in order.

use super::AuditRow;
use crate::db::{Db, Store};
use crate::params::{Param, arguments, sqlite_values};
use capgate_core::error::BoxError;
use sqlx::{AssertSqlSafe, Postgres};
use std::sync::OnceLock;

/// Most rows in one Postgres INSERT (14 parameters each, under Postgres' 65 535).
const POSTGRES_ROWS_PER_INSERT: usize = 1000;

const INSERT_HEAD: &str = "INSERT INTO capgate_audit_events (type, at, surface, actor_id, actor_kind, \
     execution_id, capability_id, correlation_id, input_hash, data, chain, seq, prev_hash, hash) ";

/// Values per row in [`INSERT_HEAD`].
const PER_ROW: usize = 14;

/// Most rows in one SQLite INSERT (14 parameters each, well under SQLite's 32 766).
const SQLITE_ROWS_PER_INSERT: usize = 64;

/// The INSERT of `n` rows, each row's placeholders as `placeholders(first index)` writes them.
fn insert_sql(n: usize, placeholders: impl Fn(usize) -> String) -> String {
    let rows: Vec<String> = (0..n).map(|i| placeholders(i * PER_ROW + 1)).collect();
    format!("{INSERT_HEAD}VALUES {}", rows.join(", "))
}

/// The Postgres INSERT of `n` rows (`$1` to `$14n`).
fn postgres_insert_sql(n: usize) -> String {
    insert_sql(n, |first| {
        let marks: Vec<String> = (first..first + PER_ROW).map(|k| format!("${k}")).collect();
        format!("({})", marks.join(", "))
    })
}

/// The SQLite INSERT of `n` rows (1..=[`SQLITE_ROWS_PER_INSERT`]), built once per size so
/// each is one prepared statement in the writer connection's cache.
fn sqlite_insert_sql(n: usize) -> &'static str {
    static SQL: OnceLock<Vec<String>> = OnceLock::new();
    let all = SQL.get_or_init(|| {
        (1..=SQLITE_ROWS_PER_INSERT)
            .map(|n| insert_sql(n, |_| format!("({})", ["?"; PER_ROW].join(", "))))
            .collect()
    });
    all[n.clamp(1, SQLITE_ROWS_PER_INSERT) - 1].as_str()
}

impl AuditRow {
    /// The row's values, in the column order of [`INSERT_HEAD`]. (`chain` is a `&String`
    /// because a `String` is the `Param`; a `&str` parameter would be a local to borrow.)
    #[allow(clippy::ptr_arg)]
    fn params<'a>(&'a self, chain: &'a String) -> [&'a dyn Param; PER_ROW] {
        [
            &self.ty,
            &self.at,
            &self.surface,
            &self.actor_id,
            &self.actor_kind,
            &self.execution_id,
            &self.capability_id,
            &self.correlation_id,
            &self.input_hash,
            &self.data,
            chain,
            &self.seq,
            &self.prev_hash,
            &self.hash,
        ]
    }
}

/// Insert `rows` in order, one statement per chunk, stopping at the first failure: how
/// many rows were committed, and the error if not all were.
pub(super) async fn insert(
    store: &Store,
    chain: &String,
    rows: &[AuditRow],
) -> (usize, Result<(), String>) {
    let per_insert = match &*store.db {
        Db::Sqlite { .. } => SQLITE_ROWS_PER_INSERT,
        Db::Postgres(_) => POSTGRES_ROWS_PER_INSERT,
    };
    let mut committed = 0;
    for chunk in rows.chunks(per_insert) {
        if let Err(e) = insert_chunk(store, chain, chunk).await {
            return (committed, Err(e.to_string()));
        }
        committed += chunk.len();
    }
    (committed, Ok(()))
}

/// Insert one chunk of rows as one statement.
async fn insert_chunk(store: &Store, chain: &String, chunk: &[AuditRow]) -> Result<(), BoxError> {
    let params: Vec<&dyn Param> = chunk.iter().flat_map(|r| r.params(chain)).collect();
    match &*store.db {
        // Through the store's group writer: the batch commits in the same transaction as
        // whatever journal and approval statements are waiting (one commit, one set of WAL
        // pages, no second task contending for the one writer connection), and is
        // acknowledged only after that commit. Chunks of at most `SQLITE_ROWS_PER_INSERT`
        // rows, each one statement, in order.
        Db::Sqlite { group, .. } => {
            group
                .execute(sqlite_insert_sql(chunk.len()), sqlite_values(&params)?)
                .await?;
        }
        Db::Postgres(pool) => {
            let args = arguments::<Postgres>(&params)?;
            sqlx::query_with(AssertSqlSafe(postgres_insert_sql(chunk.len())), args)
                .execute(pool)
                .await?;
        }
    }
    Ok(())
}
