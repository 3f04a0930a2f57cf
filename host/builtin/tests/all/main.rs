//! capgate-builtin's integration tests, one binary (link once): the shipped components in
//! the real sandbox.

mod cedar;
mod sandbox;

use capgate_builtin::Builtin;
use capgate_core::actor::{Actor, ActorKind, Surface};
use capgate_core::policy::{Phase, PolicyDecision, PolicyRequest, SharedJson};
use capgate_wasm::{Binding, CallError, Isolation, Limits, Plugin, WasmHost, WasmPolicy};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// `builtin` bound with `config`, as capgate binds it but with the given limits and
/// isolation. Each component is compiled once for the whole binary.
fn bind(
    builtin: &'static Builtin,
    config: Value,
    limits: Limits,
    isolation: Isolation,
) -> WasmPolicy {
    static LOADED: Mutex<Vec<(&str, Arc<Plugin>)>> = Mutex::new(Vec::new());
    let plugin = {
        let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        match loaded.iter().find(|(name, _)| *name == builtin.name) {
            Some((_, p)) => Arc::clone(p),
            None => {
                let p = WasmHost::shared()
                    .expect("engine")
                    .load_shipped(None, builtin.name, builtin.wasm, builtin.sha256)
                    .expect("the shipped component loads");
                loaded.push((builtin.name, Arc::clone(&p)));
                p
            }
        }
    };
    plugin
        .policy(
            Binding::new("t")
                .config(config)
                .limits(limits)
                .isolation(isolation),
        )
        .expect("it exports the policy interface")
}

/// One evaluation of `policy` for Dana (roles `agent`, org `org_1`) refunding `input` in
/// `phase`, with the sandbox's own reason on failure.
async fn decide(
    policy: &WasmPolicy,
    input: Value,
    phase: Phase,
) -> Result<PolicyDecision, CallError> {
    let capability = capgate_testkit::walkthrough::refund_info();
    let actor = Actor {
        id: "u_dana".into(),
        kind: ActorKind::User,
        attributes: json!({"roles": ["agent"], "orgId": "org_1"}),
    };
    let shared = SharedJson::default();
    let request = PolicyRequest {
        phase,
        capability: &capability,
        surface: Surface::AiSdk,
        namespace: "",
        actor: &actor,
        context: &json!({"orgId": "org_1"}),
        input: Some(&input),
        execution_id: "exe_1",
        approval: None,
        shared: &shared,
    };
    policy.evaluate_raw(&request, None).await
}

/// One discovery-phase evaluation (no input) for a user with `attributes`.
async fn decide_in_discovery(
    policy: &WasmPolicy,
    attributes: Value,
) -> Result<PolicyDecision, CallError> {
    let capability = capgate_testkit::walkthrough::refund_info();
    let actor = Actor {
        id: "u_dana".into(),
        kind: ActorKind::User,
        attributes,
    };
    let shared = SharedJson::default();
    let request = PolicyRequest {
        phase: Phase::Discovery,
        capability: &capability,
        surface: Surface::AiSdk,
        namespace: "",
        actor: &actor,
        context: &Value::Null,
        input: None,
        execution_id: "",
        approval: None,
        shared: &shared,
    };
    policy.evaluate_raw(&request, None).await
}
