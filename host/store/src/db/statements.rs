//! Running statements on a [`Store`]: where each runs ([`Via`]: SQLite's readers, group
//! writer or writer connection; Postgres' one pool), its text per backend ([`Sql`]), and
//! the rows it returns, decoded.

use super::{Db, Store};
use crate::columns::{Columns, Record};
use crate::params::{Param, arguments, sqlite_values};
use capgate_core::error::BoxError;
use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;
use sqlx::{Postgres, Sqlite};

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

impl Store {
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
}
