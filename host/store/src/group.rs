//! Group commit for the SQLite writer, on a thread that owns the writer connection.
//!
//! SQLite has one writer. With every statement in its own transaction, a governed invoke's
//! writes (journal claim, settle, approval decisions, audit rows) would queue for the
//! writer one by one, each paying for a commit and the WAL frames of the pages it touched.
//! Here concurrent writers hand their statement to one thread, which runs whatever is
//! waiting (up to [`MAX_BATCH`]) in one `BEGIN IMMEDIATE … COMMIT`, in arrival order, and
//! answers each caller only after the commit: a caller never sees a result that is not
//! durable, and the statements of one batch see each other exactly as they would run one
//! after the other, so compare-and-set statements keep their meaning.
//!
//! The thread owns its own connection ([`rusqlite`], on the same SQLite library sqlx
//! links) and runs a whole batch per wake: one hand-off in, one answer out per caller.
//! Through sqlx's driver every statement of a batch (and `BEGIN` and `COMMIT`) was a
//! message to the connection's worker thread and a wake back, about twenty context
//! switches per governed invoke (docs/contributing/benchmarks.md "Gateway under load").
//!
//! If any statement of a batch fails, the batch is rolled back (nothing of it is visible) and
//! its statements are run again one by one in their own transactions, so every caller gets
//! its own result and its own error.
//!
//! Checkpoints are off the commit path: the writer connection never checkpoints inside a
//! commit (`wal_autocheckpoint = 0`). The writer thread checkpoints (`PASSIVE`) after it
//! has answered a batch's callers, once the WAL holds [`CHECKPOINT_FRAMES`] pages and no
//! statement is waiting, or at once when the WAL has reached [`WAL_LIMIT_FRAMES`], so it
//! stays bounded under continuous writes. As the one writer runs it, the checkpoint copies
//! the whole WAL and the next commit starts the WAL over, reusing the file's pages; the
//! file is truncated back to [`JOURNAL_SIZE_LIMIT`] bytes when it restarts.
//!
//! An in-memory database lives in sqlx's one connection, so there the statements run
//! directly on that connection, one by one, in arrival order.

use crate::columns::{ColumnError, Columns, err};
use capgate_core::error::BoxError;
use rusqlite::types::Value as SqliteValue;
use sqlx::sqlite::{SqlitePool, SqliteRow};
use std::cell::Cell;
use std::ffi::c_int;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Statements committed together at most.
pub(crate) const MAX_BATCH: usize = 64;
/// Statements waiting for the writer before callers wait to enqueue.
const QUEUE: usize = 1024;
/// Prepared statements the writer connection keeps (the store has a few dozen).
const STATEMENT_CACHE: usize = 128;
/// WAL frames (pages) from which the writer checkpoints when no statement is waiting:
/// SQLite's own automatic checkpoint threshold (4 MiB of 4 KiB pages).
pub(crate) const CHECKPOINT_FRAMES: i32 = 1_000;
/// WAL frames from which the writer checkpoints even with statements waiting (16 MiB).
pub(crate) const WAL_LIMIT_FRAMES: i32 = 4_096;
/// What the WAL file is truncated to when it restarts (`journal_size_limit`): above what
/// [`WAL_LIMIT_FRAMES`] lets it reach, so in steady state the file keeps its pages and a
/// commit overwrites them rather than growing the file again.
pub(crate) const JOURNAL_SIZE_LIMIT: i64 = 32 * 1024 * 1024;

/// Why a statement sent to the group writer failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GroupError {
    /// SQLite refused it on the writer thread's connection.
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    /// sqlx refused it (in-memory databases, and opening).
    #[error(transparent)]
    Sqlx(#[from] sqlx::Error),
    /// A parameter could not be encoded.
    #[error(transparent)]
    Encode(BoxError),
    /// The writer thread could not be started.
    #[error("cannot start the SQLite writer thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// The store was closed (or its writer thread is gone).
    #[error("the store is closed")]
    Stopped,
}

impl GroupError {
    /// SQLite's extended result code, where there is one.
    fn code(&self) -> Option<i32> {
        match self {
            GroupError::Sqlite(rusqlite::Error::SqliteFailure(e, _)) => Some(e.extended_code),
            GroupError::Sqlx(sqlx::Error::Database(d)) => d.code().and_then(|c| c.parse().ok()),
            _ => None,
        }
    }

    /// Whether the statement broke a UNIQUE or PRIMARY KEY constraint.
    pub(crate) fn is_unique_violation(&self) -> bool {
        // SQLITE_CONSTRAINT_PRIMARYKEY 1555, SQLITE_CONSTRAINT_UNIQUE 2067.
        matches!(self.code(), Some(1555 | 2067))
    }

    /// Whether this says the database cannot store what it is given (rather than that one
    /// statement is wrong): SQLITE_FULL, an I/O error, a read-only or unopenable file.
    fn is_storage(&self) -> bool {
        match self {
            GroupError::Sqlx(sqlx::Error::Io(_)) => true,
            // Primary result codes (the low byte): READONLY 8, IOERR 10, FULL 13, CANTOPEN 14.
            _ => self
                .code()
                .is_some_and(|c| matches!(c & 0xff, 8 | 10 | 13 | 14)),
        }
    }
}

/// What a statement's caller wants back.
#[derive(Clone, Copy)]
enum Want {
    Row,
    Affected,
}

/// A row the writer handed back (`… RETURNING`), as the store's types read it.
pub(crate) enum GroupRow {
    /// From the writer thread: each column's name and value.
    Owned(Vec<(String, SqliteValue)>),
    /// From sqlx's connection (in-memory databases).
    Sqlx(SqliteRow),
}

enum Done {
    Row(Option<GroupRow>),
    Affected(u64),
}

/// What the writer thread is handed.
enum Msg {
    /// A statement to run.
    Run(Job),
    /// Commit what came before, checkpoint, close the connection and stop.
    Close(oneshot::Sender<()>),
}

struct Job {
    sql: &'static str,
    params: Vec<SqliteValue>,
    want: Want,
    reply: oneshot::Sender<Result<Done, GroupError>>,
}

/// Where the statements go.
#[derive(Clone)]
enum Route {
    /// To the writer thread.
    Thread(mpsc::Sender<Msg>),
    /// Straight to sqlx's one connection of an in-memory database.
    Direct(SqlitePool),
}

/// The handle the store's write paths go through. Cheap to clone; the writer thread ends
/// when every handle is dropped.
#[derive(Clone)]
pub(crate) struct GroupWriter {
    route: Route,
    /// Set when the database refused a write for lack of storage (disk full, I/O error,
    /// read-only file), cleared by the next commit that writes: what readiness asks.
    refusing: Arc<AtomicBool>,
}

/// How the store's own connections (the writer's, the inline readers') are opened.
pub(crate) struct ConnectOptions<'a> {
    /// The database file.
    pub(crate) path: &'a Path,
    /// How long SQLite waits on a lock held by another connection.
    pub(crate) busy_timeout: Duration,
}

impl GroupWriter {
    /// A group writer over its own connection to the (already created, WAL) database file,
    /// on a thread of its own.
    pub(crate) fn open(options: &ConnectOptions<'_>) -> Result<Self, GroupError> {
        let conn = open_connection(options, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)?;
        // The writer never checkpoints inside a commit; its thread does after answering.
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        conn.pragma_update(None, "journal_size_limit", JOURNAL_SIZE_LIMIT)?;
        conn.wal_hook(Some(note_wal_frames));
        let refusing = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel(QUEUE);
        let thread_refusing = refusing.clone();
        std::thread::Builder::new()
            .name("capgate-sqlite-writer".into())
            .spawn(move || run(conn, rx, &thread_refusing))
            .map_err(GroupError::Spawn)?;
        Ok(GroupWriter {
            route: Route::Thread(tx),
            refusing,
        })
    }

    /// A group writer that runs each statement directly on `pool` (an in-memory
    /// database's one connection).
    pub(crate) fn direct(pool: SqlitePool) -> Self {
        GroupWriter {
            route: Route::Direct(pool),
            refusing: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether the last write was refused for lack of storage.
    pub(crate) fn is_refusing(&self) -> bool {
        self.refusing.load(Ordering::Relaxed)
    }

    /// Forget a refusal (a probe found nothing to rewrite, so there is nothing to prove).
    pub(crate) fn clear_refusal(&self) {
        self.refusing.store(false, Ordering::Relaxed);
    }

    /// Run a statement that returns at most one row (`… RETURNING`).
    pub(crate) async fn fetch_optional(
        &self,
        sql: &'static str,
        params: Vec<SqliteValue>,
    ) -> Result<Option<GroupRow>, GroupError> {
        match self.submit(sql, params, Want::Row).await? {
            Done::Row(row) => Ok(row),
            Done::Affected(_) => Ok(None),
        }
    }

    /// Run a statement; how many rows it changed.
    pub(crate) async fn execute(
        &self,
        sql: &'static str,
        params: Vec<SqliteValue>,
    ) -> Result<u64, GroupError> {
        match self.submit(sql, params, Want::Affected).await? {
            Done::Affected(n) => Ok(n),
            Done::Row(_) => Ok(0),
        }
    }

    async fn submit(
        &self,
        sql: &'static str,
        params: Vec<SqliteValue>,
        want: Want,
    ) -> Result<Done, GroupError> {
        let tx = match &self.route {
            Route::Thread(tx) => tx,
            Route::Direct(pool) => {
                let result = direct(pool, sql, params, want).await;
                note(&self.refusing, &result.as_ref().map(wrote));
                return result;
            }
        };
        let (reply, answer) = oneshot::channel();
        let job = Job {
            sql,
            params,
            want,
            reply,
        };
        if tx.send(Msg::Run(job)).await.is_err() {
            return Err(GroupError::Stopped);
        }
        answer.await.unwrap_or(Err(GroupError::Stopped))
    }

    /// Stop the writer: what was handed to it before is committed, the WAL checkpointed and
    /// the connection closed; later statements fail with [`GroupError::Stopped`].
    pub(crate) async fn close(&self) {
        if let Route::Thread(tx) = &self.route {
            let (reply, closed) = oneshot::channel();
            if tx.send(Msg::Close(reply)).await.is_ok() {
                let _ = closed.await;
            }
        }
    }
}

/// A connection of our own to the store's file, set up as sqlx sets up the store's.
pub(crate) fn open_connection(
    options: &ConnectOptions<'_>,
    mode: rusqlite::OpenFlags,
) -> Result<rusqlite::Connection, GroupError> {
    use rusqlite::OpenFlags;
    let conn = rusqlite::Connection::open_with_flags(
        options.path,
        mode | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
    )?;
    conn.busy_timeout(options.busy_timeout)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// One statement on sqlx's connection of an in-memory database.
async fn direct(
    pool: &SqlitePool,
    sql: &'static str,
    params: Vec<SqliteValue>,
    want: Want,
) -> Result<Done, GroupError> {
    let mut args = sqlx::sqlite::SqliteArguments::default();
    for value in params {
        crate::params::add_sqlite_value(&mut args, value).map_err(GroupError::Encode)?;
    }
    let query = sqlx::query_with(sql, args);
    Ok(match want {
        // Stepped to the end, not just to its first row: the statement's own commit
        // happens at its last step, and a commit that fails (disk full) must fail the
        // caller, not hand back a row that was rolled back.
        Want::Row => Done::Row(
            query
                .fetch_all(pool)
                .await?
                .into_iter()
                .next()
                .map(GroupRow::Sqlx),
        ),
        Want::Affected => Done::Affected(query.execute(pool).await?.rows_affected()),
    })
}

/// The writer thread: a batch per wake, until every handle is dropped; a checkpoint
/// between batches when the WAL asks for one.
fn run(conn: rusqlite::Connection, mut rx: mpsc::Receiver<Msg>, refusing: &AtomicBool) {
    let mut closing = None;
    while let Some(first) = rx.blocking_recv() {
        let mut jobs = Vec::with_capacity(MAX_BATCH);
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Msg::Run(job) => jobs.push(job),
                Msg::Close(reply) => {
                    closing = Some(reply);
                    break;
                }
            }
            if jobs.len() < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !jobs.is_empty() {
            commit(&conn, jobs, refusing);
        }
        if closing.is_some() {
            break;
        }
        let frames = WAL_FRAMES.get();
        if frames >= WAL_LIMIT_FRAMES || (frames >= CHECKPOINT_FRAMES && rx.is_empty()) {
            checkpoint(&conn);
        }
    }
    // Closed, or every handle is gone: leave the WAL checkpointed, refuse what comes next.
    rx.close();
    checkpoint(&conn);
    drop(conn);
    if let Some(reply) = closing {
        let _ = reply.send(());
    }
    // Statements that were queued behind the close.
    while let Ok(msg) = rx.try_recv() {
        match msg {
            Msg::Run(job) => {
                let _ = job.reply.send(Err(GroupError::Stopped));
            }
            Msg::Close(reply) => {
                let _ = reply.send(());
            }
        }
    }
}

thread_local! {
    /// The pages in the WAL after the writer thread's last commit (its WAL hook).
    static WAL_FRAMES: Cell<i32> = const { Cell::new(0) };
}

/// The writer connection's WAL hook: runs on the writer thread after each commit.
fn note_wal_frames(_: &rusqlite::hooks::Wal, frames: c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.set(frames);
    Ok(())
}

/// Copy the WAL into the database. Run by the one writer, between its batches, so it
/// copies every page and the next commit starts the WAL over.
fn checkpoint(conn: &rusqlite::Connection) {
    match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
    }) {
        Ok((log, copied)) => {
            if copied >= log {
                WAL_FRAMES.set(0);
            }
        }
        Err(e) => {
            tracing::warn!(target: "capgate::store", error = %e, "SQLite checkpoint failed");
        }
    }
}

/// Note one outcome of a write in `refusing`: a storage error sets it, a commit that
/// stored something clears it (a statement that changed nothing proves nothing).
fn note(refusing: &AtomicBool, result: &Result<bool, &GroupError>) {
    match result {
        Ok(true) => refusing.store(false, Ordering::Relaxed),
        Err(e) if e.is_storage() => refusing.store(true, Ordering::Relaxed),
        Ok(false) | Err(_) => {}
    }
}

/// Whether a statement's result shows it stored something.
fn wrote(done: &Done) -> bool {
    match done {
        Done::Row(row) => row.is_some(),
        Done::Affected(n) => *n > 0,
    }
}

fn commit(conn: &rusqlite::Connection, jobs: Vec<Job>, refusing: &AtomicBool) {
    if jobs.len() > 1 {
        let mut results = Vec::with_capacity(jobs.len());
        let mut ok = conn.execute_batch("BEGIN IMMEDIATE").is_ok();
        if ok {
            for job in &jobs {
                match one(conn, job.sql, &job.params, job.want) {
                    Ok(done) => results.push(done),
                    Err(_) => {
                        ok = false;
                        break;
                    }
                }
            }
        }
        if ok {
            let committed = conn.execute_batch("COMMIT").map_err(GroupError::from);
            note(refusing, &committed.as_ref().map(|()| true));
            ok = committed.is_ok();
        }
        if ok {
            for (job, done) in jobs.into_iter().zip(results) {
                let _ = job.reply.send(Ok(done));
            }
            return;
        }
        // Nothing of the batch is kept; each statement runs again on its own below.
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
    }
    for job in jobs {
        let result = one(conn, job.sql, &job.params, job.want);
        note(refusing, &result.as_ref().map(wrote));
        let _ = job.reply.send(result);
    }
}

/// Run one statement on the writer connection.
fn one(
    conn: &rusqlite::Connection,
    sql: &str,
    params: &[SqliteValue],
    want: Want,
) -> Result<Done, GroupError> {
    let mut stmt = prepare_bound(conn, sql, params)?;
    match want {
        Want::Affected => Ok(Done::Affected(stmt.raw_execute()? as u64)),
        // Stepped to the end (see `direct`).
        Want::Row => Ok(Done::Row(first_row(&mut stmt)?)),
    }
}

/// `sql` prepared (from the connection's cache) with `params` bound as sqlx binds them:
/// `$N` and `?N` by their number, a bare `?` in order; an unbound parameter is NULL.
pub(crate) fn prepare_bound<'c>(
    conn: &'c rusqlite::Connection,
    sql: &str,
    params: &[SqliteValue],
) -> Result<rusqlite::CachedStatement<'c>, GroupError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut next = 0;
    for i in 1..=stmt.parameter_count() {
        let n = match stmt.parameter_name(i) {
            Some(name) => name[1..].parse::<usize>().map_err(|_| {
                GroupError::Encode(format!("parameter {name}: not numbered").into())
            })?,
            None => {
                next += 1;
                next
            }
        };
        if let Some(value) = n.checked_sub(1).and_then(|k| params.get(k)) {
            stmt.raw_bind_parameter(i, value)?;
        }
    }
    Ok(stmt)
}

/// The first row of a bound statement, stepped to its end.
pub(crate) fn first_row(
    stmt: &mut rusqlite::CachedStatement<'_>,
) -> Result<Option<GroupRow>, GroupError> {
    let names: Vec<String> = stmt.column_names().into_iter().map(String::from).collect();
    let mut rows = stmt.raw_query();
    let mut first = None;
    while let Some(row) = rows.next()? {
        if first.is_none() {
            let mut values = Vec::with_capacity(names.len());
            for (k, name) in names.iter().enumerate() {
                values.push((name.clone(), row.get::<_, SqliteValue>(k)?));
            }
            first = Some(GroupRow::Owned(values));
        }
    }
    Ok(first)
}

impl GroupRow {
    fn value(&self, col: &str) -> Result<&SqliteValue, ColumnError> {
        match self {
            GroupRow::Owned(values) => values
                .iter()
                .find(|(name, _)| name == col)
                .map(|(_, v)| v)
                .ok_or_else(|| err(col, "no such column")),
            GroupRow::Sqlx(_) => Err(err(col, "not an owned row")),
        }
    }
}

impl Columns for GroupRow {
    fn text(&self, col: &str) -> Result<String, ColumnError> {
        self.opt_text(col)?
            .ok_or_else(|| err(col, "unexpected NULL"))
    }
    fn opt_text(&self, col: &str) -> Result<Option<String>, ColumnError> {
        if let GroupRow::Sqlx(row) = self {
            return row.opt_text(col);
        }
        match self.value(col)? {
            SqliteValue::Null => Ok(None),
            SqliteValue::Text(s) => Ok(Some(s.clone())),
            other => Err(err(
                col,
                format!("expected TEXT, found {:?}", other.data_type()),
            )),
        }
    }
    fn int(&self, col: &str) -> Result<i64, ColumnError> {
        self.opt_int(col)?
            .ok_or_else(|| err(col, "unexpected NULL"))
    }
    fn opt_int(&self, col: &str) -> Result<Option<i64>, ColumnError> {
        if let GroupRow::Sqlx(row) = self {
            return row.opt_int(col);
        }
        match self.value(col)? {
            SqliteValue::Null => Ok(None),
            SqliteValue::Integer(i) => Ok(Some(*i)),
            other => Err(err(
                col,
                format!("expected INTEGER, found {:?}", other.data_type()),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(conn: &rusqlite::Connection, sql: &str, params: &[SqliteValue]) -> GroupRow {
        let mut stmt = prepare_bound(conn, sql, params).expect("bound");
        first_row(&mut stmt).expect("stepped").expect("a row")
    }

    /// Parameters bind as sqlx binds them: `$N` by its number wherever it appears (the
    /// store's statements use `$6` before `$3`, and `$1` twice), a bare `?` in order, and
    /// one past the values given is NULL.
    #[test]
    fn parameters_bind_by_number_as_sqlx_binds_them() {
        let conn = rusqlite::Connection::open_in_memory().expect("open");
        let values = [SqliteValue::Integer(1), SqliteValue::Text("two".into())];
        let r = row(&conn, "SELECT $2 AS a, $1 AS b, $1 AS c, $3 AS d", &values);
        assert_eq!(r.text("a").as_deref(), Ok("two"));
        assert_eq!(r.int("b"), Ok(1));
        assert_eq!(r.int("c"), Ok(1));
        assert_eq!(r.opt_int("d"), Ok(None));
        let r = row(&conn, "SELECT ? AS a, ? AS b", &values);
        assert_eq!(r.int("a"), Ok(1));
        assert_eq!(r.text("b").as_deref(), Ok("two"));
    }

    /// A row's columns read as the store's types, and a column of the wrong type, a NULL
    /// where a value is required or a missing column is an error naming the column.
    #[test]
    fn owned_rows_read_typed_and_name_the_column_in_errors() {
        let conn = rusqlite::Connection::open_in_memory().expect("open");
        let r = row(
            &conn,
            "SELECT '{\"k\":1}' AS j, 1 AS f, 2 AS n, NULL AS z, 1700000000000000 AS t",
            &[],
        );
        assert_eq!(r.json("j"), Ok(serde_json::json!({"k": 1})));
        assert_eq!(r.flag("f"), Ok(true));
        assert!(r.flag("n").is_err_and(|e| e.starts_with("n: ")));
        assert!(r.text("z").is_err_and(|e| e.starts_with("z: ")));
        assert_eq!(r.opt_text("z"), Ok(None));
        assert!(r.text("n").is_err_and(|e| e.starts_with("n: ")));
        assert!(r.int("missing").is_err_and(|e| e.starts_with("missing: ")));
        assert_eq!(r.ts("t").map(|t| t.timestamp()), Ok(1_700_000_000));
    }
}
