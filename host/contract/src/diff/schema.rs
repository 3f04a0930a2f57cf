//! The JSON-Schema compatibility engine: whether every input an old input schema accepted
//! is still accepted by the new one, keyword by keyword.
//!
//! It walks both schemas together and reports each keyword that differs as a [`Change`]
//! whose field is `inputSchema` plus the keyword's JSON pointer
//! (`inputSchema/properties/amount/maximum`). What it understands: `type` (with `integer`
//! inside `number`), `properties`, `required`, `additionalProperties`, single-schema
//! `items`, `enum`, `const`, `uniqueItems`, `multipleOf`, the numeric, length, item and
//! property bounds, and annotations (which never change what a schema accepts). Anything
//! else that changed (`anyOf`, `$ref`, a changed `pattern`, tuple `items`, …) is reported
//! as breaking with a detail that says capgate could not prove it safe: the engine errs
//! towards asking a person to review.

use super::{Change, Impact};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Keywords that document a schema and never change what it accepts.
const ANNOTATIONS: [&str; 10] = [
    "description",
    "title",
    "examples",
    "default",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
    "$id",
];
/// Lower bounds: raising one (or adding it) refuses values that passed.
const LOWER_BOUNDS: [&str; 6] = [
    "minimum",
    "exclusiveMinimum",
    "minLength",
    "minItems",
    "minProperties",
    "minContains",
];
/// Upper bounds: lowering one (or adding it) refuses values that passed.
const UPPER_BOUNDS: [&str; 6] = [
    "maximum",
    "exclusiveMaximum",
    "maxLength",
    "maxItems",
    "maxProperties",
    "maxContains",
];
/// Constraints capgate cannot compare: adding or changing one is breaking, removing it
/// additive.
const OPAQUE_CONSTRAINTS: [&str; 4] = ["pattern", "format", "contentEncoding", "contentMediaType"];

/// A JSON pointer segment (RFC 6901).
fn seg(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The change's field for the keyword at JSON pointer `at`.
fn field(at: &str) -> String {
    format!("inputSchema{at}")
}

/// Whether `v` accepts every instance (`true`, or an object of annotations only).
fn accepts_all(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::Object(m) => m.keys().all(|k| ANNOTATIONS.contains(&k.as_str())),
        _ => false,
    }
}

/// The changes of one (sub)schema at JSON pointer `at`.
pub(super) fn changes(old: &Value, new: &Value, at: &str, out: &mut Vec<Change>) {
    if old == new {
        return;
    }
    let empty = Map::new();
    let as_object = |v: &Value| match v {
        Value::Object(m) => Some(m.clone()),
        Value::Bool(true) => Some(empty.clone()),
        _ => None,
    };
    match (as_object(old), as_object(new)) {
        (Some(o), Some(n)) => object_changes(&o, &n, at, out),
        _ if old == &Value::Bool(false) => out.push(
            Change::new(
                field(at),
                Impact::Additive,
                "accepted nothing, accepts values now",
            )
            .values(Some(old), Some(new)),
        ),
        _ if new == &Value::Bool(false) => out.push(
            Change::new(field(at), Impact::Breaking, "accepts nothing now")
                .values(Some(old), Some(new)),
        ),
        _ => out.push(
            Change::new(
                field(at),
                Impact::Breaking,
                "not a schema capgate can compare (treated as breaking: review it)",
            )
            .values(Some(old), Some(new)),
        ),
    }
}

/// `type` as a set of names; `None` when absent (any type).
fn types(v: Option<&Value>) -> Option<Option<BTreeSet<String>>> {
    match v {
        None => Some(None),
        Some(Value::String(s)) => Some(Some(BTreeSet::from([s.clone()]))),
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| t.as_str().map(str::to_string))
            .collect::<Option<BTreeSet<_>>>()
            .map(Some),
        Some(_) => None,
    }
}

/// A set of type names as a message lists them.
fn list(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(", ")
}

/// The changes of two object-form schemas at `at`, one keyword at a time (the union of
/// both schemas' keywords, in name order).
fn object_changes(o: &Map<String, Value>, n: &Map<String, Value>, at: &str, out: &mut Vec<Change>) {
    let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
    for key in keys {
        let (x, y) = (o.get(key), n.get(key));
        if x == y {
            continue;
        }
        let here = format!("{at}/{}", seg(key));
        let change =
            |impact: Impact, detail: String| Change::new(field(&here), impact, detail).values(x, y);
        match key.as_str() {
            "type" => match (types(x), types(y)) {
                (Some(None), Some(Some(b))) => out.push(change(
                    Impact::Breaking,
                    format!("type restricted to {}", list(&b)),
                )),
                (Some(Some(_)), Some(None)) => {
                    out.push(change(Impact::Additive, "any type accepted now".into()))
                }
                (Some(Some(a)), Some(Some(b))) => {
                    let lost: BTreeSet<String> = a
                        .iter()
                        .filter(|t| {
                            !(b.contains(*t) || (t.as_str() == "integer" && b.contains("number")))
                        })
                        .cloned()
                        .collect();
                    out.push(if lost.is_empty() {
                        change(
                            Impact::Additive,
                            format!("type widened: {} → {}", list(&a), list(&b)),
                        )
                    } else {
                        change(
                            Impact::Breaking,
                            format!(
                                "type narrowed: {} → {} ({} refused now)",
                                list(&a),
                                list(&b),
                                list(&lost)
                            ),
                        )
                    });
                }
                _ => out.push(opaque(change, key)),
            },
            "properties" => properties(o, n, at, out),
            "required" => required(x, y, at, out),
            "additionalProperties" => {
                let (a, b) = (
                    x.cloned().unwrap_or(Value::Bool(true)),
                    y.cloned().unwrap_or(Value::Bool(true)),
                );
                if b == Value::Bool(false) && a != Value::Bool(false) {
                    out.push(change(
                        Impact::Breaking,
                        "additionalProperties is false now: callers that send undeclared properties are refused"
                            .into(),
                    ));
                } else {
                    changes(&a, &b, &here, out);
                }
            }
            "items" => match (x, y) {
                (_, None) => out.push(change(
                    Impact::Additive,
                    "items are unconstrained now".into(),
                )),
                (None, Some(b)) => changes(&Value::Bool(true), b, &here, out),
                (Some(a), Some(b)) if !a.is_array() && !b.is_array() => changes(a, b, &here, out),
                _ => out.push(opaque(change, key)),
            },
            "enum" => match (x.map(Value::as_array), y.map(Value::as_array)) {
                (None, Some(Some(b))) => out.push(change(
                    Impact::Breaking,
                    format!("values restricted to {}", Value::Array(b.clone())),
                )),
                (Some(Some(_)), None) => {
                    out.push(change(Impact::Additive, "any value accepted now".into()))
                }
                (Some(Some(a)), Some(Some(b))) => {
                    let lost: Vec<Value> = a.iter().filter(|v| !b.contains(v)).cloned().collect();
                    out.push(if lost.is_empty() {
                        change(Impact::Additive, "more values accepted".into())
                    } else {
                        change(
                            Impact::Breaking,
                            format!("{} no longer accepted", Value::Array(lost)),
                        )
                    });
                }
                _ => out.push(opaque(change, key)),
            },
            "const" => out.push(match y {
                None => change(Impact::Additive, "any value accepted now".into()),
                Some(v) => change(Impact::Breaking, format!("only {v} accepted now")),
            }),
            "uniqueItems" => {
                let on = |v: Option<&Value>| v == Some(&Value::Bool(true));
                out.push(if on(y) {
                    change(Impact::Breaking, "items must be unique now".into())
                } else {
                    change(Impact::Additive, "items need not be unique now".into())
                });
            }
            "multipleOf" => match (x.and_then(Value::as_f64), y.and_then(Value::as_f64)) {
                (_, None) if y.is_none() => {
                    out.push(change(Impact::Additive, "multipleOf removed".into()))
                }
                (Some(a), Some(b)) if b != 0.0 && (a / b).fract() == 0.0 => out.push(change(
                    Impact::Additive,
                    format!("multipleOf {a} → {b}: every old multiple still passes"),
                )),
                _ => out.push(change(
                    Impact::Breaking,
                    "multipleOf added or changed: values that passed may be refused".into(),
                )),
            },
            k if ANNOTATIONS.contains(&k) => out.push(change(
                Impact::Additive,
                format!("`{k}` changed (documentation only)"),
            )),
            k if LOWER_BOUNDS.contains(&k) || UPPER_BOUNDS.contains(&k) => {
                let lower = LOWER_BOUNDS.contains(&k);
                match (x.map(Value::as_f64), y.map(Value::as_f64)) {
                    (None, Some(Some(b))) => {
                        out.push(change(Impact::Breaking, format!("new {k} {b}")))
                    }
                    (Some(Some(_)), None) => {
                        out.push(change(Impact::Additive, format!("{k} removed")))
                    }
                    (Some(Some(a)), Some(Some(b))) => {
                        let tighter = if lower { b > a } else { b < a };
                        let how = if b > a { "raised" } else { "lowered" };
                        out.push(change(
                            if tighter {
                                Impact::Breaking
                            } else {
                                Impact::Additive
                            },
                            format!("{k} {how}: {a} → {b}"),
                        ));
                    }
                    _ => out.push(opaque(change, key)),
                }
            }
            k if OPAQUE_CONSTRAINTS.contains(&k) && y.is_none() => {
                out.push(change(Impact::Additive, format!("{k} removed")))
            }
            _ => out.push(opaque(change, key)),
        }
    }
}

/// A change capgate cannot prove only loosens the schema.
fn opaque(change: impl Fn(Impact, String) -> Change, key: &str) -> Change {
    change(
        Impact::Breaking,
        format!(
            "`{key}` changed, and capgate cannot prove the new schema accepts every input the old one did: \
             treated as breaking (review it; --allow-breaking accepts it)"
        ),
    )
}

/// The changes of `properties` at `at`: each property compared as a schema, a removed one
/// judged by what `additionalProperties` does with its values now, a new one additive
/// (a new *required* property breaks through `required`).
fn properties(o: &Map<String, Value>, n: &Map<String, Value>, at: &str, out: &mut Vec<Change>) {
    let empty = Map::new();
    let props = |m: &Map<String, Value>| -> Option<Map<String, Value>> {
        match m.get("properties") {
            None => Some(empty.clone()),
            Some(Value::Object(p)) => Some(p.clone()),
            Some(_) => None,
        }
    };
    let (Some(a), Some(b)) = (props(o), props(n)) else {
        out.push(
            Change::new(
                field(&format!("{at}/properties")),
                Impact::Breaking,
                "`properties` is not an object: cannot compare (treated as breaking)",
            )
            .values(o.get("properties"), n.get("properties")),
        );
        return;
    };
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for name in names {
        let here = format!("{at}/properties/{}", seg(name));
        match (a.get(name), b.get(name)) {
            (Some(x), Some(y)) => changes(x, y, &here, out),
            (Some(x), None) => {
                let extra = n
                    .get("additionalProperties")
                    .cloned()
                    .unwrap_or(Value::Bool(true));
                let (impact, detail) = if extra == Value::Bool(false) {
                    (
                        Impact::Breaking,
                        format!(
                            "property `{name}` removed and additionalProperties is false: callers that send it are refused"
                        ),
                    )
                } else if accepts_all(&extra) {
                    (
                        Impact::Additive,
                        format!(
                            "property `{name}` removed (still accepted: additionalProperties allows it; the capability may ignore it)"
                        ),
                    )
                } else {
                    (
                        Impact::Breaking,
                        format!(
                            "property `{name}` removed: its values now fall under additionalProperties' schema, which may refuse them"
                        ),
                    )
                };
                out.push(Change::new(field(&here), impact, detail).values(Some(x), None));
            }
            (None, Some(y)) => {
                let required = n
                    .get("required")
                    .and_then(Value::as_array)
                    .is_some_and(|r| r.iter().any(|v| v.as_str() == Some(name.as_str())));
                // A new required property is breaking through `required`, reported there.
                let detail = if required {
                    format!("new property `{name}` (required: see inputSchema{at}/required)")
                } else {
                    format!("new optional property `{name}`")
                };
                out.push(Change::new(field(&here), Impact::Additive, detail).values(None, Some(y)))
            }
            (None, None) => {}
        }
    }
}

/// The changes of `required` at `at`: a new required name is breaking, a dropped one
/// additive.
fn required(x: Option<&Value>, y: Option<&Value>, at: &str, out: &mut Vec<Change>) {
    let names = |v: Option<&Value>| -> Option<BTreeSet<String>> {
        match v {
            None => Some(BTreeSet::new()),
            Some(Value::Array(a)) => a.iter().map(|s| s.as_str().map(str::to_string)).collect(),
            Some(_) => None,
        }
    };
    let here = format!("{at}/required");
    let (Some(a), Some(b)) = (names(x), names(y)) else {
        out.push(
            Change::new(
                field(&here),
                Impact::Breaking,
                "`required` is not a list of names: cannot compare (treated as breaking)",
            )
            .values(x, y),
        );
        return;
    };
    for name in b.difference(&a) {
        out.push(
            Change::new(
                field(&here),
                Impact::Breaking,
                format!("new required property `{name}`: callers that omit it are refused"),
            )
            .values(None, Some(&Value::String(name.clone()))),
        );
    }
    for name in a.difference(&b) {
        out.push(
            Change::new(
                field(&here),
                Impact::Additive,
                format!("property `{name}` is optional now"),
            )
            .values(Some(&Value::String(name.clone())), None),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{only, schema};
    use serde_json::json;

    #[test]
    fn a_new_required_property_is_breaking() {
        let r = schema(|s| {
            s["properties"]["note"] = json!({"type": "string"});
            s["required"] = json!(["orderId", "amount", "note"]);
        });
        let c = &r.capabilities[0].changes;
        assert_eq!(c.len(), 2, "{c:#?}");
        assert_eq!(c[0].field, "inputSchema/properties/note");
        assert_eq!(c[0].impact, Impact::Additive);
        assert_eq!(
            c[0].detail,
            "new property `note` (required: see inputSchema/required)"
        );
        assert_eq!(c[1].field, "inputSchema/required");
        assert_eq!(c[1].impact, Impact::Breaking);
        assert!(c[1].detail.contains("new required property `note`"));
        assert!(r.breaking);
    }

    #[test]
    fn a_new_optional_property_is_additive() {
        let r = schema(|s| s["properties"]["note"] = json!({"type": "string"}));
        assert_eq!(only(&r).impact, Impact::Additive);
    }

    #[test]
    fn a_property_made_optional_is_additive() {
        let r = schema(|s| s["required"] = json!(["orderId"]));
        assert_eq!(only(&r).impact, Impact::Additive);
        assert!(only(&r).detail.contains("`amount` is optional now"));
    }

    #[test]
    fn a_removed_property_is_breaking_when_additional_properties_is_false() {
        let r = schema(|s| {
            if let Some(p) = s["properties"].as_object_mut() {
                p.remove("reason");
            }
        });
        assert_eq!(only(&r).field, "inputSchema/properties/reason");
        assert_eq!(only(&r).impact, Impact::Breaking);
    }

    #[test]
    fn a_removed_property_is_additive_when_additional_properties_allow_it() {
        let r = schema(|s| {
            if let Some(p) = s["properties"].as_object_mut() {
                p.remove("reason");
            }
            s["additionalProperties"] = json!(true);
        });
        let c = &r.capabilities[0].changes;
        assert!(c.iter().all(|c| c.impact == Impact::Additive), "{c:#?}");
    }

    #[test]
    fn additional_properties_turned_false_is_breaking() {
        let old = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let new = json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false});
        let mut out = Vec::new();
        changes(&old, &new, "", &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].field, "inputSchema/additionalProperties");
        assert_eq!(out[0].impact, Impact::Breaking);
        let mut back = Vec::new();
        changes(&new, &old, "", &mut back);
        assert_eq!(back[0].impact, Impact::Additive);
    }

    #[test]
    fn a_narrower_type_is_breaking_and_a_wider_one_additive() {
        let r = schema(|s| s["properties"]["amount"]["type"] = json!("integer"));
        assert_eq!(only(&r).impact, Impact::Breaking);
        assert_eq!(only(&r).field, "inputSchema/properties/amount/type");
        let r = schema(|s| s["properties"]["orderId"]["type"] = json!(["string", "null"]));
        assert_eq!(only(&r).impact, Impact::Additive);
    }

    #[test]
    fn integer_to_number_is_a_widening() {
        let mut out = Vec::new();
        changes(
            &json!({"type": "integer"}),
            &json!({"type": "number"}),
            "",
            &mut out,
        );
        assert_eq!(out[0].impact, Impact::Additive);
    }

    #[test]
    fn a_removed_enum_value_is_breaking_and_an_added_one_additive() {
        let r = schema(|s| s["properties"]["reason"]["enum"] = json!(["damaged", "late"]));
        assert_eq!(only(&r).impact, Impact::Breaking);
        assert!(only(&r).detail.contains("\"other\""));
        let r = schema(|s| {
            s["properties"]["reason"]["enum"] = json!(["damaged", "late", "other", "duplicate"])
        });
        assert_eq!(only(&r).impact, Impact::Additive);
    }

    #[test]
    fn a_lower_maximum_or_higher_minimum_is_breaking() {
        let r = schema(|s| s["properties"]["amount"]["maximum"] = json!(100));
        assert_eq!(only(&r).impact, Impact::Breaking);
        assert_eq!(only(&r).detail, "maximum lowered: 500 → 100");
        let r = schema(|s| s["properties"]["amount"]["minimum"] = json!(1));
        assert_eq!(only(&r).impact, Impact::Breaking);
        let r = schema(|s| s["properties"]["orderId"]["maxLength"] = json!(64));
        assert_eq!(only(&r).impact, Impact::Breaking);
        assert_eq!(only(&r).detail, "new maxLength 64");
    }

    #[test]
    fn a_higher_maximum_or_a_removed_bound_is_additive() {
        let r = schema(|s| s["properties"]["amount"]["maximum"] = json!(1000));
        assert_eq!(only(&r).impact, Impact::Additive);
        let r = schema(|s| {
            if let Some(a) = s["properties"]["orderId"].as_object_mut() {
                a.remove("minLength");
            }
        });
        assert_eq!(only(&r).impact, Impact::Additive);
    }

    #[test]
    fn a_schema_description_change_is_additive() {
        let r = schema(|s| s["properties"]["amount"]["description"] = json!("In euros."));
        assert_eq!(only(&r).impact, Impact::Additive);
        assert!(only(&r).detail.contains("documentation only"));
    }

    #[test]
    fn an_uncomparable_keyword_is_breaking_and_says_why() {
        let r = schema(|s| {
            s["properties"]["orderId"]["anyOf"] = json!([{"pattern": "^ord_"}, {"pattern": "^o-"}])
        });
        assert_eq!(only(&r).impact, Impact::Breaking);
        assert!(
            only(&r).detail.contains("cannot prove"),
            "{}",
            only(&r).detail
        );
        let r = schema(|s| s["properties"]["orderId"]["pattern"] = json!("^ord_"));
        assert_eq!(only(&r).impact, Impact::Breaking);
    }

    #[test]
    fn nested_objects_are_compared_property_by_property() {
        let mut out = Vec::new();
        changes(
            &json!({"type": "object", "properties": {"address": {"type": "object", "properties": {"zip": {"type": "string"}}}}}),
            &json!({"type": "object", "properties": {"address": {"type": "object", "properties": {"zip": {"type": "string"}}, "required": ["zip"]}}}),
            "",
            &mut out,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].field, "inputSchema/properties/address/required");
        assert_eq!(out[0].impact, Impact::Breaking);
    }

    #[test]
    fn a_multiple_of_a_divisor_is_additive() {
        let mut out = Vec::new();
        changes(
            &json!({"multipleOf": 10}),
            &json!({"multipleOf": 5}),
            "",
            &mut out,
        );
        assert_eq!(out[0].impact, Impact::Additive);
        let mut out = Vec::new();
        changes(
            &json!({"multipleOf": 5}),
            &json!({"multipleOf": 10}),
            "",
            &mut out,
        );
        assert_eq!(out[0].impact, Impact::Breaking);
    }
}
