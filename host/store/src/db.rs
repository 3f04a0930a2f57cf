//! Opening a store from a URL, its pools, and the embedded migrations.

use crate::approvals::SqlApprovalCoordinator;
use crate::audit::{AuditLog, AuditSinkOptions, SqlAuditSink};
use crate::columns::{Columns, Record};
use crate::journal::SqlInvocationJournal;
use crate::params::{Param, arguments, sqlite_values};
use capgate_core::error::BoxError;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Postgres, SqlSafeStr, Sqlite};
use std::borrow::Cow;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

/// The SQLite migrations, embedded: `(version, file name)`. Listed by hand rather than with
/// `sqlx::migrate!`, whose proc macro compiles both database drivers a second time in every
/// build; a test checks this list against `migrations/sqlite/`.
const SQLITE_FILES: &[(i64, &str, &str)] = &[
    (
        1,
        "0001_initial.sql",
        include_str!("../migrations/sqlite/0001_initial.sql"),
    ),
    (
        2,
        "0002_approval_tenancy.sql",
        include_str!("../migrations/sqlite/0002_approval_tenancy.sql"),
    ),
    (
        3,
        "0003_approval_policies.sql",
        include_str!("../migrations/sqlite/0003_approval_policies.sql"),
    ),
    (
        4,
        "0004_console_sessions.sql",
        include_str!("../migrations/sqlite/0004_console_sessions.sql"),
    ),
    (
        5,
        "0005_journal_budget.sql",
        include_str!("../migrations/sqlite/0005_journal_budget.sql"),
    ),
    (
        6,
        "0006_shared_limits_and_mcp_sessions.sql",
        include_str!("../migrations/sqlite/0006_shared_limits_and_mcp_sessions.sql"),
    ),
    (
        7,
        "0007_audit_chain.sql",
        include_str!("../migrations/sqlite/0007_audit_chain.sql"),
    ),
    (
        8,
        "0008_audit_export.sql",
        include_str!("../migrations/sqlite/0008_audit_export.sql"),
    ),
    (
        9,
        "0009_approval_escalation.sql",
        include_str!("../migrations/sqlite/0009_approval_escalation.sql"),
    ),
    (
        10,
        "0010_audit_checkpoint_chain.sql",
        include_str!("../migrations/sqlite/0010_audit_checkpoint_chain.sql"),
    ),
    (
        12,
        "0012_approval_budget.sql",
        include_str!("../migrations/sqlite/0012_approval_budget.sql"),
    ),
    (
        13,
        "0013_console_session_budget.sql",
        include_str!("../migrations/sqlite/0013_console_session_budget.sql"),
    ),
];

/// The Postgres migrations, embedded (see [`SQLITE_FILES`]).
const POSTGRES_FILES: &[(i64, &str, &str)] = &[
    (
        1,
        "0001_initial.sql",
        include_str!("../migrations/postgres/0001_initial.sql"),
    ),
    (
        2,
        "0002_approval_tenancy.sql",
        include_str!("../migrations/postgres/0002_approval_tenancy.sql"),
    ),
    (
        3,
        "0003_approval_policies.sql",
        include_str!("../migrations/postgres/0003_approval_policies.sql"),
    ),
    (
        4,
        "0004_console_sessions.sql",
        include_str!("../migrations/postgres/0004_console_sessions.sql"),
    ),
    (
        5,
        "0005_journal_budget.sql",
        include_str!("../migrations/postgres/0005_journal_budget.sql"),
    ),
    (
        6,
        "0006_shared_limits_and_mcp_sessions.sql",
        include_str!("../migrations/postgres/0006_shared_limits_and_mcp_sessions.sql"),
    ),
    (
        7,
        "0007_audit_chain.sql",
        include_str!("../migrations/postgres/0007_audit_chain.sql"),
    ),
    (
        8,
        "0008_audit_export.sql",
        include_str!("../migrations/postgres/0008_audit_export.sql"),
    ),
    (
        9,
        "0009_approval_escalation.sql",
        include_str!("../migrations/postgres/0009_approval_escalation.sql"),
    ),
    (
        10,
        "0010_audit_checkpoint_chain.sql",
        include_str!("../migrations/postgres/0010_audit_checkpoint_chain.sql"),
    ),
    (
        12,
        "0012_approval_budget.sql",
        include_str!("../migrations/postgres/0012_approval_budget.sql"),
    ),
    (
        13,
        "0013_console_session_budget.sql",
        include_str!("../migrations/postgres/0013_console_session_budget.sql"),
    ),
];

static SQLITE_MIGRATIONS: LazyLock<Migrator> = LazyLock::new(|| migrator(SQLITE_FILES));
static POSTGRES_MIGRATIONS: LazyLock<Migrator> = LazyLock::new(|| migrator(POSTGRES_FILES));

/// A migrator over embedded files, each migration exactly as `sqlx::migrate!` would build it
/// (description from the file name, checksum of the text, `-- no-transaction` honoured), so
/// databases migrated by either agree.
fn migrator(files: &'static [(i64, &'static str, &'static str)]) -> Migrator {
    Migrator::with_migrations(
        files
            .iter()
            .map(|&(version, file, sql)| {
                Migration::new(
                    version,
                    Cow::Owned(description_of(file)),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    sql.starts_with("-- no-transaction"),
                )
            })
            .collect(),
    )
}

/// `0002_approval_tenancy.sql` → `approval tenancy`, as sqlx derives it.
fn description_of(file: &str) -> String {
    let stem = file.strip_suffix(".sql").unwrap_or(file);
    let rest = stem.split_once('_').map_or("", |(_, d)| d);
    rest.replace('_', " ")
}

/// Why a store could not be opened, migrated or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The URL is not `sqlite:…` or `postgres://…`, or does not parse.
    #[error("invalid store URL: {0}")]
    Url(#[source] BoxError),
    /// The database could not be reached or opened.
    #[error("cannot open the store: {0}")]
    Connect(#[source] sqlx::Error),
    /// The TLS handshake with the Postgres server failed: `sslmode` asks for TLS the
    /// server does not offer, or its certificate was refused (`verify-ca`, `verify-full`).
    #[error(
        "cannot open the store: TLS handshake with the Postgres server {server} failed: \
         {failure} (sslmode={sslmode}; {trust}): {source}"
    )]
    Tls {
        /// `host:port` of the server.
        server: String,
        /// The `sslmode` in force.
        sslmode: String,
        /// What the certificate was checked against, in words (the `sslrootcert` file).
        trust: String,
        /// Why, as far as it can be told apart.
        failure: crate::tls::TlsFailure,
        /// The error of the TLS client.
        #[source]
        source: sqlx::Error,
    },
    /// Applying or inspecting migrations failed.
    #[error("store migration failed: {0}")]
    Migrate(#[source] BoxError),
    /// A statement failed.
    #[error("store unavailable: {0}")]
    Backend(#[source] sqlx::Error),
    /// The store's own SQLite connections (the group writer's, the inline readers') could
    /// not be opened.
    #[error("cannot open the store: {0}")]
    Writer(#[source] BoxError),
    /// A write through the SQLite writer failed.
    #[error("store unavailable: {0}")]
    Write(#[source] BoxError),
    /// A background task was requested outside a Tokio runtime.
    #[error("the audit sink needs a Tokio runtime to run its writer task")]
    NoRuntime,
}

/// Which database a [`Store`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// An embedded SQLite file (or in-memory database).
    Sqlite,
    /// A Postgres server, possibly shared by many replicas.
    Postgres,
}

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

/// The pools. SQLite has one writer connection (so this process never contends with
/// itself for the write lock) and a pool of readers (WAL lets them run beside the writer).
pub(crate) enum Db {
    Sqlite {
        writer: SqlitePool,
        /// The hot write paths (journal, approvals), committed in groups.
        group: crate::group::GroupWriter,
        readers: SqlitePool,
        /// One-row reads on the calling thread (none for an in-memory database).
        inline: Option<crate::inline::InlineReaders>,
    },
    Postgres(PgPool),
}

/// A migration and whether the database has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationState {
    /// The version (file name prefix).
    pub version: i64,
    /// The description (file name rest).
    pub description: String,
    /// Whether the migration was applied successfully.
    pub applied: bool,
}

/// What [`Store::migrate`] did, for `capgate migrate` to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// The backend migrated.
    pub backend: Backend,
    /// Migrations applied by this call, in order.
    pub applied: Vec<MigrationState>,
    /// Every embedded migration and its state after the call.
    pub status: Vec<MigrationState>,
}

/// Where a statement runs on SQLite; Postgres runs every statement on its one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// The reader pool: reads.
    Readers,
    /// The group writer: the hot writes, committed together with whatever is waiting.
    Group,
    /// The writer connection on its own.
    Writer,
}

/// A statement's destination, resolved from a [`Via`] on one store.
enum Target<'a> {
    /// SQLite's group writer.
    Group(&'a crate::group::GroupWriter),
    /// One of SQLite's pools.
    Sqlite(&'a SqlitePool),
    /// The Postgres pool.
    Postgres(&'a PgPool),
}

/// A statement's text on each backend; most statements are the same on both.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sql {
    /// The text SQLite runs.
    pub(crate) sqlite: &'static str,
    /// The text Postgres runs.
    pub(crate) postgres: &'static str,
}

impl From<&'static str> for Sql {
    fn from(sql: &'static str) -> Sql {
        Sql {
            sqlite: sql,
            postgres: sql,
        }
    }
}

/// An open store: the pools behind the approval coordinator, the audit sink and log, and
/// the invocation journal. Cheap to clone; share one per process (or per replica).
#[derive(Clone)]
pub struct Store {
    pub(crate) db: Arc<Db>,
}

fn is_sqlite_url(url: &str) -> bool {
    url.starts_with("sqlite:")
}

fn is_postgres_url(url: &str) -> bool {
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

    /// Which database this is.
    pub fn backend(&self) -> Backend {
        match &*self.db {
            Db::Sqlite { .. } => Backend::Sqlite,
            Db::Postgres(_) => Backend::Postgres,
        }
    }

    /// Apply every pending embedded migration (idempotent; concurrent replicas are
    /// serialized by the migrator's lock) and report what changed.
    pub async fn migrate(&self) -> Result<MigrationReport, StoreError> {
        let before = self.migration_status().await?;
        let result = match &*self.db {
            Db::Sqlite { writer, .. } => SQLITE_MIGRATIONS.run(writer).await,
            Db::Postgres(pool) => POSTGRES_MIGRATIONS.run(pool).await,
        };
        result.map_err(|e| StoreError::Migrate(e.into()))?;
        let status = self.migration_status().await?;
        let applied = status
            .iter()
            .filter(|m| m.applied && !before.iter().any(|b| b.version == m.version && b.applied))
            .cloned()
            .collect();
        Ok(MigrationReport {
            backend: self.backend(),
            applied,
            status,
        })
    }

    /// Every embedded migration and whether this database has applied it.
    pub async fn migration_status(&self) -> Result<Vec<MigrationState>, StoreError> {
        let mig_err = |e: sqlx::Error| StoreError::Migrate(e.into());
        let (migrator, applied): (&Migrator, Vec<i64>) = match &*self.db {
            Db::Sqlite { writer, .. } => {
                let exists: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
                )
                .fetch_one(writer)
                .await
                .map_err(mig_err)?;
                let applied = if exists > 0 {
                    sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                        .fetch_all(writer)
                        .await
                        .map_err(mig_err)?
                } else {
                    Vec::new()
                };
                (&*SQLITE_MIGRATIONS, applied)
            }
            Db::Postgres(pool) => {
                let exists: bool =
                    sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
                        .fetch_one(pool)
                        .await
                        .map_err(mig_err)?;
                let applied = if exists {
                    sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                        .fetch_all(pool)
                        .await
                        .map_err(mig_err)?
                } else {
                    Vec::new()
                };
                (&*POSTGRES_MIGRATIONS, applied)
            }
        };
        Ok(migrator
            .iter()
            .filter(|m| !m.migration_type.is_down_migration())
            .map(|m| MigrationState {
                version: m.version,
                description: m.description.to_string(),
                applied: applied.contains(&m.version),
            })
            .collect())
    }

    /// The approval coordinator on this store.
    pub fn approvals(&self) -> SqlApprovalCoordinator {
        SqlApprovalCoordinator::new(self.clone())
    }

    /// The invocation journal on this store, keeping receipts for the default replay
    /// horizon (see [`SqlInvocationJournal::with_replay_horizon`]).
    pub fn journal(&self) -> SqlInvocationJournal {
        SqlInvocationJournal::new(self.clone())
    }

    /// A batching audit sink writing to this store. Spawns its writer task on the current
    /// Tokio runtime.
    pub fn audit_sink(&self, options: AuditSinkOptions) -> Result<SqlAuditSink, StoreError> {
        SqlAuditSink::spawn(self.clone(), options)
    }

    /// Read access to the audit events (queries and `tail`).
    pub fn audit_log(&self) -> AuditLog {
        AuditLog::new(self.clone())
    }

    /// Where a statement sent `via` runs on this store.
    fn target(&self, via: Via) -> Target<'_> {
        match (&*self.db, via) {
            (Db::Sqlite { group, .. }, Via::Group) => Target::Group(group),
            (Db::Sqlite { readers, .. }, Via::Readers) => Target::Sqlite(readers),
            (Db::Sqlite { writer, .. }, Via::Writer) => Target::Sqlite(writer),
            (Db::Postgres(pool), _) => Target::Postgres(pool),
        }
    }

    /// The first row (if any) of a statement with `params`, decoded by `decode`, run where
    /// `via` says on SQLite.
    pub(crate) async fn fetch_optional<T>(
        &self,
        via: Via,
        sql: impl Into<Sql>,
        params: &[&dyn Param],
        decode: impl Fn(&dyn Columns) -> T,
    ) -> Result<Option<T>, BoxError> {
        let sql = sql.into();
        if let (
            Db::Sqlite {
                inline: Some(inline),
                ..
            },
            Via::Readers,
        ) = (&*self.db, via)
        {
            return Ok(inline
                .fetch_optional(sql.sqlite, &sqlite_values(params)?)?
                .map(|r| decode(&r)));
        }
        Ok(match self.target(via) {
            Target::Group(group) => group
                .fetch_optional(sql.sqlite, sqlite_values(params)?)
                .await?
                .map(|r| decode(&r)),
            Target::Sqlite(pool) => sqlx::query_with(sql.sqlite, arguments::<Sqlite>(params)?)
                .fetch_optional(pool)
                .await?
                .map(|r| decode(&r)),
            Target::Postgres(pool) => {
                sqlx::query_with(sql.postgres, arguments::<Postgres>(params)?)
                    .fetch_optional(pool)
                    .await?
                    .map(|r| decode(&r))
            }
        })
    }

    /// The record of the first row (if any) of a statement with `params`, decoded and
    /// checked as its table's [`Record`] says, run where `via` says on SQLite.
    pub(crate) async fn fetch_record<R: Record>(
        &self,
        via: Via,
        sql: impl Into<Sql>,
        params: &[&dyn Param],
    ) -> Result<Option<R::Checked>, R::Error> {
        self.fetch_optional(via, sql, params, R::decode)
            .await
            .map_err(R::backend)?
            .transpose()?
            .map(R::check)
            .transpose()
    }

    /// Every row of a read with `params`, each decoded by `decode` (the reader pool on
    /// SQLite).
    pub(crate) async fn fetch_all<T>(
        &self,
        sql: impl Into<Sql>,
        params: &[&dyn Param],
        decode: impl Fn(&dyn Columns) -> T,
    ) -> Result<Vec<T>, BoxError> {
        let sql = sql.into();
        Ok(match &*self.db {
            Db::Sqlite { readers, .. } => {
                sqlx::query_with(sql.sqlite, arguments::<Sqlite>(params)?)
                    .fetch_all(readers)
                    .await?
                    .iter()
                    .map(|r| decode(r))
                    .collect()
            }
            Db::Postgres(pool) => sqlx::query_with(sql.postgres, arguments::<Postgres>(params)?)
                .fetch_all(pool)
                .await?
                .iter()
                .map(|r| decode(r))
                .collect(),
        })
    }

    /// Run a write with `params` where `via` says on SQLite; how many rows it changed.
    pub(crate) async fn execute(
        &self,
        via: Via,
        sql: impl Into<Sql>,
        params: &[&dyn Param],
    ) -> Result<u64, BoxError> {
        let sql = sql.into();
        Ok(match self.target(via) {
            Target::Group(group) => group.execute(sql.sqlite, sqlite_values(params)?).await?,
            Target::Sqlite(pool) => sqlx::query_with(sql.sqlite, arguments::<Sqlite>(params)?)
                .execute(pool)
                .await?
                .rows_affected(),
            Target::Postgres(pool) => {
                sqlx::query_with(sql.postgres, arguments::<Postgres>(params)?)
                    .execute(pool)
                    .await?
                    .rows_affected()
            }
        })
    }

    /// Whether the store takes writes, for readiness. On SQLite, once a write was refused
    /// for lack of storage (disk full, I/O error), rewrite one existing row in place
    /// through the writer until that commits again; otherwise (and on Postgres, whose
    /// outage a read already shows) nothing is written.
    pub async fn check_writable(&self) -> Result<(), StoreError> {
        let Db::Sqlite { group, .. } = &*self.db else {
            return Ok(());
        };
        if !group.is_refusing() {
            return Ok(());
        }
        let rewritten = group
            .execute(
                "UPDATE capgate_audit_events SET id = id \
                 WHERE id = (SELECT max(id) FROM capgate_audit_events)",
                Vec::new(),
            )
            .await
            .map_err(|e| StoreError::Write(e.into()))?;
        if rewritten == 0 {
            group.clear_refusal();
        }
        Ok(())
    }

    /// Close every pool, waiting for checked-out connections to return.
    pub async fn close(&self) {
        match &*self.db {
            Db::Sqlite {
                writer,
                readers,
                group,
                inline,
            } => {
                group.close().await;
                if let Some(inline) = inline {
                    inline.close();
                }
                writer.close().await;
                readers.close().await;
            }
            Db::Postgres(pool) => pool.close().await,
        }
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

/// `capgate migrate`: open the store at `url` and apply every pending migration.
pub async fn migrate_url(url: &str) -> Result<MigrationReport, StoreError> {
    let store = Store::open_with(
        url,
        StoreOptions {
            auto_migrate: Some(false),
            ..StoreOptions::default()
        },
    )
    .await?;
    let report = store.migrate().await;
    store.close().await;
    report
}

/// `capgate migrate --status`: which embedded migrations the database at `url` has.
pub async fn migration_status_url(url: &str) -> Result<Vec<MigrationState>, StoreError> {
    let store = Store::open_with(
        url,
        StoreOptions {
            auto_migrate: Some(false),
            read_only: is_postgres_url(url),
            ..StoreOptions::default()
        },
    )
    .await?;
    let status = store.migration_status().await;
    store.close().await;
    status
}

#[cfg(test)]
mod migration_tests {
    use super::*;

    /// Every `.sql` file of a dialect's directory is embedded, under its version, with its
    /// current text: adding a migration file without listing it fails here.
    fn embedded_match_the_directory(dir: &str, files: &[(i64, &str, &str)]) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let mut on_disk: Vec<(i64, String, String)> = std::fs::read_dir(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".sql"))
            .map(|name| {
                let version = name
                    .split('_')
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{name}: no version prefix"));
                let text = std::fs::read_to_string(path.join(&name))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                (version, name, text)
            })
            .collect();
        on_disk.sort();
        let embedded: Vec<(i64, String, String)> = files
            .iter()
            .map(|&(v, name, text)| (v, name.to_string(), text.to_string()))
            .collect();
        assert_eq!(
            embedded, on_disk,
            "{dir}: embedded migrations differ from the files"
        );
    }

    #[test]
    fn the_embedded_migrations_are_exactly_the_migration_files() {
        embedded_match_the_directory("migrations/sqlite", SQLITE_FILES);
        embedded_match_the_directory("migrations/postgres", POSTGRES_FILES);
    }

    #[test]
    fn descriptions_and_checksums_are_what_sqlx_derives_from_the_files() {
        let m = migrator(SQLITE_FILES);
        let described: Vec<(i64, &str)> = m
            .migrations
            .iter()
            .map(|m| (m.version, m.description.as_ref()))
            .collect();
        assert_eq!(
            described,
            [
                (1, "initial"),
                (2, "approval tenancy"),
                (3, "approval policies"),
                (4, "console sessions"),
                (5, "journal budget"),
                (6, "shared limits and mcp sessions"),
                (7, "audit chain"),
                (8, "audit export"),
                (9, "approval escalation"),
                (10, "audit checkpoint chain"),
                (12, "approval budget"),
                (13, "console session budget"),
            ]
        );
        // sqlx's checksum is SHA-384 of the file's text: a database migrated with
        // `sqlx::migrate!` validates against these.
        for files in [SQLITE_FILES, POSTGRES_FILES] {
            for (migration, (_, name, sql)) in migrator(files).migrations.iter().zip(files) {
                use sha2::Digest;
                assert_eq!(
                    migration.checksum.as_ref(),
                    sha2::Sha384::digest(sql.as_bytes()).as_slice(),
                    "{name}"
                );
            }
        }
    }
}
