//! Opening a store from a URL, its pools, and the embedded migrations.
//!
//! By job: this file is the [`Store`] itself (its pools, its errors, the handles it hands
//! out), [`open`] opening one from a URL, [`migrations`] the embedded migrations and
//! `capgate migrate`, [`statements`] where a statement runs and how its rows come back.

mod migrations;
mod open;
mod statements;

use crate::approvals::SqlApprovalCoordinator;
use crate::audit::{AuditLog, AuditSinkOptions, SqlAuditSink};
use crate::journal::SqlInvocationJournal;
use capgate_core::error::BoxError;
use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;
use std::sync::Arc;

pub use migrations::{MigrationReport, MigrationState, migrate_url, migration_status_url};
pub use open::StoreOptions;
pub(crate) use statements::{Sql, Via};

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

/// An open store: the pools behind the approval coordinator, the audit sink and log, and
/// the invocation journal. Cheap to clone; share one per process (or per replica).
#[derive(Clone)]
pub struct Store {
    pub(crate) db: Arc<Db>,
}

impl Store {
    /// Which database this is.
    pub fn backend(&self) -> Backend {
        match &*self.db {
            Db::Sqlite { .. } => Backend::Sqlite,
            Db::Postgres(_) => Backend::Postgres,
        }
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
