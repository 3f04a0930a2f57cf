//! Fresh isolation holds for every plugin kind in every SDK language (issue 38): a guest bound
//! `fresh` never sees state from an earlier call, whether its instance came from the reserve
//! (made ahead, in the background) or was instantiated on the request path.
//!
//! The `state-probe` plugins (`plugins/testing/state-probe-*`, `plugins/js/testing/…`,
//! `plugins/python/testing/…`) keep a call counter and the list of markers they were handed in
//! module globals, on the guest's heap, and answer `{"calls": n, "seen": [...]}`. Fresh, every
//! call must answer `{"calls": 1, "seen": [its own marker]}`. The same probe bound `pooled`
//! answers 1, 2, 3… and lists earlier markers: the control that shows the probe can see state
//! when state survives.

use crate::common;

use capgate_core::CancellationToken;
use capgate_core::authz::{AuthorizeRequest, Authorizer, Operation, Principal};
use capgate_core::policy::{Policy, PolicyDecision, SharedJson};
use capgate_core::prelude::*;
use capgate_core::procedure::{AgentInvocationInfo, Procedure, ProcedureCall};
use capgate_core::redact::Redactor;
use capgate_wasm::{Binding, Isolation, Plugin, ReserveOptions};
use common::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The plugin kinds a probe exists for.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Policy,
    Redactor,
    Procedure,
    Authorizer,
}

/// The probe of `kind` built in `lang` (`rust`, `js` or `python`).
fn probe(lang: &str, kind: Kind) -> Arc<Plugin> {
    let name = match kind {
        Kind::Policy => "policy",
        Kind::Redactor => "redactor",
        Kind::Procedure => "procedure",
        Kind::Authorizer => "authorizer",
    };
    match lang {
        "rust" => load(&format!("state_probe_{name}")),
        other => load_polyglot(other, &format!("state-probe-{name}")),
    }
}

/// One call of `plugin` bound as `kind` with `binding`, handed `marker`: the probe's report.
struct Bound {
    kind: Kind,
    policy: Option<Box<dyn Policy>>,
    redactor: Option<Box<dyn Redactor>>,
    procedure: Option<Box<dyn Procedure>>,
    authorizer: Option<Box<dyn Authorizer>>,
}

impl Bound {
    fn new(plugin: &Arc<Plugin>, kind: Kind, binding: Binding) -> Bound {
        let mut b = Bound {
            kind,
            policy: None,
            redactor: None,
            procedure: None,
            authorizer: None,
        };
        match kind {
            Kind::Policy => b.policy = Some(Box::new(plugin.policy(binding).expect("bind"))),
            Kind::Redactor => b.redactor = Some(Box::new(plugin.redactor(binding).expect("bind"))),
            Kind::Procedure => {
                b.procedure = Some(Box::new(
                    plugin.procedure(binding, refund_info()).expect("bind"),
                ))
            }
            Kind::Authorizer => {
                b.authorizer = Some(Box::new(plugin.authorizer(binding).expect("bind")))
            }
        }
        b
    }

    async fn call(&self, marker: &str) -> Value {
        let input = json!({ "orderId": "ord_42", "amount": 20, "marker": marker });
        let text = match self.kind {
            Kind::Policy => {
                let ask = RefundAsk::by_dana();
                let shared = SharedJson::default();
                let request = ask.request(Some(&input), "exec_1", &shared);
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                let policy = self.policy.as_ref().expect("a policy");
                match policy.evaluate(&request, deadline).await {
                    Ok(PolicyDecision::Deny {
                        code: Some(code), ..
                    }) => code,
                    other => panic!("the probe denies with its report: {other:?}"),
                }
            }
            Kind::Redactor => {
                let redactor = self.redactor.as_ref().expect("a redactor");
                let out = redactor
                    .redact_output(&refund_info(), "", input)
                    .await
                    .expect("the probe redacts");
                return out;
            }
            Kind::Procedure => {
                let procedure = self.procedure.as_ref().expect("a procedure");
                let agent = AgentInvocationInfo {
                    execution_id: "exec_1".into(),
                    capability_id: "orders.refund".into(),
                    surface: Surface::AiSdk,
                    namespace: String::new(),
                    actor: dana(),
                    approval: None,
                    correlation_id: None,
                    idempotency_key: "idem_1".into(),
                };
                return procedure
                    .call(ProcedureCall {
                        input,
                        context: Value::Null,
                        agent: Arc::new(agent),
                        cancel: CancellationToken::new(),
                        progress: None,
                        attempt: 1,
                    })
                    .await
                    .expect("the probe answers");
            }
            Kind::Authorizer => {
                let authorizer = self.authorizer.as_ref().expect("an authorizer");
                let principal = Principal {
                    actor: dana(),
                    namespace: "org_1".into(),
                };
                let denied = authorizer
                    .authorize(&AuthorizeRequest {
                        principal: &principal,
                        operation: Operation::Invoke,
                        surface: Some(Surface::AiSdk),
                        capability_id: Some("orders.refund"),
                        input: Some(&input),
                    })
                    .await
                    .expect_err("the probe denies with its report")
                    .to_string();
                let start = denied.find('{').unwrap_or_else(|| panic!("{denied}"));
                let end = denied.rfind('}').unwrap_or_else(|| panic!("{denied}"));
                denied[start..=end].to_string()
            }
        };
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("report {text:?}: {e}"))
    }
}

const MARKERS: [&str; 4] = ["m_1", "m_2", "m_3", "m_4"];

/// Fresh, with the reserve on (the default) and off: every call is the instance's first. Pooled
/// (the control): one instance sees every call.
async fn a_fresh_call_never_sees_an_earlier_one(lang: &str, kind: Kind) {
    let plugin = probe(lang, kind);
    for reserve in [ReserveOptions::default(), ReserveOptions::disabled()] {
        let bound = Bound::new(
            &plugin,
            kind,
            Binding::new("probe")
                .isolation(Isolation::Fresh)
                .reserve(reserve),
        );
        for marker in MARKERS {
            let report = bound.call(marker).await;
            assert_eq!(
                report,
                json!({ "calls": 1, "seen": [marker] }),
                "{lang} {kind:?} fresh ({reserve:?}): state survived a call"
            );
        }
    }
    let pooled = Bound::new(
        &plugin,
        kind,
        Binding::new("probe").isolation(Isolation::pooled()),
    );
    for (i, marker) in MARKERS.iter().enumerate() {
        let report = pooled.call(marker).await;
        assert_eq!(
            report,
            json!({ "calls": i + 1, "seen": MARKERS[..=i] }),
            "{lang} {kind:?} pooled: the control must see earlier calls"
        );
    }
}

#[tokio::test]
async fn a_fresh_rust_policy_never_sees_an_earlier_call() {
    a_fresh_call_never_sees_an_earlier_one("rust", Kind::Policy).await;
}

#[tokio::test]
async fn a_fresh_rust_redactor_never_sees_an_earlier_call() {
    a_fresh_call_never_sees_an_earlier_one("rust", Kind::Redactor).await;
}

#[tokio::test]
async fn a_fresh_rust_procedure_never_sees_an_earlier_call() {
    a_fresh_call_never_sees_an_earlier_one("rust", Kind::Procedure).await;
}

#[tokio::test]
async fn a_fresh_rust_authorizer_never_sees_an_earlier_call() {
    a_fresh_call_never_sees_an_earlier_one("rust", Kind::Authorizer).await;
}

#[tokio::test]
async fn a_fresh_js_policy_never_sees_an_earlier_call() {
    a_fresh_call_never_sees_an_earlier_one("js", Kind::Policy).await;
}

#[tokio::test]
async fn a_fresh_js_redactor_never_sees_an_earlier_call() {
    a_fresh_call_never_sees_an_earlier_one("js", Kind::Redactor).await;
}

#[tokio::test]
async fn a_fresh_js_procedure_never_sees_an_earlier_call() {
    a_fresh_call_never_sees_an_earlier_one("js", Kind::Procedure).await;
}

#[tokio::test]
async fn a_fresh_python_policy_never_sees_an_earlier_call() {
    a_fresh_call_never_sees_an_earlier_one("python", Kind::Policy).await;
}

#[tokio::test]
async fn a_fresh_python_redactor_never_sees_an_earlier_call() {
    a_fresh_call_never_sees_an_earlier_one("python", Kind::Redactor).await;
}

#[tokio::test]
async fn a_fresh_python_procedure_never_sees_an_earlier_call() {
    a_fresh_call_never_sees_an_earlier_one("python", Kind::Procedure).await;
}
