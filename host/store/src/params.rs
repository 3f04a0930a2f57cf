//! Binding a statement's parameters the same way on both backends: the write side of
//! [`crate::columns`]. A statement lists its parameters once, as the store's types
//! (`&[&dyn Param]`); each type says how each backend takes it. SQLite keeps JSON as TEXT,
//! times as integer microseconds and booleans as 0/1; Postgres has jsonb, timestamptz and
//! boolean.

use crate::time::micros;
use capgate_core::error::BoxError;
use chrono::{DateTime, Utc};
use rusqlite::types::Value as SqliteValue;
use serde::Serialize;
use sqlx::postgres::PgArguments;
use sqlx::sqlite::SqliteArguments;
use sqlx::{Arguments, Database, Encode, Postgres, Sqlite, Type};

/// One parameter of a statement, for either backend.
pub(crate) trait Param: Sync {
    /// This value as SQLite stores it: the one form both SQLite connections (sqlx's pools
    /// and the group writer's own, see [`crate::group`]) bind.
    fn sqlite(&self) -> Result<SqliteValue, BoxError>;
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
        add_sqlite_value(args, param.sqlite()?)
    }
}

/// Append a value as SQLite stores it to sqlx's arguments.
pub(crate) fn add_sqlite_value(
    args: &mut SqliteArguments,
    value: SqliteValue,
) -> Result<(), BoxError> {
    match value {
        SqliteValue::Null => add(args, None::<i64>),
        SqliteValue::Integer(i) => add(args, i),
        SqliteValue::Real(f) => add(args, f),
        SqliteValue::Text(s) => add(args, s),
        SqliteValue::Blob(b) => add(args, b),
    }
}

/// The values of a statement's parameters as SQLite stores them, in order.
pub(crate) fn sqlite_values(params: &[&dyn Param]) -> Result<Vec<SqliteValue>, BoxError> {
    params.iter().map(|p| p.sqlite()).collect()
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
    ($($ty:ty => |$v:ident| $sqlite:expr),* $(,)?) => {$(
        impl Param for $ty {
            fn sqlite(&self) -> Result<SqliteValue, BoxError> {
                let $v = self;
                Ok($sqlite)
            }
            fn add_postgres(&self, args: &mut PgArguments) -> Result<(), BoxError> {
                add(args, self)
            }
        }
    )*};
}

as_is!(
    str => |v| SqliteValue::Text(v.to_owned()),
    String => |v| SqliteValue::Text(v.clone()),
    Option<String> => |v| v.clone().map_or(SqliteValue::Null, SqliteValue::Text),
    Option<&str> => |v| v.map_or(SqliteValue::Null, |s| SqliteValue::Text(s.to_owned())),
    i64 => |v| SqliteValue::Integer(*v),
    Option<i64> => |v| v.map_or(SqliteValue::Null, SqliteValue::Integer),
);

impl<T: Param + ?Sized> Param for &T {
    fn sqlite(&self) -> Result<SqliteValue, BoxError> {
        (**self).sqlite()
    }
    fn add_postgres(&self, args: &mut PgArguments) -> Result<(), BoxError> {
        (**self).add_postgres(args)
    }
}

/// Integer microseconds on SQLite, timestamptz on Postgres.
impl Param for DateTime<Utc> {
    fn sqlite(&self) -> Result<SqliteValue, BoxError> {
        Ok(SqliteValue::Integer(micros(*self)))
    }
    fn add_postgres(&self, args: &mut PgArguments) -> Result<(), BoxError> {
        add(args, self)
    }
}

impl Param for Option<DateTime<Utc>> {
    fn sqlite(&self) -> Result<SqliteValue, BoxError> {
        Ok(self.map_or(SqliteValue::Null, |t| SqliteValue::Integer(micros(t))))
    }
    fn add_postgres(&self, args: &mut PgArguments) -> Result<(), BoxError> {
        add(args, self)
    }
}

/// 0 or 1 on SQLite, boolean on Postgres.
impl Param for bool {
    fn sqlite(&self) -> Result<SqliteValue, BoxError> {
        Ok(SqliteValue::Integer(i64::from(*self)))
    }
    fn add_postgres(&self, args: &mut PgArguments) -> Result<(), BoxError> {
        add(args, self)
    }
}

/// A value stored as JSON: TEXT on SQLite, jsonb on Postgres. `.0` names it in the error
/// when it cannot be encoded; `.1` is the value or a reference to it.
pub(crate) struct Json<T>(pub &'static str, pub T);

impl<T: Serialize + Sync> Param for Json<T> {
    fn sqlite(&self) -> Result<SqliteValue, BoxError> {
        let Json(what, value) = self;
        let text = serde_json::to_string(value)
            .map_err(|e| BoxError::from(format!("cannot encode {what}: {e}")))?;
        Ok(SqliteValue::Text(text))
    }
    fn add_postgres(&self, args: &mut PgArguments) -> Result<(), BoxError> {
        add(args, sqlx::types::Json(&self.1))
    }
}
