//! Reading a row's columns the same way on both backends. SQLite keeps JSON as TEXT, times
//! as integer microseconds and booleans as 0/1; Postgres has jsonb, timestamptz and boolean.
//! Each table has one decoder written against [`Columns`], and every error names its column
//! ("decided_at: timestamp out of range"), because rows are hostile input too.

use crate::time::from_micros;
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::Row;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use std::fmt::Display;

/// Why a column could not be read: `column: reason`.
pub(crate) type ColumnError = String;

fn err(col: &str, e: impl Display) -> ColumnError {
    format!("{col}: {e}")
}

/// A row's columns as the store's types.
pub(crate) trait Columns {
    fn text(&self, col: &str) -> Result<String, ColumnError>;
    fn opt_text(&self, col: &str) -> Result<Option<String>, ColumnError>;
    fn json(&self, col: &str) -> Result<Value, ColumnError>;
    fn opt_json(&self, col: &str) -> Result<Option<Value>, ColumnError>;
    fn ts(&self, col: &str) -> Result<DateTime<Utc>, ColumnError>;
    fn opt_ts(&self, col: &str) -> Result<Option<DateTime<Utc>>, ColumnError>;
    fn flag(&self, col: &str) -> Result<bool, ColumnError>;
}

fn micros_ts(col: &str, v: i64) -> Result<DateTime<Utc>, ColumnError> {
    from_micros(v).ok_or_else(|| err(col, "timestamp out of range"))
}

impl Columns for SqliteRow {
    fn text(&self, col: &str) -> Result<String, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
    fn opt_text(&self, col: &str) -> Result<Option<String>, ColumnError> {
        self.try_get(col).map_err(|e| err(col, e))
    }
    fn json(&self, col: &str) -> Result<Value, ColumnError> {
        serde_json::from_str(&self.text(col)?).map_err(|e| err(col, e))
    }
    fn opt_json(&self, col: &str) -> Result<Option<Value>, ColumnError> {
        self.opt_text(col)?
            .map(|s| serde_json::from_str(&s).map_err(|e| err(col, e)))
            .transpose()
    }
    fn ts(&self, col: &str) -> Result<DateTime<Utc>, ColumnError> {
        micros_ts(col, self.try_get(col).map_err(|e| err(col, e))?)
    }
    fn opt_ts(&self, col: &str) -> Result<Option<DateTime<Utc>>, ColumnError> {
        self.try_get::<Option<i64>, _>(col)
            .map_err(|e| err(col, e))?
            .map(|v| micros_ts(col, v))
            .transpose()
    }
    fn flag(&self, col: &str) -> Result<bool, ColumnError> {
        match self.try_get::<i64, _>(col).map_err(|e| err(col, e))? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(err(col, format!("not a boolean: {other}"))),
        }
    }
}

impl Columns for PgRow {
    fn text(&self, col: &str) -> Result<String, ColumnError> {
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
}
