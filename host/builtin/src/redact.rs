//! The load-time check of a `plugin = "redact"` binding: its `config` has the right shape,
//! every entry of `drop` and `mask` is a JSON pointer, and a pointer that names a field the
//! output schema of a capability it is attached to does not have is reported (a typo there
//! would silently redact nothing).

use crate::{Attached, Found, Problem};
use serde_json::Value;

/// The keys of the configuration.
pub const KEYS: &[&str] = &["drop", "mask", "maskWith", "approvalInput"];

/// Check a `redact` binding's `config` against the output schema of every capability it
/// is attached to.
pub fn check(config: &Value, capabilities: &[Attached<'_>]) -> Vec<Found> {
    let mut out = Vec::new();
    let mut bad = |pointer: String, message: String| {
        let found = Found {
            pointer,
            offset: None,
            problem: Problem::Config { message },
        };
        if !out.contains(&found) {
            out.push(found);
        }
    };
    let top = match config {
        Value::Null => return out,
        Value::Object(top) => top,
        _ => {
            bad(
                String::new(),
                "must be a table, e.g. config = { drop = [\"/gatewayRef\"], mask = [\"/customer/email\"] }".into(),
            );
            return out;
        }
    };
    for key in top.keys().filter(|k| !KEYS.contains(&k.as_str())) {
        bad(
            format!("/{key}"),
            format!("unknown key (a `redact` config has {})", KEYS.join(", ")),
        );
    }
    if top.get("maskWith").is_some_and(|v| !v.is_string()) {
        bad("/maskWith".into(), "must be a string".into());
    }
    if top.get("approvalInput").is_some_and(|v| !v.is_boolean()) {
        bad("/approvalInput".into(), "must be true or false".into());
    }
    let mut pointers = Vec::new();
    for key in ["drop", "mask"] {
        match top.get(key) {
            None => {}
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    match item.as_str() {
                        Some(p) if p.starts_with('/') => pointers.push((format!("/{key}/{i}"), p)),
                        _ => bad(
                            format!("/{key}/{i}"),
                            "must be a JSON pointer such as \"/gatewayRef\" (`*` matches every key or element)".into(),
                        ),
                    }
                }
            }
            Some(_) => bad(
                format!("/{key}"),
                "must be an array of JSON pointers".into(),
            ),
        }
    }
    for (at, pointer) in pointers {
        for cap in capabilities {
            if let Some(problem) = cap.schema.and_then(|s| unknown(s, pointer, cap.id)) {
                let found = Found {
                    pointer: at.clone(),
                    offset: None,
                    problem,
                };
                if !out.contains(&found) {
                    out.push(found);
                }
            }
        }
    }
    out
}

/// The first segment of `pointer` that `schema` says cannot be there.
fn unknown(schema: &Value, pointer: &str, capability: &str) -> Option<Problem> {
    let mut here = schema;
    let mut walked = String::new();
    for seg in pointer.split('/').skip(1) {
        let name = seg.replace("~1", "/").replace("~0", "~");
        let s = here.as_object()?;
        if s.get("type").and_then(Value::as_str) == Some("array") {
            here = s.get("items")?;
        } else {
            let props = s.get("properties")?.as_object()?;
            if name == "*" {
                return None;
            }
            match props.get(&name) {
                Some(next) => here = next,
                None if s
                    .get("additionalProperties")
                    .is_some_and(|a| a.is_object() || a == &Value::Bool(true)) =>
                {
                    return None;
                }
                None => {
                    return Some(Problem::UnknownField {
                        capability: capability.to_string(),
                        field: format!("{walked}/{seg}"),
                        known: props.keys().cloned().collect(),
                    });
                }
            }
        }
        walked.push('/');
        walked.push_str(seg);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_are_checked_against_the_output_schema() {
        let schema = json!({"type": "object", "properties": {
            "refundId": {"type": "string"},
            "items": {"type": "array", "items": {"type": "object", "properties": {"card": {"type": "string"}}}}
        }});
        let attached = [Attached {
            id: "orders.refund",
            schema: Some(&schema),
        }];
        let ok =
            json!({"drop": ["/refundId", "/items/*/card", "/items/0/card"], "mask": ["/items/*"]});
        assert_eq!(check(&ok, &attached), vec![]);
        let found = check(
            &json!({"drop": ["/gatewayRefs", "/items/*/cvv", "gatewayRef"], "maskWith": 1, "x": 1}),
            &attached,
        );
        let messages: Vec<(String, String)> = found
            .iter()
            .map(|f| (f.pointer.clone(), f.to_string()))
            .collect();
        assert_eq!(
            messages,
            [
                ("/x".into(), "unknown key (a `redact` config has drop, mask, maskWith, approvalInput)".into()),
                ("/maskWith".into(), "must be a string".into()),
                ("/drop/2".into(), "must be a JSON pointer such as \"/gatewayRef\" (`*` matches every key or element)".into()),
                ("/drop/0".into(), "`/gatewayRefs` is not in the output schema of capability `orders.refund` (its fields there: items, refundId)".into()),
                ("/drop/1".into(), "`/items/*/cvv` is not in the output schema of capability `orders.refund` (its fields there: card)".into()),
            ]
        );
    }
}
