//! Group commit for the SQLite writer.
//!
//! SQLite has one writer. With every statement in its own transaction, a governed invoke's
//! writes (journal claim, settle, approval decisions) queue for the writer connection one by
//! one, and each pays for a pool hand-off, a commit and the WAL frames of the pages it
//! touched. Here concurrent writers hand their statement to one task, which runs whatever is
//! waiting (up to [`MAX_BATCH`]) in one `BEGIN IMMEDIATE … COMMIT`, in arrival order, and
//! answers each caller only after the commit: a caller never sees a result that is not
//! durable, and the statements of one batch see each other exactly as they would run one
//! after the other, so compare-and-set statements keep their meaning.
//!
//! If any statement of a batch fails, the batch is rolled back (nothing of it is visible) and
//! its statements are run again one by one in their own transactions, so every caller gets
//! its own result and its own error. Without a Tokio runtime at open, or once the task has
//! stopped, statements run directly on the writer pool as before.

use sqlx::sqlite::{SqliteArguments, SqliteConnection, SqlitePool, SqliteRow};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{mpsc, oneshot};

/// Statements committed together at most.
pub(crate) const MAX_BATCH: usize = 64;
/// Statements waiting for the writer task before callers wait to enqueue.
const QUEUE: usize = 1024;

/// What a statement's caller wants back.
#[derive(Clone, Copy)]
enum Want {
    Row,
    Affected,
}

enum Done {
    Row(Option<SqliteRow>),
    Affected(u64),
}

struct Job {
    sql: &'static str,
    args: SqliteArguments,
    want: Want,
    reply: oneshot::Sender<Result<Done, sqlx::Error>>,
}

/// The handle the store's write paths go through. Cheap to clone.
#[derive(Clone)]
pub(crate) struct GroupWriter {
    tx: Option<mpsc::Sender<Job>>,
    pool: SqlitePool,
    /// Set when the database refused a write for lack of storage (disk full, I/O error,
    /// read-only file), cleared by the next commit that writes: what readiness asks.
    refusing: Arc<AtomicBool>,
}

impl GroupWriter {
    /// A group writer over the (single-connection) writer pool; its task runs on the current
    /// Tokio runtime and ends when every handle is dropped.
    pub(crate) fn new(pool: SqlitePool) -> Self {
        let refusing = Arc::new(AtomicBool::new(false));
        let tx = tokio::runtime::Handle::try_current().ok().map(|handle| {
            let (tx, rx) = mpsc::channel(QUEUE);
            handle.spawn(run(pool.clone(), rx, refusing.clone()));
            tx
        });
        GroupWriter { tx, pool, refusing }
    }

    /// Whether the last write was refused for lack of storage (see [`storage_error`]).
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
        args: SqliteArguments,
    ) -> Result<Option<SqliteRow>, sqlx::Error> {
        match self.submit(sql, args, Want::Row).await? {
            Done::Row(row) => Ok(row),
            Done::Affected(_) => Ok(None),
        }
    }

    /// Run a statement; how many rows it changed.
    pub(crate) async fn execute(
        &self,
        sql: &'static str,
        args: SqliteArguments,
    ) -> Result<u64, sqlx::Error> {
        match self.submit(sql, args, Want::Affected).await? {
            Done::Affected(n) => Ok(n),
            Done::Row(_) => Ok(0),
        }
    }

    async fn submit(
        &self,
        sql: &'static str,
        args: SqliteArguments,
        want: Want,
    ) -> Result<Done, sqlx::Error> {
        let Some(tx) = &self.tx else {
            return direct(&self.pool, sql, args, want).await;
        };
        let (reply, answer) = oneshot::channel();
        match tx
            .send(Job {
                sql,
                args,
                want,
                reply,
            })
            .await
        {
            Ok(()) => answer
                .await
                .unwrap_or_else(|_| Err(sqlx::Error::WorkerCrashed)),
            // The task is gone (its runtime shut down): write directly.
            Err(mpsc::error::SendError(job)) => {
                direct(&self.pool, job.sql, job.args, job.want).await
            }
        }
    }
}

async fn direct(
    pool: &SqlitePool,
    sql: &'static str,
    args: SqliteArguments,
    want: Want,
) -> Result<Done, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    one(&mut conn, sql, args, want).await
}

async fn one(
    conn: &mut SqliteConnection,
    sql: &'static str,
    args: SqliteArguments,
    want: Want,
) -> Result<Done, sqlx::Error> {
    let query = sqlx::query_with(sql, args);
    match want {
        // Stepped to the end, not just to its first row: outside a transaction the
        // statement's own commit happens at its last step, and a commit that fails (disk
        // full) must fail the caller, not hand back a row that was rolled back.
        Want::Row => query
            .fetch_all(&mut *conn)
            .await
            .map(|rows| Done::Row(rows.into_iter().next())),
        Want::Affected => query
            .execute(&mut *conn)
            .await
            .map(|r| Done::Affected(r.rows_affected())),
    }
}

/// Whether `e` says the database cannot store what it is given (rather than that one
/// statement is wrong): SQLITE_FULL, an I/O error, a read-only or unopenable file.
pub(crate) fn storage_error(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(d) => d
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            // Primary result codes (the low byte): READONLY 8, IOERR 10, FULL 13, CANTOPEN 14.
            .is_some_and(|c| matches!(c & 0xff, 8 | 10 | 13 | 14)),
        _ => false,
    }
}

async fn run(pool: SqlitePool, mut rx: mpsc::Receiver<Job>, refusing: Arc<AtomicBool>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        commit(&pool, std::mem::take(&mut batch), &refusing).await;
    }
}

/// Note one outcome of a write in `refusing`: a storage error sets it, a commit that
/// stored something clears it (a statement that changed nothing proves nothing).
fn note(refusing: &AtomicBool, result: &Result<bool, &sqlx::Error>) {
    match result {
        Ok(true) => refusing.store(false, Ordering::Relaxed),
        Err(e) if storage_error(e) => refusing.store(true, Ordering::Relaxed),
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

async fn commit(pool: &SqlitePool, jobs: Vec<Job>, refusing: &AtomicBool) {
    let mut conn = match pool.acquire().await {
        Ok(conn) => conn,
        Err(e) => {
            let message = e.to_string();
            for job in jobs {
                let _ = job.reply.send(Err(sqlx::Error::Protocol(message.clone())));
            }
            return;
        }
    };
    if jobs.len() > 1 {
        let mut results = Vec::with_capacity(jobs.len());
        let mut ok = sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *conn)
            .await
            .is_ok();
        if ok {
            for job in &jobs {
                match one(&mut conn, job.sql, job.args.clone(), job.want).await {
                    Ok(done) => results.push(done),
                    Err(_) => {
                        ok = false;
                        break;
                    }
                }
            }
        }
        if ok {
            let committed = sqlx::query("COMMIT").execute(&mut *conn).await;
            note(refusing, &committed.as_ref().map(|_| true));
            ok = committed.is_ok();
        }
        if ok {
            for (job, done) in jobs.into_iter().zip(results) {
                let _ = job.reply.send(Ok(done));
            }
            return;
        }
        // Nothing of the batch is kept; each statement runs again on its own below.
        let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
    }
    for job in jobs {
        let result = one(&mut conn, job.sql, job.args, job.want).await;
        note(refusing, &result.as_ref().map(wrote));
        let _ = job.reply.send(result);
    }
}
