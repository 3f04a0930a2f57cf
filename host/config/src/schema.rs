//! The JSON Schema of `capgate.toml` (docs/capgate.schema.json), generated from the key
//! declarations like the reference, so an editor validates the file as it is typed
//! (Taplo / Even Better TOML read a `#:schema` directive at the top of the file).
//!
//! Each table's schema is built from its [`Key`]s (`#[derive(Keys)]`
//! implements [`Schema`] for it with [`table`]): a property per key with its doc as the
//! `description`, its declared range as `minimum` / `maximum`, its default as `default`,
//! the keys without a default as `required`, and `additionalProperties: false`, as the
//! sections' `deny_unknown_fields` has it. A key's type maps to its schema through
//! [`Schema`], implemented here for the types the sections hold: the primitives, `Option`
//! (a key left out), `Vec`, `BTreeMap<String, _>`, the wire enums by their spellings, and
//! the settings of other crates (`expose`, `retry`, `procedure.http`, …) by their fields.
//!
//! What a schema cannot say (a plugin named in a policy exists, a pin is a SHA-256) stays
//! `capgate check`'s. The schema declares draft 2020-12 but uses only keywords that mean
//! the same in every draft since 4 (`type`, `enum`, `properties`, `required`,
//! `additionalProperties`, `items`, `anyOf`, `minimum`, `maximum`), since Taplo, the TOML
//! language server most editors use, implements draft 4.
//!
//! ```
//! let schema = capgate_config::schema::json_schema();
//! assert_eq!(schema["properties"]["gateway"]["properties"]["listen"]["type"], "string");
//! assert_eq!(schema["properties"]["gateway"]["additionalProperties"], false);
//! ```

use crate::keys::{Bound, Key, KeyDefault};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// The JSON Schema of a key's type (TOML has no `null`: an `Option` is a key left out, so
/// its schema is its content's).
pub trait Schema {
    /// The schema, without description or default (those are the key's).
    fn schema() -> Value;
}

/// The JSON Schema (draft 2020-12) of the whole file.
pub fn json_schema() -> Value {
    let mut root = Map::new();
    root.insert(
        "$schema".into(),
        "https://json-schema.org/draft/2020-12/schema".into(),
    );
    root.insert("title".into(), "capgate.toml".into());
    root.insert(
        "description".into(),
        "capgate's deployment file. Generated from the key declarations in host/config \
         (docs/configuration.md lists the same keys); `capgate check` also checks what a \
         schema cannot (references between sections, pins, paths)."
            .into(),
    );
    if let Value::Object(table) = <crate::Config as Schema>::schema() {
        root.extend(table);
    }
    Value::Object(root)
}

/// [`json_schema`] as the checked-in file holds it: pretty-printed with every object's
/// keys sorted (whatever order serde_json's features keep them in), one trailing newline.
pub fn json_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&Sorted(&json_schema())).unwrap_or_default();
    text.push('\n');
    text
}

/// A JSON value serialized with each object's keys in sorted order.
struct Sorted<'a>(&'a Value);

impl serde::Serialize for Sorted<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Value::Object(m) => {
                let mut entries: Vec<(&String, &Value)> = m.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, &Sorted(v))?;
                }
                map.end()
            }
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for v in items {
                    seq.serialize_element(&Sorted(v))?;
                }
                seq.end()
            }
            v => v.serialize(s),
        }
    }
}

/// The schema of a table from its keys (those one segment below it, in declaration order;
/// the deeper ones are inside their own tables' schemas already).
pub fn table(keys: &[Key]) -> Value {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for key in keys {
        let Some(name) = key.pointer.strip_prefix('/') else {
            continue;
        };
        if name.contains('/') {
            continue;
        }
        let name = name.replace("~1", "/").replace("~0", "~");
        let mut property = match key.schema.clone() {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        property.insert("description".into(), key.doc.into());
        if let KeyDefault::Value(v) = &key.default {
            property.insert("default".into(), v.clone());
        }
        if key.default == KeyDefault::Required {
            required.push(Value::String(name.clone()));
        }
        bound(&mut property, key.minimum.as_ref(), "minimum");
        bound(&mut property, key.maximum.as_ref(), "maximum");
        properties.insert(name, Value::Object(property));
    }
    let mut schema = Map::new();
    schema.insert("type".into(), "object".into());
    schema.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".into(), Value::Array(required));
    }
    schema.insert("additionalProperties".into(), false.into());
    Value::Object(schema)
}

/// Sets `minimum` (or `exclusiveMinimum`) / `maximum` from a declared range's end,
/// replacing the bound the type implies.
fn bound(property: &mut Map<String, Value>, end: Option<&Bound>, name: &str) {
    let Some(end) = end else { return };
    let exclusive = format!("exclusive{}{}", name[..1].to_uppercase(), &name[1..]);
    property.remove(name);
    property.remove(&exclusive);
    let key = if end.inclusive {
        name.to_string()
    } else {
        exclusive
    };
    property.insert(key, Value::Number(end.value.clone()));
}

/// A key's type in words for the reference: `string`, `integer`, `array of string`,
/// `table`, `tables` (a map of tables by name), `array of tables`, `any`.
pub fn kind(schema: &Value) -> String {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let mut kinds: Vec<&str> = values
            .iter()
            .map(|v| match v {
                Value::Bool(_) => "boolean",
                Value::Number(_) => "number",
                _ => "string",
            })
            .collect();
        kinds.dedup();
        return kinds.join(" or ");
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        return any.iter().map(kind).collect::<Vec<_>>().join(" or ");
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("array") => {
            let items = schema.get("items").map_or_else(|| "any".into(), kind);
            if items == "table" {
                "array of tables".into()
            } else {
                format!("array of {items}")
            }
        }
        Some("object") => match schema.get("additionalProperties") {
            Some(Value::Object(entry)) if schema.get("properties").is_none() => {
                match kind(&Value::Object(entry.clone())).as_str() {
                    "table" => "tables".into(),
                    "any" => "table".into(),
                    k => format!("table of {k}"),
                }
            }
            _ => "table".into(),
        },
        Some(t) => t.into(),
        None => "any".into(),
    }
}

/// The values an enum key (or an array of them) accepts, in words: `` `fresh`, `pooled` ``.
pub fn values(schema: &Value) -> Option<String> {
    let schema = match schema.get("type").and_then(Value::as_str) {
        Some("array") => schema.get("items")?,
        _ => schema,
    };
    let values = schema.get("enum")?.as_array()?;
    Some(
        values
            .iter()
            .map(|v| match v {
                Value::String(s) => format!("`{s}`"),
                v => format!("`{v}`"),
            })
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// A secret key's schema: its own, or `{ env = "VAR" }` / `{ file = "path" }` in its place.
pub fn secret_or(schema: Value, secret: bool) -> Value {
    if !secret {
        return schema;
    }
    json!({ "anyOf": [
        schema,
        closed(json!({
            "env": { "type": "string", "description": "The environment variable of the capgate process holding the value." },
            "prefix": { "type": "string", "description": "Put before the value (e.g. `Bearer `)." },
        }), &["env"]),
        closed(json!({
            "file": { "type": "string", "description": "The file holding the value (relative to the config file; one trailing newline is removed)." },
            "prefix": { "type": "string", "description": "Put before the value." },
        }), &["file"]),
    ] })
}

/// An enum of wire spellings.
fn spellings<'a>(words: impl IntoIterator<Item = &'a str>) -> Value {
    json!({ "type": "string", "enum": words.into_iter().collect::<Vec<_>>() })
}

/// An object with these properties and no others.
fn closed(properties: Value, required: &[&str]) -> Value {
    let mut schema =
        json!({ "type": "object", "properties": properties, "additionalProperties": false });
    if !required.is_empty() {
        schema["required"] = json!(required);
    }
    schema
}

macro_rules! schema_of {
    ($($ty:ty => $schema:expr;)+) => {
        $(impl Schema for $ty {
            fn schema() -> Value {
                $schema
            }
        })+
    };
}

schema_of! {
    bool => json!({ "type": "boolean" });
    String => json!({ "type": "string" });
    std::path::PathBuf => json!({ "type": "string" });
    u32 => json!({ "type": "integer", "minimum": 0, "maximum": u32::MAX });
    u64 => json!({ "type": "integer", "minimum": 0 });
    usize => json!({ "type": "integer", "minimum": 0 });
    i64 => json!({ "type": "integer" });
    f64 => json!({ "type": "number" });
    // Any JSON a plugin or a policy reads (`config`, `context`, `attributes`).
    Value => json!({});
    capgate_core::actor::Surface => spellings(capgate_core::actor::Surface::ALL.map(|s| s.as_str()));
    capgate_core::actor::ActorKind => spellings(capgate_core::actor::ActorKind::ALL.map(|s| s.as_str()));
    capgate_core::meta::SideEffect => spellings(capgate_core::meta::SideEffect::ALL.map(|s| s.as_str()));
    capgate_core::meta::Risk => spellings(capgate_core::meta::Risk::ALL.map(|s| s.as_str()));
    capgate_core::meta::Discovery => spellings(capgate_core::meta::Discovery::ALL.map(|s| s.as_str()));
    capgate_core::policy::Phase => spellings(capgate_core::policy::Phase::ALL.map(|s| s.as_str()));
    crate::model::IsolationMode => spellings(crate::model::IsolationMode::ALL.map(|m| m.as_str()));
    crate::model::PolicyMode => spellings(crate::model::PolicyMode::ALL.map(|m| m.as_str()));
    crate::model::WebhookFormat => spellings(crate::model::WebhookFormat::ALL.map(|m| m.as_str()));
    crate::model::ExportTo => spellings(crate::model::ExportTo::ALL.map(|m| m.as_str()));
    crate::model::RateLimitScope => spellings(crate::model::RateLimitScope::ALL.map(|m| m.as_str()));
    crate::model::JwtAlgorithm => spellings(crate::model::JwtAlgorithm::ALL.map(|m| m.as_str()));
    crate::model::StringOrList => json!({ "anyOf": [
        { "type": "string" },
        { "type": "array", "items": { "type": "string" } },
    ] });
    crate::model::AttributesSetting => json!({ "anyOf": [
        { "type": "string", "description": "A JSON pointer to an object of attributes." },
        { "type": "object", "additionalProperties": { "type": "string" }, "description": "Attribute name → JSON pointer." },
    ] });
    // capgate-core's own settings, written inline in a capability: their keys are
    // declared field for field in `crate::model::declared`, which gives them their schema.
    capgate_core::meta::Expose => <crate::model::declared::ExposeKeys as Schema>::schema();
    capgate_core::meta::RetryConfig => <crate::model::declared::RetryKeys as Schema>::schema();
    capgate_core::meta::ApprovalConfig => <crate::model::declared::ApprovalKeys as Schema>::schema();
    capgate_core::meta::AdapterNames => <crate::model::declared::AdapterKeys as Schema>::schema();
    capgate_core::error::ErrorCode => spellings(capgate_core::error::ErrorCode::ALL.map(|c| c.as_str()));
    crate::model::ProxyAddress => json!({ "type": "string", "description": "An IPv4 or IPv6 address." });
    crate::model::SecretString => secret_or(json!({ "type": "string" }), true);
    crate::model::HttpMethod => json!({ "enum": capgate_core::defaults::http_upstream::METHODS });
    crate::model::ErrorStatuses => json!({ "type": "object", "patternProperties": { "^[45][0-9][0-9]$": { "type": "string", "pattern": "^[A-Z][A-Z0-9_]{0,63}$" } }, "additionalProperties": false });
    crate::model::SchemaRef => json!({ "anyOf": [
        { "type": "string", "description": "A JSON Schema file, relative to the config file." },
        { "type": "object", "description": "A JSON Schema written inline." },
    ] });
    crate::model::AuthorizeSetting => json!({ "anyOf": [
        { "type": "string", "enum": ["authenticated"], "description": "Any authenticated caller may use every operation (explicit opt-in)." },
        closed(json!({
            "plugin": { "type": "string", "description": "The `[plugins.NAME]` entry bound as the authorizer." },
            "config": { "description": "The binding's `config` JSON (default `null`)." },
        }), &["plugin"]),
    ] });
    crate::model::SecureCookieSetting => json!({ "enum": ["auto", true, false] });
    crate::model::SecretSetting => json!({ "anyOf": [
        { "type": "string", "description": "The value as written." },
        closed(json!({
            "env": { "type": "string", "description": "An environment variable of the capgate process." },
            "file": { "type": "string", "description": "A file (relative to the config file); one trailing newline is removed." },
            "prefix": { "type": "string", "description": "Put before the value (e.g. `Bearer `)." },
        }), &[]),
    ] });
}

impl<T: Schema> Schema for Option<T> {
    fn schema() -> Value {
        T::schema()
    }
}

impl<T: Schema> Schema for Vec<T> {
    fn schema() -> Value {
        json!({ "type": "array", "items": T::schema() })
    }
}

impl<T: Schema> Schema for BTreeMap<String, T> {
    fn schema() -> Value {
        json!({ "type": "object", "additionalProperties": T::schema() })
    }
}
