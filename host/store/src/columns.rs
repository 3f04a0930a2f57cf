//! Reading a row's columns the same way on both backends. SQLite keeps JSON as TEXT, times
//! as integer microseconds and booleans as 0/1; Postgres has jsonb, timestamptz and boolean.
//! Each table has one decoder written against [`Columns`], and every error names its column
//! ("decided_at: timestamp out of range"), because rows are hostile input too.
//!
//! A table's row type is declared once with [`row!`](crate::columns::row): the struct and its
//! decoder, each field read from the column of its name as its type says ([`FromColumn`]).

use crate::time::from_micros;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use std::fmt::Display;

/// Why a column could not be read: `column: reason`.
pub(crate) type ColumnError = String;

pub(crate) fn err(col: &str, e: impl Display) -> ColumnError {
    format!("{col}: {e}")
}

/// A row's columns as the store's types. The provided methods read SQLite's forms (JSON
/// as TEXT, times as integer microseconds, booleans as 0/1) through the four required
/// ones; Postgres overrides them with its own types.
pub(crate) trait Columns {
    fn text(&self, col: &str) -> Result<String, ColumnError>;
    fn opt_text(&self, col: &str) -> Result<Option<String>, ColumnError>;
    fn int(&self, col: &str) -> Result<i64, ColumnError>;
    fn opt_int(&self, col: &str) -> Result<Option<i64>, ColumnError>;
    fn json(&self, col: &str) -> Result<Value, ColumnError> {
        serde_json::from_str(&self.text(col)?).map_err(|e| err(col, e))
    }
    fn opt_json(&self, col: &str) -> Result<Option<Value>, ColumnError> {
        self.opt_text(col)?
            .map(|s| serde_json::from_str(&s).map_err(|e| err(col, e)))
            .transpose()
    }
    fn ts(&self, col: &str) -> Result<DateTime<Utc>, ColumnError> {
        micros_ts(col, self.int(col)?)
    }
    fn opt_ts(&self, col: &str) -> Result<Option<DateTime<Utc>>, ColumnError> {
        self.opt_int(col)?.map(|v| micros_ts(col, v)).transpose()
    }
    fn flag(&self, col: &str) -> Result<bool, ColumnError> {
        match self.int(col)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(err(col, format!("not a boolean: {other}"))),
        }
    }
}

pub(crate) fn micros_ts(col: &str, v: i64) -> Result<DateTime<Utc>, ColumnError> {
    from_micros(v).ok_or_else(|| err(col, "timestamp out of range"))
}

impl Columns for SqliteRow {
    fn text(&self, col: &str) -> Result<String, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
    fn opt_text(&self, col: &str) -> Result<Option<String>, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
    fn int(&self, col: &str) -> Result<i64, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
    fn opt_int(&self, col: &str) -> Result<Option<i64>, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
}

impl Columns for PgRow {
    fn text(&self, col: &str) -> Result<String, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
    fn opt_int(&self, col: &str) -> Result<Option<i64>, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
    fn opt_text(&self, col: &str) -> Result<Option<String>, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
    fn json(&self, col: &str) -> Result<Value, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
    fn opt_json(&self, col: &str) -> Result<Option<Value>, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
    fn ts(&self, col: &str) -> Result<DateTime<Utc>, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
    fn opt_ts(&self, col: &str) -> Result<Option<DateTime<Utc>>, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
    fn flag(&self, col: &str) -> Result<bool, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
    fn int(&self, col: &str) -> Result<i64, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
}

/// A field type read from one column, by the [`Columns`] reader of its kind.
pub(crate) trait FromColumn: Sized {
    fn from_column(row: &dyn Columns, col: &str) -> Result<Self, ColumnError>;
}

macro_rules! from_column {
    ($($ty:ty => $read:ident),* $(,)?) => {$(
        impl FromColumn for $ty {
            fn from_column(row: &dyn Columns, col: &str) -> Result<Self, ColumnError> {
                row.$read(col)
            }
        }
    )*};
}

from_column!(
    String => text,
    Option<String> => opt_text,
    Value => json,
    Option<Value> => opt_json,
    DateTime<Utc> => ts,
    Option<DateTime<Utc>> => opt_ts,
    bool => flag,
    i64 => int,
    Option<i64> => opt_int,
);

/// Decode a row whose errors name the record by its `key` column: an unreadable key is
/// `malformed("<unreadable id>", …)`, any other bad column `malformed(key, …)`.
pub(crate) fn keyed<T, E>(
    row: &dyn Columns,
    key: &str,
    decode: impl FnOnce(&dyn Columns) -> Result<T, ColumnError>,
    malformed: impl Fn(&str, ColumnError) -> E,
) -> Result<T, E> {
    let id = row.text(key).map_err(|e| malformed("<unreadable id>", e))?;
    decode(row).map_err(|e| malformed(&id, e))
}

/// A table's row as read and what it becomes: how a row is decoded (its errors naming the
/// record), checked into the domain record, and how a database failure reads in the
/// table's error type. Every read of a record goes through [`Store::fetch_record`] with it,
/// so each table reads, checks and reports its rows one way.
///
/// [`Store::fetch_record`]: crate::db::Store::fetch_record
pub(crate) trait Record: Sized {
    /// The checked domain record.
    type Checked;
    /// The table's error type.
    type Error;
    /// Decode a row of either backend.
    fn decode(row: &dyn Columns) -> Result<Self, Self::Error>;
    /// Check every field and their consistency.
    fn check(self) -> Result<Self::Checked, Self::Error>;
    /// The database failed.
    fn backend(e: capgate_core::error::BoxError) -> Self::Error;
}

/// A record store's two error constructors, for its error type `$error`: `backend(e)` (the
/// database failed) and `malformed(id, reason)` (a record that does not read back, named
/// by its id in field `$id`); and the [`Record`] impl of its row type `$raw`, decoded by
/// its `row!` reader with errors naming the record by the `$id` column, checked by its
/// `validate` into `$checked`.
macro_rules! record_errors {
    ($error:ident, $id:ident, $raw:ident => $checked:ty) => {
        fn backend(e: impl Into<capgate_core::error::BoxError>) -> $error {
            $error::Backend(e.into())
        }

        fn malformed(id: &str, reason: impl std::fmt::Display) -> $error {
            $error::Malformed {
                $id: id.to_string(),
                reason: reason.to_string(),
            }
        }

        impl $crate::columns::Record for $raw {
            type Checked = $checked;
            type Error = $error;
            fn decode(row: &dyn $crate::columns::Columns) -> Result<Self, $error> {
                $crate::columns::keyed(row, stringify!($id), $raw::read, malformed)
            }
            fn check(self) -> Result<$checked, $error> {
                self.validate()
            }
            fn backend(e: capgate_core::error::BoxError) -> $error {
                backend(e)
            }
        }
    };
}
pub(crate) use record_errors;

/// Declare a row type: the struct, and `fn read(&dyn Columns) -> Result<Self, ColumnError>`
/// that reads its fields in order, each from the column of its name (or the one named
/// after `=`) as its type says.
macro_rules! row {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($fvis:vis $field:ident: $ty:ty $(= $col:literal)?),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $($fvis $field: $ty),*
        }

        impl $name {
            /// Read a row of either backend.
            fn read(row: &dyn $crate::columns::Columns) -> Result<Self, $crate::columns::ColumnError> {
                Ok($name {
                    $($field: <$ty as $crate::columns::FromColumn>::from_column(
                        row,
                        $crate::columns::row!(@column $field $($col)?),
                    )?),*
                })
            }
        }
    };
    (@column $field:ident) => { stringify!($field) };
    (@column $field:ident $col:literal) => { $col };
}
pub(crate) use row;
