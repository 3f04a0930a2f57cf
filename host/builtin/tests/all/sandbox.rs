//! The shipped CEL policy in the real sandbox: it decides by its rules, and an expression
//! that would run away is cut by fuel or the deadline and fails closed, like any plugin.

use crate::{bind as bind_builtin, decide as decide_in};
use capgate_core::policy::{Phase, PolicyDecision};
use capgate_wasm::{CallError, Isolation, Limits, WasmPolicy};
use serde_json::{Value, json};
use std::time::Duration;

async fn evaluate(
    config: Value,
    limits: Limits,
    input: Value,
) -> Result<PolicyDecision, CallError> {
    let policy = bind(config, limits, Isolation::Fresh);
    decide(&policy, input).await
}

fn bind(config: Value, limits: Limits, isolation: Isolation) -> WasmPolicy {
    bind_builtin(&capgate_builtin::CEL, config, limits, isolation)
}

async fn decide(policy: &WasmPolicy, input: Value) -> Result<PolicyDecision, CallError> {
    decide_in(policy, input, Phase::Invocation).await
}

/// Four nested `all` over 40 elements: 2.5 million steps of the interpreter.
const RUNAWAY: &str = "[0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9]\
    .all(a, [0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9]\
    .all(b, [0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9]\
    .all(c, [0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9,0,1,2,3,4,5,6,7,8,9]\
    .all(d, a + b + c + d >= 0))))";

fn rules(when: &str) -> Value {
    json!({"rules": [{"when": when, "stance": "deny", "reason": "never reached"}]})
}

#[tokio::test]
async fn rules_decide_in_order_and_no_match_allows() {
    let config = json!({"rules": [
        {"when": "input.amount > 1000", "stance": "deny", "code": "too_big", "reason": "over ${1000}"},
        {"when": "input.amount > 500 && !('manager' in actor.attributes.roles)", "stance": "require-approval",
         "type": "manager", "expiresInMs": 900000, "reason": "Refund of $${input.amount} needs a manager"},
    ]});
    let decide =
        |amount: i64| evaluate(config.clone(), Limits::default(), json!({"amount": amount}));
    assert!(matches!(decide(100).await, Ok(PolicyDecision::Allow)));
    match decide(649).await {
        Ok(PolicyDecision::RequireApproval {
            reason,
            approval_type,
            expires_in_ms,
        }) => {
            assert_eq!(reason, "Refund of $649 needs a manager");
            assert_eq!(approval_type.as_deref(), Some("manager"));
            assert_eq!(expires_in_ms, Some(900_000));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(decide(5000).await, Ok(PolicyDecision::Deny { .. })),
        "the first matching rule decides"
    );
}

#[tokio::test]
async fn a_runaway_expression_is_cut_by_fuel_and_fails_closed() {
    let out = evaluate(rules(RUNAWAY), Limits::default(), json!({})).await;
    assert!(matches!(out, Err(CallError::FuelExhausted(_))), "{out:?}");
}

#[tokio::test]
async fn without_fuel_the_deadline_cuts_it() {
    let limits = Limits::default()
        .with_fuel(None)
        .with_timeout(Duration::from_millis(200));
    let out = evaluate(rules(RUNAWAY), limits, json!({})).await;
    assert!(matches!(out, Err(CallError::Deadline(_))), "{out:?}");
}

#[tokio::test]
async fn an_evaluation_error_or_a_non_bool_is_an_error_never_an_allow() {
    for when in [
        "input.missing > 1",
        "input.amount > 'x'",
        "input.amount",
        "1 / 0 == 1",
    ] {
        let out = evaluate(rules(when), Limits::default(), json!({"amount": 5})).await;
        assert!(matches!(out, Err(CallError::Guest(_))), "{when}: {out:?}");
    }
}

#[tokio::test]
async fn a_pooled_instance_decides_each_call_on_its_own_input_and_its_own_binding() {
    // capgate binds its shipped plugins pooled: an instance serves call after call, and
    // two bindings of the same plugin may share instances. Each call still decides on its
    // own input and its own binding's rules, never on what an earlier call left behind.
    let limit = |max: i64| {
        bind(
            json!({"rules": [{"when": format!("input.amount > {max}"), "stance": "deny", "reason": format!("over {max}")}]}),
            Limits::default(),
            Isolation::pooled(),
        )
    };
    let (low, high) = (limit(100), limit(1000));
    for round in 0..3 {
        for (policy, amount, denied) in [
            (&low, 500, true),
            (&high, 500, false),
            (&low, 50, false),
            (&high, 5000, true),
        ] {
            let out = decide(policy, json!({"amount": amount})).await;
            assert_eq!(
                matches!(out, Ok(PolicyDecision::Deny { .. })),
                denied,
                "round {round}, {amount}: {out:?}"
            );
        }
        // An input without the field is an error, not the amount of the call before.
        let out = decide(&low, json!({})).await;
        assert!(matches!(out, Err(CallError::Guest(_))), "{out:?}");
    }
}

#[tokio::test]
async fn in_discovery_only_allow_and_hide_rules_are_tried() {
    // What capgate binds by default (a hide rule, no `phases`) runs in discovery too, where
    // `input` is null: deny and require-approval rules are about a call and are passed
    // over, and so is an allow rule that cannot be evaluated without one.
    let config = json!({"rules": [
        {"when": "input.amount < 10", "stance": "allow"},
        {"when": "input.amount > 1000", "stance": "deny", "reason": "too big"},
        {"when": "actor.kind == 'user'", "stance": "require-approval", "type": "manager", "reason": "r"},
        {"when": "actor.attributes.tier != 'gold'", "stance": "hide"},
    ]});
    let policy = bind(config, Limits::default(), Isolation::Fresh);
    let silver = crate::decide_in_discovery(&policy, json!({"tier": "silver"})).await;
    assert!(matches!(silver, Ok(PolicyDecision::Hide)), "{silver:?}");
    let gold = crate::decide_in_discovery(&policy, json!({"tier": "gold"})).await;
    assert!(matches!(gold, Ok(PolicyDecision::Allow)), "{gold:?}");
    // An allow rule that does decide in discovery still comes first.
    let config = json!({"rules": [
        {"when": "actor.kind == 'user'", "stance": "allow"},
        {"when": "actor.attributes.tier != 'gold'", "stance": "hide"},
    ]});
    let policy = bind(config, Limits::default(), Isolation::Fresh);
    let shown = crate::decide_in_discovery(&policy, json!({"tier": "silver"})).await;
    assert!(matches!(shown, Ok(PolicyDecision::Allow)), "{shown:?}");
    // A hide rule that reads the input fails there: closed.
    let config = json!({"rules": [{"when": "input.amount > 1", "stance": "hide"}]});
    let policy = bind(config, Limits::default(), Isolation::Fresh);
    let failed = crate::decide_in_discovery(&policy, json!({})).await;
    assert!(matches!(failed, Err(CallError::Guest(_))), "{failed:?}");
}
