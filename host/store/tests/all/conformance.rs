//! One conformance suite for `InvocationJournal`, `ApprovalCoordinator` and `QuotaStore`,
//! run alike against the in-memory implementations of capgate-core and the SQL ones of
//! capgate-store on SQLite and on Postgres (`name::in_memory`, `name::sqlite`,
//! `name::postgres`).
//!
//! A reference model (a plain state machine over expected records) says what every
//! operation must answer. Proptest generates random operation sequences (journal: claim,
//! claim again → existing or conflict, settle completed / failed / approval-required with
//! the current, a stale or a forged token, reconcile, resume-claim, get, find-approval,
//! purge, clock advance; approvals: create, duplicate create, decide approve / reject,
//! consume, get, list by status, clock advance for lazy expiry) and checks every answer
//! and the final state. Concurrent batches run several operations at once and are accepted
//! only if some serial order of them explains every answer and the final state
//! (linearizability against the model); the fixed races (8 claims, 8 resume-claims, 8
//! settles, 8 consumes, 8 decisions, decisions racing expiry) check the same plus their
//! exact winner counts. Rate-limit buckets (`QuotaStore`) admit exactly their burst,
//! alone and under sixteen concurrent takes, refuse with a wait of at most one interval,
//! and are independent of each other; refill during a test is bounded by its elapsed time.
//!
//! Isolation inside one database per test: every proptest case uses its own scopes,
//! approval ids and namespace, and a clock epoch one day *earlier* than the previous case's,
//! so a purge in one case (settled records older than a cutoff inside that case's window)
//! can never reach records of an earlier case.

use crate::common;

use capgate_core::actor::{Actor, ActorKind, ActorRef, Surface};
use capgate_core::approval::{
    ApprovalCoordinator, ApprovalFilter, ApprovalRecord, ApprovalRequest, ApprovalStatus,
    ApprovalStoreError, DecidedVia, Decision, DecisionStatus, InMemoryApprovalCoordinator,
};
use capgate_core::canonical::input_hash;
use capgate_core::journal::{
    ClaimOutcome, ClaimRequest, InMemoryInvocationJournal, InvocationJournal, InvocationRecord,
    InvocationState, JournalError, ObservedClaim, ResumeClaim, Settlement,
};
use capgate_core::meta::{Risk, SideEffect};
use capgate_core::quota::{Admission, BucketRate, InMemoryQuotaStore, QuotaStore};
use chrono::{DateTime, Duration, TimeZone, Utc};
use common::TestDb;
use futures::future::BoxFuture;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

// ---------------------------------------------------------------------------------------
// The three implementations.
// ---------------------------------------------------------------------------------------

/// Which implementation a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    InMemory,
    Sqlite,
    Postgres,
}

/// The journal and coordinator under test, and the database they live in.
struct Subject {
    journal: Arc<dyn InvocationJournal>,
    approvals: Arc<dyn ApprovalCoordinator>,
    quotas: Arc<dyn QuotaStore>,
    backend: Backend,
    /// Epochs handed to proptest cases: each one a day before the last.
    epochs: AtomicI64,
    _db: Option<TestDb>,
}

/// The journal, coordinator and buckets of one backend, and its database.
type Implementations = (
    Arc<dyn InvocationJournal>,
    Arc<dyn ApprovalCoordinator>,
    Arc<dyn QuotaStore>,
    Option<TestDb>,
);

impl Subject {
    async fn open(backend: Backend) -> Option<Subject> {
        let (journal, approvals, quotas, db): Implementations = match backend {
            Backend::InMemory => (
                Arc::new(InMemoryInvocationJournal::new()),
                Arc::new(InMemoryApprovalCoordinator::new()),
                Arc::new(InMemoryQuotaStore::new()),
                None,
            ),
            Backend::Sqlite | Backend::Postgres => {
                let db = if backend == Backend::Sqlite {
                    TestDb::sqlite()
                } else {
                    // Panics under CI=true without CAPGATE_TEST_POSTGRES_URL; None elsewhere.
                    TestDb::postgres().await?
                };
                let store = db.open().await;
                (
                    Arc::new(store.journal()),
                    Arc::new(store.approvals()),
                    Arc::new(store.quotas()),
                    Some(db),
                )
            }
        };
        Some(Subject {
            journal,
            approvals,
            quotas,
            backend,
            epochs: AtomicI64::new(0),
            _db: db,
        })
    }

    /// A fresh case: its own number (for ids and scopes) and clock epoch.
    fn next_case(&self) -> Case {
        let n = self.epochs.fetch_add(1, Ordering::SeqCst);
        // 2030-01-01 minus n days, in whole seconds (the SQL stores keep microseconds).
        let base = Utc
            .with_ymd_and_hms(2030, 1, 1, 0, 0, 0)
            .single()
            .expect("a valid date")
            - Duration::days(n);
        Case { n, base }
    }

    /// Cases per proptest run: fewer on the SQL backends, which do real I/O.
    fn cases(&self, memory: u32, sql: u32) -> u32 {
        match self.backend {
            Backend::InMemory => memory,
            Backend::Sqlite | Backend::Postgres => sql,
        }
    }
}

/// One proptest case's partition of the shared database.
#[derive(Debug, Clone, Copy)]
struct Case {
    n: i64,
    base: DateTime<Utc>,
}

impl Case {
    fn scope(&self, s: u8) -> String {
        format!("case{}_scope{s}", self.n)
    }
    fn approval(&self, a: u8) -> String {
        format!("c{}_apr_{a}", self.n)
    }
    fn namespace(&self) -> String {
        format!("case{}", self.n)
    }
    fn at(&self, secs: i64) -> DateTime<Utc> {
        self.base + Duration::seconds(secs)
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a Tokio runtime")
}

/// Run one conformance test on one backend (skipped, with a notice, only for Postgres
/// without `CAPGATE_TEST_POSTGRES_URL` outside CI).
fn run(backend: Backend, test: fn(&Subject, &tokio::runtime::Runtime)) {
    let rt = runtime();
    let Some(subject) = rt.block_on(Subject::open(backend)) else {
        return;
    };
    test(&subject, &rt);
    // Drop the stores' pools inside the runtime, then the database outside it.
    let Subject {
        journal,
        approvals,
        quotas,
        _db,
        ..
    } = subject;
    drop((journal, approvals, quotas));
    drop(rt);
    drop(_db);
}

/// Run a proptest over `strategy` on one subject, cases numbered by the subject.
fn check<S: Strategy>(
    subject: &Subject,
    cases: u32,
    strategy: S,
    test: impl Fn(&Subject, Case, S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let config = Config {
        cases,
        failure_persistence: None,
        // Shrinking replays cases against a real database: keep it bounded.
        max_shrink_iters: 256,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    if let Err(e) = runner.run(&strategy, |v| test(subject, subject.next_case(), v)) {
        panic!("{:?} backend: {e}", subject.backend);
    }
}

/// `name::in_memory`, `name::sqlite` and `name::postgres`, each running
/// `fn name(&Subject, &Runtime)` on its backend.
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn in_memory() {
                super::run(super::Backend::InMemory, super::$name);
            }

            #[test]
            fn sqlite() {
                super::run(super::Backend::Sqlite, super::$name);
            }

            #[test]
            fn postgres() {
                super::run(super::Backend::Postgres, super::$name);
            }
        }
    )*};
}

on_every_backend!(
    journal_answers_random_operation_sequences_as_the_model_does,
    journal_concurrent_batches_are_linearizable_against_the_model,
    approvals_answer_random_operation_sequences_as_the_model_does,
    approvals_concurrent_batches_are_linearizable_against_the_model,
    eight_concurrent_claims_of_one_id_admit_exactly_one,
    eight_concurrent_resume_claims_admit_exactly_one,
    eight_concurrent_settles_with_one_token_settle_exactly_once,
    eight_concurrent_consumes_of_one_approval_succeed_exactly_once,
    eight_concurrent_decisions_record_exactly_one,
    decisions_racing_expiry_never_land_after_it,
    rate_limit_buckets_admit_their_burst_then_refuse_and_are_independent,
    sixteen_concurrent_takes_of_one_bucket_admit_exactly_its_burst,
);

// ---------------------------------------------------------------------------------------
// Serial search: is there an order of the operations that explains what was observed?
// ---------------------------------------------------------------------------------------

/// A reference model and how to drive the implementations against it: the generated
/// operations, the calls they resolve to, and the stored state a case can touch.
trait Machine: Clone + Default {
    /// An operation as generated.
    type Gen: Copy + std::fmt::Debug;
    /// An operation ready to run: concrete strings, tokens and clock.
    type Call: Clone + PartialEq + std::fmt::Debug + Send + 'static;
    /// What an implementation answered, comparable.
    type Answer: Clone + PartialEq + std::fmt::Debug + Send + 'static;
    /// The stored records of every key a case can touch.
    type Stored;
    /// The seconds a generated clock advance moves; `None` for an operation.
    fn tick(op: &Self::Gen) -> Option<u8>;
    /// A generated operation as a concrete call at `now` (tokens from the model's state).
    /// A clock advance has no call.
    fn resolve(&self, case: &Case, op: Self::Gen, now: DateTime<Utc>) -> Option<Self::Call>;
    /// Run one call on the subject. Backend and malformed-row errors fail the test.
    fn run(
        s: &Subject,
        call: Self::Call,
        now: DateTime<Utc>,
    ) -> BoxFuture<'static, Result<Self::Answer, String>>;
    /// Check `answer` is what the model answers to `call` at `now` (taking the tokens the
    /// implementation chooses from it); the state moves on.
    fn step(
        &mut self,
        call: &Self::Call,
        now: DateTime<Utc>,
        answer: &Self::Answer,
    ) -> Result<(), String>;
    /// What the subject stores for every key `case` can touch.
    async fn stored(s: &Subject, case: &Case) -> Result<Self::Stored, String>;
    /// Whether the model holds exactly the `stored` records.
    fn matches(&self, stored: &Self::Stored) -> Result<(), String>;
}

/// A resolved call with its clock: the unit the serial search reorders.
#[derive(Debug, Clone, PartialEq)]
struct Timed<C> {
    call: C,
    now: DateTime<Utc>,
}

/// The observed answers to some calls, in call order.
type Observed<M> = Vec<(Timed<<M as Machine>::Call>, <M as Machine>::Answer)>;

/// Some serial order of `ops` (with their observed `answers`) that the model accepts and
/// that ends in a state `accept_final` accepts; the first error seen otherwise.
fn linearize<M: Machine>(
    model: &M,
    ops: &[(Timed<M::Call>, M::Answer)],
    accept_final: &dyn Fn(&M) -> Result<(), String>,
) -> Result<M, String> {
    fn go<M: Machine>(
        model: &M,
        ops: &[(Timed<M::Call>, M::Answer)],
        left: &mut Vec<usize>,
        accept_final: &dyn Fn(&M) -> Result<(), String>,
        last_error: &mut String,
    ) -> Option<M> {
        if left.is_empty() {
            return match accept_final(model) {
                Ok(()) => Some(model.clone()),
                Err(e) => {
                    *last_error = format!("final state: {e}");
                    None
                }
            };
        }
        for k in 0..left.len() {
            let i = left[k];
            // Identical operations with identical answers are interchangeable: try one.
            if left[..k].iter().any(|&j| ops[j] == ops[i]) {
                continue;
            }
            let mut next = model.clone();
            let (op, answer) = &ops[i];
            if let Err(e) = next.step(&op.call, op.now, answer) {
                *last_error = e;
                continue;
            }
            left.remove(k);
            let found = go(&next, ops, left, accept_final, last_error);
            left.insert(k, i);
            if found.is_some() {
                return found;
            }
        }
        None
    }
    let mut left: Vec<usize> = (0..ops.len()).collect();
    let mut last_error = String::new();
    go(model, ops, &mut left, accept_final, &mut last_error)
        .ok_or_else(|| format!("no serial order explains the answers (e.g. {last_error})"))
}

// ---------------------------------------------------------------------------------------
// The drivers, alike for both models.
// ---------------------------------------------------------------------------------------

fn fail(e: String) -> TestCaseError {
    TestCaseError::fail(e)
}

/// Run generated `ops` one after another from `clock` (which ticks move on), checking every
/// answer against `model`.
async fn run_serial<M: Machine>(
    s: &Subject,
    case: &Case,
    model: &mut M,
    clock: &mut i64,
    ops: Vec<M::Gen>,
) -> Result<(), String> {
    for op in ops {
        if let Some(secs) = M::tick(&op) {
            *clock += i64::from(secs);
            continue;
        }
        let now = case.at(*clock);
        let Some(call) = model.resolve(case, op, now) else {
            continue;
        };
        let answer = M::run(s, call.clone(), now).await?;
        model.step(&call, now, &answer)?;
    }
    Ok(())
}

/// Run random sequences of `op` one after another, checking every answer, then the final
/// state.
fn answers_random_sequences<M: Machine>(
    s: &Subject,
    rt: &tokio::runtime::Runtime,
    op: impl Strategy<Value = M::Gen>,
) {
    let ops = proptest::collection::vec(op, 1..24);
    check(s, s.cases(256, 48), ops, |s, case, ops| {
        rt.block_on(async {
            let mut model = M::default();
            run_serial(s, &case, &mut model, &mut 0, ops)
                .await
                .map_err(fail)?;
            let stored = M::stored(s, &case).await.map_err(fail)?;
            model.matches(&stored).map_err(fail)
        })
    });
}

/// Run a serial prefix of `op`, then `batch`es concurrently, the clock `step` seconds on
/// before each (plus each operation's own offset); accept each batch only if a serial
/// order of it explains the answers and the stored state.
fn concurrent_batches<M: Machine>(
    s: &Subject,
    rt: &tokio::runtime::Runtime,
    op: impl Strategy<Value = M::Gen>,
    batch: impl Strategy<Value = Vec<(M::Gen, i64)>>,
    step: i64,
) {
    let strategy = (
        proptest::collection::vec(op, 0..10),
        proptest::collection::vec(batch, 1..4),
    );
    check(
        s,
        s.cases(128, 32),
        strategy,
        |s, case, (prefix, batches)| {
            rt.block_on(async {
                let mut model = M::default();
                let mut clock = 0i64;
                run_serial(s, &case, &mut model, &mut clock, prefix)
                    .await
                    .map_err(fail)?;
                for batch in batches {
                    clock += step;
                    let calls: Vec<Timed<M::Call>> = batch
                        .into_iter()
                        .filter_map(|(op, dt)| {
                            let now = case.at(clock + dt);
                            model
                                .resolve(&case, op, now)
                                .map(|call| Timed { call, now })
                        })
                        .collect();
                    let observed = race::<M>(s, calls).await.map_err(fail)?;
                    let stored = M::stored(s, &case).await.map_err(fail)?;
                    model = linearize(&model, &observed, &|m: &M| m.matches(&stored))
                        .map_err(|e| fail(format!("batch {observed:#?}: {e}")))?;
                }
                Ok(())
            })
        },
    );
}

/// Run `calls` at once on the subject; their answers, in call order.
async fn race<M: Machine>(s: &Subject, calls: Vec<Timed<M::Call>>) -> Result<Observed<M>, String> {
    let tasks: Vec<_> = calls
        .iter()
        .cloned()
        .map(|t| tokio::spawn(M::run(s, t.call, t.now)))
        .collect();
    let mut observed = Vec::new();
    for (call, task) in calls.into_iter().zip(tasks) {
        observed.push((call, task.await.map_err(|e| e.to_string())??));
    }
    Ok(observed)
}

/// Resolve `ops`, each at its own clock, race them, and check a serial order explains the
/// answers and the stored state; the answers, in order.
async fn race_ops<M: Machine>(
    s: &Subject,
    model: &M,
    case: &Case,
    ops: impl IntoIterator<Item = (M::Gen, DateTime<Utc>)>,
) -> Vec<M::Answer> {
    let calls = ops
        .into_iter()
        .map(|(op, now)| Timed {
            call: model.resolve(case, op, now).expect("call"),
            now,
        })
        .collect();
    let observed = race::<M>(s, calls).await.expect("every call answers");
    let stored = M::stored(s, case).await.expect("stored");
    if let Err(e) = linearize(model, &observed, &|m: &M| m.matches(&stored)) {
        panic!("{:?}: {e}\n{observed:#?}", s.backend);
    }
    observed.into_iter().map(|(_, a)| a).collect()
}

/// Serial calls at the case's start that set it up, checked against the model as they go.
async fn setup<M: Machine>(s: &Subject, model: &mut M, case: &Case, ops: &[M::Gen]) {
    for op in ops {
        let now = case.at(0);
        let call = model.resolve(case, *op, now).expect("a call");
        let answer = M::run(s, call.clone(), now).await.expect("answer");
        model
            .step(&call, now, &answer)
            .expect("setup follows the model");
    }
}

/// Whether `records` (the model's) are exactly the `stored` ones, key by key.
fn same_records<K: Ord + std::fmt::Debug, R: PartialEq + std::fmt::Debug>(
    records: &BTreeMap<K, R>,
    stored: &BTreeMap<K, Option<R>>,
) -> Result<(), String> {
    for (key, got) in stored {
        if got.as_ref() != records.get(key) {
            return Err(format!(
                "{key:?}: model {:?}, stored {got:?}",
                records.get(key)
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The journal model.
// ---------------------------------------------------------------------------------------

const CAPABILITIES: [&str; 2] = ["orders.refund", "orders.cancel"];

/// Which claim token a settle or reconcile presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// The record's current token.
    Current,
    /// A token the record had before (forged when it never had another).
    Stale,
    /// A token it never had.
    Forged,
}

/// How a settle or reconcile ends the invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    Completed,
    Failed,
    /// Approval-required, awaiting approval `apr_N`.
    Awaiting(u8),
    /// Awaiting an approval id that is out of bounds (refused before anything else).
    AwaitingInvalid,
}

/// A journal operation as generated (tokens not resolved yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JOp {
    Claim {
        scope: u8,
        id: u8,
        cap: u8,
        input: u8,
    },
    Settle {
        scope: u8,
        id: u8,
        token: Token,
        how: How,
        reconcile: bool,
    },
    Resume {
        scope: u8,
        id: u8,
        approval: u8,
    },
    Get {
        scope: u8,
        id: u8,
    },
    FindApproval {
        scope: u8,
        approval: u8,
    },
    /// Purge settled records last changed more than `age` seconds before now.
    Purge {
        age: u8,
    },
    /// Advance the clock.
    Tick {
        secs: u8,
    },
}

fn jop() -> impl Strategy<Value = JOp> {
    let scope = 0u8..2;
    let id = 0u8..3;
    let token = prop_oneof![
        6 => Just(Token::Current),
        1 => Just(Token::Stale),
        1 => Just(Token::Forged)
    ];
    let how = prop_oneof![
        2 => Just(How::Completed),
        1 => Just(How::Failed),
        3 => (0u8..2).prop_map(How::Awaiting),
        1 => Just(How::AwaitingInvalid),
    ];
    prop_oneof![
        5 => (scope.clone(), id.clone(), 0u8..2, 0u8..2)
            .prop_map(|(scope, id, cap, input)| JOp::Claim { scope, id, cap, input }),
        5 => (scope.clone(), id.clone(), token, how, proptest::bool::weighted(0.2)).prop_map(
            |(scope, id, token, how, reconcile)| JOp::Settle { scope, id, token, how, reconcile }
        ),
        3 => (scope.clone(), id.clone(), 0u8..2)
            .prop_map(|(scope, id, approval)| JOp::Resume { scope, id, approval }),
        2 => (scope.clone(), id).prop_map(|(scope, id)| JOp::Get { scope, id }),
        1 => (scope, 0u8..2).prop_map(|(scope, approval)| JOp::FindApproval { scope, approval }),
        1 => (0u8..4).prop_map(|age| JOp::Purge { age }),
        2 => (0u8..3).prop_map(|secs| JOp::Tick { secs }),
    ]
}

/// A journal operation ready to run: concrete strings, tokens and clock.
#[derive(Debug, Clone, PartialEq)]
enum JCall {
    Claim {
        request: ClaimRequest,
    },
    Settle {
        scope: String,
        id: String,
        token: String,
        settlement: Settlement,
        reconcile: bool,
    },
    Resume {
        scope: String,
        id: String,
        approval: String,
    },
    Get {
        scope: String,
        id: String,
    },
    FindApproval {
        scope: String,
        approval: String,
    },
    Purge {
        cutoff: DateTime<Utc>,
    },
}

/// A journal refusal, comparable.
#[derive(Debug, Clone, PartialEq, Eq)]
enum JRefusal {
    Invalid,
    NotFound,
    StaleClaim,
    NotPending,
}

fn refusal(e: JournalError) -> Result<JRefusal, String> {
    match e {
        JournalError::Invalid(_) => Ok(JRefusal::Invalid),
        JournalError::NotFound(_) => Ok(JRefusal::NotFound),
        JournalError::StaleClaim(_) => Ok(JRefusal::StaleClaim),
        JournalError::NotPending(_) => Ok(JRefusal::NotPending),
        other => Err(format!("unexpected journal error: {other}")),
    }
}

/// What a journal answered.
#[derive(Debug, Clone, PartialEq)]
enum JAnswer {
    Claim(ClaimOutcome),
    Settled(Result<InvocationRecord, JRefusal>),
    Resume(ResumeClaim),
    Get(Option<InvocationRecord>),
    Purged(u64),
}

/// Run one call on a journal. Backend and malformed-row errors fail the test.
async fn run_jcall(
    j: &dyn InvocationJournal,
    call: &JCall,
    now: DateTime<Utc>,
) -> Result<JAnswer, String> {
    let fail = |e: JournalError| format!("{call:?} failed: {e}");
    Ok(match call {
        JCall::Claim { request } => {
            JAnswer::Claim(j.claim(request.clone(), now).await.map_err(fail)?)
        }
        JCall::Settle {
            scope,
            id,
            token,
            settlement,
            reconcile,
        } => {
            let r = if *reconcile {
                let observed = ObservedClaim {
                    scope,
                    invocation_id: id,
                    claim_token: token,
                };
                j.reconcile(observed, settlement.clone(), now).await
            } else {
                j.settle(scope, id, token, settlement.clone(), now).await
            };
            JAnswer::Settled(match r {
                Ok(r) => Ok(r),
                Err(e) => Err(refusal(e)?),
            })
        }
        JCall::Resume {
            scope,
            id,
            approval,
        } => JAnswer::Resume(
            j.claim_resume(scope, id, approval, now)
                .await
                .map_err(fail)?,
        ),
        JCall::Get { scope, id } => JAnswer::Get(j.get(scope, id).await.map_err(fail)?),
        JCall::FindApproval { scope, approval } => {
            JAnswer::Get(j.find_approval(scope, approval).await.map_err(fail)?)
        }
        JCall::Purge { cutoff } => {
            JAnswer::Purged(j.purge_settled_before(*cutoff).await.map_err(fail)?)
        }
    })
}

/// The journal as it must be: the expected record of every `(scope, invocation id)` and
/// every claim token each record was ever given.
#[derive(Debug, Clone, Default)]
struct JournalModel {
    records: BTreeMap<(String, String), InvocationRecord>,
    tokens: BTreeMap<(String, String), Vec<String>>,
    /// Every token any implementation ever issued in this case: new ones must be fresh.
    issued: HashSet<String>,
}

fn input(n: u8) -> Value {
    json!({"orderId": format!("ord_{n}"), "amount": 20 + u32::from(n)})
}

fn outcome_of(how: How) -> Value {
    match how {
        How::Completed => json!({"status": "completed", "output": {"refunded": true}}),
        How::Failed => json!({"status": "failed", "error": {"code": "INTERNAL_ERROR"}}),
        How::Awaiting(_) | How::AwaitingInvalid => json!({"status": "approval-required"}),
    }
}

impl Machine for JournalModel {
    type Gen = JOp;
    type Call = JCall;
    type Answer = JAnswer;
    type Stored = BTreeMap<(String, String), Option<InvocationRecord>>;

    fn tick(op: &JOp) -> Option<u8> {
        match op {
            JOp::Tick { secs } => Some(*secs),
            _ => None,
        }
    }

    fn resolve(&self, case: &Case, op: JOp, now: DateTime<Utc>) -> Option<JCall> {
        Some(match op {
            JOp::Claim {
                scope,
                id,
                cap,
                input: i,
            } => JCall::Claim {
                request: ClaimRequest::new(
                    case.scope(scope),
                    format!("inv_{id}"),
                    CAPABILITIES[usize::from(cap)],
                    input(i),
                )
                .ok()?,
            },
            JOp::Settle {
                scope,
                id,
                token,
                how,
                reconcile,
            } => {
                let key = (case.scope(scope), format!("inv_{id}"));
                let history = self.tokens.get(&key).cloned().unwrap_or_default();
                let forged = "clm_forged".to_string();
                let token = match token {
                    Token::Current => history.last().cloned().unwrap_or(forged),
                    Token::Stale if history.len() > 1 => history[history.len() - 2].clone(),
                    Token::Stale | Token::Forged => forged,
                };
                let outcome = outcome_of(how);
                let settlement = match how {
                    How::Completed | How::Failed => Settlement::final_outcome(outcome),
                    How::Awaiting(a) => Settlement::approval_required(format!("apr_{a}"), outcome),
                    How::AwaitingInvalid => Settlement::approval_required("", outcome),
                };
                JCall::Settle {
                    scope: key.0,
                    id: key.1,
                    token,
                    settlement,
                    reconcile,
                }
            }
            JOp::Resume {
                scope,
                id,
                approval,
            } => JCall::Resume {
                scope: case.scope(scope),
                id: format!("inv_{id}"),
                approval: format!("apr_{approval}"),
            },
            JOp::Get { scope, id } => JCall::Get {
                scope: case.scope(scope),
                id: format!("inv_{id}"),
            },
            JOp::FindApproval { scope, approval } => JCall::FindApproval {
                scope: case.scope(scope),
                approval: format!("apr_{approval}"),
            },
            JOp::Purge { age } => JCall::Purge {
                cutoff: now - Duration::seconds(i64::from(age)),
            },
            JOp::Tick { .. } => return None,
        })
    }

    fn run(
        s: &Subject,
        call: JCall,
        now: DateTime<Utc>,
    ) -> BoxFuture<'static, Result<JAnswer, String>> {
        let j = s.journal.clone();
        Box::pin(async move { run_jcall(&*j, &call, now).await })
    }

    /// The expected answer to `call` at `now`, given the tokens in `answer` where the
    /// implementation chooses them (a new claim token); the state moves on.
    fn step(&mut self, call: &JCall, now: DateTime<Utc>, answer: &JAnswer) -> Result<(), String> {
        let expected = match call {
            JCall::Claim { request } => {
                let key = (request.scope.clone(), request.invocation_id.clone());
                match self.records.get(&key) {
                    Some(r) if r.binds(&request.capability_id, &request.input_hash) => {
                        JAnswer::Claim(ClaimOutcome::Existing(r.clone()))
                    }
                    Some(_) => JAnswer::Claim(ClaimOutcome::Conflict),
                    None => {
                        let JAnswer::Claim(ClaimOutcome::Admitted { claim_token, .. }) = answer
                        else {
                            return Err(format!("a first claim must be admitted, got {answer:?}"));
                        };
                        self.adopt(&key, claim_token)?;
                        let record = request.clone().into_record(claim_token.clone(), now);
                        self.records.insert(key, record.clone());
                        JAnswer::Claim(ClaimOutcome::Admitted {
                            claim_token: claim_token.clone(),
                            record,
                        })
                    }
                }
            }
            JCall::Settle {
                scope,
                id,
                token,
                settlement,
                reconcile,
            } => {
                let key = (scope.clone(), id.clone());
                JAnswer::Settled(match self.records.get_mut(&key) {
                    _ if settlement.awaiting_approval.as_deref() == Some("") => {
                        Err(JRefusal::Invalid)
                    }
                    None => Err(JRefusal::NotFound),
                    Some(r) if r.claim_token != *token => Err(JRefusal::StaleClaim),
                    Some(r) if r.state != InvocationState::Pending => Err(JRefusal::NotPending),
                    Some(r) => {
                        r.state = InvocationState::Settled;
                        r.outcome = Some(settlement.outcome.clone());
                        r.awaiting_approval = settlement.awaiting_approval.is_some();
                        if let Some(a) = &settlement.awaiting_approval {
                            r.approval_id = Some(a.clone());
                        }
                        r.reconciled = *reconcile;
                        r.updated_at = now;
                        Ok(r.clone())
                    }
                })
            }
            JCall::Resume {
                scope,
                id,
                approval,
            } => {
                let key = (scope.clone(), id.clone());
                match self.records.get(&key).cloned() {
                    None => JAnswer::Resume(ResumeClaim::NotFound),
                    Some(r)
                        if r.state != InvocationState::Settled
                            || !r.awaiting_approval
                            || r.approval_id.as_deref() != Some(approval.as_str()) =>
                    {
                        JAnswer::Resume(ResumeClaim::NotResumable(r))
                    }
                    Some(mut r) => {
                        let JAnswer::Resume(ResumeClaim::Admitted { claim_token, .. }) = answer
                        else {
                            return Err(format!(
                                "a resumable record must be reopened, got {answer:?}"
                            ));
                        };
                        self.adopt(&key, claim_token)?;
                        r.state = InvocationState::Pending;
                        r.awaiting_approval = false;
                        r.outcome = None;
                        r.claim_token = claim_token.clone();
                        r.updated_at = now;
                        self.records.insert(key, r.clone());
                        JAnswer::Resume(ResumeClaim::Admitted {
                            claim_token: claim_token.clone(),
                            record: r,
                        })
                    }
                }
            }
            JCall::Get { scope, id } => {
                JAnswer::Get(self.records.get(&(scope.clone(), id.clone())).cloned())
            }
            JCall::FindApproval { scope, approval } => JAnswer::Get(
                // The oldest record of the scope that asked for it; ties by invocation id.
                self.records
                    .values()
                    .filter(|r| {
                        r.scope == *scope && r.approval_id.as_deref() == Some(approval.as_str())
                    })
                    .min_by(|a, b| {
                        a.created_at
                            .cmp(&b.created_at)
                            .then_with(|| a.invocation_id.cmp(&b.invocation_id))
                    })
                    .cloned(),
            ),
            JCall::Purge { cutoff } => {
                let before = self.records.len();
                self.records
                    .retain(|_, r| r.state == InvocationState::Pending || r.updated_at >= *cutoff);
                JAnswer::Purged((before - self.records.len()) as u64)
            }
        };
        if expected == *answer {
            Ok(())
        } else {
            Err(format!(
                "{call:?} at {now}:\n  expected {expected:?}\n  answered {answer:?}"
            ))
        }
    }

    async fn stored(s: &Subject, case: &Case) -> Result<Self::Stored, String> {
        let mut stored = BTreeMap::new();
        for scope in 0..2 {
            for id in 0..3 {
                let key = (case.scope(scope), format!("inv_{id}"));
                let got = s
                    .journal
                    .get(&key.0, &key.1)
                    .await
                    .map_err(|e| e.to_string())?;
                stored.insert(key, got);
            }
        }
        Ok(stored)
    }

    fn matches(&self, stored: &Self::Stored) -> Result<(), String> {
        same_records(&self.records, stored)
    }
}

impl JournalModel {
    /// Accept a token an implementation just issued: well-formed and never seen before.
    fn adopt(&mut self, key: &(String, String), token: &str) -> Result<(), String> {
        if !token.starts_with("clm_") || token.len() < 20 {
            return Err(format!("claim token `{token}` is not a fresh clm_ token"));
        }
        if !self.issued.insert(token.to_string()) {
            return Err(format!("claim token `{token}` was issued before"));
        }
        self.tokens
            .entry(key.clone())
            .or_default()
            .push(token.to_string());
        Ok(())
    }
}

/// Run `ops` one after another, checking every answer, then the final state.
fn journal_answers_random_operation_sequences_as_the_model_does(
    s: &Subject,
    rt: &tokio::runtime::Runtime,
) {
    answers_random_sequences::<JournalModel>(s, rt, jop());
}

/// Run a serial prefix, then batches of operations concurrently; accept each batch only if
/// a serial order of it explains the answers and the stored state.
fn journal_concurrent_batches_are_linearizable_against_the_model(
    s: &Subject,
    rt: &tokio::runtime::Runtime,
) {
    // Batches hammer one scope and few ids so that the operations really collide.
    let batch = proptest::collection::vec(
        (jop(), 0i64..3).prop_map(|(op, dt)| {
            let op = match op {
                JOp::Claim { id, cap, input, .. } => JOp::Claim {
                    scope: 0,
                    id: id % 2,
                    cap,
                    input,
                },
                JOp::Settle {
                    id,
                    token,
                    how,
                    reconcile,
                    ..
                } => JOp::Settle {
                    scope: 0,
                    id: id % 2,
                    token,
                    how,
                    reconcile,
                },
                JOp::Resume { id, approval, .. } => JOp::Resume {
                    scope: 0,
                    id: id % 2,
                    approval,
                },
                other => other,
            };
            (op, dt)
        }),
        2..6,
    );
    concurrent_batches::<JournalModel>(s, rt, jop(), batch, 3);
}

// ---------------------------------------------------------------------------------------
// The approvals model.
// ---------------------------------------------------------------------------------------

/// An approvals operation as generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AOp {
    Create {
        id: u8,
        ttl: u8,
        untyped: bool,
    },
    Decide {
        id: u8,
        approve: bool,
        via: u8,
        comment: bool,
    },
    Consume {
        id: u8,
        execution: u8,
    },
    Get {
        id: u8,
    },
    List {
        status: Option<u8>,
    },
    Tick {
        secs: u8,
    },
}

fn aop() -> impl Strategy<Value = AOp> {
    let id = 0u8..3;
    prop_oneof![
        4 => (id.clone(), 1u8..6, any::<bool>())
            .prop_map(|(id, ttl, untyped)| AOp::Create { id, ttl, untyped }),
        4 => (id.clone(), proptest::bool::weighted(0.7), 0u8..3, any::<bool>())
            .prop_map(|(id, approve, via, comment)| AOp::Decide { id, approve, via, comment }),
        4 => (id.clone(), 0u8..3).prop_map(|(id, execution)| AOp::Consume { id, execution }),
        2 => id.prop_map(|id| AOp::Get { id }),
        2 => proptest::option::of(0u8..6).prop_map(|status| AOp::List { status }),
        3 => (0u8..4).prop_map(|secs| AOp::Tick { secs }),
    ]
}

const STATUSES: [ApprovalStatus; 6] = [
    ApprovalStatus::Pending,
    ApprovalStatus::Approved,
    ApprovalStatus::Rejected,
    ApprovalStatus::Expired,
    ApprovalStatus::Cancelled,
    ApprovalStatus::Consumed,
];

/// An approvals operation ready to run.
#[derive(Debug, Clone, PartialEq)]
enum ACall {
    Create(Box<ApprovalRequest>),
    Decide { id: String, decision: Decision },
    Consume { id: String, execution: String },
    Get { id: String },
    List(ApprovalFilter),
}

/// An approvals refusal, comparable.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ARefusal {
    NotFound,
    Duplicate,
    WrongStatus {
        status: &'static str,
        expected: &'static str,
    },
}

/// What a coordinator answered.
#[derive(Debug, Clone, PartialEq)]
enum AAnswer {
    Record(Result<ApprovalRecord, ARefusal>),
    Get(Option<ApprovalRecord>),
    List(Vec<ApprovalRecord>),
}

fn arefusal(e: ApprovalStoreError) -> Result<ARefusal, String> {
    match e {
        ApprovalStoreError::NotFound(_) => Ok(ARefusal::NotFound),
        ApprovalStoreError::Duplicate(_) => Ok(ARefusal::Duplicate),
        ApprovalStoreError::WrongStatus {
            status, expected, ..
        } => Ok(ARefusal::WrongStatus { status, expected }),
        other => Err(format!("unexpected approvals error: {other}")),
    }
}

async fn run_acall(
    a: &dyn ApprovalCoordinator,
    call: &ACall,
    now: DateTime<Utc>,
) -> Result<AAnswer, String> {
    let record = |r: Result<ApprovalRecord, ApprovalStoreError>| -> Result<AAnswer, String> {
        Ok(AAnswer::Record(match r {
            Ok(r) => Ok(r),
            Err(e) => Err(arefusal(e)?),
        }))
    };
    match call {
        ACall::Create(request) => record(a.create(request.as_ref().clone()).await),
        ACall::Decide { id, decision } => record(a.decide(id, decision.clone(), now).await),
        ACall::Consume { id, execution } => record(a.mark_consumed(id, execution, now).await),
        ACall::Get { id } => Ok(AAnswer::Get(
            a.get(id).await.map_err(|e| format!("get: {e}"))?,
        )),
        ACall::List(filter) => Ok(AAnswer::List(
            a.list(filter, now)
                .await
                .map_err(|e| format!("list: {e}"))?,
        )),
    }
}

/// The coordinator as it must be: the expected record of every approval of this case.
#[derive(Debug, Clone, Default)]
struct ApprovalsModel {
    records: BTreeMap<String, ApprovalRecord>,
}

/// The status a record shows at `now`: pending and approved lapse at `expires_at`.
fn shown(r: &ApprovalRecord, now: DateTime<Utc>) -> ApprovalStatus {
    match r.status {
        ApprovalStatus::Pending | ApprovalStatus::Approved if now >= r.request.expires_at => {
            ApprovalStatus::Expired
        }
        s => s,
    }
}

fn request(case: &Case, id: u8, now: DateTime<Utc>, ttl: u8, untyped: bool) -> ApprovalRequest {
    let input = json!({"orderId": format!("ord_{id}"), "amount": 600 + u32::from(id)});
    ApprovalRequest {
        id: case.approval(id),
        capability_id: "orders.refund".into(),
        surface: Surface::AiSdk,
        actor: Actor::user("u_dana", json!({"orgId": "org_1"})),
        input_hash: input_hash(&input).expect("hashable input"),
        input,
        reasons: vec!["refund over $500".into()],
        types: if untyped {
            Vec::new()
        } else {
            vec!["manager".into()]
        },
        policies: if untyped {
            vec!["refund-limit".into()]
        } else {
            Vec::new()
        },
        risk: Risk::High,
        side_effect: SideEffect::Write,
        requested_at: now,
        expires_at: now + Duration::seconds(i64::from(ttl)),
        execution_id: format!("exe_{id}"),
        correlation_id: untyped.then(|| "cor_1".to_string()),
        namespace: case.namespace(),
        untyped,
        descriptor_digest: untyped.then(|| "dgst_1".to_string()),
    }
}

impl Machine for ApprovalsModel {
    type Gen = AOp;
    type Call = ACall;
    type Answer = AAnswer;
    type Stored = BTreeMap<String, Option<ApprovalRecord>>;

    fn tick(op: &AOp) -> Option<u8> {
        match op {
            AOp::Tick { secs } => Some(*secs),
            _ => None,
        }
    }

    fn resolve(&self, case: &Case, op: AOp, now: DateTime<Utc>) -> Option<ACall> {
        Some(match op {
            AOp::Create { id, ttl, untyped } => {
                ACall::Create(Box::new(request(case, id, now, ttl, untyped)))
            }
            AOp::Decide {
                id,
                approve,
                via,
                comment,
            } => ACall::Decide {
                id: case.approval(id),
                decision: Decision {
                    status: if approve {
                        DecisionStatus::Approved
                    } else {
                        DecisionStatus::Rejected
                    },
                    approver: ActorRef {
                        id: "u_priya".into(),
                        kind: ActorKind::User,
                    },
                    comment: comment.then(|| "checked the receipt".to_string()),
                    decided_at: now,
                    approver_namespace: (via != 1).then(|| case.namespace()),
                    via: [
                        DecidedVia::Approver,
                        DecidedVia::Operator,
                        DecidedVia::Requester,
                    ][usize::from(via)],
                },
            },
            AOp::Consume { id, execution } => ACall::Consume {
                id: case.approval(id),
                execution: format!("exe_resume_{execution}"),
            },
            AOp::Get { id } => ACall::Get {
                id: case.approval(id),
            },
            AOp::List { status } => ACall::List(ApprovalFilter {
                status: status.map(|s| STATUSES[usize::from(s)]),
                namespace: Some(case.namespace()),
                ..ApprovalFilter::default()
            }),
            AOp::Tick { .. } => return None,
        })
    }

    fn run(
        s: &Subject,
        call: ACall,
        now: DateTime<Utc>,
    ) -> BoxFuture<'static, Result<AAnswer, String>> {
        let a = s.approvals.clone();
        Box::pin(async move { run_acall(&*a, &call, now).await })
    }

    fn step(&mut self, call: &ACall, now: DateTime<Utc>, answer: &AAnswer) -> Result<(), String> {
        let wrong = |status: ApprovalStatus, expected| {
            Err(ARefusal::WrongStatus {
                status: status.as_str(),
                expected,
            })
        };
        let expected = match call {
            ACall::Create(request) => AAnswer::Record(if self.records.contains_key(&request.id) {
                Err(ARefusal::Duplicate)
            } else {
                let r = ApprovalRecord {
                    request: request.as_ref().clone(),
                    status: ApprovalStatus::Pending,
                    decision: None,
                    consumed_by_execution_id: None,
                };
                self.records.insert(request.id.clone(), r.clone());
                Ok(r)
            }),
            ACall::Decide { id, decision } => AAnswer::Record(match self.records.get_mut(id) {
                None => Err(ARefusal::NotFound),
                Some(r) if shown(r, now) != ApprovalStatus::Pending => {
                    wrong(shown(r, now), "pending")
                }
                Some(r) => {
                    r.status = match decision.status {
                        DecisionStatus::Approved => ApprovalStatus::Approved,
                        DecisionStatus::Rejected => ApprovalStatus::Rejected,
                    };
                    r.decision = Some(decision.clone());
                    Ok(r.clone())
                }
            }),
            ACall::Consume { id, execution } => AAnswer::Record(match self.records.get_mut(id) {
                None => Err(ARefusal::NotFound),
                Some(r) if shown(r, now) != ApprovalStatus::Approved => {
                    wrong(shown(r, now), "approved")
                }
                Some(r) => {
                    r.status = ApprovalStatus::Consumed;
                    r.consumed_by_execution_id = Some(execution.clone());
                    Ok(r.clone())
                }
            }),
            ACall::Get { id } => AAnswer::Get(self.records.get(id).cloned()),
            ACall::List(filter) => {
                let mut out: Vec<ApprovalRecord> = self
                    .records
                    .values()
                    .filter(|r| filter.status.is_none_or(|s| shown(r, now) == s))
                    .cloned()
                    .collect();
                // Newest first; ties by id, descending.
                out.sort_by(|a, b| {
                    (b.request.requested_at, &b.request.id)
                        .cmp(&(a.request.requested_at, &a.request.id))
                });
                AAnswer::List(out)
            }
        };
        if expected == *answer {
            Ok(())
        } else {
            Err(format!(
                "{call:?} at {now}:\n  expected {expected:?}\n  answered {answer:?}"
            ))
        }
    }

    async fn stored(s: &Subject, case: &Case) -> Result<Self::Stored, String> {
        let mut out = BTreeMap::new();
        for id in 0..3 {
            let id = case.approval(id);
            let got = s.approvals.get(&id).await.map_err(|e| e.to_string())?;
            out.insert(id, got);
        }
        Ok(out)
    }

    fn matches(&self, stored: &Self::Stored) -> Result<(), String> {
        same_records(&self.records, stored)
    }
}

fn approvals_answer_random_operation_sequences_as_the_model_does(
    s: &Subject,
    rt: &tokio::runtime::Runtime,
) {
    answers_random_sequences::<ApprovalsModel>(s, rt, aop());
}

fn approvals_concurrent_batches_are_linearizable_against_the_model(
    s: &Subject,
    rt: &tokio::runtime::Runtime,
) {
    // Batch operations carry their own clock offsets, so decisions and consumptions race
    // each other on both sides of an expiry.
    let batch = proptest::collection::vec(
        (
            aop().prop_filter("no list in batches", |op| !matches!(op, AOp::List { .. })),
            0i64..4,
        )
            .prop_map(|(op, dt)| {
                let op = match op {
                    AOp::Create { id, ttl, untyped } => AOp::Create {
                        id: id % 2,
                        ttl,
                        untyped,
                    },
                    AOp::Decide {
                        id,
                        approve,
                        via,
                        comment,
                    } => AOp::Decide {
                        id: id % 2,
                        approve,
                        via,
                        comment,
                    },
                    AOp::Consume { id, execution } => AOp::Consume {
                        id: id % 2,
                        execution,
                    },
                    other => other,
                };
                (op, dt)
            }),
        2..6,
    );
    concurrent_batches::<ApprovalsModel>(s, rt, aop(), batch, 2);
}

// ---------------------------------------------------------------------------------------
// Fixed races: eight tasks on one record, on every backend.
// ---------------------------------------------------------------------------------------

fn eight_concurrent_claims_of_one_id_admit_exactly_one(s: &Subject, rt: &tokio::runtime::Runtime) {
    rt.block_on(async {
        let case = s.next_case();
        let model = JournalModel::default();
        let claim = JOp::Claim { scope: 0, id: 0, cap: 0, input: 0 };
        let answers = race_ops(s, &model, &case, (0..8).map(|i| (claim, case.at(i)))).await;
        let admitted = answers
            .iter()
            .filter(|a| matches!(a, JAnswer::Claim(ClaimOutcome::Admitted { .. })))
            .count();
        let existing = answers
            .iter()
            .filter(|a| matches!(a, JAnswer::Claim(ClaimOutcome::Existing(r)) if r.state == InvocationState::Pending))
            .count();
        assert_eq!((admitted, existing), (1, 7), "{:?}: {answers:#?}", s.backend);
    });
}

fn eight_concurrent_resume_claims_admit_exactly_one(s: &Subject, rt: &tokio::runtime::Runtime) {
    rt.block_on(async {
        let case = s.next_case();
        let mut model = JournalModel::default();
        setup(
            s,
            &mut model,
            &case,
            &[
                JOp::Claim {
                    scope: 0,
                    id: 0,
                    cap: 0,
                    input: 0,
                },
                JOp::Settle {
                    scope: 0,
                    id: 0,
                    token: Token::Current,
                    how: How::Awaiting(0),
                    reconcile: false,
                },
            ],
        )
        .await;
        let resume = JOp::Resume {
            scope: 0,
            id: 0,
            approval: 0,
        };
        let ops = (0..8).map(|i| (resume, case.at(i + 1)));
        let answers = race_ops(s, &model, &case, ops).await;
        let admitted: Vec<&String> = answers
            .iter()
            .filter_map(|a| match a {
                JAnswer::Resume(ResumeClaim::Admitted { claim_token, .. }) => Some(claim_token),
                _ => None,
            })
            .collect();
        let refused = answers
            .iter()
            .filter(|a| matches!(a, JAnswer::Resume(ResumeClaim::NotResumable(_))))
            .count();
        assert_eq!(
            (admitted.len(), refused),
            (1, 7),
            "{:?}: {answers:#?}",
            s.backend
        );
        let stored = s
            .journal
            .get(&case.scope(0), "inv_0")
            .await
            .expect("get")
            .expect("exists");
        assert_eq!(
            (&stored.claim_token, stored.state),
            (admitted[0], InvocationState::Pending)
        );
    });
}

fn eight_concurrent_settles_with_one_token_settle_exactly_once(
    s: &Subject,
    rt: &tokio::runtime::Runtime,
) {
    rt.block_on(async {
        let case = s.next_case();
        let mut model = JournalModel::default();
        setup(
            s,
            &mut model,
            &case,
            &[JOp::Claim {
                scope: 0,
                id: 0,
                cap: 0,
                input: 0,
            }],
        )
        .await;
        let ops = (0..8u8).map(|i| {
            // Half of them would complete, half would fail: exactly one outcome lands.
            let how = if i % 2 == 0 {
                How::Completed
            } else {
                How::Failed
            };
            let op = JOp::Settle {
                scope: 0,
                id: 0,
                token: Token::Current,
                how,
                reconcile: false,
            };
            (op, case.at(i64::from(i) + 1))
        });
        let answers = race_ops(s, &model, &case, ops).await;
        let settled: Vec<&InvocationRecord> = answers
            .iter()
            .filter_map(|a| match a {
                JAnswer::Settled(Ok(r)) => Some(r),
                _ => None,
            })
            .collect();
        let not_pending = answers
            .iter()
            .filter(|a| matches!(a, JAnswer::Settled(Err(JRefusal::NotPending))))
            .count();
        assert_eq!(
            (settled.len(), not_pending),
            (1, 7),
            "{:?}: {answers:#?}",
            s.backend
        );
        let stored = s.journal.get(&case.scope(0), "inv_0").await.expect("get");
        assert_eq!(stored.as_ref(), Some(settled[0]));
    });
}

/// Create approval 0 (expiring after `ttl` seconds) and, when `approve`, approve it.
async fn approval_setup(
    s: &Subject,
    model: &mut ApprovalsModel,
    case: &Case,
    ttl: u8,
    approve: bool,
) {
    let mut ops = vec![AOp::Create {
        id: 0,
        ttl,
        untyped: false,
    }];
    if approve {
        ops.push(AOp::Decide {
            id: 0,
            approve: true,
            via: 0,
            comment: false,
        });
    }
    setup(s, model, case, &ops).await;
}

fn eight_concurrent_consumes_of_one_approval_succeed_exactly_once(
    s: &Subject,
    rt: &tokio::runtime::Runtime,
) {
    rt.block_on(async {
        let case = s.next_case();
        let mut model = ApprovalsModel::default();
        approval_setup(s, &mut model, &case, 60, true).await;
        let ops = (0..8u8).map(|i| {
            let op = AOp::Consume {
                id: 0,
                execution: i % 3,
            };
            (op, case.at(1))
        });
        let answers = race_ops(s, &model, &case, ops).await;
        let consumed = answers
            .iter()
            .filter(|a| matches!(a, AAnswer::Record(Ok(_))))
            .count();
        let refused = answers
            .iter()
            .filter(|a| {
                **a == AAnswer::Record(Err(ARefusal::WrongStatus {
                    status: "consumed",
                    expected: "approved",
                }))
            })
            .count();
        assert_eq!((consumed, refused), (1, 7), "{:?}: {answers:#?}", s.backend);
    });
}

fn eight_concurrent_decisions_record_exactly_one(s: &Subject, rt: &tokio::runtime::Runtime) {
    rt.block_on(async {
        let case = s.next_case();
        let mut model = ApprovalsModel::default();
        approval_setup(s, &mut model, &case, 60, false).await;
        let ops = (0..8u8).map(|i| {
            let op = AOp::Decide {
                id: 0,
                approve: i % 2 == 0,
                via: i % 3,
                comment: i % 4 == 0,
            };
            (op, case.at(1))
        });
        let answers = race_ops(s, &model, &case, ops).await;
        let winners: Vec<&ApprovalRecord> = answers
            .iter()
            .filter_map(|a| match a {
                AAnswer::Record(Ok(r)) => Some(r),
                _ => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "{:?}: {answers:#?}", s.backend);
        let stored = s.approvals.get(&case.approval(0)).await.expect("get");
        assert_eq!(stored.as_ref(), Some(winners[0]));
    });
}

fn decisions_racing_expiry_never_land_after_it(s: &Subject, rt: &tokio::runtime::Runtime) {
    rt.block_on(async {
        let case = s.next_case();
        let mut model = ApprovalsModel::default();
        // Expires at +4 s; four approvals before it, four rejections at or after it, and
        // two consumptions after it: whatever the interleaving, one approval lands and
        // everything late sees the record expired (pending or approved, it lapsed).
        approval_setup(s, &mut model, &case, 4, false).await;
        let mut ops: Vec<(AOp, DateTime<Utc>)> = (0..8u8)
            .map(|i| {
                let now = case.at(if i < 4 { 3 } else { 4 + i64::from(i % 2) });
                let op = AOp::Decide {
                    id: 0,
                    approve: i < 4,
                    via: i % 3,
                    comment: false,
                };
                (op, now)
            })
            .collect();
        for e in 0..2 {
            let op = AOp::Consume {
                id: 0,
                execution: e,
            };
            ops.push((op, case.at(5)));
        }
        let late: Vec<bool> = ops.iter().map(|(_, now)| *now >= case.at(4)).collect();
        let answers = race_ops(s, &model, &case, ops).await;
        let mut won = 0;
        for (answer, late) in answers.iter().zip(late) {
            match answer {
                AAnswer::Record(Ok(_)) => {
                    assert!(
                        !late,
                        "{:?}: a decision or consumption at or after expiry landed",
                        s.backend
                    );
                    won += 1;
                }
                AAnswer::Record(Err(ARefusal::WrongStatus { status, .. })) if late => {
                    assert_eq!(
                        *status, "expired",
                        "{:?}: after expiry the record shows expired",
                        s.backend
                    );
                }
                AAnswer::Record(Err(ARefusal::WrongStatus { .. })) => {}
                other => panic!("{:?}: unexpected answer {other:?}", s.backend),
            }
        }
        assert_eq!(
            won, 1,
            "{:?}: exactly one timely decision lands: {answers:#?}",
            s.backend
        );
    });
}

// ---------------------------------------------------------------------------------------
// Rate-limit buckets: exactly the burst, then refusals, on every backend.
// ---------------------------------------------------------------------------------------

/// 1 request per second, `burst` at once: refill during a test is one token per elapsed
/// second, which the bounds below allow for (a correctness bound, not a timing one).
fn slow(burst: u32) -> BucketRate {
    BucketRate {
        per_second: std::num::NonZeroU32::MIN,
        burst: std::num::NonZeroU32::new(burst).expect("a burst"),
    }
}

/// At most `burst` plus one token per whole second elapsed since `since`.
fn refill_bound(burst: u32, since: std::time::Instant) -> usize {
    usize::try_from(burst).unwrap_or(0)
        + usize::try_from(since.elapsed().as_secs()).unwrap_or(usize::MAX)
}

fn rate_limit_buckets_admit_their_burst_then_refuse_and_are_independent(
    s: &Subject,
    rt: &tokio::runtime::Runtime,
) {
    rt.block_on(async {
        let case = s.next_case();
        let (a, b) = (format!("p:case{}_a", case.n), format!("p:case{}_b", case.n));
        let start = std::time::Instant::now();
        let mut answers = Vec::new();
        for _ in 0..8 {
            answers.push(s.quotas.take(&a, slow(5)).await.expect("take"));
        }
        let admitted = answers
            .iter()
            .filter(|a| **a == Admission::Admitted)
            .count();
        assert!(
            (5..=refill_bound(5, start)).contains(&admitted),
            "{:?}: {answers:?}",
            s.backend
        );
        assert_eq!(answers[..5], [Admission::Admitted; 5], "{:?}", s.backend);
        for answer in &answers[admitted..] {
            match answer {
                Admission::Limited { retry_after } => assert!(
                    *retry_after > std::time::Duration::ZERO
                        && *retry_after <= std::time::Duration::from_secs(1),
                    "{:?}: {retry_after:?}",
                    s.backend
                ),
                Admission::Admitted => {
                    panic!("{:?}: admitted after a refusal: {answers:?}", s.backend)
                }
            }
        }
        // Another bucket is full.
        assert_eq!(
            s.quotas.take(&b, slow(5)).await.expect("take"),
            Admission::Admitted,
            "{:?}",
            s.backend
        );
    });
}

fn sixteen_concurrent_takes_of_one_bucket_admit_exactly_its_burst(
    s: &Subject,
    rt: &tokio::runtime::Runtime,
) {
    rt.block_on(async {
        let case = s.next_case();
        let key = format!("n:case{}", case.n);
        let start = std::time::Instant::now();
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let (q, key) = (s.quotas.clone(), key.clone());
                tokio::spawn(async move { q.take(&key, slow(8)).await })
            })
            .collect();
        let mut admitted = 0;
        for t in tasks {
            if t.await.expect("task").expect("take") == Admission::Admitted {
                admitted += 1;
            }
        }
        assert!(
            (8..=refill_bound(8, start)).contains(&admitted),
            "{:?}: {admitted} of 16 admitted",
            s.backend
        );
    });
}
