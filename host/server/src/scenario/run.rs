//! Running one scenario: the deployment's real runtime (its Wasm plugins, schemas, policies,
//! redactors, approval rules) over a fresh in-memory SQLite store of its own, with a clock
//! the scenario moves, an observer around every policy, and the scenario's stub in place of
//! its capability's procedure. Decisions go through the real approvals API (its role
//! check, requester door, namespace and authorizer), in process.
//!
//! No configured procedure runs unless the run says `--live`: every procedure the scenario
//! does not stub is replaced by `Unstubbed`, which sends nothing anywhere, and a scenario
//! that reaches it fails saying so (an HTTP upstream would otherwise be called with its
//! configured credentials as an actor the scenario file invents).

use super::file::{ActorSpec, Call, Expect, Refusal, Scenario, Step, Stub, StubError};
use crate::validate::{Checked, TestHooks};
use anyhow::Context;
use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use capgate_core::actor::Actor;
use capgate_core::audit::{AuditSink, MemorySink};
use capgate_core::authz::Principal;
use capgate_core::clock::ManualClock;
use capgate_core::policy::{Phase, Policy, PolicyDecision, PolicyError, PolicyRequest};
use capgate_core::procedure::{Procedure, ProcedureCall, ProcedureError};
use capgate_core::result::ExecutionResult;
use capgate_core::runtime::{InvokeRequest, ResumeOptions, Runtime};
use capgate_gateway::auth::{AuthError, Authenticated, Authenticator};
use capgate_gateway::door::Doorkeeper;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// The most a scenario may take beyond the delays it asks for.
const SCENARIO_BUDGET: Duration = Duration::from_secs(120);

/// The largest approvals API answer read (a decided approval view).
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// One way a scenario did not go as written.
#[derive(Debug, Clone, PartialEq)]
pub enum Mismatch {
    /// A field of an envelope or a decision: expected vs actual.
    Field {
        /// Where: `call orders.refund`, `step 2 (resume)`, …
        place: String,
        /// Which field: `status`, `output/refundId`, `policies.refundLimit`, …
        field: String,
        /// As written.
        expected: String,
        /// As it happened.
        actual: String,
    },
    /// The audit event types of the scenario, in order.
    Events {
        /// As written.
        expected: Vec<String>,
        /// As emitted.
        actual: Vec<String>,
    },
    /// The scenario could not run as written (no approval to decide, the store…).
    Error {
        /// Where.
        place: String,
        /// What.
        message: String,
    },
}

/// The stances one call's policies took: `name` (invocation phase) or
/// `name@execution`/`name@discovery` → stance.
type Stances = Arc<Mutex<Vec<(String, String)>>>;

/// Run one scenario against a checked deployment: every mismatch (none: it passed). Unless
/// `live`, a configured procedure never runs: reaching one without a stub fails the
/// scenario.
pub async fn run(checked: &Checked, s: &Scenario, live: bool) -> Vec<Mismatch> {
    let delays: u64 = s.call.cancel_after_ms.unwrap_or(0)
        + s.stub.as_ref().map_or(0, |st| st.delay_ms)
        + s.steps
            .iter()
            .map(|st| match st {
                Step::Resume(c) => {
                    c.cancel_after_ms.unwrap_or(0) + s.stub.as_ref().map_or(0, |st| st.delay_ms)
                }
                _ => 0,
            })
            .sum::<u64>();
    let budget = SCENARIO_BUDGET + Duration::from_millis(delays);
    match tokio::time::timeout(budget, run_inner(checked, s, live)).await {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => vec![Mismatch::Error {
            place: "setup".into(),
            message: format!("{e:#}"),
        }],
        Err(_) => vec![Mismatch::Error {
            place: "scenario".into(),
            message: format!("did not finish within {} s", budget.as_secs()),
        }],
    }
}

/// What one scenario runs on.
struct Bench {
    runtime: Runtime,
    clock: Arc<ManualClock>,
    stances: Stances,
    approvals: axum::Router,
    tokens: HashMap<String, String>,
}

async fn run_inner(checked: &Checked, s: &Scenario, live: bool) -> anyhow::Result<Vec<Mismatch>> {
    let store = capgate_store::Store::open("sqlite::memory:")
        .await
        .context("could not open an in-memory store")?;
    let memory = Arc::new(MemorySink::new());
    let sql = Arc::new(
        store
            .audit_sink(capgate_store::AuditSinkOptions::default())
            .context("the store's audit sink")?,
    );
    let audit = crate::build::audit_config(
        checked.audit(),
        vec![sql.clone() as Arc<dyn AuditSink>, memory.clone()],
    );
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let stances: Stances = Arc::default();
    let observer = stances.clone();
    let mut procedures: BTreeMap<String, Arc<dyn Procedure>> = BTreeMap::new();
    if let Some(stub) = &s.stub {
        procedures.insert(
            s.call.capability.clone(),
            Arc::new(StubProcedure(stub.clone())),
        );
    }
    let unstubbed = Arc::new(Unstubbed::default());
    let hooks = TestHooks {
        clock: clock.clone(),
        observe: Box::new(move |p| {
            Arc::new(Watched {
                inner: p,
                log: observer.clone(),
            }) as Arc<dyn Policy>
        }),
        procedures,
        unstubbed: (!live).then(|| unstubbed.clone() as Arc<dyn Procedure>),
    };
    let runtime = checked
        .test_runtime(Arc::new(store.approvals()), audit, &hooks)
        .context("the runtime")?;
    // Every decider of the scenario gets a credential of the approvals API.
    let mut tokens = HashMap::new();
    let mut identities = HashMap::new();
    for (i, step) in s.steps.iter().enumerate() {
        if let Step::Decide { by, .. } = step {
            let token = format!("scenario-decider-{i}");
            tokens.insert(key(by), token.clone());
            identities.insert(token, authenticated(by));
        }
    }
    let keeper = Doorkeeper::new(
        Arc::new(ScenarioAuthenticator(identities)),
        checked.authorizer(),
    )
    .clock(clock.clone());
    let approvals = capgate_gateway::approvals_api::ApprovalsRouter::new(runtime.clone(), keeper)
        .role(crate::serve::APPROVER_ROLE)
        .build();
    let bench = Bench {
        runtime,
        clock,
        stances,
        approvals,
        tokens,
    };
    let mut out = Vec::new();
    let place = format!("call {}", s.call.capability);
    let first = bench.invoke(&s.call).await;
    check(&place, &s.call.expect, &first, &mut out);
    let mut approval = first.envelope.approval().map(|a| a.id.clone());
    for (i, step) in s.steps.iter().enumerate() {
        let n = i + 1;
        match step {
            Step::Advance { ms } => bench.clock.advance(chrono::Duration::milliseconds(
                i64::try_from(*ms).unwrap_or(i64::MAX),
            )),
            Step::Decide {
                approve,
                by,
                comment,
                refused,
            } => {
                let place = format!(
                    "step {n} ({} by {})",
                    if *approve { "approve" } else { "reject" },
                    by.id
                );
                let Some(id) = &approval else {
                    out.push(no_approval(place));
                    continue;
                };
                match bench.decide(id, by, *approve, comment.as_deref()).await {
                    Ok(answer) => {
                        let expected = refused.map_or("accepted", Refusal::as_str);
                        if answer.0 != expected {
                            out.push(Mismatch::Field {
                                place,
                                field: "decision".into(),
                                expected: expected.into(),
                                actual: answer.describe(),
                            });
                        }
                    }
                    Err(e) => out.push(Mismatch::Error {
                        place,
                        message: format!("{e:#}"),
                    }),
                }
            }
            Step::Resume(call) => {
                let place = format!("step {n} (resume)");
                let Some(id) = &approval else {
                    out.push(no_approval(place));
                    continue;
                };
                let observed = bench.resume(id, call).await;
                check(&place, &call.expect, &observed, &mut out);
                if let Some(a) = observed.envelope.approval() {
                    approval = Some(a.id.clone());
                }
            }
        }
    }
    if let Err(e) = bench.runtime.drain_audit().await {
        out.push(Mismatch::Error {
            place: "audit".into(),
            message: e.to_string(),
        });
    }
    if let Some(expected) = &s.events {
        let actual: Vec<String> = memory.types().into_iter().map(str::to_owned).collect();
        if *expected != actual {
            out.push(Mismatch::Events {
                expected: expected.clone(),
                actual,
            });
        }
    }
    // The chain's end is recorded while the store is open (else the writer finds it closed).
    sql.close().await;
    store.close().await;
    if let Some(capability) = unstubbed.reached() {
        // What followed (a failed envelope, its events) is the stand-in's doing, not the
        // deployment's: the one thing to say is what to do.
        return Ok(vec![unstubbed_reached(s, &capability)]);
    }
    Ok(out)
}

/// The failure of a scenario that reached a procedure it does not stub, without `--live`.
fn unstubbed_reached(s: &Scenario, capability: &str) -> Mismatch {
    Mismatch::Error {
        place: "procedure".into(),
        message: format!(
            "scenario {:?} ({}:{}) reached the procedure of `{capability}`, which it does not \
             stub; nothing was sent to the configured procedure. Add a stub to the scenario \
             (`stub = {{ output = {{ … }} }}` or `stub = {{ error = \"internal\" }}`), or run \
             `capgate test --live` to call the configured procedures for real, with their \
             configured credentials",
            s.name,
            s.file.display(),
            s.line
        ),
    }
}

fn no_approval(place: String) -> Mismatch {
    Mismatch::Error {
        place,
        message: "there is no approval to act on: no envelope of this scenario so far was `approval-required`".into(),
    }
}

/// An envelope and the policy stances of the call that produced it.
struct Observed {
    envelope: ExecutionResult,
    stances: BTreeMap<String, String>,
}

/// How the approvals API answered a decision: `accepted`, `forbidden`, … and its message.
struct Answer(&'static str, u16, String);

impl Answer {
    fn describe(&self) -> String {
        let mut s = format!("{} (HTTP {}", self.0, self.1);
        if !self.2.is_empty() {
            s.push_str(": ");
            s.push_str(&self.2);
        }
        s.push(')');
        s
    }
}

impl Bench {
    async fn invoke(&self, call: &Call) -> Observed {
        let mut request = InvokeRequest::new(
            call.surface,
            call.capability.clone(),
            call.input.clone(),
            actor(&call.actor),
        )
        .namespace(call.actor.namespace.clone())
        .context(call.context.clone());
        let cancel = canceller(call.cancel_after_ms);
        if let Some(token) = &cancel {
            request = request.cancel(token.clone());
        }
        self.stances_cleared();
        let envelope = self.runtime.invoke(request).await;
        Observed {
            envelope,
            stances: self.stances_taken(),
        }
    }

    /// Resume as the gateway does: the caller's identity, door and namespace are the guards.
    async fn resume(&self, approval_id: &str, call: &Call) -> Observed {
        let me = actor(&call.actor);
        let options = ResumeOptions {
            context: call.context.clone(),
            cancel: canceller(call.cancel_after_ms),
            expected_actor: Some(me.reference()),
            expected_surface: Some(call.surface),
            expected_namespace: Some(call.actor.namespace.clone()),
            actor: Some(me),
            ..ResumeOptions::default()
        };
        self.stances_cleared();
        let envelope = self.runtime.resume(approval_id, options).await;
        Observed {
            envelope,
            stances: self.stances_taken(),
        }
    }

    /// `POST /approvals/{id}/decision` as `by`.
    async fn decide(
        &self,
        id: &str,
        by: &ActorSpec,
        approve: bool,
        comment: Option<&str>,
    ) -> anyhow::Result<Answer> {
        let token = self
            .tokens
            .get(&key(by))
            .context("the decider has no credential")?;
        let mut body =
            serde_json::json!({ "decision": if approve { "approved" } else { "rejected" } });
        if let Some(c) = comment {
            body["comment"] = Value::String(c.to_string());
        }
        let request = Request::post(format!("/approvals/{id}/decision"))
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .context("the decision request")?;
        let response = self
            .approvals
            .clone()
            .oneshot(request)
            .await
            .context("the approvals API")?;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), MAX_ANSWER_BYTES)
            .await
            .context("the approvals API's answer")?;
        let message = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| {
                v.pointer("/error/message")
                    .or_else(|| v.get("message"))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        let word = match status {
            StatusCode::OK => "accepted",
            StatusCode::FORBIDDEN => "forbidden",
            StatusCode::NOT_FOUND => "not-found",
            StatusCode::CONFLICT => "conflict",
            StatusCode::UNAUTHORIZED => "unauthenticated",
            _ => "refused",
        };
        Ok(Answer(word, status.as_u16(), message))
    }

    fn stances_cleared(&self) {
        self.stances
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    fn stances_taken(&self) -> BTreeMap<String, String> {
        std::mem::take(&mut *self.stances.lock().unwrap_or_else(|p| p.into_inner()))
            .into_iter()
            .collect()
    }
}

/// The caller's cancellation, fired `after` ms from now.
fn canceller(after: Option<u64>) -> Option<CancellationToken> {
    let ms = after?;
    let token = CancellationToken::new();
    let fire = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        fire.cancel();
    });
    Some(token)
}

fn actor(a: &ActorSpec) -> Actor {
    Actor {
        id: a.id.clone(),
        kind: a.kind,
        attributes: a
            .attributes
            .clone()
            .unwrap_or_else(|| Value::Object(Default::default())),
    }
}

/// One identity per distinct actor statement.
fn key(a: &ActorSpec) -> String {
    serde_json::json!([a.id, a.kind, a.namespace, a.roles, a.attributes]).to_string()
}

fn authenticated(a: &ActorSpec) -> Authenticated {
    Authenticated {
        principal: Principal {
            actor: actor(a),
            namespace: a.namespace.clone(),
        },
        context: a.context.clone().unwrap_or(Value::Null),
        roles: a.roles.clone(),
        surfaces: Vec::new(),
        expires_at: None,
        // A scenario's decider opens no model door: a human's credential, as a key
        // without surfaces is by default.
        requester_door: true,
        operator: false,
        credential: capgate_gateway::auth::Credential::Token,
    }
}

/// The approvals API's authenticator in a scenario: each decider's credential is the token
/// the runner gave it.
struct ScenarioAuthenticator(HashMap<String, Authenticated>);

#[async_trait]
impl Authenticator for ScenarioAuthenticator {
    async fn authenticate(
        &self,
        headers: &axum::http::HeaderMap,
    ) -> Result<Authenticated, AuthError> {
        let token = capgate_gateway::auth::bearer(headers).ok_or(AuthError::Missing)?;
        self.0
            .get(token)
            .cloned()
            .ok_or_else(|| AuthError::Invalid("unknown scenario credential".into()))
    }
}

/// A policy seen from outside: what it decided, recorded for the scenario's expectations.
struct Watched {
    inner: Arc<dyn Policy>,
    log: Stances,
}

/// Records "error" when an evaluation ends without a decision (the batch deadline dropped
/// it, or it panicked).
struct Recording {
    log: Stances,
    key: String,
    stance: Option<&'static str>,
}

impl Drop for Recording {
    fn drop(&mut self) {
        let stance = self.stance.unwrap_or("error");
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((std::mem::take(&mut self.key), stance.to_string()));
    }
}

#[async_trait]
impl Policy for Watched {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn phases(&self) -> &[Phase] {
        self.inner.phases()
    }

    // A shadow policy stays one under observation: its stance is recorded, never enforced.
    fn shadow(&self) -> bool {
        self.inner.shadow()
    }

    async fn evaluate(
        &self,
        request: &PolicyRequest<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<PolicyDecision, PolicyError> {
        let key = match request.phase {
            Phase::Invocation => self.inner.name().to_string(),
            other => format!("{}@{}", self.inner.name(), other.as_str()),
        };
        let mut recording = Recording {
            log: self.log.clone(),
            key,
            stance: None,
        };
        let decision = self.inner.evaluate(request, deadline).await;
        recording.stance = Some(match &decision {
            Ok(d) if d.validate().is_ok() => d.kind(),
            _ => "error",
        });
        decision
    }
}

/// Every procedure a scenario does not stub, unless the run says `--live`: it sends nothing
/// anywhere, fails the attempt, and remembers the first capability it stood in for, which
/// fails the scenario with what to do.
#[derive(Default)]
struct Unstubbed {
    reached: Mutex<Option<String>>,
}

impl Unstubbed {
    /// The first capability whose procedure was reached, if any.
    fn reached(&self) -> Option<String> {
        self.reached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[async_trait]
impl Procedure for Unstubbed {
    async fn call(&self, call: ProcedureCall) -> Result<Value, ProcedureError> {
        self.reached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(|| call.agent.capability_id.clone());
        Err(ProcedureError::internal(
            "capgate test: no stub for this procedure, and the run is not --live",
        ))
    }
}

/// The scenario's procedure: its output or error, after its delay (it stops early when the
/// call is cancelled or times out, as a cooperative handler does).
struct StubProcedure(Stub);

#[async_trait]
impl Procedure for StubProcedure {
    async fn call(&self, call: ProcedureCall) -> Result<Value, ProcedureError> {
        let stub = &self.0;
        if stub.delay_ms > 0 {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(stub.delay_ms)) => {}
                _ = call.cancel.cancelled() => {
                    return Err(ProcedureError::internal("the stub was stopped by its signal"));
                }
            }
        }
        let message = || {
            stub.message
                .clone()
                .unwrap_or_else(|| "stubbed failure".into())
        };
        match (stub.error, &stub.output) {
            (None, Some(output)) => Ok(output.clone()),
            (Some(StubError::Defined), _) => Err(ProcedureError::Defined {
                code: stub.code.clone().unwrap_or_default(),
                message: message(),
                data: None,
                retryable: stub.retryable,
            }),
            (Some(StubError::Forbidden), _) => Err(ProcedureError::Forbidden(message())),
            (Some(StubError::Unauthorized), _) => Err(ProcedureError::Unauthorized(message())),
            (Some(StubError::Internal), _) | (None, None) => {
                Err(ProcedureError::Internal(message()))
            }
        }
    }
}

/// Compare one envelope with its expectation.
fn check(place: &str, e: &Expect, o: &Observed, out: &mut Vec<Mismatch>) {
    let envelope = serde_json::to_value(&o.envelope).unwrap_or(Value::Null);
    let mut field = |field: String, expected: String, actual: String| {
        out.push(Mismatch::Field {
            place: place.to_string(),
            field,
            expected,
            actual,
        });
    };
    let status = o.envelope.status();
    let code = envelope
        .pointer("/error/code")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(want) = &e.status
        && want != status
    {
        let mut actual = quote(status);
        if let Some(c) = &code {
            actual.push_str(&format!(" (error {c})"));
        }
        field("status".into(), quote(want), actual);
    }
    if let Some(want) = &e.error
        && code.as_deref() != Some(want.as_str())
    {
        field(
            "error".into(),
            quote(want),
            code.as_deref()
                .map_or_else(|| format!("no error (status {})", quote(status)), quote),
        );
    }
    let output = envelope.get("output");
    for (pointer, want) in &e.output {
        let got = output.and_then(|v| v.pointer(pointer));
        if let Some((w, a)) = compare(want, got) {
            field(format!("output{pointer}"), w, a);
        }
    }
    for (pointer, want) in &e.envelope {
        if let Some((w, a)) = compare(want, envelope.pointer(pointer)) {
            field(format!("envelope{pointer}"), w, a);
        }
    }
    if let Some(want) = &e.policies {
        let names: std::collections::BTreeSet<&String> =
            want.keys().chain(o.stances.keys()).collect();
        for name in names {
            let (w, a) = (want.get(name), o.stances.get(name));
            if w != a {
                field(
                    format!("policies.{name}"),
                    w.map_or_else(|| "(did not run)".to_string(), |s| quote(s)),
                    a.map_or_else(|| "(did not run)".to_string(), |s| quote(s)),
                );
            }
        }
    }
}

fn quote(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// `None` when `got` matches `want` (`"absent"`, `"present"` or a value; numbers compare by
/// value, so 649 matches 649.0); else (expected, actual) as written for a reader.
fn compare(want: &Value, got: Option<&Value>) -> Option<(String, String)> {
    let shown = |v: Option<&Value>| v.map_or_else(|| "(absent)".to_string(), Value::to_string);
    let ok = match (want.as_str(), got) {
        (Some("absent"), g) => g.is_none(),
        (Some("present"), g) => g.is_some(),
        (_, Some(g)) => same(want, g),
        (_, None) => false,
    };
    if ok {
        return None;
    }
    let expected = match want.as_str() {
        Some("absent") => "(absent)".to_string(),
        Some("present") => "(present)".to_string(),
        _ => want.to_string(),
    };
    Some((expected, shown(got)))
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_and_present_match_by_existence_and_numbers_by_value() {
        assert!(compare(&Value::from("absent"), None).is_none());
        assert!(compare(&Value::from("absent"), Some(&Value::from(1))).is_some());
        assert!(compare(&Value::from("present"), Some(&Value::Null)).is_none());
        assert!(compare(&Value::from(649), Some(&serde_json::json!(649.0))).is_none());
        assert_eq!(
            compare(&Value::from("ref_77"), Some(&Value::from("ref_1"))),
            Some(("\"ref_77\"".into(), "\"ref_1\"".into()))
        );
    }
}
