//! The shape of a `cel` config: a table of `rules`, each with the keys, stances and value
//! types the component reads; and the `${…}` holes of a rule's `reason` template.

use super::{RULE_KEYS, STANCES};
use crate::{Found, Problem};
use serde_json::{Map, Value};

/// Check the configuration's shape; the expressions to compile: (pointer, offset of the
/// expression inside that string, its source, whether it must be a bool).
pub(super) fn shape(config: &Value, out: &mut Vec<Found>) -> Vec<(String, usize, String, bool)> {
    let mut exprs = Vec::new();
    let mut bad = |pointer: String, message: String| {
        out.push(Found {
            pointer,
            offset: None,
            problem: Problem::Config { message },
        })
    };
    let Some(top) = config.as_object() else {
        bad(
            String::new(),
            "must be a table with `rules` (e.g. config = { rules = [{ when = \"input.amount > 500\", stance = \"deny\" }] })".into(),
        );
        return exprs;
    };
    for key in top.keys().filter(|k| *k != "rules") {
        bad(
            format!("/{key}"),
            "unknown key (a `cel` policy's config has only `rules`)".into(),
        );
    }
    let Some(rules) = top.get("rules").and_then(Value::as_array) else {
        bad(
            "/rules".into(),
            "must be an array of rules, tried in order: [{ when = \"…\", stance = \"…\" }, …]"
                .into(),
        );
        return exprs;
    };
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("/rules/{i}");
        let Some(rule) = rule.as_object() else {
            bad(
                at,
                "must be a table: { when = \"…\", stance = \"…\" }".into(),
            );
            continue;
        };
        rule_shape(&at, rule, &mut bad, &mut exprs);
    }
    exprs
}

fn rule_shape(
    at: &str,
    rule: &Map<String, Value>,
    bad: &mut impl FnMut(String, String),
    exprs: &mut Vec<(String, usize, String, bool)>,
) {
    for key in rule.keys().filter(|k| !RULE_KEYS.contains(&k.as_str())) {
        bad(
            format!("{at}/{key}"),
            format!("unknown key (a rule has {})", RULE_KEYS.join(", ")),
        );
    }
    match rule.get("when") {
        Some(Value::String(w)) => exprs.push((format!("{at}/when"), 0, w.clone(), true)),
        _ => bad(
            format!("{at}/when"),
            "must be a CEL expression (a string) that is true when the rule applies".into(),
        ),
    }
    let stance = rule.get("stance").and_then(Value::as_str);
    if !stance.is_some_and(|s| STANCES.contains(&s)) {
        bad(
            format!("{at}/stance"),
            format!("must be one of {}", STANCES.join(", ")),
        );
    }
    for key in ["type", "code"] {
        if rule
            .get(key)
            .is_some_and(|v| !v.is_string() && !v.is_null())
        {
            bad(format!("{at}/{key}"), "must be a string".into());
        }
    }
    if rule
        .get("expiresInMs")
        .is_some_and(|v| !v.is_u64() && !v.is_null())
    {
        bad(
            format!("{at}/expiresInMs"),
            "must be a whole number of milliseconds (0 or more)".into(),
        );
    }
    match rule.get("reason") {
        Some(Value::String(r)) => match holes(r) {
            Ok(holes) => {
                for (offset, expr) in holes {
                    exprs.push((format!("{at}/reason"), offset, expr, false));
                }
            }
            Err(offset) => {
                bad(
                    format!("{at}/reason"),
                    format!("`${{` at character {offset} has no closing `}}`"),
                );
            }
        },
        Some(Value::Null) | None => {
            if stance == Some("require-approval") {
                bad(
                    format!("{at}/reason"),
                    "a require-approval rule needs a reason (what the approver is asked)".into(),
                );
            }
        }
        Some(_) => bad(format!("{at}/reason"), "must be a string".into()),
    }
}

/// The `${EXPR}` holes of a template: (character offset of EXPR, EXPR). `Err(offset)` for
/// an unclosed hole. The component reads templates the same way.
pub fn holes(template: &str) -> Result<Vec<(usize, String)>, usize> {
    let mut out = Vec::new();
    let mut rest = template;
    let mut consumed = 0; // characters before `rest`
    while let Some(at) = rest.find("${") {
        let start = consumed + rest[..at].chars().count() + 2;
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else {
            return Err(start - 2);
        };
        out.push((start, after[..end].to_string()));
        consumed = start + after[..end].chars().count() + 1;
        rest = &after[end + 1..];
    }
    Ok(out)
}
