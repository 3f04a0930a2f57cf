//! The lifecycle walkthrough (docs/walkthrough.md) with refund-limit,
//! org-isolation and pii-redactor as Wasm plugins produces the same audit trail as the
//! native version.

use crate::common;

use capgate_core::prelude::*;
use capgate_wasm::{Binding, Isolation};
use common::*;
use serde_json::{Value, json};
use std::sync::Arc;

fn native_policies() -> Vec<Arc<dyn Policy>> {
    let org: Arc<dyn Policy> = Arc::new(policy_sync("orgIsolation", |req| {
        Ok(if req.actor.attributes["orgId"] == req.context["orgId"] {
            PolicyDecision::allow()
        } else {
            PolicyDecision::deny("This resource belongs to another organization.")
        })
    }));
    let limit: Arc<dyn Policy> = Arc::new(capgate_testkit::walkthrough::refund_limit(
        "refundLimit",
        Some("manager"),
    ));
    vec![org, limit]
}

fn native_redactor() -> Arc<dyn Redactor> {
    Arc::new(redactor_fn("stripGatewayRef", |mut out| {
        if let Some(o) = out.as_object_mut() {
            o.remove("gatewayRef");
        }
        Ok(out)
    }))
}

fn wasm_policies(isolation: Isolation) -> Vec<Arc<dyn Policy>> {
    wasm_policies_with(isolation, load("refund_limit"))
}

/// The walkthrough's policies with `refund_limit` taken from any language's build: only the
/// plugin file changes, the binding and its config stay the same.
fn wasm_policies_with(
    isolation: Isolation,
    refund_limit: Arc<capgate_wasm::Plugin>,
) -> Vec<Arc<dyn Policy>> {
    let org = load("org_isolation")
        .policy(
            Binding::new("orgIsolation")
                .config(json!({"actorAttribute": "/orgId", "contextPath": "/orgId"}))
                .isolation(isolation),
        )
        .expect("bind org-isolation");
    let limit = refund_limit
        .policy(
            Binding::new("refundLimit")
                .config(
                    json!({"maxAmount": 500, "amountPath": "/amount", "approvalType": "manager"}),
                )
                .isolation(isolation),
        )
        .expect("bind refund-limit");
    vec![Arc::new(org), Arc::new(limit)]
}

fn wasm_redactor(isolation: Isolation) -> Arc<dyn Redactor> {
    Arc::new(
        load("pii_redactor")
            .redactor(
                Binding::new("stripGatewayRef")
                    .config(json!({"paths": ["/gatewayRef"]}))
                    .isolation(isolation),
            )
            .expect("bind pii-redactor"),
    )
}

/// Acts 1–5; returns the audit trail with ids, times and durations normalised away.
async fn walkthrough(policies: Vec<Arc<dyn Policy>>, redactor: Arc<dyn Redactor>) -> Vec<Value> {
    let sink = Arc::new(MemorySink::new());
    let c = Counter::default();
    let mut def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .output_schema(json!({
            "type": "object",
            "properties": {
                "refundId": {"type": "string"},
                "amount": {"type": "number"},
                "status": {"type": "string"},
                "gatewayRef": {"type": "string"}
            },
            "required": ["refundId", "amount", "status"]
        }))
        .redactor_arc(redactor)
        .procedure(c.procedure());
    for p in policies {
        def = def.policy_arc(p);
    }
    let rt = Runtime::builder(
        Registry::builder()
            .capability(def)
            .build()
            .expect("registry"),
    )
    .audit_sink(sink.clone())
    .build()
    .expect("a valid runtime");
    let app_context = json!({"orgId": "org_1"});

    // Act 1–2: the model asks; the runtime gates.
    let first = rt.invoke(refund(649).context(app_context.clone())).await;
    assert_eq!(first.status(), "approval-required", "{first:?}");
    let approval = first.approval().expect("approval summary").clone();
    assert_eq!(
        approval.reasons,
        vec!["Refund of $649 exceeds $500".to_string()]
    );
    assert_eq!(c.get(), 0, "nothing executed");

    // Act 3: a human reviews the (redacted) input and decides.
    let pending = rt
        .approvals()
        .list(&ApprovalFilter::default())
        .await
        .expect("list");
    assert_eq!(pending.len(), 1);
    let shown = serde_json::to_value(&pending[0].request).expect("request json");
    assert_eq!(shown["input"]["amount"], 649, "{shown}");
    rt.approvals()
        .decide(&approval.id, priya_decides(DecisionStatus::Approved, None))
        .await
        .expect("decide");
    assert_eq!(c.get(), 0, "approving executes nothing");

    // Act 4–5: resumption with integrity; the governed exit.
    let done = rt
        .resume(
            &approval.id,
            ResumeOptions {
                context: app_context.clone(),
                ..ResumeOptions::default()
            },
        )
        .await;
    assert_eq!(done.status(), "completed", "{done:?}");
    assert_eq!(
        done.output(),
        Some(&json!({"refundId": "ref_77", "amount": 649, "status": "issued"}))
    );
    assert_eq!(c.get(), 1);

    // A failure branch: another organization's context is denied, nothing runs.
    let other = rt
        .invoke(refund(20).context(json!({"orgId": "org_2"})))
        .await;
    assert_eq!(code(&other), Some(ErrorCode::PolicyDenied));
    assert_eq!(c.get(), 1);

    sink.events()
        .into_iter()
        .map(|e| {
            let mut v = serde_json::to_value(&e).expect("event json");
            normalise(&mut v);
            v
        })
        .collect()
}

fn normalise(v: &mut Value) {
    if let Some(o) = v.as_object_mut() {
        // A Wasm policy's stance names its build and configuration (issue 39's provenance,
        // tested in `capgate` `provenance::*`); native ones have none. The decisions must
        // match, not the builds.
        for key in ["pluginSha256", "configSha256", "revision"] {
            o.remove(key);
        }
        for key in [
            "timestamp",
            "executionId",
            "approvalId",
            "expiresAt",
            "durationMs",
        ] {
            if o.contains_key(key) {
                o.insert(key.into(), json!("<varies>"));
            }
        }
        for child in o.values_mut() {
            normalise(child);
        }
    } else if let Some(items) = v.as_array_mut() {
        for item in items {
            normalise(item);
        }
    }
}

fn types(trail: &[Value]) -> Vec<&str> {
    trail
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect()
}

#[tokio::test]
async fn walkthrough_with_wasm_plugins_matches_the_native_audit_trail() {
    let native = walkthrough(native_policies(), native_redactor()).await;
    assert_eq!(
        types(&native),
        [
            "capability.requested",
            "capability.approval_requested",
            "capability.approved",
            "capability.started",
            "capability.completed",
            "capability.requested",
            "capability.denied",
        ]
    );
    let fresh = walkthrough(
        wasm_policies(Isolation::Fresh),
        wasm_redactor(Isolation::Fresh),
    )
    .await;
    assert_eq!(
        fresh, native,
        "fresh-isolation Wasm plugins diverge from native"
    );
    let pooled = walkthrough(
        wasm_policies(Isolation::pooled()),
        wasm_redactor(Isolation::pooled()),
    )
    .await;
    assert_eq!(
        pooled, native,
        "pooled-isolation Wasm plugins diverge from native"
    );

    let requested = &native[1]["data"];
    assert_eq!(requested["reasons"], json!(["refundLimit"]));
    assert_eq!(requested["types"], json!(["manager"]));
    assert_eq!(
        native[2]["data"]["approver"],
        json!({"id": "u_priya", "kind": "user"})
    );
    assert_eq!(
        native[6]["data"]["policyDecisions"],
        json!([{"policy": "orgIsolation", "type": "deny"}, {"policy": "refundLimit", "type": "allow"}])
    );
}

#[tokio::test]
async fn walkthrough_with_the_javascript_refund_limit_matches_the_native_audit_trail() {
    let native = walkthrough(native_policies(), native_redactor()).await;
    for isolation in [Isolation::Fresh, Isolation::pooled()] {
        let js = walkthrough(
            wasm_policies_with(isolation, load_polyglot("js", "refund-limit")),
            wasm_redactor(isolation),
        )
        .await;
        assert_eq!(
            js, native,
            "the JavaScript refund-limit ({isolation:?}) diverges from native"
        );
    }
}

#[tokio::test]
async fn walkthrough_with_the_python_refund_limit_matches_the_native_audit_trail() {
    let native = walkthrough(native_policies(), native_redactor()).await;
    let py = walkthrough(
        wasm_policies_with(Isolation::pooled(), load_polyglot("python", "refund-limit")),
        wasm_redactor(Isolation::pooled()),
    )
    .await;
    assert_eq!(py, native, "the Python refund-limit diverges from native");
}
