//! The shipped Cedar policy in the real sandbox: a satisfied forbid decides by its
//! `@stance`, several merge as the pipeline merges (deny > hide > require-approval; every
//! require-approval one counts, each bound as its own policy), no satisfied permit denies
//! without telling the model why, in discovery only hide forbids count, an error in any
//! policy fails closed instead of being skipped, and an expensive request is cut by fuel or
//! the deadline like any plugin's.

use crate::{decide, decide_in_discovery};
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

/// Two require-approval forbids of different types (issue 55): over $10 000 a `manager`
/// (1 h), over $5 000 `finance` (15 min).
const TWO_APPROVERS: &str = "permit(principal, action, resource);\n\
    @stance(\"require-approval\") @type(\"manager\") @expiresInMs(\"3600000\")\n\
    @reason(\"Refund of ${context.input.amount} needs a manager\")\n\
    forbid(principal, action, resource) when { context.input.amount.greaterThan(decimal(\"10000.0\")) };\n\
    @stance(\"require-approval\") @type(\"finance\") @expiresInMs(\"900000\")\n\
    @reason(\"Refund of ${context.input.amount} needs finance\")\n\
    forbid(principal, action, resource) when { context.input.amount.greaterThan(decimal(\"5000.0\")) };\n";

/// A `cedar` config bound as capgate binds it: one policy per config
/// [`capgate_builtin::cedar::slots`] gives, pooled.
fn bound_as_capgate_binds(config: Value) -> Vec<WasmPolicy> {
    capgate_builtin::cedar::slots(&config)
        .into_iter()
        .map(|given| {
            crate::bind(
                &capgate_builtin::CEDAR,
                given,
                Limits::default(),
                Isolation::pooled(),
            )
        })
        .collect()
}

#[tokio::test]
async fn every_satisfied_require_approval_forbid_counts_as_separate_policies_would() {
    use capgate_core::policy::{ApprovalRequirement, Evaluated, Verdict, combine};
    let config = json!({ "policies": TWO_APPROVERS });
    let slots = bound_as_capgate_binds(config.clone());
    assert_eq!(slots.len(), 2, "one policy per require-approval forbid");
    let verdict = |amount: f64| {
        let slots = &slots;
        async move {
            let mut evaluated = Vec::new();
            for p in slots {
                let outcome = decide(p, json!({ "amount": amount }), Phase::Invocation)
                    .await
                    .map_err(|e| capgate_core::policy::PolicyError::Failed(e.to_string()));
                evaluated.push(Evaluated {
                    policy: "limits".into(),
                    outcome,
                    provenance: None,
                });
            }
            combine(&evaluated)
        }
    };
    match verdict(20_000.0).await {
        Verdict::ApprovalRequired(ApprovalRequirement {
            reasons,
            types,
            policies,
            expires_in_ms,
            untyped,
            ..
        }) => {
            assert_eq!(
                types,
                ["manager", "finance"],
                "both approvers, not the first"
            );
            assert_eq!(expires_in_ms, Some(900_000), "the shortest expiry");
            assert_eq!(
                reasons,
                [
                    "Refund of 20000.0 needs a manager",
                    "Refund of 20000.0 needs finance"
                ]
            );
            assert_eq!(policies, ["limits"]);
            assert!(!untyped);
        }
        other => panic!("{other:?}"),
    }
    // Over $5 000 only: finance alone, its own expiry.
    match verdict(6_000.0).await {
        Verdict::ApprovalRequired(r) => {
            assert_eq!(
                (r.types, r.expires_in_ms),
                (vec!["finance".to_string()], Some(900_000))
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(verdict(100.0).await, Verdict::Allowed);

    // Bound once (as `capgate plugin test` binds it), the set cannot carry both types in
    // one decision: it fails closed rather than ask for fewer approvers.
    let once = bind(TWO_APPROVERS, Limits::default(), Isolation::Fresh);
    let out = decide(&once, json!({"amount": 20_000}), Phase::Invocation).await;
    assert!(
        matches!(&out, Err(CallError::Guest(m)) if m.contains("different types")),
        "{out:?}"
    );
    // Same type twice in one decision: every reason, the shortest expiry.
    let same = TWO_APPROVERS.replace("@type(\"finance\")", "@type(\"manager\")");
    let out = decide(
        &bind(&same, Limits::default(), Isolation::Fresh),
        json!({"amount": 20_000}),
        Phase::Invocation,
    )
    .await;
    match out {
        Ok(PolicyDecision::RequireApproval {
            reason,
            approval_type,
            expires_in_ms,
        }) => {
            assert_eq!(approval_type.as_deref(), Some("manager"));
            assert_eq!(expires_in_ms, Some(900_000));
            assert_eq!(
                reason,
                "Refund of 20000 needs a manager; Refund of 20000 needs finance"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_stricter_forbid_still_wins_over_the_slots() {
    // deny > hide > require-approval, in every slot alike.
    let policies = format!(
        "{TWO_APPROVERS}@stance(\"hide\")\n\
         forbid(principal, action, resource) when {{ context.input.amount.greaterThan(decimal(\"50000.0\")) }};\n\
         @code(\"too_big\") @reason(\"no\")\n\
         forbid(principal, action, resource) when {{ context.input.amount.greaterThan(decimal(\"90000.0\")) }};\n"
    );
    let slots = bound_as_capgate_binds(json!({ "policies": policies }));
    assert_eq!(slots.len(), 2);
    for p in &slots {
        let hidden = decide(p, json!({"amount": 60_000}), Phase::Invocation).await;
        assert!(matches!(hidden, Ok(PolicyDecision::Hide)), "{hidden:?}");
        let denied = decide(p, json!({"amount": 95_000}), Phase::Invocation).await;
        assert!(
            matches!(&denied, Ok(PolicyDecision::Deny { code: Some(c), .. }) if c == "too_big"),
            "{denied:?}"
        );
    }
}

/// Attacker's view: Priya holds the `manager` role only. The set asks a `manager` and
/// `finance` for a $20 000 refund; her approval alone must not be enough.
#[tokio::test]
async fn priya_a_manager_cannot_approve_alone_what_the_set_gives_manager_and_finance() {
    use capgate_core::prelude::*;
    use capgate_core::runtime::ApprovalsError;
    let counter = capgate_testkit::walkthrough::Counter::default();
    let mut def = CapabilityDef::new("orders.refund", capgate_testkit::walkthrough::refund_meta())
        .input_schema(capgate_testkit::schemas::refund())
        .procedure(counter.procedure());
    for p in bound_as_capgate_binds(json!({ "policies": TWO_APPROVERS })) {
        def = def.policy(p);
    }
    let rt = Runtime::builder(
        Registry::builder()
            .capability(def)
            .build()
            .expect("registry"),
    )
    .approval_type_roles("manager", ["manager"])
    .approval_type_roles("finance", ["finance"])
    .build()
    .expect("a valid runtime");
    let held = rt
        .invoke(
            InvokeRequest::new(
                Surface::AiSdk,
                "orders.refund",
                json!({"orderId": "ord_1", "amount": 20_000, "reason": "damaged"}),
                capgate_testkit::actors::dana(),
            )
            .namespace("org_1"),
        )
        .await;
    let approval = held
        .approval()
        .unwrap_or_else(|| panic!("approval-required, got {held:?}"))
        .clone();
    assert_eq!(approval.types, ["manager", "finance"]);
    assert_eq!(approval.reasons.len(), 2, "{:?}", approval.reasons);
    let lifetime = approval.expires_at - approval.requested_at;
    assert_eq!(lifetime.num_minutes(), 15, "the shortest expiry");
    let approve = |roles: &[&str]| DecideRequest {
        status: DecisionStatus::Approved,
        approver: capgate_testkit::actors::priya(),
        comment: None,
        decider: Decider::Approver {
            namespace: "org_1".into(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
        },
    };
    let alone = rt
        .approvals()
        .decide(&approval.id, approve(&["manager"]))
        .await;
    assert!(
        matches!(&alone, Err(ApprovalsError::Forbidden(m)) if m.contains("finance")),
        "a manager alone must not approve what also needs finance: {alone:?}"
    );
    let resumed = rt
        .resume(
            &approval.id,
            ResumeOptions {
                expected_actor: Some(capgate_testkit::actors::dana().reference()),
                expected_namespace: Some("org_1".into()),
                ..Default::default()
            },
        )
        .await;
    assert_ne!(resumed.status(), "completed");
    assert_eq!(counter.get(), 0, "the refund must not run");
    // Someone who holds both may.
    rt.approvals()
        .decide(&approval.id, approve(&["manager", "finance"]))
        .await
        .expect("an approver holding both roles decides it");
}

#[tokio::test]
async fn the_default_deny_tells_the_model_nothing_of_the_set_and_keeps_why_privately() {
    let out = evaluate(
        "permit(principal, action, resource) when { principal.kind == \"agent\" };",
        Limits::default(),
        json!({"amount": 1}),
        Phase::Invocation,
    )
    .await;
    match out {
        Ok(PolicyDecision::Deny { code, message }) => {
            assert_eq!(message, None, "no public message");
            assert_eq!(code.as_deref(), Some("no_permit_applies"));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn in_discovery_only_hide_forbids_count() {
    let policies = "permit(principal, action, resource) when { context.input.amount.lessThan(decimal(\"100000.0\")) };\n\
        forbid(principal, action, resource) when { context.input.amount.greaterThan(decimal(\"50000.0\")) };\n\
        @stance(\"require-approval\") @type(\"manager\") @reason(\"r\")\n\
        forbid(principal, action, resource) when { principal.kind == \"user\" };\n\
        @stance(\"hide\")\n\
        forbid(principal, action, resource) when { !principal.attributes.roles.contains(\"gold\") };\n";
    let p = bind(policies, Limits::default(), Isolation::Fresh);
    // Dana is not gold: hidden in discovery, though the permit and the deny forbid read the
    // input discovery does not have (they are left out, not failed).
    let out = decide_in_discovery(&p, json!({"roles": ["agent"]})).await;
    assert!(matches!(out, Ok(PolicyDecision::Hide)), "{out:?}");
    // Gold: shown (the require-approval forbid is about a call; discovery has none).
    let out = decide_in_discovery(&p, json!({"roles": ["gold"]})).await;
    assert!(matches!(out, Ok(PolicyDecision::Allow)), "{out:?}");
    // A hide forbid that reads the input fails in discovery, closed.
    let p = bind(
        &format!(
            "{PERMIT_ALL}@stance(\"hide\")\n\
             forbid(principal, action, resource) when {{ context.input.amount.greaterThan(decimal(\"1.0\")) }};"
        ),
        Limits::default(),
        Isolation::Fresh,
    );
    let out = decide_in_discovery(&p, json!({"roles": ["gold"]})).await;
    assert!(matches!(out, Err(CallError::Guest(_))), "{out:?}");
}
