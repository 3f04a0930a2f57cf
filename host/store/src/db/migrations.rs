//! The embedded migrations (listed by hand, checked against the files by a test), applying
//! them ([`Store::migrate`]), their status, and `capgate migrate`'s entry points.

use super::open::is_postgres_url;
use super::{Backend, Db, Store, StoreError, StoreOptions};
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use std::borrow::Cow;
use std::sync::LazyLock;

/// The SQLite migrations, embedded: `(version, file name)`. Listed by hand rather than with
/// `sqlx::migrate!`, whose proc macro compiles both database drivers a second time in every
/// build; a test checks this list against `migrations/sqlite/`.
const SQLITE_FILES: &[(i64, &str, &str)] = &[
    (
        1,
        "0001_initial.sql",
        include_str!("../../migrations/sqlite/0001_initial.sql"),
    ),
    (
        2,
        "0002_approval_tenancy.sql",
        include_str!("../../migrations/sqlite/0002_approval_tenancy.sql"),
    ),
    (
        3,
        "0003_approval_policies.sql",
        include_str!("../../migrations/sqlite/0003_approval_policies.sql"),
    ),
    (
        4,
        "0004_console_sessions.sql",
        include_str!("../../migrations/sqlite/0004_console_sessions.sql"),
    ),
    (
        5,
        "0005_journal_budget.sql",
        include_str!("../../migrations/sqlite/0005_journal_budget.sql"),
    ),
    (
        6,
        "0006_shared_limits_and_mcp_sessions.sql",
        include_str!("../../migrations/sqlite/0006_shared_limits_and_mcp_sessions.sql"),
    ),
    (
        7,
        "0007_audit_chain.sql",
        include_str!("../../migrations/sqlite/0007_audit_chain.sql"),
    ),
    (
        8,
        "0008_audit_export.sql",
        include_str!("../../migrations/sqlite/0008_audit_export.sql"),
    ),
    (
        9,
        "0009_approval_escalation.sql",
        include_str!("../../migrations/sqlite/0009_approval_escalation.sql"),
    ),
    (
        10,
        "0010_audit_checkpoint_chain.sql",
        include_str!("../../migrations/sqlite/0010_audit_checkpoint_chain.sql"),
    ),
    (
        12,
        "0012_approval_budget.sql",
        include_str!("../../migrations/sqlite/0012_approval_budget.sql"),
    ),
    (
        13,
        "0013_console_session_budget.sql",
        include_str!("../../migrations/sqlite/0013_console_session_budget.sql"),
    ),
    (
        14,
        "0014_mcp_tasks.sql",
        include_str!("../../migrations/sqlite/0014_mcp_tasks.sql"),
    ),
];

/// The Postgres migrations, embedded (see [`SQLITE_FILES`]).
const POSTGRES_FILES: &[(i64, &str, &str)] = &[
    (
        1,
        "0001_initial.sql",
        include_str!("../../migrations/postgres/0001_initial.sql"),
    ),
    (
        2,
        "0002_approval_tenancy.sql",
        include_str!("../../migrations/postgres/0002_approval_tenancy.sql"),
    ),
    (
        3,
        "0003_approval_policies.sql",
        include_str!("../../migrations/postgres/0003_approval_policies.sql"),
    ),
    (
        4,
        "0004_console_sessions.sql",
        include_str!("../../migrations/postgres/0004_console_sessions.sql"),
    ),
    (
        5,
        "0005_journal_budget.sql",
        include_str!("../../migrations/postgres/0005_journal_budget.sql"),
    ),
    (
        6,
        "0006_shared_limits_and_mcp_sessions.sql",
        include_str!("../../migrations/postgres/0006_shared_limits_and_mcp_sessions.sql"),
    ),
    (
        7,
        "0007_audit_chain.sql",
        include_str!("../../migrations/postgres/0007_audit_chain.sql"),
    ),
    (
        8,
        "0008_audit_export.sql",
        include_str!("../../migrations/postgres/0008_audit_export.sql"),
    ),
    (
        9,
        "0009_approval_escalation.sql",
        include_str!("../../migrations/postgres/0009_approval_escalation.sql"),
    ),
    (
        10,
        "0010_audit_checkpoint_chain.sql",
        include_str!("../../migrations/postgres/0010_audit_checkpoint_chain.sql"),
    ),
    (
        12,
        "0012_approval_budget.sql",
        include_str!("../../migrations/postgres/0012_approval_budget.sql"),
    ),
    (
        13,
        "0013_console_session_budget.sql",
        include_str!("../../migrations/postgres/0013_console_session_budget.sql"),
    ),
    (
        14,
        "0014_mcp_tasks.sql",
        include_str!("../../migrations/postgres/0014_mcp_tasks.sql"),
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

impl Store {
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
                (14, "mcp tasks"),
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
