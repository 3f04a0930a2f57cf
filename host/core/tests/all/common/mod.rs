//! Shared fixtures for the pipeline tests.
#![allow(dead_code)]

pub mod walkthrough;

use capgate_core::prelude::*;
use serde_json::Value;
use std::sync::Arc;

pub use capgate_testkit::actors::{dana, priya, priya_decides};
pub use capgate_testkit::schemas::refund as refund_schema;
pub use capgate_testkit::walkthrough::{refund_limit, refund_meta};

/// Counts calls and echoes what it saw (who approved, who asked).
#[derive(Clone, Default)]
pub struct Counter(pub capgate_testkit::walkthrough::Counter);

impl Counter {
    pub fn get(&self) -> usize {
        self.0.get()
    }
    pub fn procedure(&self) -> impl Procedure + use<> {
        self.0.procedure_naming_parties()
    }
}

pub fn refund_def(counter: &Counter) -> CapabilityDef {
    CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .policy(refund_limit("refundLimit", Some("manager")))
        .procedure(counter.procedure())
}

pub fn runtime_with(defs: Vec<CapabilityDef>, sink: Arc<MemorySink>) -> Runtime {
    let mut b = Registry::builder();
    for d in defs {
        b.push(d);
    }
    Runtime::builder(b.build().expect("registry"))
        .audit_sink(sink)
        .build()
        .expect("a valid runtime")
}

pub fn call(id: &str, input: Value) -> InvokeRequest {
    InvokeRequest::new(Surface::AiSdk, id, input, dana())
}

pub fn code(r: &ExecutionResult) -> Option<ErrorCode> {
    r.error().map(|e| e.code())
}

/// A decision by an approver of `namespace` holding `roles`.
pub fn decide_as(approver: ActorRef, namespace: &str, roles: &[&str]) -> DecideRequest {
    DecideRequest {
        status: DecisionStatus::Approved,
        approver,
        comment: None,
        decider: Decider::Approver {
            namespace: namespace.into(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
        },
    }
}

pub async fn approve(rt: &Runtime, id: &str) {
    rt.approvals()
        .decide(id, priya_decides(DecisionStatus::Approved, Some("ok")))
        .await
        .expect("decide");
}

/// The `data` object of the first event of a type.
pub fn data_of(sink: &MemorySink, ty: &str) -> Value {
    let ev = sink
        .events()
        .into_iter()
        .find(|e| e.type_name() == ty)
        .unwrap_or_else(|| panic!("no {ty} event in {:?}", sink.types()));
    serde_json::to_value(&ev).unwrap()["data"].clone()
}
