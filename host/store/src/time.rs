//! Timestamps as the store keeps them: microsecond precision on both backends (Postgres
//! `timestamptz` resolution), integer microseconds since the Unix epoch on SQLite so that
//! the conditional statements compare numbers.

use chrono::{DateTime, Utc};

/// `t` truncated to whole microseconds: what either backend will hand back.
pub(crate) fn trunc(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap_or(t)
}

/// Microseconds since the epoch (the SQLite column value).
pub(crate) fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// Read back a SQLite column value; `None` when out of chrono's range (a hostile row).
pub(crate) fn from_micros(v: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_micros(v)
}
