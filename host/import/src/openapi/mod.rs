//! `capgate import openapi`'s importer: an OpenAPI 3.0/3.1 document (JSON or YAML) to
//! `[[capabilities]]` entries whose procedure is an HTTP upstream with a `request` mapping
//! (capgate_provider::http), so each imported operation calls the service as its own
//! clients do.
//!
//! Per operation: the id is `PREFIX.operationId` (sanitised to capgate's id and tool-name
//! syntax); the input schema is an object with one property per path, query and header
//! parameter plus `body` for an `application/json` request body; the output schema is the
//! first 2xx `application/json` response's; local `$ref`s (`#/…`) are inlined, a cycle or an
//! external reference is an error; `sideEffect`, `idempotent` and `risk` follow the method;
//! declared 4xx responses become `errors`; `expose = {}` (offered nowhere until the operator
//! says where). An operation that cannot be mapped faithfully (a non-JSON body or response,
//! a cookie parameter…) is skipped with a warning saying why.
//!
//! The document is hostile input: its size is bounded ([`MAX_DOCUMENT_BYTES`]), and so is
//! every schema after inlining ([`MAX_SCHEMA_NODES`]), so nested references cannot
//! multiply it without limit.

mod schema;

use crate::{Capability, Entry, Procedure};
use capgate_core::meta::{Risk, SideEffect};
use capgate_provider::HttpUpstreamConfig;
use schema::{Resolver, holds_null, to_json_schema, token};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// The largest document read.
pub const MAX_DOCUMENT_BYTES: usize = 16 * 1024 * 1024;
/// The deepest chain of `$ref`s inlined (`#/A` → `#/B` → …): a deeper one is refused,
/// located, instead of exhausting the stack.
const MAX_REF_DEPTH: usize = 64;

/// The most JSON nodes one schema may have once its references are inlined.
pub const MAX_SCHEMA_NODES: usize = 100_000;
/// The longest capability id written (its tool name, the id with `.` → `_`, must fit 64).
const MAX_ID_CHARS: usize = 64;

/// Why a document could not be imported; `at` is a JSON pointer into the document.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The document is larger than [`MAX_DOCUMENT_BYTES`].
    #[error("the document is {0} bytes; at most {MAX_DOCUMENT_BYTES} are read")]
    TooLarge(usize),
    /// The text is neither JSON nor YAML.
    #[error("not a JSON or YAML document: {0}")]
    Syntax(String),
    /// The document is not an OpenAPI 3.0/3.1 document, or a part of it has the wrong shape.
    #[error("{at}: {message}")]
    Invalid {
        /// Where (a JSON pointer; empty: the whole document).
        at: String,
        /// What is wrong.
        message: String,
    },
}

fn invalid(at: &str, message: impl Into<String>) -> ImportError {
    ImportError::Invalid {
        at: if at.is_empty() { "/".into() } else { at.into() },
        message: message.into(),
    }
}

/// What to import.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The service's base URL (default: the document's first `servers[].url`).
    pub base_url: Option<String>,
    /// The capability id prefix (default: from `info.title`).
    pub prefix: Option<String>,
    /// Only these operations (by `operationId`, or the derived name when there is none);
    /// empty: all.
    pub operations: Vec<String>,
}

/// The importer's result: entries to print and warnings (skipped operations and why).
#[derive(Debug, Default)]
pub struct Imported {
    /// One entry per imported operation, by path, then method.
    pub entries: Vec<Entry>,
    /// Operations left out, and anything else the operator should know.
    pub warnings: Vec<String>,
}

/// Parse a document: JSON when it starts with `{`, else YAML.
pub fn parse(bytes: &[u8]) -> Result<Value, ImportError> {
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(ImportError::TooLarge(bytes.len()));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| ImportError::Syntax(format!("not UTF-8 text: {e}")))?;
    let text = text.trim_start_matches('\u{feff}');
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| ImportError::Syntax(format!("JSON: {e}")))
    } else {
        serde_saphyr::from_str(text).map_err(|e| ImportError::Syntax(format!("YAML: {e}")))
    }
}

/// An id segment: ASCII letters, digits, `_` and `-`; anything else becomes `_`.
fn sanitise(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    while out.contains("__") {
        out = out.replace("__", "_");
    }
    out.trim_matches('_').to_string()
}

/// The default prefix: the title, lower case, as one id segment.
fn prefix_of(title: &str) -> String {
    let p = sanitise(&title.to_ascii_lowercase());
    if p.is_empty() { "api".into() } else { p }
}

/// A user-given prefix: each dot-separated segment sanitised.
pub fn clean_prefix(prefix: &str) -> String {
    prefix
        .split('.')
        .map(sanitise)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(".")
}

/// An error code from a response description: `Pet not found` → `PET_NOT_FOUND`; `HTTP_404`
/// when the description gives none.
fn error_code(description: &str, status: &str) -> String {
    let mut code = String::new();
    for c in description.chars() {
        if c.is_ascii_alphanumeric() {
            code.push(c.to_ascii_uppercase());
        } else if !code.ends_with('_') && !code.is_empty() {
            code.push('_');
        }
    }
    let code = code.trim_end_matches('_').to_string();
    if code.is_empty() || code.len() > 64 || !code.starts_with(|c: char| c.is_ascii_uppercase()) {
        format!("HTTP_{status}")
    } else {
        code
    }
}

fn is_json(media: &str) -> bool {
    let m = media
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    m == "application/json" || (m.starts_with("application/") && m.ends_with("+json"))
}

/// The `application/json` schema of a `content` map: `Ok(None)` when there is no content,
/// `Err` (a reason) when there is content but none of it JSON.
fn json_schema_of(content: Option<&Value>) -> Result<Option<(String, Value)>, String> {
    let Some(Value::Object(content)) = content else {
        return Ok(None);
    };
    if content.is_empty() {
        return Ok(None);
    }
    for (media, body) in content {
        if is_json(media) {
            let schema = body.get("schema").cloned().unwrap_or_else(|| json!({}));
            return Ok(Some((media.clone(), schema)));
        }
    }
    Err(format!(
        "its content is {} (only JSON is mapped)",
        content.keys().cloned().collect::<Vec<_>>().join(", ")
    ))
}

const METHODS: [&str; 7] = ["get", "head", "post", "put", "patch", "delete", "options"];

/// Import every operation of a parsed document.
pub fn import(doc: &Value, options: &Options) -> Result<Imported, ImportError> {
    let version = doc.get("openapi").and_then(Value::as_str).ok_or_else(|| {
        invalid(
            "/openapi",
            if doc.get("swagger").is_some() {
                "a Swagger 2.0 document; only OpenAPI 3.0 and 3.1 are imported"
            } else {
                "missing: not an OpenAPI 3.0/3.1 document"
            },
        )
    })?;
    let v30 = version.starts_with("3.0");
    if !v30 && !version.starts_with("3.1") {
        return Err(invalid(
            "/openapi",
            format!("version {version}; only OpenAPI 3.0 and 3.1 are imported"),
        ));
    }
    let base_url = match &options.base_url {
        Some(u) => u.clone(),
        None => doc
            .pointer("/servers/0/url")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                invalid(
                    "/servers",
                    "no `servers[0].url` to call the service at; give --base-url",
                )
            })?,
    };
    if url_is_relative(&base_url) {
        return Err(invalid(
            "/servers/0/url",
            format!("`{base_url}` is not an absolute http(s) URL; give --base-url"),
        ));
    }
    let prefix = match &options.prefix {
        Some(p) => clean_prefix(p),
        None => prefix_of(
            doc.pointer("/info/title")
                .and_then(Value::as_str)
                .unwrap_or("api"),
        ),
    };
    if prefix.is_empty() {
        return Err(invalid("", "the id prefix is empty once sanitised"));
    }
    let Some(paths) = doc.get("paths") else {
        return Ok(Imported {
            warnings: vec!["the document has no `paths`".into()],
            ..Default::default()
        });
    };
    let paths = paths
        .as_object()
        .ok_or_else(|| invalid("/paths", "not an object"))?;
    let resolver = Resolver { doc };
    let mut out = Imported::default();
    let mut ids = BTreeSet::new();
    let mut wanted: BTreeSet<&str> = options.operations.iter().map(String::as_str).collect();
    for (path, item) in paths {
        let item_at = format!("/paths/{}", token(path));
        // A path item may itself be a reference; its operations are inlined one by one
        // below, so a problem in one skips that operation only.
        let item = if item.get("$ref").is_some() {
            resolver.inline(item, &item_at)?
        } else {
            item.clone()
        };
        let Some(item_map) = item.as_object() else {
            return Err(invalid(&item_at, "not an object"));
        };
        for method in METHODS {
            let Some(op) = item_map.get(method) else {
                continue;
            };
            let at = format!("{item_at}/{method}");
            let operation = format!("{} {path}", method.to_ascii_uppercase());
            let name = op
                .get("operationId")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{method}_{path}"));
            if !options.operations.is_empty() && !wanted.remove(name.as_str()) {
                continue;
            }
            match operation_entry(
                &OperationCtx {
                    doc_at: &at,
                    item_at: &item_at,
                    path,
                    method,
                    v30,
                    base_url: &base_url,
                },
                op,
                item_map.get("parameters"),
                &resolver,
            ) {
                Ok(Some(mut cap)) => {
                    let mut id = capability_id(&prefix, &name);
                    let mut n = 2;
                    while ids.contains(&id) {
                        id = capability_id(&prefix, &format!("{name}_{n}"));
                        n += 1;
                    }
                    ids.insert(id.clone());
                    cap.id = id.clone();
                    let Procedure::Http(http) = &mut cap.procedure else {
                        continue;
                    };
                    http.target = id;
                    // The entry must be one an HTTP upstream accepts.
                    if let Err(e) = capgate_provider::HttpUpstream::new((**http).clone()) {
                        out.warnings.push(format!(
                            "skipped {operation} ({name}): its upstream would be refused: {e}"
                        ));
                        continue;
                    }
                    out.entries.push(Entry {
                        source: operation,
                        capability: cap,
                    });
                }
                Ok(None) => {}
                Err(Skip(why)) => out
                    .warnings
                    .push(format!("skipped {operation} ({name}): {why}")),
            }
        }
    }
    for missing in wanted {
        out.warnings
            .push(format!("no operation `{missing}` in the document"));
    }
    Ok(out)
}

fn url_is_relative(url: &str) -> bool {
    !(url.starts_with("http://") || url.starts_with("https://"))
}

/// `prefix.name`, the name sanitised and the whole at most 64 characters (its tool name, the id with `.` → `_`, must fit).
pub fn capability_id(prefix: &str, name: &str) -> String {
    let mut name = sanitise(name);
    if name.is_empty() {
        name = "operation".into();
    }
    let room = MAX_ID_CHARS.saturating_sub(prefix.len() + 1).max(1);
    let name: String = name.chars().take(room).collect();
    format!("{prefix}.{}", name.trim_end_matches('_'))
}

/// Why an operation is left out (a warning, not an error).
struct Skip(String);

struct OperationCtx<'a> {
    doc_at: &'a str,
    item_at: &'a str,
    path: &'a str,
    method: &'a str,
    v30: bool,
    base_url: &'a str,
}

/// Headers OpenAPI says a parameter cannot describe (they are ignored by its own rules).
const IGNORED_HEADER_PARAMS: [&str; 3] = ["accept", "content-type", "authorization"];

fn operation_entry(
    ctx: &OperationCtx<'_>,
    op: &Value,
    shared: Option<&Value>,
    resolver: &Resolver<'_>,
) -> Result<Option<Capability>, Skip> {
    let err = |e: ImportError| Skip(e.to_string());
    // The operation's parameters override the path item's by (name, in).
    let mut params: Vec<(String, String, Value)> = Vec::new();
    for (list, at) in [
        (shared, format!("{}/parameters", ctx.item_at)),
        (op.get("parameters"), format!("{}/parameters", ctx.doc_at)),
    ] {
        let Some(list) = list else { continue };
        let list = resolver.inline(list, &at).map_err(err)?;
        let Some(list) = list.as_array() else {
            return Err(Skip(format!("{at}: not an array")));
        };
        for p in list {
            let name = p.get("name").and_then(Value::as_str).unwrap_or_default();
            let place = p.get("in").and_then(Value::as_str).unwrap_or_default();
            if name.is_empty() {
                return Err(Skip(format!("{at}: a parameter without a name")));
            }
            params.retain(|(n, i, _)| !(n == name && i == place));
            params.push((name.to_string(), place.to_string(), p.clone()));
        }
    }
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut query = Vec::new();
    let mut headers = BTreeMap::new();
    for (name, place, p) in &params {
        let is_required = p.get("required").and_then(Value::as_bool).unwrap_or(false);
        match place.as_str() {
            "path" | "query" => {}
            "header" if IGNORED_HEADER_PARAMS.contains(&name.to_ascii_lowercase().as_str()) => {
                continue;
            }
            "header" => {}
            "cookie" if !is_required => continue,
            other => {
                return Err(Skip(format!(
                    "its parameter `{name}` is in `{other}`, which is not mapped"
                )));
            }
        }
        if properties.contains_key(name) {
            return Err(Skip(format!(
                "two parameters are named `{name}` (one input field each is needed)"
            )));
        }
        let schema = match (p.get("schema"), p.get("content")) {
            (Some(s), _) => s.clone(),
            (None, Some(c)) => match json_schema_of(Some(c)) {
                Ok(Some((_, s))) => s,
                _ => return Err(Skip(format!("its parameter `{name}` is not JSON"))),
            },
            (None, None) => json!({}),
        };
        let mut schema = schema;
        if let (Some(d), Value::Object(m)) = (p.get("description"), &mut schema)
            && !m.contains_key("description")
        {
            m.insert("description".into(), d.clone());
        }
        if place == "query" && schema.get("type") == Some(&json!("object")) {
            return Err(Skip(format!(
                "its query parameter `{name}` is an object (only scalars and arrays are mapped)"
            )));
        }
        properties.insert(name.clone(), schema);
        if is_required || place == "path" {
            required.push(json!(name));
        }
        match place.as_str() {
            "query" => query.push(name.clone()),
            "header" => {
                headers.insert(name.clone(), name.clone());
            }
            _ => {}
        }
    }
    for placeholder in placeholders(ctx.path) {
        if !params
            .iter()
            .any(|(n, place, _)| n == &placeholder && place == "path")
        {
            return Err(Skip(format!(
                "its path parameter `{placeholder}` is not declared"
            )));
        }
    }
    let mut body_field = None;
    if let Some(body) = op.get("requestBody") {
        let at = format!("{}/requestBody", ctx.doc_at);
        let body = resolver.inline(body, &at).map_err(err)?;
        match json_schema_of(body.get("content")) {
            Ok(Some((_, schema))) => {
                let field = ["body", "requestBody", "_body"]
                    .into_iter()
                    .find(|f| !properties.contains_key(*f))
                    .unwrap_or("_body");
                properties.insert(field.into(), schema);
                if body.get("required").and_then(Value::as_bool) == Some(true) {
                    required.push(json!(field));
                }
                body_field = Some(field.to_string());
            }
            Ok(None) => {}
            Err(why) => return Err(Skip(format!("its request body: {why}"))),
        }
    }
    // The output: the first 2xx response, 200 and 201 first.
    let responses = op.get("responses").and_then(Value::as_object);
    let mut output_schema = None;
    let mut errors = BTreeMap::new();
    if let Some(responses) = responses {
        let mut success: Vec<&String> = responses
            .keys()
            .filter(|k| k.starts_with('2') && k.len() == 3)
            .collect();
        success.sort_by_key(|k| match k.as_str() {
            "200" => 0,
            "201" => 1,
            "2XX" | "2xx" => 3,
            _ => 2,
        });
        if let Some(code) = success.first() {
            let at = format!("{}/responses/{}", ctx.doc_at, token(code));
            let resp = resolver.inline(&responses[*code], &at).map_err(err)?;
            match json_schema_of(resp.get("content")) {
                Ok(Some((_, schema))) => output_schema = Some(schema),
                Ok(None) => {}
                Err(why) => return Err(Skip(format!("its {code} response: {why}"))),
            }
        }
        for (status, resp) in responses {
            if !(status.starts_with('4')
                && status.len() == 3
                && status[1..].bytes().all(|b| b.is_ascii_digit()))
            {
                continue;
            }
            let at = format!("{}/responses/{status}", ctx.doc_at);
            let resp = resolver.inline(resp, &at).map_err(err)?;
            let description = resp
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default();
            errors.insert(status.clone(), error_code(description, status));
        }
    }
    let mut input_schema = json!({
        "type": "object",
        "properties": properties,
        "additionalProperties": false,
    });
    if !required.is_empty() {
        input_schema["required"] = Value::Array(required);
    }
    to_json_schema(&mut input_schema, ctx.v30);
    if let Some(s) = &mut output_schema {
        to_json_schema(s, ctx.v30);
    }
    if holds_null(&input_schema) || output_schema.as_ref().is_some_and(holds_null) {
        return Err(Skip(
            "its schema holds a JSON null (e.g. `default: null`), which TOML cannot write".into(),
        ));
    }
    let method = ctx.method.to_ascii_uppercase();
    let read = matches!(ctx.method, "get" | "head" | "options");
    let description = [op.get("summary"), op.get("description")]
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::trim)
        .find(|s| !s.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{method} {}", ctx.path));
    Ok(Some(Capability {
        id: String::new(),
        description,
        side_effect: if read {
            SideEffect::Read
        } else {
            SideEffect::Write
        },
        risk: match ctx.method {
            "get" | "head" | "options" => Risk::Low,
            "delete" => Risk::High,
            _ => Risk::Medium,
        },
        idempotent: matches!(ctx.method, "get" | "head" | "options" | "put" | "delete"),
        input_schema,
        output_schema,
        procedure: Procedure::Http(Box::new(HttpUpstreamConfig {
            target: String::new(),
            url: ctx.base_url.to_string(),
            request: Some(capgate_provider::HttpRequestMapping {
                method,
                path: template_of(ctx.path),
                query,
                headers,
                body: body_field,
            }),
            errors,
            ..Default::default()
        })),
    }))
}

/// The document's path as a mapping template: the literal parts percent-encoded where
/// they hold characters a path cannot carry as they are (`/a b/{id}` → `/a%20b/{id}`).
fn template_of(path: &str) -> String {
    let mut out = String::new();
    let mut in_placeholder = false;
    for c in path.chars() {
        match c {
            '{' => in_placeholder = true,
            '}' => in_placeholder = false,
            _ => {}
        }
        if in_placeholder
            || c == '}'
            || c.is_ascii_alphanumeric()
            || "/-._~!$&'()*+,;=:@%".contains(c)
        {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

/// The `{name}`s of a path template.
fn placeholders(path: &str) -> Vec<String> {
    path.split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}').map(|(n, _)| n.to_string()))
        .collect()
}

#[cfg(test)]
mod tests;
