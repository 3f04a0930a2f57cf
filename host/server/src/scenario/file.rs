//! The scenario file format of `capgate test` (docs/guides/reviewing-changes.md "Testing a
//! deployment"), read into [`Scenario`]s with every problem located as `file:line:column: key:
//! message`, like a configuration problem of `capgate check`.
//!
//! A file holds named actors (`[actors.NAME]`) and any number of `[[scenario]]`s. A
//! scenario is one governed call (actor, surface, capability, input, context; optionally a
//! stubbed procedure and a caller who cancels), what its envelope must be (`[scenario.expect]`),
//! then steps in order (`[[scenario.steps]]`: decide the approval, move the clock, resume),
//! each resume with its own expectation, and the audit event types of the whole scenario.

use capgate_config::load::part;
use capgate_config::located::{Located, Problem, seg};
use capgate_core::actor::{ActorKind, Surface};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The largest scenario file read (a scenario file is reviewed like code; this bounds a
/// mistaken path at something else).
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The longest delay a stub or a cancellation may ask for (10 minutes).
pub const MAX_DELAY_MS: u64 = 600_000;

/// The most a step may move the clock (400 days).
const MAX_ADVANCE_MS: u64 = 400 * 24 * 3_600_000;

/// One scenario, ready to run.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Its name, unique in the run.
    pub name: String,
    /// The file it came from.
    pub file: PathBuf,
    /// Its line in the file (of `name`).
    pub line: usize,
    /// The call.
    pub call: Call,
    /// The procedure that replaces the capability's, if any.
    pub stub: Option<Stub>,
    /// The steps after the call, in order.
    pub steps: Vec<Step>,
    /// Every audit event type of the scenario, in order (`None`: not checked).
    pub events: Option<Vec<String>>,
    /// Where `stub` is written, for a problem with it found against the deployment.
    pub stub_problem: Option<Problem>,
    /// Where `name` is written, for a duplicate name.
    pub name_problem: Problem,
}

/// Who acts, as the scenario states it (what a credential would establish).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ActorSpec {
    /// The actor id.
    pub id: String,
    /// user, service, agent or anonymous.
    pub kind: ActorKind,
    /// The tenant partition (a credential's `namespace`).
    pub namespace: String,
    /// Attributes the policies and the procedure read.
    pub attributes: Option<Value>,
    /// Roles, for deciding approvals (`approver`, `manager`, …).
    #[serde(default)]
    pub roles: Vec<String>,
    /// The application context of this actor's calls, unless a call sets its own.
    pub context: Option<Value>,
}

/// A governed call: `invoke`.
#[derive(Debug, Clone)]
pub struct Call {
    /// Who calls.
    pub actor: ActorSpec,
    /// Through which door.
    pub surface: Surface,
    /// The capability id (an unknown one is a legitimate test: CAPABILITY_NOT_FOUND).
    pub capability: String,
    /// The raw input.
    pub input: Value,
    /// The context (else the actor's).
    pub context: Value,
    /// The caller cancels this long after the call starts.
    pub cancel_after_ms: Option<u64>,
    /// What its envelope must be.
    pub expect: Expect,
}

/// What a stubbed procedure does instead of the configured one: an `output` or an `error`
/// (the check says so when a stub has both or neither); the other keys may be left out.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Stub {
    /// Return this output (validated and redacted by the pipeline like any output).
    pub output: Option<Value>,
    /// Fail: `defined`, `forbidden`, `unauthorized` or `internal` (the procedure contract's
    /// four failures).
    pub error: Option<StubError>,
    /// The application's code of a `defined` error (private: audit only).
    pub code: Option<String>,
    /// The message of the error (public only for `defined`).
    pub message: Option<String>,
    /// Whether a `defined` error is retryable.
    pub retryable: bool,
    /// Answer only after this long (a hang, to meet the capability's timeout).
    pub delay_ms: u64,
}

/// The procedure contract's failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StubError {
    /// Shown to the model as EXECUTION_FAILED with its message.
    Defined,
    /// FORBIDDEN.
    Forbidden,
    /// UNAUTHENTICATED.
    Unauthorized,
    /// Hidden: EXECUTION_FAILED, "The operation failed." (SI-9).
    Internal,
}

/// One step after the call.
#[derive(Debug, Clone)]
pub enum Step {
    /// Decide the approval through the approvals API, as `by`.
    Decide {
        /// Approve or reject.
        approve: bool,
        /// The decider.
        by: ActorSpec,
        /// The comment.
        comment: Option<String>,
        /// `None`: the decision must be accepted; else how it must be refused.
        refused: Option<Refusal>,
    },
    /// Move the scenario's clock forward.
    Advance {
        /// By this many milliseconds.
        ms: u64,
    },
    /// Resume the approval.
    Resume(Box<Call>),
}

/// How the approvals API refuses a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Refusal {
    /// 403: not theirs to decide (SI-4, a role they lack, not self-confirmable).
    Forbidden,
    /// 404: another namespace's approval, or someone else's through the requester door.
    NotFound,
    /// 409: no longer pending (decided, expired).
    Conflict,
}

capgate_core::wire_enum! {
    Refusal {
        Forbidden => "forbidden",
        NotFound => "not-found",
        Conflict => "conflict",
    }
}

/// What an envelope must be. Every field is optional; what is not stated is not checked.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expect {
    /// completed, approval-required, failed or cancelled.
    pub status: Option<String>,
    /// The public error code (`/error/code`).
    pub error: Option<String>,
    /// JSON pointer into the output → value, `"absent"` or `"present"`.
    #[serde(default)]
    pub output: BTreeMap<String, Value>,
    /// JSON pointer into the whole envelope → value, `"absent"` or `"present"`.
    #[serde(default)]
    pub envelope: BTreeMap<String, Value>,
    /// Policy → stance of this call, exactly (every policy that ran, none other).
    pub policies: Option<BTreeMap<String, String>>,
}

/// Every `*.toml` scenario file of `paths` (a directory: its `*.toml` files, sorted).
pub fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Problem> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let entries =
                std::fs::read_dir(p).map_err(|e| at_file(p, format!("cannot read: {e}")))?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|f| f.is_file() && f.extension().is_some_and(|x| x == "toml"))
                .collect();
            found.sort();
            out.extend(found);
        } else if p.is_file() {
            out.push(p.clone());
        } else {
            return Err(at_file(p, "no such scenario file or directory".into()));
        }
    }
    Ok(out)
}

fn at_file(file: &Path, message: String) -> Problem {
    Problem {
        file: file.to_path_buf(),
        line: 1,
        column: 1,
        key: String::new(),
        message,
    }
}

/// Read one scenario file: its scenarios, or every problem in it.
pub fn load(file: &Path) -> Result<Vec<Scenario>, Vec<Problem>> {
    let size = std::fs::metadata(file)
        .map_err(|e| vec![at_file(file, format!("cannot read the scenario file: {e}"))])?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(vec![at_file(
            file,
            format!("the scenario file is larger than {MAX_FILE_BYTES} bytes"),
        )]);
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| vec![at_file(file, format!("cannot read the scenario file: {e}"))])?;
    let doc = Located::parse(file, text).map_err(|p| vec![p])?;
    let mut problems = doc.overflow_problems();
    let Some(root) = doc.json.as_object() else {
        return Err(vec![doc.problem("", "the file must be a TOML table")]);
    };
    for k in root.keys() {
        if k != "actors" && k != "scenario" {
            problems.push(doc.problem(
                &format!("/{}", seg(k)),
                format!("unknown key `{k}` (expected `[actors.NAME]` tables and `[[scenario]]`s)"),
            ));
        }
    }
    let actors: BTreeMap<String, ActorSpec> =
        part(&doc, "/actors", &mut problems).unwrap_or_default();
    for (name, a) in &actors {
        check_actor(&doc, &format!("/actors/{}", seg(name)), a, &mut problems);
    }
    let mut out = Vec::new();
    match root.get("scenario") {
        None => problems.push(doc.problem(
            "",
            "no `[[scenario]]` in this file (a scenario file holds at least one)",
        )),
        Some(Value::Array(list)) => {
            let reader = Reader {
                doc: &doc,
                actors: &actors,
            };
            for i in 0..list.len() {
                if let Some(s) = reader.scenario(&format!("/scenario/{i}"), &mut problems) {
                    out.push(s);
                }
            }
        }
        Some(_) => problems.push(doc.problem(
            "/scenario",
            "`scenario` must be an array of tables: write `[[scenario]]`",
        )),
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        problems.sort_by_key(|p| (p.line, p.column));
        problems.dedup();
        Err(problems)
    }
}

fn check_actor(doc: &Located, at: &str, a: &ActorSpec, problems: &mut Vec<Problem>) {
    if a.id.trim().is_empty() || a.id.len() > 256 {
        problems.push(doc.problem(
            &format!("{at}/id"),
            "an actor needs a non-empty id of at most 256 characters",
        ));
    }
    if a.namespace.trim().is_empty() {
        problems.push(doc.problem(
            &format!("{at}/namespace"),
            "an actor needs a namespace (its tenant partition), e.g. namespace = \"org_1\"",
        ));
    }
    if a.attributes.as_ref().is_some_and(|v| !v.is_object()) {
        problems.push(doc.problem(&format!("{at}/attributes"), "attributes must be a table"));
    }
}

/// The keys of one `[[scenario]]`, before the actor names are resolved.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawScenario {
    name: String,
    actor: Value,
    surface: Surface,
    capability: String,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    context: Option<Value>,
    #[serde(default)]
    cancel_after_ms: Option<u64>,
    #[serde(default)]
    events: Option<Vec<String>>,
    // Read on their own (`Reader::scenario`).
    #[serde(default, rename = "stub")]
    _stub: Option<Value>,
    #[serde(default, rename = "expect")]
    _expect: Option<Value>,
    #[serde(default, rename = "steps")]
    _steps: Option<Value>,
}

/// One `[[scenario.steps]]`: exactly one of `decide`, `advanceMs`, `resume`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawStep {
    #[serde(default)]
    decide: Option<DecideWord>,
    #[serde(default)]
    by: Option<Value>,
    #[serde(default)]
    comment: Option<String>,
    #[serde(default)]
    refused: Option<Refusal>,
    #[serde(default)]
    advance_ms: Option<u64>,
    #[serde(default)]
    resume: Option<bool>,
    #[serde(default)]
    actor: Option<Value>,
    #[serde(default)]
    context: Option<Value>,
    #[serde(default)]
    cancel_after_ms: Option<u64>,
    #[serde(default)]
    expect: Option<Expect>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum DecideWord {
    Approve,
    Reject,
}

/// The event types an `events` list may name.
const EVENT_TYPES: &[&str] = &[
    "capability.requested",
    "capability.denied",
    "capability.approval_requested",
    "capability.approved",
    "capability.rejected",
    "capability.started",
    "capability.retried",
    "capability.completed",
    "capability.failed",
    "capability.cancelled",
];

/// Envelope statuses.
const STATUSES: &[&str] = &["completed", "approval-required", "failed", "cancelled"];

/// Policy stances (`error`: the policy failed).
const STANCES: &[&str] = &["allow", "deny", "hide", "require-approval", "error"];

struct Reader<'a> {
    doc: &'a Located,
    actors: &'a BTreeMap<String, ActorSpec>,
}

impl Reader<'_> {
    fn scenario(&self, at: &str, problems: &mut Vec<Problem>) -> Option<Scenario> {
        let doc = self.doc;
        let before = problems.len();
        // The head and each sub-table are read on their own, so that one mistake does not
        // hide the others.
        let head: Option<RawScenario> = part(doc, at, problems);
        let raw = doc.json.pointer(at);
        let has = |key: &str| raw.and_then(|r| r.get(key)).is_some();
        let expect: Option<Expect> = if has("expect") {
            part(doc, &format!("{at}/expect"), problems)
        } else {
            Some(Expect::default())
        };
        let stub: Option<Stub> = if has("stub") {
            let stub = part(doc, &format!("{at}/stub"), problems);
            if let Some(st) = &stub {
                self.check_stub(&format!("{at}/stub"), st, problems);
            }
            stub
        } else {
            None
        };
        if let Some(e) = &expect {
            self.check_expect(&format!("{at}/expect"), e, problems);
        }
        let actor = head
            .as_ref()
            .and_then(|s| self.actor(&format!("{at}/actor"), &s.actor, problems));
        let mut steps = Vec::new();
        match raw.and_then(|r| r.get("steps")) {
            None => {}
            Some(Value::Array(list)) => {
                for (i, step) in list.iter().enumerate() {
                    let step_at = format!("{at}/steps/{i}");
                    let Some(step) = step.as_object() else {
                        problems.push(
                            doc.problem(&step_at, "a step is a table: write `[[scenario.steps]]`"),
                        );
                        continue;
                    };
                    if let Some(step) =
                        self.step(&step_at, step, actor.as_ref(), head.as_ref(), problems)
                    {
                        steps.push(step);
                    }
                }
            }
            Some(_) => problems.push(doc.problem(
                &format!("{at}/steps"),
                "`steps` must be an array of tables: write `[[scenario.steps]]`",
            )),
        }
        let s = head?;
        if s.name.trim().is_empty() || s.name.len() > 200 {
            problems.push(doc.problem(
                &format!("{at}/name"),
                "a scenario needs a non-empty name of at most 200 characters",
            ));
        }
        if s.capability.trim().is_empty() {
            problems.push(doc.problem(&format!("{at}/capability"), "name the capability"));
        }
        self.check_delay(&format!("{at}/cancelAfterMs"), s.cancel_after_ms, problems);
        if let Some(events) = &s.events {
            for (i, e) in events.iter().enumerate() {
                if !EVENT_TYPES.contains(&e.as_str()) {
                    problems.push(doc.problem(
                        &format!("{at}/events/{i}"),
                        format!(
                            "`{e}` is no event type (expected one of {})",
                            EVENT_TYPES.join(", ")
                        ),
                    ));
                }
            }
        }
        let (actor, expect) = (actor?, expect?);
        if problems.len() > before {
            return None;
        }
        let context = s
            .context
            .clone()
            .or_else(|| actor.context.clone())
            .unwrap_or(Value::Null);
        Some(Scenario {
            line: doc.problem(&format!("{at}/name"), "").line,
            name: s.name.trim().to_string(),
            file: doc.file.clone(),
            call: Call {
                actor,
                surface: s.surface,
                capability: s.capability,
                input: s.input.unwrap_or_else(|| Value::Object(Map::new())),
                context,
                cancel_after_ms: s.cancel_after_ms,
                expect,
            },
            stub_problem: stub
                .as_ref()
                .map(|_| doc.problem(&format!("{at}/stub"), "")),
            name_problem: doc.problem(&format!("{at}/name"), ""),
            stub,
            steps,
            events: s.events,
        })
    }

    /// `actor = "NAME"` (one of the file's `[actors]`) or an inline table.
    fn actor(&self, at: &str, v: &Value, problems: &mut Vec<Problem>) -> Option<ActorSpec> {
        match v {
            Value::String(name) => match self.actors.get(name) {
                Some(a) => Some(a.clone()),
                None => {
                    let known: Vec<&str> = self.actors.keys().map(String::as_str).collect();
                    problems.push(self.doc.problem(
                        at,
                        format!(
                            "no actor `{name}` in this file's [actors] (known: {})",
                            if known.is_empty() {
                                "none".to_string()
                            } else {
                                known.join(", ")
                            }
                        ),
                    ));
                    None
                }
            },
            Value::Object(_) => {
                let a: ActorSpec = part(self.doc, at, problems)?;
                check_actor(self.doc, at, &a, problems);
                Some(a)
            }
            _ => {
                problems.push(self.doc.problem(
                    at,
                    "an actor is the name of one of the file's [actors] or an inline table { id, kind, namespace, … }",
                ));
                None
            }
        }
    }

    fn check_stub(&self, at: &str, stub: &Stub, problems: &mut Vec<Problem>) {
        let doc = self.doc;
        match (&stub.output, stub.error) {
            (Some(_), Some(_)) => problems.push(doc.problem(
                at,
                "a stub returns an `output` or fails with an `error`, not both",
            )),
            (None, None) => problems.push(doc.problem(
                at,
                "a stub needs `output = {…}` or `error = \"defined\" | \"forbidden\" | \"unauthorized\" | \"internal\"`",
            )),
            _ => {}
        }
        if stub.error != Some(StubError::Defined) && (stub.code.is_some() || stub.retryable) {
            problems.push(doc.problem(
                &format!("{at}/code"),
                "`code` and `retryable` belong to a `defined` error",
            ));
        }
        if stub.error == Some(StubError::Defined) && stub.code.is_none() {
            problems.push(doc.problem(
                at,
                "a `defined` error needs the application's `code`, e.g. code = \"REFUND_TOO_LARGE\"",
            ));
        }
        if stub.error.is_none() && stub.message.is_some() {
            problems.push(doc.problem(&format!("{at}/message"), "`message` belongs to an error"));
        }
        self.check_delay(&format!("{at}/delayMs"), Some(stub.delay_ms), problems);
    }

    fn check_delay(&self, at: &str, ms: Option<u64>, problems: &mut Vec<Problem>) {
        if ms.is_some_and(|ms| ms > MAX_DELAY_MS) {
            problems.push(
                self.doc
                    .problem(at, format!("at most {MAX_DELAY_MS} ms (10 minutes)")),
            );
        }
    }

    fn check_expect(&self, at: &str, e: &Expect, problems: &mut Vec<Problem>) {
        let doc = self.doc;
        if let Some(s) = &e.status
            && !STATUSES.contains(&s.as_str())
        {
            problems.push(doc.problem(
                &format!("{at}/status"),
                format!(
                    "`{s}` is no envelope status (expected one of {})",
                    STATUSES.join(", ")
                ),
            ));
        }
        if let Some(policies) = &e.policies {
            for (name, stance) in policies {
                if !STANCES.contains(&stance.as_str()) {
                    problems.push(doc.problem(
                        &format!("{at}/policies/{}", seg(name)),
                        format!(
                            "`{stance}` is no stance (expected one of {})",
                            STANCES.join(", ")
                        ),
                    ));
                }
            }
        }
        for (field, map) in [("output", &e.output), ("envelope", &e.envelope)] {
            for pointer in map.keys() {
                if !pointer.is_empty() && !pointer.starts_with('/') {
                    problems.push(doc.problem(
                        &format!("{at}/{field}/{}", seg(pointer)),
                        format!("`{pointer}` is no JSON pointer (write \"/{pointer}\")"),
                    ));
                }
            }
        }
    }

    fn step(
        &self,
        at: &str,
        raw: &Map<String, Value>,
        caller: Option<&ActorSpec>,
        s: Option<&RawScenario>,
        problems: &mut Vec<Problem>,
    ) -> Option<Step> {
        let doc = self.doc;
        let step: RawStep = part(doc, at, problems)?;
        let kinds = [
            step.decide.is_some(),
            step.advance_ms.is_some(),
            step.resume.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            problems.push(doc.problem(
                at,
                "a step is exactly one of `decide = \"approve\" | \"reject\"`, `advanceMs = N` or `resume = true`",
            ));
            return None;
        }
        let stray = |keys: &[&str], what: &str, problems: &mut Vec<Problem>| {
            for k in raw.keys() {
                if keys.contains(&k.as_str()) {
                    problems.push(doc.problem(
                        &format!("{at}/{}", seg(k)),
                        format!("`{k}` does not belong to a {what} step"),
                    ));
                }
            }
        };
        if let Some(word) = step.decide {
            stray(
                &["actor", "context", "cancelAfterMs", "expect"],
                "decide",
                problems,
            );
            let Some(by) = &step.by else {
                problems.push(doc.problem(
                    at,
                    "a decision needs `by`: who decides (an actor name or an inline actor)",
                ));
                return None;
            };
            let by = self.actor(&format!("{at}/by"), by, problems)?;
            return Some(Step::Decide {
                approve: word == DecideWord::Approve,
                by,
                comment: step.comment,
                refused: step.refused,
            });
        }
        if let Some(ms) = step.advance_ms {
            stray(
                &[
                    "by",
                    "comment",
                    "refused",
                    "actor",
                    "context",
                    "cancelAfterMs",
                    "expect",
                ],
                "clock",
                problems,
            );
            if ms == 0 || ms > MAX_ADVANCE_MS {
                problems.push(doc.problem(
                    &format!("{at}/advanceMs"),
                    format!("move the clock by 1 to {MAX_ADVANCE_MS} ms"),
                ));
            }
            return Some(Step::Advance { ms });
        }
        stray(&["by", "comment", "refused"], "resume", problems);
        if step.resume == Some(false) {
            problems.push(doc.problem(
                &format!("{at}/resume"),
                "write `resume = true` (or leave the step out)",
            ));
        }
        self.check_delay(
            &format!("{at}/cancelAfterMs"),
            step.cancel_after_ms,
            problems,
        );
        let expect = step.expect.unwrap_or_default();
        self.check_expect(&format!("{at}/expect"), &expect, problems);
        let actor = match &step.actor {
            Some(v) => self.actor(&format!("{at}/actor"), v, problems)?,
            None => caller?.clone(),
        };
        let s = s?;
        let context = step
            .context
            .or_else(|| s.context.clone())
            .or_else(|| actor.context.clone())
            .unwrap_or(Value::Null);
        Some(Step::Resume(Box::new(Call {
            actor,
            surface: s.surface,
            capability: s.capability.clone(),
            input: Value::Null,
            context,
            cancel_after_ms: step.cancel_after_ms,
            expect,
        })))
    }
}
