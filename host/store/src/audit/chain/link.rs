//! What an event's hash covers ([`Linked`]) and where a writer's chain stands
//! ([`ChainHead`]).

use capgate_core::canonical::input_hash;
use capgate_core::error::BoxError;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Map, Value};

/// The fields an event's hash covers, as stored.
pub(crate) struct Linked<'a> {
    pub chain: &'a str,
    pub seq: i64,
    pub prev: Option<&'a str>,
    pub ty: &'a str,
    pub at: DateTime<Utc>,
    pub surface: &'a str,
    pub actor_id: &'a str,
    pub actor_kind: &'a str,
    pub execution_id: Option<&'a str>,
    pub capability_id: Option<&'a str>,
    pub correlation_id: Option<&'a str>,
    pub input_hash: Option<&'a str>,
    pub data: &'a Value,
}

impl Linked<'_> {
    /// Lower-case hex SHA-256 of the canonical JSON of every field (nulls included).
    pub(crate) fn hash(&self) -> Result<String, BoxError> {
        let text = |s: Option<&str>| s.map_or(Value::Null, |s| Value::String(s.to_string()));
        let mut m = Map::new();
        m.insert("chain".into(), Value::String(self.chain.to_string()));
        m.insert("seq".into(), Value::from(self.seq));
        m.insert("prev".into(), text(self.prev));
        m.insert("type".into(), Value::String(self.ty.to_string()));
        m.insert(
            "at".into(),
            Value::String(self.at.to_rfc3339_opts(SecondsFormat::Micros, true)),
        );
        m.insert("surface".into(), Value::String(self.surface.to_string()));
        m.insert("actorId".into(), Value::String(self.actor_id.to_string()));
        m.insert(
            "actorKind".into(),
            Value::String(self.actor_kind.to_string()),
        );
        m.insert("executionId".into(), text(self.execution_id));
        m.insert("capabilityId".into(), text(self.capability_id));
        m.insert("correlationId".into(), text(self.correlation_id));
        m.insert("inputHash".into(), text(self.input_hash));
        m.insert("data".into(), self.data.clone());
        Ok(input_hash(&Value::Object(m))?)
    }
}

/// Where a writer's chain stands: the last committed event's `seq` and hash.
#[derive(Debug, Clone)]
pub(crate) struct ChainHead {
    pub id: String,
    pub seq: i64,
    pub hash: Option<String>,
}

impl ChainHead {
    /// A new chain, named by a UUIDv7 (time-ordered, unique per writer).
    pub(crate) fn start() -> Self {
        ChainHead {
            id: uuid::Uuid::now_v7().to_string(),
            seq: 0,
            hash: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash is the documented recipe (docs/events.md), recomputed here independently:
    /// Python's `json.dumps(o, sort_keys=True, separators=(",", ":"))` of the same object,
    /// SHA-256, hex.
    #[test]
    fn an_events_hash_is_the_documented_recipe() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-04T10:00:00.123456Z")
            .expect("a time")
            .with_timezone(&Utc);
        let data = serde_json::json!({"sideEffect": "write", "risk": "high"});
        let linked = Linked {
            chain: "c1",
            seq: 2,
            prev: Some("ab"),
            ty: "capability.requested",
            at,
            surface: "aiSdk",
            actor_id: "u_dana",
            actor_kind: "user",
            execution_id: Some("exe_1"),
            capability_id: Some("orders.refund"),
            correlation_id: None,
            input_hash: None,
            data: &data,
        };
        assert_eq!(
            linked.hash().expect("hashes"),
            "f67df2516245ef2a6440ea131cf9bec9cecbbbfdf3e57f913a368ecb3814f45f"
        );
    }
}
