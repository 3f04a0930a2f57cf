//! `capgate plugin test PLUGIN.wasm --cases CASES.toml`: the plugin author's inner loop, in
//! any language. Loads a component (unpinned: the author is iterating on it), runs each case
//! of a conformance file (format: `plugins/conformance/README.md`: `[defaults]`, `[[case]]`
//! with `world`, `config`, `request`, `expect`, and `X_json` twins for values TOML cannot
//! write), times the plugin call, and renders a pass/fail table. The CLI prints
//! [`TestReport::render`] and exits non-zero unless [`TestReport::all_passed`].
//!
//! The same case file runs against the Rust, JavaScript and Python builds of a plugin: adding
//! a language means adding a build, not new tests.

use capgate_core::actor::{Actor, ActorKind, ActorRef, Surface};
use capgate_core::approval::ApprovalRef;
use capgate_core::meta::{Risk, SideEffect};
use capgate_core::policy::{CapabilityInfo, Phase, PolicyDecision, PolicyRequest, SharedJson};
use capgate_wasm::{Binding, CallError, Limits, LoadError, WasmHost, WasmPolicy, WasmRedactor};
use serde_json::{Map, Value};
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// Why a test run could not start (as opposed to a case failing).
#[derive(Debug, thiserror::Error)]
pub enum PluginTestError {
    /// The plugin file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The cases file is not valid.
    #[error("invalid cases file: {0}")]
    Cases(String),
    /// The plugin could not be loaded or bound.
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// Which interface the cases exercise.
/// Which export a case calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseKind {
    /// `capgate:plugin/policy.evaluate`.
    Policy,
    /// `capgate:plugin/redactor.redact-output`.
    RedactorOutput,
    /// `capgate:plugin/redactor.redact-approval-input`.
    RedactorApprovalInput,
}

/// One case's outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseResult {
    /// The case name.
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
    /// Why it failed.
    pub detail: Option<String>,
    /// The plugin's time for the call.
    pub duration: Duration,
}

/// The outcome of a case file against one plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct TestReport {
    /// The plugin file name.
    pub plugin: String,
    /// Its SHA-256.
    pub digest: String,
    /// Every case, in file order.
    pub cases: Vec<CaseResult>,
}

impl TestReport {
    /// True when every case passed (and there was at least one).
    pub fn all_passed(&self) -> bool {
        !self.cases.is_empty() && self.cases.iter().all(|c| c.passed)
    }

    /// The pass/fail table, ending with an `N passed, N failed` line.
    pub fn render(&self) -> String {
        let width = self
            .cases
            .iter()
            .map(|c| c.name.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let mut out = String::new();
        let _ = writeln!(out, "plugin {} (sha256 {})", self.plugin, self.digest);
        for c in &self.cases {
            let mark = if c.passed { "PASS" } else { "FAIL" };
            let _ = writeln!(
                out,
                "  {mark}  {:<width$}  {:>10}",
                c.name,
                fmt_duration(c.duration)
            );
            if let Some(d) = &c.detail {
                let _ = writeln!(out, "        {d}");
            }
        }
        let passed = self.cases.iter().filter(|c| c.passed).count();
        let _ = writeln!(out, "{passed} passed, {} failed", self.cases.len() - passed);
        out
    }
}

impl TestReport {
    /// `capgate plugin test --output json`: `{"ok", "plugin", "sha256", "passed", "failed",
    /// "cases"}`, each case `{"name", "passed", "detail", "durationMs"}` in file order.
    pub fn to_json(&self) -> Value {
        let passed = self.cases.iter().filter(|c| c.passed).count();
        let cases: Vec<Value> = self
            .cases
            .iter()
            .map(|c| {
                serde_json::json!({
                    "name": c.name,
                    "passed": c.passed,
                    "detail": c.detail,
                    "durationMs": c.duration.as_secs_f64() * 1e3,
                })
            })
            .collect();
        serde_json::json!({
            "ok": self.all_passed(),
            "plugin": self.plugin,
            "sha256": self.digest,
            "passed": passed,
            "failed": self.cases.len() - passed,
            "cases": cases,
        })
    }
}

fn fmt_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1_000.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.2} ms", us / 1_000.0)
    }
}

/// Load `plugin` (not pinned) and run the cases in `cases_toml` against it.
pub fn run_file(
    host: &WasmHost,
    plugin: &Path,
    cases_toml: &str,
) -> Result<TestReport, PluginTestError> {
    let bytes = std::fs::read(plugin).map_err(|source| PluginTestError::Read {
        path: plugin.display().to_string(),
        source,
    })?;
    let name = plugin.file_name().map_or_else(
        || plugin.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    run_bytes(host, &name, &bytes, cases_toml)
}

/// A case with defaults merged and every `X_json` twin resolved.
struct Case {
    name: String,
    kind: CaseKind,
    config: Value,
    request: Map<String, Value>,
    expect: Map<String, Value>,
}

fn bad(msg: impl Into<String>) -> PluginTestError {
    PluginTestError::Cases(msg.into())
}

fn toml_to_json(v: &toml::Value, at: &str) -> Result<Value, PluginTestError> {
    Ok(match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| bad(format!("{at}: non-finite float")))?,
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(_) => return Err(bad(format!("{at}: TOML dates are not JSON"))),
        toml::Value::Array(a) => Value::Array(
            a.iter()
                .enumerate()
                .map(|(i, x)| toml_to_json(x, &format!("{at}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        toml::Value::Table(t) => {
            let mut m = Map::new();
            for (k, x) in t {
                m.insert(k.clone(), toml_to_json(x, &format!("{at}.{k}"))?);
            }
            Value::Object(m)
        }
    })
}

/// Resolve `X_json` twins (JSON text) into `X`, refusing both at once.
fn resolve_json_twins(m: &mut Map<String, Value>, at: &str) -> Result<(), PluginTestError> {
    let twins: Vec<String> = m.keys().filter(|k| k.ends_with("_json")).cloned().collect();
    for twin in twins {
        let base = twin.trim_end_matches("_json").to_string();
        if m.contains_key(&base) {
            return Err(bad(format!("{at}: give `{base}` or `{twin}`, not both")));
        }
        let text = m
            .remove(&twin)
            .and_then(|v| v.as_str().map(str::to_string))
            .ok_or_else(|| bad(format!("{at}.{twin}: must be a string of JSON text")))?;
        let parsed: Value =
            serde_json::from_str(&text).map_err(|e| bad(format!("{at}.{twin}: not JSON: {e}")))?;
        m.insert(base, parsed);
    }
    Ok(())
}

/// Merge a default map under a case map: a case key replaces the default key and its twin.
fn merge(defaults: &Map<String, Value>, case: &Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (k, v) in defaults {
        let base = k.trim_end_matches("_json");
        if case.contains_key(base) || case.contains_key(&format!("{base}_json")) {
            continue;
        }
        out.insert(k.clone(), v.clone());
    }
    for (k, v) in case {
        out.insert(k.clone(), v.clone());
    }
    out
}

fn parse_cases(text: &str) -> Result<Vec<Case>, PluginTestError> {
    let doc: toml::Table = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
    let doc = match toml_to_json(&toml::Value::Table(doc), "")? {
        Value::Object(m) => m,
        _ => return Err(bad("the case file must be a table")),
    };
    for k in doc.keys() {
        if k != "defaults" && k != "case" {
            return Err(bad(format!(
                "unknown top-level key `{k}` (expected [defaults] and [[case]])"
            )));
        }
    }
    let defaults = table(&doc, "defaults");
    let default_request = table(&defaults, "request");
    let cases = doc
        .get("case")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no [[case]] entries"))?;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(cases.len());
    for (i, c) in cases.iter().enumerate() {
        let c = c
            .as_object()
            .ok_or_else(|| bad(format!("case {i}: must be a table")))?;
        for k in c.keys() {
            if !matches!(
                k.as_str(),
                "name" | "world" | "config" | "config_json" | "request" | "expect"
            ) {
                return Err(bad(format!("case {i}: unknown key `{k}`")));
            }
        }
        let name = c
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad(format!("case {i}: `name` is required")))?
            .to_string();
        if !seen.insert(name.clone()) {
            return Err(bad(format!("case `{name}`: duplicate name")));
        }
        let mut top = merge(
            &defaults
                .iter()
                .filter(|(k, _)| k.as_str() != "request")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            &c.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "name" | "request" | "expect"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        );
        resolve_json_twins(&mut top, &name)?;
        let kind = match top.get("world").and_then(Value::as_str).unwrap_or("policy") {
            "policy" => CaseKind::Policy,
            "redactor-output" => CaseKind::RedactorOutput,
            "redactor-approval-input" => CaseKind::RedactorApprovalInput,
            other => return Err(bad(format!("case `{name}`: unknown world `{other}`"))),
        };
        let case_request = table(c, "request");
        let mut request = merge(&default_request, &case_request);
        resolve_json_twins(&mut request, &format!("{name}.request"))?;
        for key in ["actor", "capability"] {
            if let Some(Value::Object(m)) = request.get_mut(key) {
                resolve_json_twins(m, &format!("{name}.request.{key}"))?;
            }
        }
        let mut expect = c
            .get("expect")
            .and_then(Value::as_object)
            .cloned()
            .ok_or_else(|| bad(format!("case `{name}`: `expect` is required")))?;
        resolve_json_twins(&mut expect, &format!("{name}.expect"))?;
        out.push(Case {
            name,
            kind,
            config: top.get("config").cloned().unwrap_or(Value::Null),
            request,
            expect,
        });
    }
    Ok(out)
}

/// Run the cases against a component given as bytes.
pub fn run_bytes(
    host: &WasmHost,
    name: &str,
    bytes: &[u8],
    cases_toml: &str,
) -> Result<TestReport, PluginTestError> {
    let cases = parse_cases(cases_toml)?;
    let plugin = host.load_unpinned(name, bytes)?;
    let limits = Limits::default();
    let mut results = Vec::with_capacity(cases.len());
    for case in &cases {
        let binding = Binding::new(name)
            .config(case.config.clone())
            .limits(limits.clone());
        let result = match case.kind {
            CaseKind::Policy => run_policy_case(&plugin.policy(binding)?, case),
            CaseKind::RedactorOutput | CaseKind::RedactorApprovalInput => {
                run_redactor_case(&plugin.redactor(binding)?, case)
            }
        };
        results.push(result);
    }
    Ok(TestReport {
        plugin: name.to_string(),
        digest: plugin.digest().to_string(),
        cases: results,
    })
}

fn capability(req: &Map<String, Value>) -> Result<CapabilityInfo, String> {
    let c = table(req, "capability");
    let parse = |k: &str, d: &str| -> Result<String, String> {
        match c.get(k) {
            None => Ok(d.to_string()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("capability.{k} must be a string")),
        }
    };
    let side_effect: SideEffect =
        serde_json::from_value(Value::String(parse("sideEffect", "none")?))
            .map_err(|e| format!("capability.sideEffect: {e}"))?;
    let risk: Risk = serde_json::from_value(Value::String(parse("risk", "low")?))
        .map_err(|e| format!("capability.risk: {e}"))?;
    let tags = match c.get("tags") {
        None => Vec::new(),
        Some(v) => {
            serde_json::from_value(v.clone()).map_err(|e| format!("capability.tags: {e}"))?
        }
    };
    Ok(CapabilityInfo {
        id: parse("id", "test.capability")?,
        side_effect,
        risk,
        tags,
    })
}

fn actor(req: &Map<String, Value>) -> Result<Actor, String> {
    let a = table(req, "actor");
    let id = a
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or("u_test")
        .to_string();
    let kind: ActorKind = a
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("user")
        .parse()?;
    Ok(Actor {
        id,
        kind,
        attributes: a.get("attributes").cloned().unwrap_or(Value::Null),
    })
}

fn failed(case: &Case, detail: String) -> CaseResult {
    CaseResult {
        name: case.name.clone(),
        passed: false,
        detail: Some(detail),
        duration: Duration::ZERO,
    }
}

fn run_policy_case(policy: &WasmPolicy, case: &Case) -> CaseResult {
    let req = &case.request;
    let (capability, actor) = match (capability(req), actor(req)) {
        (Ok(c), Ok(a)) => (c, a),
        (Err(e), _) | (_, Err(e)) => return failed(case, format!("bad request: {e}")),
    };
    let str_field = |k: &str, d: &str| req.get(k).and_then(Value::as_str).unwrap_or(d).to_string();
    let phase: Phase = match serde_json::from_value(Value::String(str_field("phase", "invocation")))
    {
        Ok(p) => p,
        Err(e) => return failed(case, format!("bad request: phase: {e}")),
    };
    let surface: Surface = match str_field("surface", "test").parse() {
        Ok(s) => s,
        Err(e) => return failed(case, format!("bad request: {e}")),
    };
    let context = req.get("context").cloned().unwrap_or(Value::Null);
    let default_exe = if phase == Phase::Discovery {
        ""
    } else {
        "exe_conformance"
    };
    let execution_id = str_field("executionId", default_exe);
    let approval = req
        .get("approval")
        .and_then(Value::as_object)
        .map(|a| ApprovalRef {
            id: a
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            approver: ActorRef {
                id: a
                    .get("approverId")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                kind: a
                    .get("approverKind")
                    .and_then(Value::as_str)
                    .and_then(|k| k.parse().ok())
                    .unwrap_or(ActorKind::User),
            },
        });
    let shared = SharedJson::default();
    let request = PolicyRequest {
        phase,
        capability: &capability,
        surface,
        namespace: req.get("namespace").and_then(Value::as_str).unwrap_or(""),
        actor: &actor,
        context: &context,
        input: req.get("input"),
        execution_id: &execution_id,
        approval: approval.as_ref(),
        shared: &shared,
    };
    let started = Instant::now();
    // Cases run one at a time from synchronous code: drive the call here (a guest that
    // outlives the inline slice finishes on the host's slow lane, awaited the same way).
    let outcome = futures::executor::block_on(policy.evaluate_raw(&request, None));
    let duration = started.elapsed();
    let detail = check_decision(&case.expect, &outcome);
    CaseResult {
        name: case.name.clone(),
        passed: detail.is_none(),
        detail,
        duration,
    }
}

fn check_decision(
    expect: &Map<String, Value>,
    outcome: &Result<PolicyDecision, CallError>,
) -> Option<String> {
    let Some(want) = expect.get("decision").and_then(Value::as_str) else {
        return Some("expect.decision is required for policy cases".into());
    };
    let got = match outcome {
        Ok(d) => d.kind(),
        // Only the plugin's own `err` counts as the expected error: a trap never passes.
        Err(CallError::Guest(_)) => "error",
        Err(e) => return Some(format!("expected {want}, but the plugin failed: {e}")),
    };
    if want != got {
        let extra = match outcome {
            Err(e) => format!(" ({e})"),
            Ok(d) => format!(" ({})", serde_json::to_string(d).unwrap_or_default()),
        };
        return Some(format!("expected {want}, got {got}{extra}"));
    }
    let mut diffs = Vec::new();
    let exact = |name: &str,
                 got: Option<Value>,
                 diffs: &mut Vec<String>,
                 absent_means_none: bool| match (expect.get(name), got) {
        (Some(w), g) if Some(w) != g.as_ref() && !num_eq(Some(w), g.as_ref()) => {
            diffs.push(format!(
                "{name}: expected {w}, got {}",
                g.map_or("none".into(), |g| g.to_string())
            ));
        }
        (None, Some(g)) if absent_means_none => {
            diffs.push(format!("{name}: expected none, got {g}"));
        }
        _ => {}
    };
    match outcome {
        Ok(PolicyDecision::RequireApproval {
            reason,
            approval_type,
            expires_in_ms,
        }) => {
            exact(
                "reason",
                Some(Value::String(reason.clone())),
                &mut diffs,
                false,
            );
            exact(
                "approvalType",
                approval_type.clone().map(Value::String),
                &mut diffs,
                true,
            );
            exact(
                "expiresInMs",
                expires_in_ms.map(Value::from),
                &mut diffs,
                true,
            );
        }
        Ok(PolicyDecision::Deny { code, message }) => {
            exact(
                "message",
                message.clone().map(Value::String),
                &mut diffs,
                false,
            );
            exact("code", code.clone().map(Value::String), &mut diffs, false);
        }
        _ => {}
    }
    (!diffs.is_empty()).then(|| diffs.join("; "))
}

fn num_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if json_eq(a, b))
}

/// Structural equality with numbers compared as f64 (JavaScript cannot keep 649 and 649.0
/// apart).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn run_redactor_case(redactor: &WasmRedactor, case: &Case) -> CaseResult {
    let capability = match capability(&case.request) {
        Ok(c) => c,
        Err(e) => return failed(case, format!("bad request: {e}")),
    };
    let Some(value) = case.request.get("value") else {
        return failed(
            case,
            "request.value (or value_json) is required for redactor cases".into(),
        );
    };
    let started = Instant::now();
    let outcome = futures::executor::block_on(async {
        if case.kind == CaseKind::RedactorApprovalInput {
            redactor.redact_approval_input_raw(&capability, value).await
        } else {
            redactor.redact_output_raw(&capability, value).await
        }
    });
    let duration = started.elapsed();
    let expects_error = case.expect.get("error").and_then(Value::as_bool) == Some(true);
    let detail = match (&outcome, expects_error) {
        (Err(CallError::Guest(_)), true) => None,
        (Err(e), true) => Some(format!("expected the plugin's err, but it failed: {e}")),
        (Err(e), false) => Some(format!("plugin failed: {e}")),
        (Ok(v), true) => Some(format!("expected an error, got {v}")),
        (Ok(v), false) => match case.expect.get("output") {
            Some(w) if !json_eq(w, v) => Some(format!("expected {w}, got {v}")),
            Some(_) => None,
            None => Some("expect.output (or output_json) or error = true is required".into()),
        },
    };
    CaseResult {
        name: case.name.clone(),
        passed: detail.is_none(),
        detail,
        duration,
    }
}
/// The table at `key` of a case-file table (empty when absent or not a table).
fn table(m: &Map<String, Value>, key: &str) -> Map<String, Value> {
    m.get(key)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}
