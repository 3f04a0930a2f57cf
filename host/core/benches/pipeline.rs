//! The cost of governance: a direct handler call vs. a governed invoke with no policies vs.
//! a governed invoke with two native policies, a native redactor and an in-memory audit sink.
//!
//! `cargo bench -p capgate-core --bench pipeline`

use async_trait::async_trait;
use capgate_core::audit::{AuditEvent, AuditSink, AuditSinkError};
use capgate_core::prelude::*;
use capgate_core::procedure::{AgentInvocationInfo, ProcedureCall};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// An in-memory sink that keeps the last 1024 events (bounded, like a real buffer).
#[derive(Default)]
struct RingSink(Mutex<VecDeque<AuditEvent>>);

#[async_trait]
impl AuditSink for RingSink {
    fn name(&self) -> &str {
        "ring"
    }
    async fn emit(&self, event: &AuditEvent) -> Result<(), AuditSinkError> {
        let mut q = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == 1024 {
            q.pop_front();
        }
        q.push_back(event.clone());
        Ok(())
    }
}

fn schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "orderId": {"type": "string"},
            "amount": {"type": "number", "exclusiveMinimum": 0},
            "reason": {"type": "string"}
        },
        "required": ["orderId", "amount"]
    })
}

fn refund() -> impl Procedure {
    handler(|call| async move {
        Ok(
            json!({"refundId": "ref_77", "amount": call.input["amount"], "status": "issued", "gatewayRef": "gw_1"}),
        )
    })
}

fn meta() -> CapabilityMeta {
    CapabilityMeta::new("Refund an order", SideEffect::Write, Risk::High)
        .exposed_on([Surface::AiSdk])
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let input = json!({"orderId": "ord_42", "amount": 120, "reason": "damaged item"});
    let actor = Actor::user("u_dana", json!({"orgId": "org_1"}));

    c.bench_function("canonical input hash (RFC 8785 + SHA-256)", |b| {
        b.iter(|| capgate_core::canonical::input_hash(std::hint::black_box(&input)))
    });
    let validator = capgate_core::schema::Schema::compile(schema()).expect("schema");
    c.bench_function("input schema validation", |b| {
        b.iter(|| validator.validate(std::hint::black_box(input.clone())))
    });

    let direct = refund();
    let agent = Arc::new(AgentInvocationInfo {
        execution_id: "exe_bench".into(),
        capability_id: "orders.refund".into(),
        surface: Surface::AiSdk,
        namespace: String::new(),
        actor: actor.clone(),
        approval: None,
        correlation_id: None,
        idempotency_key: "idk_bench".into(),
    });
    c.bench_function("direct handler call", |b| {
        b.to_async(&rt).iter(|| {
            let call = ProcedureCall {
                input: input.clone(),
                context: json!({"orgId": "org_1"}),
                agent: agent.clone(),
                cancel: CancellationToken::new(),
                progress: None,
                attempt: 1,
            };
            let p = &direct;
            async move { p.call(call).await }
        })
    });

    let bare = Runtime::builder(
        Registry::builder()
            .capability(
                CapabilityDef::new("orders.refund", meta())
                    .input_schema(schema())
                    .procedure(refund()),
            )
            .build()
            .expect("registry"),
    )
    .build()
    .expect("a valid runtime");
    bench_refund(
        c,
        &rt,
        "governed invoke, no policies",
        &bare,
        &input,
        &actor,
    );

    let org_isolation = policy_sync("orgIsolation", |req| {
        Ok(if req.actor.attributes["orgId"] == req.context["orgId"] {
            PolicyDecision::allow()
        } else {
            PolicyDecision::deny("wrong org")
        })
    });
    let refund_limit = capgate_testkit::walkthrough::refund_limit("refundLimit", None);
    let governed = Runtime::builder(
        Registry::builder()
            .capability(
                CapabilityDef::new("orders.refund", meta())
                    .input_schema(schema())
                    .policy(refund_limit)
                    .redactor(redactor_fn("stripGatewayRef", |mut v| {
                        if let Some(o) = v.as_object_mut() {
                            o.remove("gatewayRef");
                        }
                        Ok(v)
                    }))
                    .procedure(refund()),
            )
            .build()
            .expect("registry"),
    )
    .policy(org_isolation)
    .audit_sink(Arc::new(RingSink::default()))
    .build()
    .expect("a valid runtime");
    bench_refund(
        c,
        &rt,
        "governed invoke, 2 policies + redactor + audit",
        &governed,
        &input,
        &actor,
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);

/// One criterion bench of Dana's refund through `runtime`, which must complete it.
fn bench_refund(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    name: &str,
    runtime: &Runtime,
    input: &serde_json::Value,
    actor: &Actor,
) {
    c.bench_function(name, |b| {
        b.to_async(rt).iter(|| {
            let req = InvokeRequest::new(
                Surface::AiSdk,
                "orders.refund",
                input.clone(),
                actor.clone(),
            )
            .context(json!({"orgId": "org_1"}));
            async move {
                let r = runtime.invoke(req).await;
                debug_assert_eq!(r.status(), "completed");
                r
            }
        })
    });
}
