//! Opening a [`Store`] from a URL: SQLite (its writer, group writer, readers and inline
//! readers; an in-memory database on one connection) or a Postgres pool, with the options
//! that tune them.

use super::{Backend, Db, Store, StoreError};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Knobs for [`Store::open_with`]; the defaults suit a single process on SQLite and a
/// modest replica on Postgres.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Apply pending migrations at open. `None` (the default): yes for SQLite, no for
    /// Postgres, where `capgate migrate` is an explicit deployment step.
    pub auto_migrate: Option<bool>,
    /// Open without write access (e.g. `capgate audit tail` on a live database). Every
    /// write then fails, and nothing is migrated.
    pub read_only: bool,
    /// Postgres pool size; on SQLite, the number of reader connections (there is always
    /// exactly one writer). Default 16 / 4.
    pub max_connections: Option<u32>,
    /// How long SQLite waits on a lock held by another process. Default 5 s.
    pub busy_timeout: Duration,
    /// How long a statement waits for a pooled connection. Default 10 s.
    pub acquire_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            auto_migrate: None,
            read_only: false,
            max_connections: None,
            busy_timeout: Duration::from_secs(5),
            acquire_timeout: Duration::from_secs(10),
        }
    }
}

fn is_sqlite_url(url: &str) -> bool {
    url.starts_with("sqlite:")
}

pub(super) fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

fn is_sqlite_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

impl Store {
    /// Open `sqlite://path` (created if missing, WAL, migrated) or `postgres://…` (not
    /// migrated: call [`Store::migrate`] or run `capgate migrate`).
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        Store::open_with(url, StoreOptions::default()).await
    }

    /// [`Store::open`] with explicit options.
    pub async fn open_with(url: &str, options: StoreOptions) -> Result<Store, StoreError> {
        let store = if is_sqlite_url(url) {
            open_sqlite(url, &options).await?
        } else if is_postgres_url(url) {
            open_postgres(url, &options).await?
        } else {
            return Err(StoreError::Url(
                "expected sqlite://path, sqlite::memory: or postgres://…".into(),
            ));
        };
        let migrate = options
            .auto_migrate
            .unwrap_or(store.backend() == Backend::Sqlite)
            && !options.read_only;
        if migrate {
            store.migrate().await?;
        }
        Ok(store)
    }
}

/// Create the database file readable and writable by its owner only (`0600`), when it does
/// not exist yet: it holds inputs, approvals and the audit trail. SQLite gives the WAL and
/// shared-memory files it makes beside it the database file's permissions. An existing
/// file is left as its operator set it.
fn create_private(path: &std::path::Path) -> Result<(), StoreError> {
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    match open.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        // A directory that does not exist is refused by SQLite itself, with its own error.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StoreError::Connect(sqlx::Error::Io(e))),
    }
}

/// Every SQLite pool here skips sqlx's ping before handing out a connection
/// (`test_before_acquire(false)`): the database is in-process, so there is no peer that can
/// have hung up, and the ping is one more round trip to the connection's worker thread (two
/// context switches) before every batch the group writer commits and every read. A
/// connection whose worker thread died fails its next statement instead.
async fn open_sqlite(url: &str, options: &StoreOptions) -> Result<Store, StoreError> {
    let base = SqliteConnectOptions::from_str(url)
        .map_err(|e| StoreError::Url(e.into()))?
        .busy_timeout(options.busy_timeout);
    if is_sqlite_memory(url) {
        // One connection that never closes: an in-memory database lives exactly as long
        // as its connection, and a second pool would see a different database.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .test_before_acquire(false)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(base)
            .await
            .map_err(StoreError::Connect)?;
        return Ok(Store {
            db: Arc::new(Db::Sqlite {
                writer: pool.clone(),
                group: crate::group::GroupWriter::direct(pool.clone()),
                readers: pool,
                inline: None,
            }),
        });
    }
    let path = base.get_filename().to_path_buf();
    if !options.read_only {
        create_private(&path)?;
    }
    let writer_options = if options.read_only {
        base.clone().read_only(true).create_if_missing(false)
    } else {
        base.clone()
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // In WAL mode NORMAL is durable across application crashes and only a power
            // loss can roll back the last commits; it keeps a commit off the fsync path.
            .synchronous(SqliteSynchronous::Normal)
    };
    let writer = SqlitePoolOptions::new()
        .max_connections(1)
        .min_connections(1)
        .test_before_acquire(false)
        .acquire_timeout(options.acquire_timeout)
        .connect_with(writer_options)
        .await
        .map_err(StoreError::Connect)?;
    let readers = SqlitePoolOptions::new()
        .max_connections(options.max_connections.unwrap_or(4).max(1))
        .test_before_acquire(false)
        .acquire_timeout(options.acquire_timeout)
        .connect_with(base.read_only(true).create_if_missing(false))
        .await
        .map_err(StoreError::Connect)?;
    let own = crate::group::ConnectOptions {
        path: &path,
        busy_timeout: options.busy_timeout,
    };
    let group = if options.read_only {
        // Nothing to batch: every write is refused, as the read-only writer pool says.
        crate::group::GroupWriter::direct(writer.clone())
    } else {
        crate::group::GroupWriter::open(&own).map_err(|e| StoreError::Writer(e.into()))?
    };
    let inline = crate::inline::InlineReaders::open(
        &own,
        options.max_connections.unwrap_or(4).max(1) as usize,
    )
    .map_err(|e| StoreError::Writer(e.into()))?;
    Ok(Store {
        db: Arc::new(Db::Sqlite {
            group,
            writer,
            readers,
            inline: Some(inline),
        }),
    })
}

async fn open_postgres(url: &str, options: &StoreOptions) -> Result<Store, StoreError> {
    let connect = PgConnectOptions::from_str(url).map_err(|e| StoreError::Url(e.into()))?;
    let (mut connect, tls) = crate::tls::PgTls::apply(url, connect);
    if options.read_only {
        connect = connect.options([("default_transaction_read_only", "on")]);
    }
    let pool = PgPoolOptions::new()
        .max_connections(options.max_connections.unwrap_or(16).max(1))
        .acquire_timeout(options.acquire_timeout)
        .connect_with(connect)
        .await
        .map_err(|e| tls.connect_error(e))?;
    Ok(Store {
        db: Arc::new(Db::Postgres(pool)),
    })
}
