//! Registry build checks (all problems at once) and the discovery pipeline.

use crate::common;

use capgate_core::meta::AdapterNames;
use capgate_core::prelude::*;
use common::*;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn registry_build_errors_list_every_problem_at_once() {
    let c = Counter::default();
    let err = Registry::builder()
        .capability(
            CapabilityDef::new(
                "orders.refund",
                refund_meta().with_timeout_ms(0).with_retry(RetryConfig {
                    max_attempts: 2,
                    backoff_ms: None,
                    retry_on: None,
                }),
            )
            .procedure(c.procedure()),
        )
        .capability(
            CapabilityDef::new(
                "orders.refund",
                CapabilityMeta::new("", SideEffect::Read, Risk::Low),
            )
            .procedure(c.procedure()),
        )
        .capability(
            CapabilityDef::new(
                "orders_refund",
                CapabilityMeta::new("clash", SideEffect::Read, Risk::Low),
            )
            .procedure(c.procedure()),
        )
        .capability(
            CapabilityDef::new(
                "bad id!",
                CapabilityMeta::new("x", SideEffect::Read, Risk::Low),
            )
            .input_schema(json!({"type": "nonsense"})),
        )
        .build()
        .unwrap_err();
    let fields: Vec<(String, String)> = err
        .problems
        .iter()
        .map(|p| (p.capability.clone(), p.field.clone()))
        .collect();
    for want in [
        ("orders.refund", "meta.timeoutMs"),
        ("orders.refund", "meta.retry"),
        ("orders.refund", "id"),
        ("orders.refund", "meta.description"),
        ("orders_refund", "meta.adapters"),
        ("bad id!", "id"),
        ("bad id!", "inputSchema"),
        ("bad id!", "procedure"),
    ] {
        assert!(
            fields.contains(&(want.0.to_string(), want.1.to_string())),
            "missing {want:?} in {err}"
        );
    }
    let text = err.to_string();
    assert!(text.contains("problem(s)"), "{text}");
}

#[test]
fn unknown_surface_keys_are_refused_when_meta_is_read_from_json() {
    let meta = serde_json::from_value::<CapabilityMeta>(json!({
        "description": "x", "sideEffect": "read", "risk": "low",
        "expose": {"aiSdk": true, "telepathy": true}
    }));
    assert!(meta.unwrap_err().to_string().contains("telepathy"));
}

#[test]
fn tool_names_default_to_underscores_and_honour_overrides() {
    let c = Counter::default();
    let mut meta = refund_meta();
    meta.adapters = Some(AdapterNames {
        ai_sdk: None,
        mcp: Some("refund_order".into()),
    });
    let reg = Registry::builder()
        .capability(CapabilityDef::new("orders.refund", meta).procedure(c.procedure()))
        .build()
        .unwrap();
    let cap = reg.get("orders.refund").unwrap();
    assert_eq!(cap.tool_name(Surface::AiSdk), "orders_refund");
    assert_eq!(cap.tool_name(Surface::Mcp), "refund_order");
    assert!(reg.by_tool_name(Surface::Mcp, "refund_order").is_some());
}

fn discovery_runtime(policy_timeout_ms: u64, budget_ms: u64) -> (Runtime, Arc<MemorySink>) {
    let c = Counter::default();
    let sink = Arc::new(MemorySink::new());
    let def = |id: &str, tags: &[&str]| {
        CapabilityDef::new(
            id,
            CapabilityMeta::new(format!("{id} description"), SideEffect::Read, Risk::Low)
                .exposed_on([Surface::Mcp])
                .tagged(tags.iter().copied()),
        )
        .procedure(c.procedure())
    };
    let discovery = |name: &'static str, d: PolicyDecision| {
        policy_sync(name, move |_| Ok(d.clone())).with_phases([Phase::Discovery])
    };
    let registry = Registry::builder()
        .capability(def("a.visible", &["support"]))
        .capability(def("b.hidden", &["support"]).policy(discovery("hide", PolicyDecision::hide())))
        .capability(def("c.denied", &[]).policy(discovery("deny", PolicyDecision::deny("no"))))
        .capability(
            def("d.gated", &["billing"])
                .policy(discovery("gate", PolicyDecision::require_approval("big"))),
        )
        .capability(
            def("e.broken", &[]).policy(
                policy_sync("broken", |_| Err(PolicyError::Failed("x".into())))
                    .with_phases([Phase::Discovery]),
            ),
        )
        .capability(
            CapabilityDef::new(
                "f.direct_only",
                CapabilityMeta::new("direct", SideEffect::Read, Risk::Low)
                    .exposed_on([Surface::Direct]),
            )
            .procedure(c.procedure()),
        )
        .capability(
            def("g.invocation_only", &[])
                .policy(policy_sync("inv", |_| Ok(PolicyDecision::hide()))),
        )
        .build()
        .unwrap();
    let rt = Runtime::builder(registry)
        .audit(capgate_core::audit::AuditConfig {
            sinks: vec![sink.clone()],
            verbose: true,
            ..Default::default()
        })
        .defaults(capgate_core::runtime::Defaults {
            policy_timeout_ms,
            discovery_budget_ms: budget_ms,
            ..Default::default()
        })
        .build()
        .expect("a valid runtime");
    (rt, sink)
}

fn opts(scope: Option<Scope>) -> DescribeOptions {
    DescribeOptions {
        namespace: String::new(),
        actor: dana(),
        context: json!({}),
        scope,
    }
}

/// SI-1 (deny by default: only an exposure flag of exactly `true` lists a capability).
#[tokio::test]
async fn discovery_filters_by_exposure_and_policy_in_registry_order_and_fails_closed() {
    let (rt, sink) = discovery_runtime(5000, 30_000);
    let d = rt.describe(Surface::Mcp, opts(None)).await.unwrap();
    let ids: Vec<&str> = d.iter().map(|x| x.id.as_str()).collect();
    assert_eq!(ids, ["a.visible", "d.gated", "g.invocation_only"]);
    assert_eq!(d[1].requires_approval, Some(true));
    assert_eq!(d[0].requires_approval, None);
    let wire = serde_json::to_value(&d[0]).unwrap();
    assert!(wire.get("outputSchema").is_none());
    assert_eq!(wire["sideEffect"], "read");
    let data = data_of(&sink, "capabilities.discovered");
    assert_eq!(data["count"], 3);
    assert_eq!(
        data["capabilityIds"],
        json!(["a.visible", "d.gated", "g.invocation_only"])
    );
}

#[tokio::test]
async fn discovery_scope_is_a_union_of_tags_and_ids() {
    let (rt, _) = discovery_runtime(5000, 30_000);
    let d = rt
        .describe(
            Surface::Mcp,
            opts(Some(Scope {
                tags: vec!["billing".into()],
                ids: vec!["a.visible".into(), "f.direct_only".into()],
            })),
        )
        .await
        .unwrap();
    let ids: Vec<&str> = d.iter().map(|x| x.id.as_str()).collect();
    assert_eq!(ids, ["a.visible", "d.gated"], "scope never widens exposure");
}

#[tokio::test]
async fn discovery_past_its_budget_is_a_timeout_at_stage_discovery() {
    let c = Counter::default();
    let slow = policy_fn("slow", |_| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(PolicyDecision::allow())
        })
    })
    .with_phases([Phase::Discovery]);
    let reg = Registry::builder()
        .capability(
            CapabilityDef::new(
                "a.slow",
                CapabilityMeta::new("x", SideEffect::Read, Risk::Low).exposed_on([Surface::Mcp]),
            )
            .policy(slow)
            .procedure(c.procedure()),
        )
        .build()
        .unwrap();
    let rt = Runtime::builder(reg)
        .defaults(capgate_core::runtime::Defaults {
            policy_timeout_ms: 60_000,
            discovery_budget_ms: 30,
            ..Default::default()
        })
        .build()
        .expect("a valid runtime");
    let err = rt.describe(Surface::Mcp, opts(None)).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::Timeout);
    assert_eq!(err.stage(), Some(Stage::Discovery));
}

#[tokio::test]
async fn si2_discovery_is_ux_and_invocation_still_enforces() {
    // A capability hidden only at invocation is listed, but calling it is concealed.
    let (rt, _) = discovery_runtime(5000, 30_000);
    let r = rt
        .invoke(InvokeRequest::new(
            Surface::Mcp,
            "g.invocation_only",
            json!({}),
            dana(),
        ))
        .await;
    assert_eq!(code(&r), Some(ErrorCode::CapabilityNotFound));
}

#[test]
fn the_error_table_has_the_spec_defaults() {
    use capgate_core::error::ErrorCode as C;
    let exposed: Vec<C> = C::ALL
        .into_iter()
        .filter(|c| c.defaults().exposed)
        .collect();
    assert_eq!(
        exposed,
        vec![
            C::CapabilityNotFound,
            C::InputInvalid,
            C::Unauthenticated,
            C::Forbidden,
            C::PolicyDenied,
            C::ApprovalRequired,
            C::ApprovalPending,
            C::ApprovalRejected,
            C::ApprovalExpired,
            C::ApprovalConsumed,
            C::ApprovalSelfApproval,
            C::Timeout,
            C::Cancelled,
        ]
    );
    let retryable: Vec<C> = C::ALL
        .into_iter()
        .filter(|c| c.defaults().retryable)
        .collect();
    assert_eq!(
        retryable,
        vec![C::ApprovalPending, C::Timeout, C::AuditUnavailable]
    );
    assert_eq!(C::InternalError.defaults().stage, None);
    for c in C::ALL {
        assert_eq!(serde_json::to_value(c).unwrap(), json!(c.as_str()));
    }
}

#[test]
fn describe_and_invoke_futures_are_send() {
    // Adapters (axum, rmcp) need `Send` futures; this fails to compile otherwise.
    fn assert_send<T: Send>(_: &T) {}
    let (rt, _) = discovery_runtime(5000, 30_000);
    let d = rt.describe(Surface::Mcp, opts(None));
    assert_send(&d);
    let i = rt.invoke(InvokeRequest::new(
        Surface::Mcp,
        "a.visible",
        json!({}),
        dana(),
    ));
    assert_send(&i);
    let r = rt.resume("apr_x", ResumeOptions::default());
    assert_send(&r);
}
