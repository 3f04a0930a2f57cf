//! A document's schemas as capgate reads them: local `$ref`s inlined (bounded in depth and
//! size), OpenAPI 3.0's dialect turned into JSON Schema, nulls found.

use super::{ImportError, MAX_REF_DEPTH, MAX_SCHEMA_NODES, invalid};
use serde_json::{Map, Value, json};

/// `~` and `/` escaped for a JSON pointer token.
pub(super) fn token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// Inlines local references of one document.
pub(super) struct Resolver<'a> {
    pub(super) doc: &'a Value,
}

impl Resolver<'_> {
    /// `value` (found at `at`) with every `$ref` replaced by its target, recursively.
    pub(super) fn inline(&self, value: &Value, at: &str) -> Result<Value, ImportError> {
        let mut stack = Vec::new();
        let mut nodes = 0usize;
        self.walk(value, at, &mut stack, &mut nodes)
    }

    fn walk(
        &self,
        value: &Value,
        at: &str,
        stack: &mut Vec<String>,
        nodes: &mut usize,
    ) -> Result<Value, ImportError> {
        *nodes += 1;
        // A chain of references (or of nested schemas) deeper than this is refused before
        // it can exhaust the stack: each level is a frame of this walk.
        if stack.len() > MAX_REF_DEPTH {
            return Err(invalid(
                at,
                format!("references chained more than {MAX_REF_DEPTH} deep"),
            ));
        }
        if *nodes > MAX_SCHEMA_NODES {
            return Err(invalid(
                at,
                format!("more than {MAX_SCHEMA_NODES} schema nodes once references are inlined"),
            ));
        }
        match value {
            Value::Object(map) => {
                if let Some(r) = map.get("$ref") {
                    let Some(r) = r.as_str() else {
                        return Err(invalid(at, "`$ref` is not a string"));
                    };
                    let Some(pointer) = r.strip_prefix('#') else {
                        return Err(invalid(
                            at,
                            format!(
                                "`$ref: {r}` is an external reference; only local ones (`#/…`) are inlined"
                            ),
                        ));
                    };
                    if stack.iter().any(|s| s == pointer) {
                        return Err(invalid(
                            at,
                            format!(
                                "`$ref: {r}` is a cycle ({} → {r}); a recursive schema cannot be inlined",
                                stack
                                    .iter()
                                    .map(|s| format!("#{s}"))
                                    .collect::<Vec<_>>()
                                    .join(" → ")
                            ),
                        ));
                    }
                    let decoded = percent_decode(pointer);
                    let Some(target) = self.doc.pointer(&decoded) else {
                        return Err(invalid(at, format!("`$ref: {r}` points at nothing")));
                    };
                    stack.push(pointer.to_string());
                    let mut out = self.walk(target, &decoded, stack, nodes)?;
                    stack.pop();
                    // Siblings of `$ref` (3.1) apply too: they are laid over the target.
                    if let Value::Object(o) = &mut out {
                        for (k, v) in map {
                            if k != "$ref" {
                                let child = format!("{at}/{}", token(k));
                                o.insert(k.clone(), self.walk(v, &child, stack, nodes)?);
                            }
                        }
                    }
                    return Ok(out);
                }
                let mut out = Map::new();
                for (k, v) in map {
                    let child = format!("{at}/{}", token(k));
                    out.insert(k.clone(), self.walk(v, &child, stack, nodes)?);
                }
                Ok(Value::Object(out))
            }
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, v)| self.walk(v, &format!("{at}/{i}"), stack, nodes))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            other => Ok(other.clone()),
        }
    }
}

/// A `$ref`'s fragment is URI-encoded (`%7B` for `{`); the pointer is not.
pub(super) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(h) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(h, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// OpenAPI 3.0's schema dialect to JSON Schema 2020-12 (what capgate validates with):
/// `nullable: true` becomes a `"null"` type, boolean `exclusiveMinimum`/`exclusiveMaximum`
/// become numbers, and OpenAPI-only keywords (`discriminator`, `xml`, `externalDocs`,
/// `example`) are dropped. 3.1 schemas are JSON Schema already and pass unchanged but for
/// the same dropped keywords.
pub(super) fn to_json_schema(schema: &mut Value, v30: bool) {
    match schema {
        Value::Object(map) => {
            for k in ["discriminator", "xml", "externalDocs", "example"] {
                map.remove(k);
            }
            if v30 {
                if map.remove("nullable") == Some(Value::Bool(true)) {
                    match map.get_mut("type") {
                        Some(Value::String(t)) => {
                            let t = t.clone();
                            map.insert("type".into(), json!([t, "null"]));
                        }
                        Some(_) => {}
                        None => {}
                    }
                }
                for (flag, bound) in [
                    ("exclusiveMinimum", "minimum"),
                    ("exclusiveMaximum", "maximum"),
                ] {
                    if let Some(Value::Bool(b)) = map.get(flag).cloned() {
                        map.remove(flag);
                        if b && let Some(n) = map.remove(bound) {
                            map.insert(flag.into(), n);
                        }
                    }
                }
            }
            for (k, v) in map.iter_mut() {
                // Property names are data, not keywords.
                if k == "properties" || k == "patternProperties" || k == "$defs" {
                    if let Value::Object(props) = v {
                        props.values_mut().for_each(|p| to_json_schema(p, v30));
                    }
                } else {
                    to_json_schema(v, v30);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| to_json_schema(v, v30)),
        _ => {}
    }
}

/// Whether a value holds a JSON `null` anywhere (TOML cannot write one).
pub(super) fn holds_null(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.iter().any(holds_null),
        Value::Object(o) => o.values().any(holds_null),
        _ => false,
    }
}
