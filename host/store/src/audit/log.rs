//! The read side of the audit table: [`AuditLog`] and its [`AuditQuery`] filters. Reads
//! never go through the sink's queue, so they see committed events only.

use crate::columns::{Columns, row};
use crate::db::{Sql, Store};
use capgate_core::audit::AuditEvent;
use capgate_core::clock::TimeRange;
use capgate_core::error::BoxError;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

/// Which end of the log a query starts from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuditOrder {
    /// Oldest first (by insertion id): replay, follow.
    #[default]
    OldestFirst,
    /// Newest first: "what happened lately".
    NewestFirst,
}

/// A filter over the audit table; every field narrows, `None` matches all.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditQuery {
    /// Events of one execution.
    pub execution_id: Option<String>,
    /// Events of one capability.
    pub capability_id: Option<String>,
    /// Events of one actor (the envelope actor: the approver for decisions).
    pub actor_id: Option<String>,
    /// One event type (`capability.started`, …).
    pub event_type: Option<String>,
    /// When the events happened: at or after `since`, strictly before `until`.
    pub during: TimeRange,
    /// Only rows inserted after this id (for following a live log).
    pub after_id: Option<i64>,
    /// Page size: default 100, at most 10 000.
    pub limit: Option<u32>,
    /// Which end of the log the page starts from.
    pub order: AuditOrder,
}

impl AuditQuery {
    fn effective_limit(&self) -> i64 {
        i64::from(self.limit.unwrap_or(100).clamp(1, 10_000))
    }
}

/// A stored row that does not read back as an [`AuditEvent`] (tampered or written by an
/// incompatible version). Returned in place of the event so one bad row neither hides the
/// others nor passes unnoticed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("audit row {id} is malformed: {reason}")]
pub struct MalformedAuditRow {
    /// The row id.
    pub id: i64,
    /// What is wrong.
    pub reason: String,
}

/// One row of the audit table.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredAuditEvent {
    /// Insertion id: increasing, so `after_id` can follow the log.
    pub id: i64,
    /// The event, or why it could not be read.
    pub event: Result<AuditEvent, MalformedAuditRow>,
}

/// Why an audit query failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditQueryError {
    /// The store failed (the database error, or an unreadable row).
    #[error("audit store unavailable: {0}")]
    Backend(#[source] BoxError),
}

macro_rules! audit_select {
    ($null_text:literal, $null_ts:literal, $null_id:literal, $order:literal) => {
        concat!(
            "SELECT id, type, at, surface, actor_id, actor_kind, execution_id, capability_id, \
             correlation_id, input_hash, data FROM capgate_audit_events WHERE \
             ($1",
            $null_text,
            " IS NULL OR execution_id = $1) \
             AND ($2",
            $null_text,
            " IS NULL OR capability_id = $2) \
             AND ($3",
            $null_text,
            " IS NULL OR actor_id = $3) \
             AND ($4",
            $null_text,
            " IS NULL OR type = $4) \
             AND ($5",
            $null_ts,
            " IS NULL OR at >= $5) \
             AND ($6",
            $null_ts,
            " IS NULL OR at < $6) \
             AND ($7",
            $null_id,
            " IS NULL OR id > $7) \
             ORDER BY id ",
            $order,
            " LIMIT $8"
        )
    };
}

const SELECT_SQLITE_ASC: &str = audit_select!("", "", "", "ASC");
const SELECT_SQLITE_DESC: &str = audit_select!("", "", "", "DESC");
const SELECT_PG_ASC: &str = audit_select!("::text", "::timestamptz", "::bigint", "ASC");
const SELECT_PG_DESC: &str = audit_select!("::text", "::timestamptz", "::bigint", "DESC");
const SELECT_ASC: Sql = Sql {
    sqlite: SELECT_SQLITE_ASC,
    postgres: SELECT_PG_ASC,
};
const SELECT_DESC: Sql = Sql {
    sqlite: SELECT_SQLITE_DESC,
    postgres: SELECT_PG_DESC,
};

/// The read side of the audit table: queries by execution, capability, actor, type and
/// time, and the `tail` that `capgate audit tail` prints. Reads never go through the
/// sink's queue, so they see committed events only.
#[derive(Clone)]
pub struct AuditLog {
    pub(crate) store: Store,
}

row! {
    /// The columns of a row before the event is rebuilt (also what a chained row's hash
    /// covers, with its chain fields: `chain`).
    pub(crate) struct RawAudit {
        pub(crate) ty: String = "type",
        pub(crate) at: DateTime<Utc>,
        pub(crate) surface: String,
        pub(crate) actor_id: String,
        pub(crate) actor_kind: String,
        pub(crate) execution_id: Option<String>,
        pub(crate) capability_id: Option<String>,
        pub(crate) correlation_id: Option<String>,
        pub(crate) input_hash: Option<String>,
        pub(crate) data: Value,
    }
}

/// The event's columns read as one field of a wider row (the column name is unused).
impl crate::columns::FromColumn for RawAudit {
    fn from_column(row: &dyn Columns, _: &str) -> Result<Self, crate::columns::ColumnError> {
        RawAudit::read(row)
    }
}

impl RawAudit {
    fn into_event(self) -> Result<AuditEvent, String> {
        serde_json::from_value(self.into_json()).map_err(|e| e.to_string())
    }

    /// The event as the spec's JSON envelope, as stored (not checked against the event
    /// types: an export carries a row as it is, whatever it holds).
    pub(crate) fn into_json(self) -> Value {
        let mut m = Map::new();
        m.insert(
            "timestamp".into(),
            // As `AuditEvent` serializes it (chrono's RFC 3339), so an export and `audit
            // tail` print the same text.
            serde_json::to_value(self.at).unwrap_or_else(|_| Value::String(self.at.to_rfc3339())),
        );
        m.insert("surface".into(), Value::String(self.surface));
        let mut actor = Map::new();
        actor.insert("id".into(), Value::String(self.actor_id));
        actor.insert("kind".into(), Value::String(self.actor_kind));
        m.insert("actor".into(), Value::Object(actor));
        for (k, v) in [
            ("executionId", self.execution_id),
            ("capabilityId", self.capability_id),
            ("correlationId", self.correlation_id),
            ("inputHash", self.input_hash),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), Value::String(v));
            }
        }
        m.insert("type".into(), Value::String(self.ty));
        m.insert("data".into(), self.data);
        Value::Object(m)
    }
}

fn stored(id: i64, raw: Result<RawAudit, String>) -> StoredAuditEvent {
    StoredAuditEvent {
        id,
        event: raw
            .and_then(RawAudit::into_event)
            .map_err(|reason| MalformedAuditRow { id, reason }),
    }
}

/// Decode a row of either backend: a row without a readable id fails the query; any other
/// bad column makes the row a [`MalformedAuditRow`].
fn read_row(row: &dyn Columns) -> Result<StoredAuditEvent, AuditQueryError> {
    // The column error reads `id: …`.
    let id = row.int("id").map_err(|e| {
        AuditQueryError::Backend(format!("audit row without a readable {e}").into())
    })?;
    Ok(stored(id, RawAudit::read(row)))
}

impl AuditLog {
    pub(crate) fn new(store: Store) -> Self {
        AuditLog { store }
    }

    /// Rows matching `q`, in `q.order`.
    pub async fn query(&self, q: &AuditQuery) -> Result<Vec<StoredAuditEvent>, AuditQueryError> {
        let sql = match q.order {
            AuditOrder::OldestFirst => SELECT_ASC,
            AuditOrder::NewestFirst => SELECT_DESC,
        };
        self.store
            .fetch_all(
                sql,
                &[
                    &q.execution_id,
                    &q.capability_id,
                    &q.actor_id,
                    &q.event_type,
                    &q.during.since,
                    &q.during.until,
                    &q.after_id,
                    &q.effective_limit(),
                ],
                read_row,
            )
            .await
            .map_err(AuditQueryError::Backend)?
            .into_iter()
            .collect()
    }

    /// Every event of one execution, in order.
    pub async fn for_execution(
        &self,
        execution_id: &str,
    ) -> Result<Vec<StoredAuditEvent>, AuditQueryError> {
        self.query(&AuditQuery {
            execution_id: Some(execution_id.to_string()),
            limit: Some(10_000),
            ..AuditQuery::default()
        })
        .await
    }

    /// The last `n` events, oldest first (what `capgate audit tail` prints first).
    pub async fn tail(&self, n: u32) -> Result<Vec<StoredAuditEvent>, AuditQueryError> {
        let mut rows = self
            .query(&AuditQuery {
                limit: Some(n),
                order: AuditOrder::NewestFirst,
                ..AuditQuery::default()
            })
            .await?;
        rows.reverse();
        Ok(rows)
    }

    /// Events inserted after `after_id`, oldest first, at most `limit`: poll this with the
    /// last id seen to follow the log (`capgate audit tail --follow`).
    pub async fn follow(
        &self,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<StoredAuditEvent>, AuditQueryError> {
        self.query(&AuditQuery {
            after_id: Some(after_id),
            limit: Some(limit),
            ..AuditQuery::default()
        })
        .await
    }
}
