//! capgate's importers: what a service already describes, turned into `capgate.toml`
//! capability entries an operator reviews and pastes.
//!
//! - [`openapi`]: an OpenAPI 3.0/3.1 document (JSON or YAML) → one entry per operation,
//!   whose procedure is an HTTP upstream with a `request` mapping.
//! - [`mcp`]: an MCP upstream's tool listing → one entry per tool, pinned to the digest of
//!   the definition it was made from; and the difference between a listing and the pins a
//!   configuration holds.
//!
//! Both produce typed [`Entry`]s (core's [`SideEffect`] and [`Risk`], the provider's HTTP
//! upstream or the file's `procedure.mcp` section), and [`to_toml`] writes them with a TOML
//! library. The `capgate import` command is presentation over this crate.
//!
//! ```
//! let doc = capgate_import::openapi::parse(br#"{"openapi": "3.1.0",
//!   "info": {"title": "Pets", "version": "1"},
//!   "servers": [{"url": "https://pets.example.com"}],
//!   "paths": {"/pets/{petId}": {"get": {"operationId": "getPet",
//!     "parameters": [{"name": "petId", "in": "path", "required": true,
//!                     "schema": {"type": "string"}}],
//!     "responses": {"200": {"description": "ok", "content": {"application/json":
//!       {"schema": {"type": "object"}}}}}}}}}"#)?;
//! let imported = capgate_import::openapi::import(&doc, &Default::default())?;
//! let text = capgate_import::to_toml(&imported.entries);
//! assert!(text.contains("id = \"pets.getPet\""));
//! # Ok::<(), capgate_import::openapi::ImportError>(())
//! ```

pub mod mcp;
pub mod openapi;

use capgate_core::meta::{Risk, SideEffect};
use serde_json::Value;

/// One imported entry: a comment naming what it came from, and the capability.
#[derive(Debug, Clone)]
pub struct Entry {
    /// `GET /pets/{petId}`, or ``tool `echo` of MCP upstream `files` ``: written as a
    /// comment above the entry.
    pub source: String,
    /// The `[[capabilities]]` entry.
    pub capability: Capability,
}

/// A `[[capabilities]]` entry as an importer makes it: offered nowhere (`expose = {}`)
/// until the operator says where.
#[derive(Debug, Clone)]
pub struct Capability {
    /// The capability id.
    pub id: String,
    /// For the model.
    pub description: String,
    /// Read or write.
    pub side_effect: SideEffect,
    /// Low, medium or high.
    pub risk: Risk,
    /// Whether a retry repeats nothing.
    pub idempotent: bool,
    /// The input's JSON Schema (no nulls: TOML has none).
    pub input_schema: Value,
    /// The output's JSON Schema, if known (no nulls).
    pub output_schema: Option<Value>,
    /// How it is reached.
    pub procedure: Procedure,
}

/// How an imported capability is reached: one of the file's procedure kinds.
#[derive(Debug, Clone)]
pub enum Procedure {
    /// `procedure.http`: the provider's HTTP upstream, with its request mapping.
    Http(Box<capgate_provider::HttpUpstreamConfig>),
    /// `procedure.mcp`: a tool of a configured MCP upstream, pinned.
    Mcp(capgate_config::McpProcedureSection),
}

/// The entries as `capgate.toml` text: each `[[capabilities]]` preceded by a comment naming
/// its source and followed by a blank line, one key a line, schemas and the procedure as
/// inline tables (the form the examples of docs/guides/upstreams.md use).
pub fn to_toml(entries: &[Entry]) -> String {
    use toml_edit::{ArrayOfTables, DocumentMut, InlineTable, Item, Table, value};
    let mut text = String::new();
    for entry in entries {
        let c = &entry.capability;
        let mut t = Table::new();
        t.decor_mut()
            .set_prefix(format!("# {}\n", entry.source.replace(['\n', '\r'], " ")));
        t.insert("id", value(c.id.as_str()));
        t.insert("description", value(c.description.as_str()));
        t.insert("expose", value(InlineTable::new()));
        t.insert("sideEffect", value(c.side_effect.as_str()));
        t.insert("risk", value(c.risk.as_str()));
        t.insert("idempotent", value(c.idempotent));
        t.insert("inputSchema", Item::Value(toml_value(&c.input_schema)));
        if let Some(o) = &c.output_schema {
            t.insert("outputSchema", Item::Value(toml_value(o)));
        }
        let (kind, procedure) = match &c.procedure {
            Procedure::Http(h) => ("http", serde_json::to_value(&**h)),
            Procedure::Mcp(m) => ("mcp", serde_json::to_value(m)),
        };
        // Both serialize to a JSON object of strings, lists and tables (no map with a
        // non-string key, no number beyond a TOML integer), so this cannot fail.
        let procedure = in_reading_order(procedure.unwrap_or(Value::Null));
        let mut inline = InlineTable::new();
        inline.insert(kind, procedure);
        t.insert("procedure", value(inline));
        let mut one = ArrayOfTables::new();
        one.push(t);
        let mut doc = DocumentMut::new();
        doc.insert("capabilities", Item::ArrayOfTables(one));
        text.push_str(&doc.to_string());
        text.push('\n');
    }
    text
}

/// The order a reader wants a procedure's keys in (where it is going, how, then what its
/// answers mean), not the alphabetical order of a JSON object; any other key after them.
const READING_ORDER: [&str; 14] = [
    "target",
    "url",
    "healthUrl",
    "method",
    "path",
    "query",
    "upstream",
    "tool",
    "toolSha256",
    "headers",
    "body",
    "connectTimeoutMs",
    "caFile",
    "request",
];

/// A procedure's table with its keys (and its request mapping's) in [`READING_ORDER`],
/// `errors` last.
fn in_reading_order(v: Value) -> toml_edit::Value {
    let Value::Object(map) = v else {
        return toml_value(&v);
    };
    let rank = |k: &str| {
        READING_ORDER
            .iter()
            .position(|o| *o == k)
            .unwrap_or(usize::MAX)
    };
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_by_key(|k| rank(k));
    let mut t = toml_edit::InlineTable::new();
    for k in keys {
        let value = match (k.as_str(), &map[k]) {
            ("request", r) => in_reading_order(r.clone()),
            (_, other) => toml_value(other),
        };
        insert(&mut t, k, value);
    }
    t.into()
}

/// Insert `key`, quoted when it is all digits (`"404" = …` reads as the string it is).
fn insert(t: &mut toml_edit::InlineTable, key: &str, value: toml_edit::Value) {
    let quoted = !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit());
    match toml_edit::Key::parse(&format!("\"{key}\"")) {
        Ok(mut parsed) if quoted && parsed.len() == 1 => {
            let k = parsed.remove(0);
            t.insert_formatted(&k, value);
        }
        _ => {
            t.insert(key, value);
        }
    }
}

/// A JSON value as TOML writes it inline, for reports (`capgate import mcp --diff`).
pub(crate) fn shown(v: &Value) -> String {
    toml_value(v).to_string().trim().to_string()
}

/// A JSON value as a TOML value: objects as inline tables, keys in their order; a null
/// (which TOML cannot hold) as an empty table, never reached for a schema the importers
/// cleaned.
fn toml_value(v: &Value) -> toml_edit::Value {
    use toml_edit::{Array, InlineTable};
    match v {
        Value::Null => InlineTable::new().into(),
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.into(),
            None => n.as_f64().unwrap_or(f64::MAX).into(),
        },
        Value::String(s) => s.as_str().into(),
        Value::Array(items) => items.iter().map(toml_value).collect::<Array>().into(),
        Value::Object(map) => {
            let mut t = InlineTable::new();
            for (k, v) in map {
                insert(&mut t, k, toml_value(v));
            }
            t.into()
        }
    }
}
