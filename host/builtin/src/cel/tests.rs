//! The load-time check of `cel` configs: shapes, syntax and type errors located at their
//! character, hide and reason warnings.

use super::*;
use serde_json::json;

fn refund_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"orderId": {"type": "string"}, "amount": {"type": "number"}},
        "required": ["orderId", "amount"],
        "additionalProperties": false
    })
}

fn run(when: &str) -> Vec<Found> {
    let schema = refund_schema();
    check(
        &json!({"rules": [{"when": when, "stance": "deny"}]}),
        &[Attached {
            id: "orders.refund",
            schema: Some(&schema),
        }],
    )
}

#[test]
fn a_hide_rule_is_found_and_one_that_reads_the_input_is_located() {
    let config = json!({"rules": [
        {"when": "input.amount > 5", "stance": "deny"},
        {"when": "actor.attributes.tier != 'gold'", "stance": "hide"},
        {"when": "actor.kind == 'agent' && input.amount > 5", "stance": "hide"},
    ]});
    assert!(hides(&config));
    assert!(!hides(
        &json!({"rules": [{"when": "true", "stance": "deny"}]})
    ));
    let found = hide_reads_input(&config);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].pointer, "/rules/2/when");
    assert_eq!(found[0].offset, Some(25));
}

#[test]
fn a_reason_that_reads_the_input_is_located_at_its_hole() {
    let config = json!({"rules": [
        {"when": "true", "stance": "require-approval", "reason": "Refund of $${input.amount}"},
        {"when": "true", "stance": "deny", "reason": "Agents may not (${actor.kind})"},
        {"when": "true", "stance": "deny", "reason": "${actor.id} asked: ${input.reason}"},
        {"when": "true", "stance": "deny", "reason": "no holes, input named in words"},
    ]});
    let found = reason_reads_input(&config);
    let at: Vec<_> = found
        .iter()
        .map(|f| (f.pointer.as_str(), f.offset))
        .collect();
    assert_eq!(
        at,
        [("/rules/0/reason", Some(11)), ("/rules/2/reason", Some(19))]
    );
    assert!(matches!(found[0].problem, Problem::ReasonReadsInput { .. }));
}

#[test]
fn a_well_typed_rule_has_no_problem() {
    assert_eq!(
        run("phase != 'discovery' && input.amount > 500 && !('manager' in actor.attributes.roles)"),
        vec![]
    );
    assert_eq!(run("[1, 2].all(x, x < input.amount)"), vec![]);
}

#[test]
fn a_syntax_error_is_located_at_its_character() {
    let found = run("input.amount > > 500");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].pointer, "/rules/0/when");
    assert_eq!(found[0].offset, Some(15));
    assert!(matches!(found[0].problem, Problem::Syntax { .. }));
    let found = run("input.amount >\n  500 +");
    assert_eq!(found[0].offset, Some(22), "{found:?}");
}

#[test]
fn a_type_error_is_located_at_its_operator() {
    let found = run("input.amount > '500'");
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        matches!(&found[0].problem, Problem::Type { message } if message == "cannot order a number against a string"),
        "{found:?}"
    );
    assert_eq!(found[0].offset, Some(13));
    assert!(matches!(
        run("input.amount")[0].problem,
        Problem::Type { .. }
    ));
    assert!(matches!(
        run("inptu.amount > 1")[0].problem,
        Problem::Type { .. }
    ));
}

#[test]
fn a_field_the_input_schema_lacks_is_named_with_the_capability() {
    let found = run("input.amount > 500 || input.amout > 5");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].offset, Some(27));
    assert_eq!(
        found[0].problem.to_string(),
        "`input.amout` is not in the input schema of capability `orders.refund` (its fields there: amount, orderId)"
    );
    // Read through `has()` and `[]` too.
    assert_eq!(run("has(input.total)").len(), 1);
    assert_eq!(run("input['total'] > 1").len(), 1);
}

#[test]
fn reason_holes_are_checked_at_their_place() {
    let schema = refund_schema();
    let found = check(
        &json!({"rules": [{"when": "true", "stance": "require-approval", "reason": "Refund of $${input.amout}"}]}),
        &[Attached {
            id: "orders.refund",
            schema: Some(&schema),
        }],
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].pointer, "/rules/0/reason");
    assert_eq!(found[0].offset, Some(18));
    assert_eq!(
        holes("a ${x} b ${y}"),
        Ok(vec![(4, "x".into()), (11, "y".into())])
    );
    assert_eq!(holes("a ${x"), Err(2));
}

#[test]
fn the_shape_of_the_config_is_checked() {
    let found = check(
        &json!({"rules": [{"when": 1, "stance": "maybe", "expiresInMs": -1, "extra": 1}], "x": 1}),
        &[],
    );
    let pointers: Vec<&str> = found.iter().map(|f| f.pointer.as_str()).collect();
    assert_eq!(
        pointers,
        [
            "/x",
            "/rules/0/extra",
            "/rules/0/when",
            "/rules/0/stance",
            "/rules/0/expiresInMs"
        ]
    );
    assert!(
        !check(
            &json!({"rules": [{"when": "true", "stance": "require-approval"}]}),
            &[]
        )
        .is_empty()
    );
    assert!(!check(&Value::Null, &[]).is_empty());
}
