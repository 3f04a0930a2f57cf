//! JSON Schema validation (stages 5 and 12), compiled once per capability, with schema
//! `default`s applied before validation so that the validated value is canonical (SI-6).

use crate::error::Issue;
use serde_json::Value;

/// At most this many issues are reported for one value.
pub const MAX_ISSUES: usize = 32;

/// A compiled schema plus its defaults plan.
pub struct Schema {
    source: Value,
    validator: jsonschema::Validator,
    defaults: Option<DefaultsPlan>,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schema")
            .field("source", &self.source)
            .finish()
    }
}

/// Why a schema did not compile.
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid JSON Schema at `{path}`: {message}")]
pub struct SchemaError {
    /// Where in the schema.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl Schema {
    /// Compile a JSON Schema (draft 2020-12 unless `$schema` says otherwise).
    pub fn compile(source: Value) -> Result<Schema, SchemaError> {
        let validator = jsonschema::validator_for(&source).map_err(|e| SchemaError {
            path: e.instance_path().to_string(),
            message: e.masked().to_string(),
        })?;
        let defaults = DefaultsPlan::build(&source, 0);
        Ok(Schema {
            source,
            validator,
            defaults,
        })
    }

    /// A schema that accepts anything.
    pub fn any() -> Schema {
        // `true` is a valid schema; compiling it cannot fail.
        Schema {
            source: Value::Bool(true),
            validator: jsonschema::validator_for(&Value::Bool(true))
                .unwrap_or_else(|_| unreachable!("`true` is a valid schema")),
            defaults: None,
        }
    }

    /// The schema as written.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Apply defaults, then validate. Returns the canonical value or model-safe issues
    /// (paths and masked messages, never instance values).
    pub fn validate(&self, mut value: Value) -> Result<Value, Vec<Issue>> {
        if let Some(plan) = &self.defaults {
            plan.apply(&mut value);
        }
        if self.validator.is_valid(&value) {
            return Ok(value);
        }
        let issues = self
            .validator
            .iter_errors(&value)
            .take(MAX_ISSUES)
            .map(|e| Issue {
                path: e.instance_path().to_string(),
                message: e.masked().to_string(),
            })
            .collect();
        Err(issues)
    }

    /// Every way `value` fails the schema, for an operator rather than a model: the
    /// messages unmasked (a plugin's `config` is the operator's own text), and an
    /// unexpected property located at its own key, with the keys the schema does take, so
    /// `capgate check` points at the `maxAmont` typo rather than at the object around it.
    pub fn explain(&self, value: &Value) -> Vec<Issue> {
        use jsonschema::error::ValidationErrorKind;
        let mut out = Vec::new();
        for e in self.validator.iter_errors(value).take(MAX_ISSUES) {
            let at = e.instance_path().to_string();
            match e.kind() {
                ValidationErrorKind::AdditionalProperties { unexpected } => {
                    // The object's schema is the one holding `additionalProperties`.
                    let parent = e
                        .schema_path()
                        .as_str()
                        .strip_suffix("/additionalProperties")
                        .unwrap_or_default();
                    let known: Vec<&str> = self
                        .source
                        .pointer(parent)
                        .and_then(|s| s.get("properties"))
                        .and_then(Value::as_object)
                        .map(|p| p.keys().map(String::as_str).collect())
                        .unwrap_or_default();
                    for key in unexpected {
                        let escaped = key.replace('~', "~0").replace('/', "~1");
                        let message = if known.is_empty() {
                            format!("`{key}` is not a key this schema allows")
                        } else {
                            format!(
                                "`{key}` is not a key this schema allows (it takes: {})",
                                known.join(", ")
                            )
                        };
                        out.push(Issue {
                            path: format!("{at}/{escaped}"),
                            message,
                        });
                    }
                }
                _ => out.push(Issue {
                    path: at,
                    message: e.to_string(),
                }),
            }
        }
        out
    }

    /// Validate without applying defaults (output validation: the contract is checked on
    /// the true output).
    pub fn check(&self, value: &Value) -> Result<(), Vec<Issue>> {
        if self.validator.is_valid(value) {
            return Ok(());
        }
        Err(self
            .validator
            .iter_errors(value)
            .take(MAX_ISSUES)
            .map(|e| Issue {
                path: e.instance_path().to_string(),
                message: e.masked().to_string(),
            })
            .collect())
    }
}

/// Where defaults go: `properties.*.default`, recursively, and `items`.
struct DefaultsPlan {
    props: Vec<(String, Option<Value>, Option<DefaultsPlan>)>,
    items: Option<Box<DefaultsPlan>>,
}

impl DefaultsPlan {
    fn build(schema: &Value, depth: usize) -> Option<DefaultsPlan> {
        if depth > 32 {
            return None;
        }
        let obj = schema.as_object()?;
        let mut props = Vec::new();
        if let Some(p) = obj.get("properties").and_then(Value::as_object) {
            for (k, sub) in p {
                let default = sub.get("default").cloned();
                let nested = DefaultsPlan::build(sub, depth + 1);
                if default.is_some() || nested.is_some() {
                    props.push((k.clone(), default, nested));
                }
            }
        }
        let items = obj
            .get("items")
            .and_then(|i| DefaultsPlan::build(i, depth + 1))
            .map(Box::new);
        if props.is_empty() && items.is_none() {
            None
        } else {
            Some(DefaultsPlan { props, items })
        }
    }

    fn apply(&self, value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (k, default, nested) in &self.props {
                    match map.get_mut(k) {
                        Some(v) => {
                            if let Some(n) = nested {
                                n.apply(v);
                            }
                        }
                        None => {
                            if let Some(d) = default {
                                let mut d = d.clone();
                                if let Some(n) = nested {
                                    n.apply(&mut d);
                                }
                                map.insert(k.clone(), d);
                            }
                        }
                    }
                }
            }
            Value::Array(items) => {
                if let Some(plan) = &self.items {
                    for v in items {
                        plan.apply(v);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn explain_locates_an_unknown_key_at_the_key_and_names_the_ones_taken() {
        let s = Schema::compile(json!({
            "type": "object",
            "properties": {"maxAmount": {"type": "number"}, "label": {"type": "string"},
                "nested": {"type": "object", "properties": {"a/b": {}}, "additionalProperties": false}},
            "required": ["maxAmount"],
            "additionalProperties": false
        }))
        .unwrap();
        let issues = s.explain(&json!({"maxAmont": 500, "nested": {"x~y": 1}}));
        let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
        assert!(paths.contains(&"/maxAmont"), "{issues:?}");
        assert!(paths.contains(&"/nested/x~0y"), "{issues:?}");
        assert!(
            paths.contains(&""),
            "the missing maxAmount at the root: {issues:?}"
        );
        let typo = issues.iter().find(|i| i.path == "/maxAmont").unwrap();
        assert!(
            typo.message.contains("label, maxAmount, nested"),
            "{}",
            typo.message
        );
        let nested = issues.iter().find(|i| i.path == "/nested/x~0y").unwrap();
        assert!(
            nested.message.contains("(it takes: a/b)"),
            "{}",
            nested.message
        );
        assert!(s.explain(&json!({"maxAmount": 1})).is_empty());
    }

    #[test]
    fn defaults_are_applied_before_validation() {
        let s = Schema::compile(json!({
            "type": "object",
            "properties": {
                "amount": {"type": "number"},
                "currency": {"type": "string", "default": "USD"},
                "meta": {"type": "object", "properties": {"channel": {"default": "chat"}}, "default": {}}
            },
            "required": ["amount", "currency"]
        }))
        .unwrap();
        let v = s.validate(json!({"amount": 5})).unwrap();
        assert_eq!(
            v,
            json!({"amount": 5, "currency": "USD", "meta": {"channel": "chat"}})
        );
    }

    #[test]
    fn issues_name_paths_but_never_values() {
        let s = Schema::compile(json!({
            "type": "object",
            "properties": {"amount": {"type": "number", "exclusiveMinimum": 0}},
            "required": ["amount"]
        }))
        .unwrap();
        let issues = s
            .validate(json!({"amount": "secret-value-123"}))
            .unwrap_err();
        assert_eq!(issues[0].path, "/amount");
        assert!(
            !issues[0].message.contains("secret-value-123"),
            "{issues:?}"
        );
    }

    #[test]
    fn invalid_schema_is_refused() {
        assert!(Schema::compile(json!({"type": "no-such-type"})).is_err());
    }
}
