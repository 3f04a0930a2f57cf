//! The load-time check of a `plugin = "cedar"` binding. Its shape is checked here; the
//! policy set itself is parsed, its annotations checked and the set validated, in Cedar's
//! strict mode, by the shipped component, in the sandbox, given [`check_config`]: the
//! binding's config with a schema generated from the capabilities it is attached to. The
//! host does not link Cedar: its crate turns on serde_json's `preserve_order` for every
//! crate built with it, which would change the key order capgate's canonical JSON relies
//! on. So the check runs the very parser and validator the calls run, and [`problems`]
//! reads the component's answer back. The generated schema:
//!
//! - principal type `Actor`: `kind` (String) and `attributes`, a record of the optional
//!   attributes `actorAttributes` declares;
//! - one action per capability, `Action::"<capability id>"`, applying to `Actor` and
//!   `Capability`;
//! - resource type `Capability`: `sideEffect`, `risk` (String) and `tags` (`Set<String>`);
//! - each action's context: `phase`, `surface` (String), `input` (the capability's input
//!   schema: objects as records, with its `required` members required, strings, booleans,
//!   arrays as sets, every number a `decimal`), `context` (the optional attributes
//!   `contextAttributes` declares) and the optional `approval` (`id`, `approverId`,
//!   `approverKind`).
//!
//! A member of the input schema that has none of those types is left out of the schema,
//! so a policy that reads it is refused rather than guessed at. A binding attached to no
//! capability is parsed and its annotations checked, but there is no action to validate
//! it against.

use crate::{Attached, Found, Problem};
use serde_json::{Map, Value, json};

/// The keys of the configuration.
pub const KEYS: &[&str] = &[
    "policies",
    "policiesFile",
    "sha256",
    "actorAttributes",
    "contextAttributes",
];

/// Why a `policiesFile` could not be inlined.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// `policiesFile` without `sha256`, or with `policies` beside it.
    #[error("{0}")]
    Shape(String),
    /// The file cannot be read.
    #[error("cannot read {path}: {message}")]
    Unreadable {
        /// The path as the configuration gives it.
        path: String,
        /// The operating system's reason.
        message: String,
    },
    /// The file is not what `sha256` pins.
    #[error("{path} has SHA-256 {actual}, but the configuration pins {pinned}")]
    Digest {
        /// The path as the configuration gives it.
        path: String,
        /// What `sha256` says.
        pinned: String,
        /// What the file hashes to.
        actual: String,
    },
}

/// A `cedar` config whose `policiesFile` has been read: the config the component is given
/// (`policies` inline, `policiesFile` and `sha256` gone) and the file's text, if it came
/// from one.
#[derive(Debug, Clone)]
pub struct Inlined {
    /// What the component is given.
    pub config: Value,
    /// `(path as configured, text)` when the policies came from a file.
    pub file: Option<(String, String)>,
}

/// Read `policiesFile` (through `read`, relative to the configuration as the caller
/// resolves it), check it against `sha256`, and put its text in `policies`. A config
/// without `policiesFile` comes back as it is.
pub fn inline(
    config: &Value,
    read: impl FnOnce(&str) -> std::io::Result<Vec<u8>>,
) -> Result<Inlined, FileError> {
    let Some(top) = config.as_object() else {
        return Ok(Inlined {
            config: config.clone(),
            file: None,
        });
    };
    let Some(path) = top.get("policiesFile") else {
        return Ok(Inlined {
            config: config.clone(),
            file: None,
        });
    };
    let path = path
        .as_str()
        .ok_or_else(|| FileError::Shape("`policiesFile` must be a path".into()))?;
    if top.contains_key("policies") {
        return Err(FileError::Shape(
            "give `policies` or `policiesFile`, not both".into(),
        ));
    }
    let pinned = top.get("sha256").and_then(Value::as_str).ok_or_else(|| {
        FileError::Shape(
            "`policiesFile` needs `sha256`, the lowercase hex SHA-256 of the file".into(),
        )
    })?;
    let bytes = read(path).map_err(|e| FileError::Unreadable {
        path: path.into(),
        message: e.to_string(),
    })?;
    let actual: String = {
        use sha2::{Digest, Sha256};
        Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    if actual != pinned {
        return Err(FileError::Digest {
            path: path.into(),
            pinned: pinned.into(),
            actual,
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| FileError::Unreadable {
        path: path.into(),
        message: "not UTF-8".into(),
    })?;
    let mut out = top.clone();
    out.remove("policiesFile");
    out.remove("sha256");
    out.insert("policies".into(), Value::String(text.clone()));
    Ok(Inlined {
        config: Value::Object(out),
        file: Some((path.into(), text)),
    })
}

/// Check the shape of a `cedar` binding's `config` (with `policiesFile` already inlined,
/// see [`inline`]): its keys, `policies`, and the attribute types it declares. The policy
/// set itself is the component's to check ([`check_config`]).
pub fn check(config: &Value, _capabilities: &[Attached<'_>]) -> Vec<Found> {
    let mut out = Vec::new();
    let bad = |out: &mut Vec<Found>, pointer: String, message: String| {
        out.push(Found {
            pointer,
            offset: None,
            problem: Problem::Config { message },
        });
    };
    let Some(top) = config.as_object() else {
        bad(
            &mut out,
            String::new(),
            "must be a table, e.g. config = { policies = '''permit(principal, action, resource);''' }".into(),
        );
        return out;
    };
    for key in top.keys().filter(|k| !KEYS.contains(&k.as_str())) {
        bad(
            &mut out,
            format!("/{key}"),
            format!("unknown key (a `cedar` config has {})", KEYS.join(", ")),
        );
    }
    for key in ["actorAttributes", "contextAttributes"] {
        match top.get(key) {
            None => {}
            Some(Value::Object(o)) => {
                for (name, ty) in o {
                    if ty.as_str().and_then(cedar_type).is_none() {
                        bad(
                            &mut out,
                            format!("/{key}/{}", name.replace('~', "~0").replace('/', "~1")),
                            "must be a Cedar type: \"String\", \"Bool\", \"decimal\" or \"Set<…>\" of one".into(),
                        );
                    }
                }
            }
            Some(_) => bad(
                &mut out,
                format!("/{key}"),
                "must be a table of attribute names to Cedar types, e.g. { roles = \"Set<String>\" }".into(),
            ),
        }
    }
    match top.get("policies") {
        Some(Value::String(_)) => {}
        Some(_) => bad(
            &mut out,
            "/policies".into(),
            "must be Cedar policy text".into(),
        ),
        None => bad(
            &mut out,
            String::new(),
            "needs `policies` (Cedar text) or `policiesFile` with its `sha256`".into(),
        ),
    }
    out
}

/// The attribute types `key` (`actorAttributes`, `contextAttributes`) declares, as Cedar
/// JSON schema types of optional attributes; `None` where one does not read.
fn declared(config: &Value, key: &str) -> Option<Map<String, Value>> {
    let mut attrs = Map::new();
    if let Some(o) = config.get(key) {
        for (name, ty) in o.as_object()? {
            let mut t = ty.as_str().and_then(cedar_type)?;
            t["required"] = json!(false);
            attrs.insert(name.clone(), t);
        }
    }
    Some(attrs)
}

/// What the shipped component is given to check a binding whose shape [`check`] found
/// nothing wrong with (and whose `policiesFile` is inlined): its config with `schema`, the
/// Cedar schema generated from `capabilities`. A binding attached to no capability is
/// given its config as it is: there is no action to validate against, so the component
/// parses the set and checks its annotations only.
pub fn check_config(config: &Value, capabilities: &[Attached<'_>]) -> Value {
    let mut out = config.clone();
    if capabilities.is_empty() {
        return out;
    }
    let (Some(actor), Some(context)) = (
        declared(config, "actorAttributes"),
        declared(config, "contextAttributes"),
    ) else {
        return out;
    };
    if let Some(o) = out.as_object_mut() {
        o.insert("schema".into(), schema(capabilities, actor, context));
    }
    out
}

/// The problems in a shipped Cedar component's answer to [`check_config`], each at its
/// character in `policies`; `None` when the error is not such an answer (an error of the
/// call itself, such as running out of fuel).
pub fn problems(error: &str) -> Option<Vec<Found>> {
    let answer: Value = serde_json::from_str(error).ok()?;
    let list = answer.get("cedarProblems")?.as_array()?;
    Some(
        list.iter()
            .map(|p| {
                let message = p["message"].as_str().unwrap_or_default().to_string();
                Found {
                    pointer: "/policies".into(),
                    offset: p["offset"].as_u64().and_then(|o| usize::try_from(o).ok()),
                    problem: match p["kind"].as_str() {
                        Some("syntax") => Problem::CedarSyntax { message },
                        Some("validation") => Problem::CedarValidation { message },
                        _ => Problem::Config { message },
                    },
                }
            })
            .collect(),
    )
}

/// One policy of a Cedar set as the host reads it without Cedar (see [`scan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scanned {
    /// Character offset of the policy's first token (its first annotation, or its effect).
    pub offset: usize,
    /// Its `@stance("…")`, as written between the quotes, if it has one.
    pub stance: Option<String>,
    /// Whether its code (outside strings and comments) reads `context.input`.
    pub reads_input: bool,
}

/// The policies of a Cedar text, read lexically: split at each `;` outside strings and
/// comments, with the `@stance` annotation and whether the code reads `context.input`.
/// The host does not link Cedar (see the module docs); this reading serves the host's
/// decisions that only need the annotations (how many policies a `cedar` binding is
/// bound as, [`slots`]; whether it hides, [`hides`]) and the warnings of `capgate check`.
/// The component parses the set for real, and refuses what does not parse.
pub fn scan(text: &str) -> Vec<Scanned> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    // The current policy: its start, and its code with strings kept as `"…"` (their
    // contents raw) and comments and whitespace gone.
    let mut start: Option<usize> = None;
    let mut code = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        start.get_or_insert(i);
        if c == '"' {
            code.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' && i + 1 < chars.len() {
                    code.push(chars[i]);
                    i += 1;
                }
                code.push(chars[i]);
                i += 1;
            }
            code.push('"');
            i += 1;
            continue;
        }
        if c == ';' {
            if let Some(offset) = start.take() {
                out.push(scanned(offset, &code));
            }
            code.clear();
            i += 1;
            continue;
        }
        code.push(c);
        i += 1;
    }
    out
}

fn scanned(offset: usize, code: &str) -> Scanned {
    let stance = code.find("@stance(\"").and_then(|at| {
        let rest = &code[at + "@stance(\"".len()..];
        rest.find("\")").map(|end| rest[..end].to_string())
    });
    // Outside strings only: a reason that mentions `context.input` reads nothing.
    let mut bare = String::new();
    let mut in_string = false;
    let mut escaped = false;
    for c in code.chars() {
        match (in_string, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (true, false, '"') => in_string = false,
            (true, false, _) => {}
            (false, _, '"') => {
                in_string = true;
                bare.push_str("\"\"");
            }
            (false, _, c) => bare.push(c),
        }
    }
    let reads_input = bare.contains("context.input") || code.contains("context[\"input\"]");
    Scanned {
        offset,
        stance,
        reads_input,
    }
}

/// The Cedar text of a `cedar` config (`policiesFile` inlined first), if it has one.
fn text(config: &Value) -> Option<&str> {
    config.get("policies").and_then(Value::as_str)
}

/// Whether a `cedar` config has a `@stance("hide")` forbid: such a binding runs in
/// discovery too unless its `phases` say otherwise, so that what it hides is left out of
/// the capability listings as well as refused when called.
pub fn hides(config: &Value) -> bool {
    text(config).is_some_and(|t| scan(t).iter().any(|p| p.stance.as_deref() == Some("hide")))
}

/// The configs a `cedar` binding is bound with, one policy each. A policy's decision
/// carries one approval type (`capgate:plugin/policy@0.1.0`), so a set with several
/// `@stance("require-approval")` forbids is bound as that many policies, each given the
/// config with `approvalSlot` (its place) and `approvalSlots` (how many): each answers for
/// one satisfied require-approval forbid, and the pipeline merges them as it merges any
/// policies (every type, every reason, the shortest expiry). A set with one or none is
/// bound once, with its config as written.
pub fn slots(config: &Value) -> Vec<Value> {
    let n = text(config).map_or(0, |t| {
        scan(t)
            .iter()
            .filter(|p| p.stance.as_deref() == Some("require-approval"))
            .count()
    });
    let Some(top) = config.as_object().filter(|_| n > 1) else {
        return vec![config.clone()];
    };
    (0..n)
        .map(|i| {
            let mut c = top.clone();
            c.insert("approvalSlot".into(), json!(i));
            c.insert("approvalSlots".into(), json!(n));
            Value::Object(c)
        })
        .collect()
}

/// The `@stance("hide")` forbids of a `cedar` config that read `context.input`, for a
/// binding that runs in discovery, where there is no input: each fails there, which hides
/// the capability from everyone (fails closed). Located at the policy in `policies`.
pub fn hide_reads_input(config: &Value) -> Vec<Found> {
    text(config).map_or_else(Vec::new, |t| {
        scan(t)
            .into_iter()
            .filter(|p| p.stance.as_deref() == Some("hide") && p.reads_input)
            .map(|p| Found {
                pointer: "/policies".into(),
                offset: Some(p.offset),
                problem: Problem::Discovery {
                    message: "this @stance(\"hide\") forbid reads `context.input`, which discovery (where the binding also runs) does not have: there it fails, and a failed policy hides the capability from every caller. Decide a hide on the principal, the resource or `context.context`, or give the binding `phases` without discovery".into(),
                },
            })
            .collect()
    })
}

/// The `@reason("…")` annotations of a `cedar` config with a `${…}` hole that reads
/// `context.input`, located at that hole's `${` in the policy text (see
/// [`crate::reason_warnings`]). Read lexically, like [`scan`]: annotations in comments or
/// inside other strings are not annotations.
pub fn reason_reads_input(config: &Value) -> Vec<Found> {
    let Some(text) = text(config) else {
        return Vec::new();
    };
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    // A string literal from the `"` at `i`: its contents (escapes kept) and where they
    // start, and the index after its closing quote.
    let string_at = |mut i: usize| {
        let start = i + 1;
        i += 1;
        while i < chars.len() && chars[i] != '"' {
            i += if chars[i] == '\\' { 2 } else { 1 };
        }
        let end = i.min(chars.len());
        (
            start,
            chars[start.min(end)..end].iter().collect::<String>(),
            i + 1,
        )
    };
    while i < chars.len() {
        match chars[i] {
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '"' => i = string_at(i).2,
            '@' if chars[i + 1..].starts_with(&['r', 'e', 'a', 's', 'o', 'n']) => {
                let mut j = i + 7;
                while j < chars.len() && (chars[j].is_whitespace() || chars[j] == '(') {
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    i += 1;
                    continue;
                }
                let (start, reason, next) = string_at(j);
                if let Ok(holes) = crate::cel::holes(&reason) {
                    let reads = holes.into_iter().find(|(_, path)| {
                        let path = path.trim();
                        path == "context.input" || path.starts_with("context.input.")
                    });
                    if let Some((offset, _)) = reads {
                        out.push(Found {
                            pointer: "/policies".into(),
                            offset: Some(start + offset - 2),
                            problem: crate::reason_reads_input("context.input"),
                        });
                    }
                }
                i = next;
            }
            _ => i += 1,
        }
    }
    out
}

/// A type name of `actorAttributes` / `contextAttributes` as a Cedar JSON schema type.
fn cedar_type(name: &str) -> Option<Value> {
    let name = name.trim();
    match name {
        "String" => Some(json!({"type": "String"})),
        "Bool" | "Boolean" => Some(json!({"type": "Boolean"})),
        "decimal" => Some(json!({"type": "Extension", "name": "decimal"})),
        _ => {
            let inner = name.strip_prefix("Set<")?.strip_suffix('>')?;
            Some(json!({"type": "Set", "element": cedar_type(inner)?}))
        }
    }
}

/// A JSON Schema as a Cedar JSON schema type, if it has one.
fn of_schema(s: &Value) -> Option<Value> {
    let ty = match s.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => {
            let mut non_null = ts.iter().filter_map(Value::as_str).filter(|t| *t != "null");
            let one = non_null.next()?;
            if non_null.next().is_some() {
                return None;
            }
            one
        }
        None if s.get("properties").is_some() => "object",
        None if s
            .get("enum")
            .and_then(Value::as_array)
            .is_some_and(|e| !e.is_empty() && e.iter().all(Value::is_string)) =>
        {
            "string"
        }
        _ => return None,
    };
    Some(match ty {
        "string" => json!({"type": "String"}),
        "boolean" => json!({"type": "Boolean"}),
        "number" | "integer" => json!({"type": "Extension", "name": "decimal"}),
        "array" => json!({"type": "Set", "element": of_schema(s.get("items")?)?}),
        "object" => {
            let required: Vec<&str> = s
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut attrs = Map::new();
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (name, p) in props {
                    if let Some(mut t) = of_schema(p) {
                        t["required"] = json!(required.contains(&name.as_str()));
                        attrs.insert(name.clone(), t);
                    }
                }
            }
            json!({"type": "Record", "attributes": attrs})
        }
        _ => return None,
    })
}

/// The Cedar schema (JSON form) a `cedar` binding is validated against.
pub fn schema(
    capabilities: &[Attached<'_>],
    actor_attributes: Map<String, Value>,
    context_attributes: Map<String, Value>,
) -> Value {
    let string = json!({"type": "String"});
    let mut actions = Map::new();
    for cap in capabilities {
        let input = cap
            .schema
            .and_then(of_schema)
            .unwrap_or_else(|| json!({"type": "Record", "attributes": {}}));
        actions.insert(
            cap.id.to_string(),
            json!({
                "appliesTo": {
                    "principalTypes": ["Actor"],
                    "resourceTypes": ["Capability"],
                    "context": {"type": "Record", "attributes": {
                        "phase": string,
                        "surface": string,
                        "input": input,
                        "context": {"type": "Record", "attributes": context_attributes, "required": false},
                        "approval": {"type": "Record", "required": false, "attributes": {
                            "id": string, "approverId": string, "approverKind": string,
                        }},
                    }},
                },
            }),
        );
    }
    json!({"": {
        "entityTypes": {
            "Actor": {"shape": {"type": "Record", "attributes": {
                "kind": string,
                "attributes": {"type": "Record", "attributes": actor_attributes},
            }}},
            "Capability": {"shape": {"type": "Record", "attributes": {
                "sideEffect": string,
                "risk": string,
                "tags": {"type": "Set", "element": string},
            }}},
        },
        "actions": actions,
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refund_schema() -> Value {
        json!({"type": "object", "required": ["amount"], "properties": {
            "amount": {"type": "number"}, "orderId": {"type": "string"}}})
    }

    #[test]
    fn a_reason_annotation_that_reads_the_input_is_located_at_its_hole() {
        let text = r#"// @reason("${context.input.amount} in a comment")
@stance("require-approval")
@reason("Refund of $${context.input.amount} exceeds $500")
forbid (principal, action, resource) when { context.input.amount > 500 };
@reason("Agents (${principal.kind}) may not; \"${context.input.x}\" is quoted")
forbid (principal, action, resource) when { principal.kind == "agent" };
forbid (principal, action, resource) when { context.note == "@reason(\"${context.input.a}\")" };
"#;
        let found = reason_reads_input(&json!({ "policies": text }));
        let at: Vec<_> = found.iter().map(|f| f.offset).collect();
        let first = text
            .find("${context.input.amount} exceeds")
            .map(|b| text[..b].chars().count());
        let second = text
            .find("${context.input.x}")
            .map(|b| text[..b].chars().count());
        assert_eq!(at, [first, second], "{found:?}");
        assert!(found.iter().all(|f| f.pointer == "/policies"));
    }

    #[test]
    fn the_generated_schema_types_the_input_from_its_schema() {
        let schema = refund_schema();
        let caps = [Attached {
            id: "orders.refund",
            schema: Some(&schema),
        }];
        let config = json!({"policies": "permit(principal, action, resource);",
                            "actorAttributes": {"roles": "Set<String>"}});
        assert_eq!(check(&config, &caps), vec![]);
        let given = check_config(&config, &caps);
        let action = &given["schema"][""]["actions"]["orders.refund"]["appliesTo"];
        let input = &action["context"]["attributes"]["input"];
        assert_eq!(
            input["attributes"]["amount"],
            json!({"type": "Extension", "name": "decimal", "required": true})
        );
        assert_eq!(
            input["attributes"]["orderId"],
            json!({"type": "String", "required": false})
        );
        assert_eq!(
            given["schema"][""]["entityTypes"]["Actor"]["shape"]["attributes"]["attributes"]["attributes"]
                ["roles"],
            json!({"type": "Set", "element": {"type": "String"}, "required": false})
        );
        // Attached nowhere: nothing to validate against.
        assert_eq!(check_config(&config, &[]), config);
    }

    #[test]
    fn the_shape_is_checked_and_the_components_answer_is_read_back() {
        let found = check(
            &json!({"policy": "x", "actorAttributes": {"n": "Long"}}),
            &[],
        );
        let at: Vec<&str> = found.iter().map(|f| f.pointer.as_str()).collect();
        assert_eq!(at, ["/policy", "/actorAttributes/n", ""], "{found:?}");
        let answer = r#"{"cedarProblems":[{"kind":"validation","offset":12,"message":"attribute `amout` not found"}]}"#;
        assert_eq!(
            problems(answer),
            Some(vec![Found {
                pointer: "/policies".into(),
                offset: Some(12),
                problem: Problem::CedarValidation {
                    message: "attribute `amout` not found".into()
                },
            }])
        );
        assert_eq!(problems("fuel exhausted"), None);
    }

    #[test]
    fn the_host_reads_each_policys_stance_and_slots_a_set_per_approval_forbid() {
        let text = "// a comment; with @stance(\"hide\") in it\n\
            permit(principal, action, resource);\n\
            @stance(\"require-approval\") @type(\"manager\") @reason(\"a; b \\\" context.input\")\n\
            forbid(principal, action, resource) when { context.input.amount > 1 };\n\
            @stance( \"require-approval\" ) @reason(\"r\")\n\
            forbid(principal, action, resource);\n\
            @stance(\"hide\") @reason(\"context.input\")\n\
            forbid(principal, action, resource) when { !principal.attributes.gold };\n";
        let scanned = scan(text);
        let stances: Vec<Option<&str>> = scanned.iter().map(|p| p.stance.as_deref()).collect();
        assert_eq!(
            stances,
            [
                None,
                Some("require-approval"),
                Some("require-approval"),
                Some("hide")
            ]
        );
        let reads: Vec<bool> = scanned.iter().map(|p| p.reads_input).collect();
        assert_eq!(reads, [false, true, false, false], "a reason reads nothing");
        let config = json!({ "policies": text });
        assert!(hides(&config));
        assert_eq!(hide_reads_input(&config), vec![]);
        let slots = slots(&config);
        assert_eq!(slots.len(), 2);
        assert_eq!(slots[1]["approvalSlot"], json!(1));
        assert_eq!(slots[1]["approvalSlots"], json!(2));
        assert_eq!(slots[1]["policies"], json!(text));
        // One approval forbid or none: bound once, as written.
        let one = json!({ "policies": "@stance(\"require-approval\") @reason(\"r\") forbid(principal, action, resource);" });
        assert_eq!(super::slots(&one), vec![one.clone()]);
        assert!(!hides(&one));
        let reading = json!({ "policies": "@stance(\"hide\")\nforbid(principal, action, resource) when { context.input.amount > 1 };" });
        let found = hide_reads_input(&reading);
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].pointer.as_str(), found[0].offset),
            ("/policies", Some(0))
        );
    }

    #[test]
    fn a_file_is_inlined_only_when_its_digest_matches() {
        use sha2::{Digest, Sha256};
        let text = b"permit(principal, action, resource);";
        let digest: String = Sha256::digest(text)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let wrong = json!({"policiesFile": "p.cedar", "sha256": "00"});
        let e = inline(&wrong, |_| Ok(text.to_vec()));
        assert!(matches!(e, Err(FileError::Digest { .. })), "{e:?}");
        let right = json!({"policiesFile": "p.cedar", "sha256": digest});
        let inlined = inline(&right, |p| {
            assert_eq!(p, "p.cedar");
            Ok(text.to_vec())
        })
        .expect("the digest matches");
        assert_eq!(
            inlined.config,
            json!({"policies": "permit(principal, action, resource);"})
        );
        let unpinned = json!({"policiesFile": "p.cedar"});
        assert!(matches!(
            inline(&unpinned, |_| Ok(text.to_vec())),
            Err(FileError::Shape(_))
        ));
    }
}
