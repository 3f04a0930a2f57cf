//! Binding a statement's parameters the same way on both backends: the write side of
//! [`crate::columns`]. A statement lists its parameters once, as the store's types
//! (`&[&dyn Param]`); each type says how each backend takes it. SQLite keeps JSON as TEXT,
//! times as integer microseconds and booleans as 0/1; Postgres has jsonb, timestamptz and
//! boolean.

use crate::time::micros;
use capgate_core::error::BoxError;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::postgres::PgArguments;
use sqlx::sqlite::SqliteArguments;
use sqlx::{Arguments, Database, Encode, Postgres, Sqlite, Type};

/// One parameter of a statement, for either backend.
pub(crate) trait Param: Sync {
    /// Append this value to a SQLite statement's arguments.
    fn add_sqlite(&self, args: &mut SqliteArguments) -> Result<(), BoxError>;
    /// Append this value to a Postgres statement's arguments.
    fn add_postgres(&self, args: &mut PgArguments) -> Result<(), BoxError>;
}

/// A backend whose arguments [`arguments`] builds.
pub(crate) trait Dialect: Database {
    /// Append `param` as this backend takes it.
    fn add(args: &mut Self::Arguments, param: &dyn Param) -> Result<(), BoxError>;
}

impl Dialect for Sqlite {
    fn add(args: &mut SqliteArguments, param: &dyn Param) -> Result<(), BoxError> {
        param.add_sqlite(args)
    }
}

impl Dialect for Postgres {
    fn add(args: &mut PgArguments, param: &dyn Param) -> Result<(), BoxError> {
        param.add_postgres(args)
    }
}

/// A statement's arguments on backend `DB`, bound in order. A value that cannot be encoded
/// is the error (`sqlx::Error::Encode`, or the JSON encoder's "cannot encode …").
pub(crate) fn arguments<DB: Dialect>(params: &[&dyn Param]) -> Result<DB::Arguments, BoxError> {
    let mut args = DB::Arguments::default();
    for param in params {
        DB::add(&mut args, *param)?;
    }
    Ok(args)
}

/// Append one value as sqlx encodes it for `A`'s backend.
fn add<'t, A: Arguments, T>(args: &mut A, value: T) -> Result<(), BoxError>
where
    T: Encode<'t, A::Database> + Type<A::Database>,
{
    args.add(value).map_err(|e| sqlx::Error::Encode(e).into())
}

/// Values both backends take as they are.
macro_rules! as_is {
    ($($ty:ty),* $(,)?) => {$(
        impl Param for $ty {
            fn add_sqlite(&self, args: &mut SqliteArguments) -> Result<(), BoxError> {
                add(args, self)
            }
            fn add_postgres(&self, args: &mut PgArguments) -> Result<(), BoxError> {
                add(args, self)
            }
        }
    )*};
}

as_is!(str, String, Option<String>, Option<&str>, i64, Option<i64>);

impl<T: Param + ?Sized> Param for &T {
    fn add_sqlite(&self, args: &mut SqliteArguments) -> Result<(), BoxError> {
        (**self).add_sqlite(args)
    }
    fn add_postgres(&self, args: &mut PgArguments) -> Result<(), BoxError> {
        (**self).add_postgres(args)
    }
}

/// Integer microseconds on SQLite, timestamptz on Postgres.
impl Param for DateTime<Utc> {
    fn add_sqlite(&self, args: &mut SqliteArguments) -> Result<(), BoxError> {
        add(args, micros(*self))
    }
    fn add_postgres(&self, args: &mut PgArguments) -> Result<(), BoxError> {
        add(args, self)
    }
}

impl Param for Option<DateTime<Utc>> {
    fn add_sqlite(&self, args: &mut SqliteArguments) -> Result<(), BoxError> {
        add(args, self.map(micros))
    }
    fn add_postgres(&self, args: &mut PgArguments) -> Result<(), BoxError> {
        add(args, self)
    }
}

/// 0 or 1 on SQLite, boolean on Postgres.
impl Param for bool {
    fn add_sqlite(&self, args: &mut SqliteArguments) -> Result<(), BoxError> {
        add(args, i64::from(*self))
    }
    fn add_postgres(&self, args: &mut PgArguments) -> Result<(), BoxError> {
        add(args, self)
    }
}

/// A value stored as JSON: TEXT on SQLite, jsonb on Postgres. `.0` names it in the error
/// when it cannot be encoded; `.1` is the value or a reference to it.
pub(crate) struct Json<T>(pub &'static str, pub T);

impl<T: Serialize + Sync> Param for Json<T> {
    fn add_sqlite(&self, args: &mut SqliteArguments) -> Result<(), BoxError> {
        let Json(what, value) = self;
        let text = serde_json::to_string(value)
            .map_err(|e| BoxError::from(format!("cannot encode {what}: {e}")))?;
        add(args, text)
    }
    fn add_postgres(&self, args: &mut PgArguments) -> Result<(), BoxError> {
        add(args, sqlx::types::Json(&self.1))
    }
}
