//! The shipped Cedar policy in the real sandbox: a satisfied forbid decides by its
//! `@stance`, several merge as the pipeline merges (deny > hide > require-approval), no
//! satisfied permit denies, an error in any policy fails closed instead of being skipped,
//! and an expensive request is cut by fuel or the deadline like any plugin's.

use crate::decide;
use capgate_core::policy::{Phase, PolicyDecision};
use capgate_wasm::{CallError, Isolation, Limits, WasmPolicy};
use serde_json::{Value, json};
use std::time::Duration;

fn bind(policies: &str, limits: Limits, isolation: Isolation) -> WasmPolicy {
    crate::bind(
        &capgate_builtin::CEDAR,
        json!({ "policies": policies }),
        limits,
        isolation,
    )
}

async fn evaluate(
    policies: &str,
    limits: Limits,
    input: Value,
    phase: Phase,
) -> Result<PolicyDecision, CallError> {
    decide(&bind(policies, limits, Isolation::Fresh), input, phase).await
}

const PERMIT_ALL: &str = "permit(principal, action, resource);\n";

#[tokio::test]
async fn a_satisfied_forbid_decides_by_its_stance_and_the_strictest_wins() {
    let policies = format!(
        "{PERMIT_ALL}\
         @stance(\"require-approval\") @type(\"manager\") @expiresInMs(\"900000\")\n\
         @reason(\"Refund of $${{context.input.amount}} by ${{principal.id}} needs a manager\")\n\
         forbid(principal, action, resource) when {{ context.input.amount.greaterThan(decimal(\"500.0\")) }};\n\
         @stance(\"hide\")\n\
         forbid(principal, action, resource) when {{ context.input.amount.greaterThan(decimal(\"5000.0\")) }};\n\
         @code(\"too_big\") @reason(\"over ${{context.input.amount}}\")\n\
         forbid(principal, action, resource) when {{ context.input.amount.greaterThan(decimal(\"50000.0\")) }};\n\
         forbid(principal, action, resource) when {{ !principal.attributes.roles.contains(\"agent\") }};\n"
    );
    let decide = |amount: f64| {
        evaluate(
            &policies,
            Limits::default(),
            json!({"amount": amount}),
            Phase::Invocation,
        )
    };
    assert!(matches!(decide(100.0).await, Ok(PolicyDecision::Allow)));
    match decide(649.5).await {
        Ok(PolicyDecision::RequireApproval {
            reason,
            approval_type,
            expires_in_ms,
        }) => {
            assert_eq!(reason, "Refund of $649.5 by u_dana needs a manager");
            assert_eq!(approval_type.as_deref(), Some("manager"));
            assert_eq!(expires_in_ms, Some(900_000));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(decide(6000.0).await, Ok(PolicyDecision::Hide)));
    match decide(60000.0).await {
        Ok(PolicyDecision::Deny { code, message }) => {
            assert_eq!(code.as_deref(), Some("too_big"));
            assert_eq!(message.as_deref(), Some("over 60000.0"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn no_satisfied_permit_denies() {
    let out = evaluate(
        "permit(principal, action, resource) when { principal.kind == \"agent\" };",
        Limits::default(),
        json!({"amount": 1}),
        Phase::Invocation,
    )
    .await;
    assert!(
        matches!(&out, Ok(PolicyDecision::Deny { message: Some(m), .. }) if m.contains("no Cedar permit")),
        "{out:?}"
    );
}

#[tokio::test]
async fn an_error_in_any_policy_fails_closed_where_cedar_would_skip_it() {
    // Cedar skips a policy whose condition errors: for this forbid that would allow the
    // refund it was written to stop. capgate makes it a policy error.
    for (when, input) in [
        (
            "context.input.amount.greaterThan(decimal(\"500.0\"))",
            json!({"orderId": "o"}),
        ),
        ("context.input.amount > 500", json!({"amount": 649})),
        (
            "context.input.amount.greaterThan(decimal(\"500.0\"))",
            json!({"amount": "649"}),
        ),
        (
            "context.input.amount.greaterThan(decimal(\"500.0\"))",
            json!({"amount": 1e-7}),
        ),
        (
            "context.input.amount.greaterThan(decimal(\"500.0\"))",
            json!({"amount": 1e300}),
        ),
    ] {
        let policies =
            format!("{PERMIT_ALL}forbid(principal, action, resource) when {{ {when} }};");
        let out = evaluate(
            &policies,
            Limits::default(),
            input.clone(),
            Phase::Invocation,
        )
        .await;
        assert!(
            matches!(out, Err(CallError::Guest(_))),
            "{when} {input}: {out:?}"
        );
    }
}

/// A request the policy set makes expensive: a set of `n` strings built and compared with
/// itself.
fn expensive(n: usize) -> (String, Value) {
    let items: Vec<String> = (0..n).map(|i| format!("item-{i}")).collect();
    (
        format!(
            "{PERMIT_ALL}forbid(principal, action, resource) when {{ \
             context.input.items.containsAll(context.input.items) && \
             context.input.items.containsAny(context.input.items) }};"
        ),
        json!({ "items": items }),
    )
}

#[tokio::test]
async fn an_expensive_request_is_cut_by_fuel_and_fails_closed() {
    let (policies, input) = expensive(100_000);
    let out = evaluate(&policies, Limits::default(), input, Phase::Invocation).await;
    assert!(matches!(out, Err(CallError::FuelExhausted(_))), "{out:?}");
}

#[tokio::test]
async fn without_fuel_the_deadline_cuts_it() {
    let (policies, input) = expensive(100_000);
    let limits = Limits::default()
        .with_fuel(None)
        .with_timeout(Duration::from_millis(20));
    let out = evaluate(&policies, limits, input, Phase::Invocation).await;
    assert!(matches!(out, Err(CallError::Deadline(_))), "{out:?}");
}

#[tokio::test]
async fn a_pooled_instance_decides_each_call_on_its_own_input_and_its_own_binding() {
    // As capgate binds it: pooled, two bindings of the plugin sharing its instances. Each
    // call decides on its own input and its own binding's set, never on an earlier call's.
    let limit = |max: &str| {
        bind(
            &format!(
                "{PERMIT_ALL}forbid(principal, action, resource) when {{ \
                 context.input.amount.greaterThan(decimal(\"{max}\")) }};"
            ),
            Limits::default(),
            Isolation::pooled(),
        )
    };
    let (low, high) = (limit("100.0"), limit("1000.0"));
    for round in 0..3 {
        for (policy, amount, denied) in [
            (&low, 500, true),
            (&high, 500, false),
            (&low, 50, false),
            (&high, 5000, true),
        ] {
            let out = decide(policy, json!({"amount": amount}), Phase::Invocation).await;
            assert_eq!(
                matches!(out, Ok(PolicyDecision::Deny { .. })),
                denied,
                "round {round}, {amount}: {out:?}"
            );
        }
        // An input without the field is an error, not the amount of the call before.
        let out = decide(&low, json!({}), Phase::Invocation).await;
        assert!(matches!(out, Err(CallError::Guest(_))), "{out:?}");
    }
}
