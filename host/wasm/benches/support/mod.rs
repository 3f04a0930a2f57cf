//! What the Wasm benches share: the example's plugins loaded from
//! `plugins/target/wasm32-wasip2/release` (run `cargo xtask build-plugins` first), and the
//! customer-support refund as a runtime with Wasm or native policies and redactor.
#![allow(dead_code)]

use capgate_core::audit::{AuditEvent, AuditSink, AuditSinkError};
use capgate_core::prelude::*;
use capgate_wasm::{Binding, Isolation, PluginDir, ReserveOptions, WasmHost, sha256_hex};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where `cargo xtask build-plugins` puts the guest plugins.
pub fn wasm_dir() -> PathBuf {
    capgate_testkit::paths::plugin_wasm_dir()
}

/// A plugin file name and the SHA-256 it is pinned to.
pub fn pinned(name: &str) -> (String, String) {
    let file = format!("{name}.wasm");
    let path = wasm_dir().join(&file);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run `cargo xtask build-plugins` first",
            path.display()
        )
    });
    (file, sha256_hex(&bytes))
}

/// The process-wide Wasm host.
pub fn host() -> WasmHost {
    WasmHost::shared().expect("host")
}

/// Load a built plugin by its stem (`refund_limit`).
pub fn plugin(name: &str) -> Arc<capgate_wasm::Plugin> {
    let (file, digest) = pinned(name);
    let dir = PluginDir::open(wasm_dir()).expect("plugin dir");
    host().load(&dir, &file, &digest).expect("load")
}

/// An audit sink that records nothing but still receives every event.
pub struct NullSink;

#[async_trait::async_trait]
impl AuditSink for NullSink {
    fn name(&self) -> &str {
        "null"
    }
    async fn emit(&self, _event: &AuditEvent) -> Result<(), AuditSinkError> {
        Ok(())
    }
}

/// An audit sink that keeps every event it receives (as the spec's reference runtime's
/// collecting sink does): the per-call harness audits into it, and empties it between
/// calls, untimed, so memory stays flat over 120 000 calls.
#[derive(Default)]
pub struct CollectingSink(std::sync::Mutex<Vec<AuditEvent>>);

impl CollectingSink {
    /// Forget what was collected (untimed, between calls).
    pub fn trim(&self) {
        let mut events = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if events.len() >= 4096 {
            events.clear();
        }
    }
}

#[async_trait::async_trait]
impl AuditSink for CollectingSink {
    fn name(&self) -> &str {
        "collecting"
    }
    async fn emit(&self, event: &AuditEvent) -> Result<(), AuditSinkError> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event.clone());
        Ok(())
    }
}

static COLLECTING: std::sync::OnceLock<Arc<CollectingSink>> = std::sync::OnceLock::new();

/// From now on, every runtime these helpers build audits into one [`CollectingSink`]
/// (instead of [`NullSink`]); that sink.
pub fn collect_audit() -> Arc<CollectingSink> {
    COLLECTING.get_or_init(Default::default).clone()
}

/// The refund-limit policy written natively.
pub fn refund_limit_native() -> impl Policy {
    capgate_testkit::walkthrough::refund_limit("refundLimit", None)
}

/// `orders.refund` with these policies and redactor, an input and an output schema,
/// audited to [`NullSink`] (or, after [`collect_audit`], to the collecting sink).
pub fn runtime(policies: Vec<Arc<dyn Policy>>, redactor: Arc<dyn Redactor>) -> Runtime {
    let mut def = CapabilityDef::new(
        "orders.refund",
        CapabilityMeta::new("Refund an order", SideEffect::Write, Risk::High).exposed_on([Surface::AiSdk]),
    )
    .input_schema(json!({
        "type": "object",
        "properties": {"orderId": {"type": "string"}, "amount": {"type": "number"}},
        "required": ["orderId", "amount"]
    }))
    .output_schema(json!({
        "type": "object",
        "properties": {
            "refundId": {"type": "string"},
            "amount": {"type": "number"},
            "gatewayRef": {"type": "string"},
            "email": {"type": "string"}
        },
        "required": ["refundId", "amount"]
    }))
    .redactor_arc(redactor)
    .procedure(handler(|call| async move {
        Ok(json!({"refundId": "ref_77", "amount": call.input["amount"], "gatewayRef": "gw_1", "email": "dana@example.com"}))
    }));
    for p in policies {
        def = def.policy_arc(p);
    }
    Runtime::builder(
        Registry::builder()
            .capability(def)
            .build()
            .expect("registry"),
    )
    .audit_sink(match COLLECTING.get() {
        Some(sink) => sink.clone() as Arc<dyn AuditSink>,
        None => Arc::new(NullSink),
    })
    .build()
    .expect("a valid runtime")
}

/// The refund with the example's Wasm plugins (org isolation, refund limit, PII redactor).
pub fn wasm_runtime(isolation: Isolation) -> Runtime {
    wasm_runtime_with(isolation, ReserveOptions::default())
}

/// [`wasm_runtime`] with a reserve other than the default (fresh isolation).
pub fn wasm_runtime_with(isolation: Isolation, reserve: ReserveOptions) -> Runtime {
    wasm_runtime_probed(isolation, reserve).0
}

/// The reserves' counters of the three plugins of a [`wasm_runtime_probed`], summed.
pub struct ReserveProbe {
    policies: Vec<Arc<capgate_wasm::WasmPolicy>>,
    redactor: Arc<capgate_wasm::WasmRedactor>,
}

impl ReserveProbe {
    /// Hits, misses and ready instances of all three plugins together.
    pub fn stats(&self) -> capgate_wasm::ReserveStats {
        let mut all = self.redactor.reserve_stats();
        for p in &self.policies {
            let s = p.reserve_stats();
            all.hits += s.hits;
            all.misses += s.misses;
            all.ready += s.ready;
        }
        all
    }
}

/// The example's refund-limit policy as a Wasm binding (`maxAmount` 500).
pub fn refund_limit_wasm(
    isolation: Isolation,
    reserve: ReserveOptions,
) -> Arc<capgate_wasm::WasmPolicy> {
    Arc::new(
        plugin("refund_limit")
            .policy(
                Binding::new("refundLimit")
                    .config(json!({"maxAmount": 500}))
                    .isolation(isolation)
                    .reserve(reserve),
            )
            .expect("bind"),
    )
}

/// [`wasm_runtime_with`], and a probe of its plugins' reserves.
pub fn wasm_runtime_probed(
    isolation: Isolation,
    reserve: ReserveOptions,
) -> (Runtime, ReserveProbe) {
    let org = Arc::new(
        plugin("org_isolation")
            .policy(
                Binding::new("orgIsolation")
                    .config(json!({"contextPath": "/orgId"}))
                    .isolation(isolation)
                    .reserve(reserve),
            )
            .expect("bind"),
    );
    let limit = refund_limit_wasm(isolation, reserve);
    let red = Arc::new(
        plugin("pii_redactor")
            .redactor(
                // The example's `stripGatewayRef`: the same redaction as the native one
                // (drop `/gatewayRef`, no pattern scanning).
                Binding::new("pii")
                    .config(json!({"paths": ["/gatewayRef"], "emails": false, "phones": false, "cards": false}))
                    .isolation(isolation)
                    .reserve(reserve),
            )
            .expect("bind"),
    );
    let probe = ReserveProbe {
        policies: vec![org.clone(), limit.clone()],
        redactor: red.clone(),
    };
    let policies: Vec<Arc<dyn Policy>> = vec![org, limit];
    (runtime(policies, red), probe)
}

/// The same refund with native equivalents of the plugins.
pub fn native_runtime() -> Runtime {
    let org: Arc<dyn Policy> = Arc::new(policy_sync("orgIsolation", |req| {
        Ok(if req.actor.attributes["orgId"] == req.context["orgId"] {
            PolicyDecision::allow()
        } else {
            PolicyDecision::deny("other org")
        })
    }));
    let red: Arc<dyn Redactor> = Arc::new(redactor_fn("pii", |mut out| {
        if let Some(o) = out.as_object_mut() {
            o.remove("gatewayRef");
        }
        Ok(out)
    }));
    runtime(vec![org, Arc::new(refund_limit_native())], red)
}

/// The walkthrough's $649 refund by Dana as an invocation-phase policy request, owned so a
/// bench can borrow [`RefundCall::request`] as often as it calls.
pub struct RefundCall {
    info: capgate_core::policy::CapabilityInfo,
    actor: Actor,
    input: serde_json::Value,
    context: serde_json::Value,
    shared: capgate_core::policy::SharedJson,
}

impl RefundCall {
    /// Dana's refund of 649 on `ord_42`, no context.
    pub fn new() -> Self {
        RefundCall {
            info: capgate_core::policy::CapabilityInfo {
                id: "orders.refund".into(),
                side_effect: SideEffect::Write,
                risk: Risk::High,
                tags: vec![],
            },
            actor: Actor::user("u_dana", json!({"orgId": "org_1"})),
            input: json!({"orderId": "ord_42", "amount": 649}),
            context: serde_json::Value::Null,
            shared: capgate_core::policy::SharedJson::default(),
        }
    }

    /// The request a policy sees for it.
    pub fn request(&self) -> capgate_core::policy::PolicyRequest<'_> {
        capgate_core::policy::PolicyRequest {
            phase: capgate_core::policy::Phase::Invocation,
            capability: &self.info,
            surface: Surface::AiSdk,
            namespace: "",
            actor: &self.actor,
            context: &self.context,
            input: Some(&self.input),
            execution_id: "exe_1",
            approval: None,
            shared: &self.shared,
        }
    }
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// p50, p99, p99.9 and max, in µs.
pub struct Summary {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

pub fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    Summary {
        p50: us(percentile(&samples, 50.0)),
        p99: us(percentile(&samples, 99.0)),
        p999: us(percentile(&samples, 99.9)),
        max: us(*samples.last().unwrap_or(&Duration::ZERO)),
    }
}
