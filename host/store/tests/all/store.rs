//! Behaviour of the durable stores, each test run once on SQLite and once on Postgres.

use crate::common;

use capgate_core::actor::{ActorKind, ActorRef, Surface};
use capgate_core::approval::{
    ApprovalCoordinator, ApprovalFilter, ApprovalStatus, ApprovalStoreError,
};
use capgate_core::audit::AuditSink;
use capgate_core::journal::{
    ClaimOutcome, ClaimRequest, InvocationJournal, InvocationState, JournalBudget, JournalError,
    ResumeClaim, Settlement, scope_hash,
};
use capgate_core::runtime::ResumeOptions;
use capgate_store::{AuditOrder, AuditQuery, AuditSinkOptions, SqlInvocationJournal, Store};
use chrono::Utc;
use common::{Counter, TestDb, approved_refund, code, refund, runtime};
use serde_json::json;
use std::process::Command;
use std::time::Duration;

on_both_backends!(
    concurrent_resumes_of_one_approval_execute_exactly_once,
    concurrent_resumes_from_two_runtimes_on_two_pools_execute_exactly_once,
    concurrent_claims_of_one_invocation_admit_exactly_one,
    same_invocation_id_with_different_input_conflicts,
    settle_with_a_stale_claim_token_is_refused,
    pending_receipt_is_never_taken_over_only_reconciled,
    purge_drops_settled_receipts_past_the_horizon_and_keeps_pending_ones,
    state_written_by_one_process_is_read_and_resumed_by_a_new_process,
    strict_audit_with_an_unreachable_store_fails_before_the_procedure_runs,
    best_effort_audit_with_an_unreachable_store_keeps_serving_and_holds_events_for_retry,
    tampered_approval_input_fails_resume_with_input_mismatch,
    malformed_rows_read_back_as_typed_errors,
    decide_and_consume_evaluate_expiry_against_the_callers_clock,
    list_filters_by_status_capability_actor_and_time,
    audit_events_are_queryable_by_execution_capability_actor_and_tailed_in_order,
    migrate_is_idempotent_and_reports_every_migration,
    a_failing_write_among_concurrent_ones_fails_alone,
    every_way_of_deciding_reads_back_as_recorded,
    concurrent_audit_events_are_all_written_in_order_and_drained_when_the_sink_is_dropped,
    a_namespace_over_its_journal_budget_is_refused_with_nothing_written,
    concurrent_claims_never_take_a_namespace_past_its_budget,
    a_released_claim_is_gone_and_frees_its_budget_and_only_its_token_releases_it,
    approvals_count_against_their_namespaces_budget_and_leave_it_when_purged,
    receipts_pending_past_the_pending_horizon_are_settled_unknown_and_then_purged,
);

fn scope() -> String {
    let dana = ActorRef {
        id: "u_dana".into(),
        kind: ActorKind::User,
    };
    scope_hash("org_1", &dana, Surface::AiSdk).expect("scope")
}

fn claim_req(id: &str, input: serde_json::Value) -> ClaimRequest {
    ClaimRequest::new(scope(), id, "orders.refund", input).expect("valid claim")
}

/// Resume `approval_id` `n` times at once across `runtimes`; returns (completed, consumed).
async fn race_resumes(
    runtimes: &[capgate_core::runtime::Runtime],
    approval_id: &str,
    n: usize,
) -> (usize, usize) {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let rt = runtimes[i % runtimes.len()].clone();
            let id = approval_id.to_string();
            tokio::spawn(async move { rt.resume(&id, ResumeOptions::default()).await })
        })
        .collect();
    let mut completed = 0;
    let mut consumed = 0;
    for t in tasks {
        let r = t.await.expect("task");
        match (r.status(), code(&r)) {
            ("completed", _) => completed += 1,
            (_, Some("APPROVAL_CONSUMED")) => consumed += 1,
            (s, c) => panic!("unexpected resume result {s} {c:?}"),
        }
    }
    (completed, consumed)
}

async fn concurrent_resumes_of_one_approval_execute_exactly_once(db: &TestDb) {
    let store = db.open().await;
    let counter = Counter::default();
    let (rt, _sink) = runtime(&store, &counter, true);
    let id = approved_refund(&rt).await;

    let (completed, consumed) = race_resumes(std::slice::from_ref(&rt), &id, 100).await;
    assert_eq!((completed, consumed), (1, 99));
    assert_eq!(counter.get(), 1);
    let record = store
        .approvals()
        .get(&id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(record.status, ApprovalStatus::Consumed);
    assert!(record.consumed_by_execution_id.is_some());
}

async fn concurrent_resumes_from_two_runtimes_on_two_pools_execute_exactly_once(db: &TestDb) {
    let (store_a, store_b) = (db.open().await, db.open().await);
    let counter = Counter::default();
    let (rt_a, _sink_a) = runtime(&store_a, &counter, true);
    let (rt_b, _sink_b) = runtime(&store_b, &counter, true);
    let id = approved_refund(&rt_a).await;

    let (completed, consumed) = race_resumes(&[rt_a, rt_b], &id, 100).await;
    assert_eq!((completed, consumed), (1, 99));
    assert_eq!(counter.get(), 1);
}

async fn concurrent_claims_of_one_invocation_admit_exactly_one(db: &TestDb) {
    let (store_a, store_b) = (db.open().await, db.open().await);
    let journals = [store_a.journal(), store_b.journal()];
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let j = journals[i % 2].clone();
            tokio::spawn(async move {
                j.claim(
                    claim_req("inv_race", json!({"orderId": "ord_1", "amount": 20})),
                    Utc::now(),
                )
                .await
            })
        })
        .collect();
    let (mut admitted, mut existing) = (0, 0);
    for t in tasks {
        match t.await.expect("task").expect("claim") {
            ClaimOutcome::Admitted { .. } => admitted += 1,
            ClaimOutcome::Existing(r) => {
                assert_eq!(r.state, InvocationState::Pending);
                existing += 1;
            }
            ClaimOutcome::Conflict => panic!("identical claims never conflict"),
        }
    }
    assert_eq!((admitted, existing), (1, 99));
}

async fn same_invocation_id_with_different_input_conflicts(db: &TestDb) {
    let j = db.open().await.journal();
    let now = Utc::now();
    let first = j
        .claim(claim_req("inv_1", json!({"amount": 20})), now)
        .await
        .expect("claim");
    assert!(matches!(first, ClaimOutcome::Admitted { .. }));
    // Key order is not part of the fingerprint; the value is.
    let same = j
        .claim(claim_req("inv_1", json!({"amount": 20})), now)
        .await
        .expect("claim");
    assert!(matches!(same, ClaimOutcome::Existing(_)));
    let other = j
        .claim(claim_req("inv_1", json!({"amount": 21})), now)
        .await
        .expect("claim");
    assert_eq!(other, ClaimOutcome::Conflict);
    let other_cap =
        ClaimRequest::new(scope(), "inv_1", "orders.cancel", json!({"amount": 20})).expect("valid");
    assert_eq!(
        j.claim(other_cap, now).await.expect("claim"),
        ClaimOutcome::Conflict
    );
    // Another scope never sees it.
    let other_scope = ClaimRequest::new(
        "f".repeat(64),
        "inv_1",
        "orders.refund",
        json!({"amount": 21}),
    )
    .expect("valid");
    assert!(matches!(
        j.claim(other_scope, now).await.expect("claim"),
        ClaimOutcome::Admitted { .. }
    ));
}

async fn settle_with_a_stale_claim_token_is_refused(db: &TestDb) {
    let j = db.open().await.journal();
    let now = Utc::now();
    let ClaimOutcome::Admitted {
        claim_token: first,
        record,
    } = j
        .claim(claim_req("inv_s", json!({"amount": 649})), now)
        .await
        .expect("claim")
    else {
        panic!("admitted");
    };
    assert!(record.idempotency_key.starts_with("idk_"));
    let wrong = j
        .settle(
            &scope(),
            "inv_s",
            "clm_forged",
            Settlement::final_outcome(json!({})),
            now,
        )
        .await;
    assert!(
        matches!(wrong, Err(JournalError::StaleClaim(_))),
        "{wrong:?}"
    );

    let waiting = j
        .settle(
            &scope(),
            "inv_s",
            &first,
            Settlement::approval_required("apr_1", json!({"status": "approval-required"})),
            now,
        )
        .await
        .expect("settled");
    assert!(waiting.awaiting_approval);
    assert_eq!(
        j.find_approval(&scope(), "apr_1")
            .await
            .expect("find")
            .map(|r| r.invocation_id),
        Some("inv_s".to_string())
    );

    let ResumeClaim::Admitted {
        claim_token: second,
        ..
    } = j
        .claim_resume(&scope(), "inv_s", "apr_1", now)
        .await
        .expect("resume")
    else {
        panic!("resume reopens the receipt");
    };
    assert!(matches!(
        j.claim_resume(&scope(), "inv_s", "apr_1", now)
            .await
            .expect("resume"),
        ResumeClaim::NotResumable(_)
    ));
    assert_eq!(
        j.claim_resume(&scope(), "inv_missing", "apr_1", now)
            .await
            .expect("resume"),
        ResumeClaim::NotFound
    );
    let stale = j
        .settle(
            &scope(),
            "inv_s",
            &first,
            Settlement::final_outcome(json!({"status": "completed"})),
            now,
        )
        .await;
    assert!(
        matches!(stale, Err(JournalError::StaleClaim(_))),
        "{stale:?}"
    );

    let done = j
        .settle(
            &scope(),
            "inv_s",
            &second,
            Settlement::final_outcome(json!({"status": "completed"})),
            now,
        )
        .await
        .expect("current token settles");
    assert_eq!(done.state, InvocationState::Settled);
    assert_eq!(done.approval_id.as_deref(), Some("apr_1"));
    assert!(!done.awaiting_approval && !done.reconciled);
    let again = j
        .settle(
            &scope(),
            "inv_s",
            &second,
            Settlement::final_outcome(json!({})),
            now,
        )
        .await;
    assert!(
        matches!(again, Err(JournalError::NotPending(_))),
        "{again:?}"
    );
    let receipt = j
        .get(&scope(), "inv_s")
        .await
        .expect("get")
        .expect("exists")
        .receipt();
    assert_eq!(receipt.outcome, Some(json!({"status": "completed"})));
}

async fn pending_receipt_is_never_taken_over_only_reconciled(db: &TestDb) {
    let j = db.open().await.journal();
    let start = Utc::now();
    let ClaimOutcome::Admitted { claim_token, .. } = j
        .claim(claim_req("inv_orphan", json!({"amount": 20})), start)
        .await
        .expect("claim")
    else {
        panic!("admitted");
    };
    // A day later the claim is still the original caller's.
    let later = start + chrono::Duration::days(1);
    let ClaimOutcome::Existing(r) = j
        .claim(claim_req("inv_orphan", json!({"amount": 20})), later)
        .await
        .expect("claim")
    else {
        panic!("existing");
    };
    assert_eq!(r.state, InvocationState::Pending);
    assert_eq!(r.outcome, None);

    let reconciled = j
        .reconcile(
            (&r).into(),
            Settlement::final_outcome(json!({"status": "failed", "reconciled": true})),
            later,
        )
        .await
        .expect("reconciled");
    assert!(reconciled.reconciled);
    assert_eq!(reconciled.state, InvocationState::Settled);
    // The original caller, late, cannot overwrite the operator's verified outcome.
    let late = j
        .settle(
            &scope(),
            "inv_orphan",
            &claim_token,
            Settlement::final_outcome(json!({})),
            later,
        )
        .await;
    assert!(matches!(late, Err(JournalError::NotPending(_))), "{late:?}");
}

async fn purge_drops_settled_receipts_past_the_horizon_and_keeps_pending_ones(db: &TestDb) {
    let j = db
        .open()
        .await
        .journal()
        .with_replay_horizon(Duration::from_secs(3600));
    let old = Utc::now() - chrono::Duration::hours(2);
    for id in ["inv_old_settled", "inv_old_pending"] {
        let ClaimOutcome::Admitted { claim_token, .. } =
            j.claim(claim_req(id, json!({})), old).await.expect("claim")
        else {
            panic!("admitted");
        };
        if id == "inv_old_settled" {
            j.settle(
                &scope(),
                id,
                &claim_token,
                Settlement::final_outcome(json!({})),
                old,
            )
            .await
            .expect("settle");
        }
    }
    j.claim(claim_req("inv_new", json!({})), Utc::now())
        .await
        .expect("claim");
    assert_eq!(j.purge_expired(Utc::now()).await.expect("purge"), 1);
    assert!(
        j.get(&scope(), "inv_old_settled")
            .await
            .expect("get")
            .is_none()
    );
    assert!(
        j.get(&scope(), "inv_old_pending")
            .await
            .expect("get")
            .is_some()
    );
    assert!(j.get(&scope(), "inv_new").await.expect("get").is_some());
}

/// A claim in `namespace`'s budget (scope: Dana's, whatever the namespace).
fn budgeted(namespace: &str, id: &str, input: serde_json::Value) -> ClaimRequest {
    claim_req(id, input)
        .namespace(namespace)
        .expect("valid namespace")
}

async fn a_namespace_over_its_journal_budget_is_refused_with_nothing_written(db: &TestDb) {
    let j = db
        .open()
        .await
        .journal()
        .with_replay_horizon(Duration::from_secs(3600))
        .with_budget(JournalBudget {
            max_rows: 3,
            max_bytes: 1 << 20,
        });
    let old = Utc::now() - chrono::Duration::hours(2);
    let mut first_token = None;
    for i in 0..3 {
        let claimed = j
            .claim(budgeted("org_1", &format!("inv_{i}"), json!({"i": i})), old)
            .await
            .expect("within budget");
        let ClaimOutcome::Admitted { claim_token, .. } = claimed else {
            panic!("admitted: {claimed:?}");
        };
        first_token.get_or_insert(claim_token);
    }
    let refused = j
        .claim(budgeted("org_1", "inv_3", json!({"i": 3})), Utc::now())
        .await;
    assert!(
        matches!(&refused, Err(JournalError::QuotaExceeded { namespace, limit: "rows" }) if namespace == "org_1"),
        "{refused:?}"
    );
    assert!(j.get(&scope(), "inv_3").await.expect("get").is_none());
    // An id already there is still answered as what it is, not as over budget.
    assert!(matches!(
        j.claim(budgeted("org_1", "inv_0", json!({"i": 0})), Utc::now())
            .await
            .expect("existing"),
        ClaimOutcome::Existing(_)
    ));
    // Another namespace has a budget of its own.
    let other = ClaimRequest::new("e".repeat(64), "inv_3", "orders.refund", json!({}))
        .and_then(|c| c.namespace("org_2"))
        .expect("valid");
    assert!(matches!(
        j.claim(other, Utc::now()).await.expect("claim"),
        ClaimOutcome::Admitted { .. }
    ));
    // Settled receipts leave the count when the horizon purges them.
    j.settle(
        &scope(),
        "inv_0",
        first_token.as_deref().expect("token"),
        Settlement::final_outcome(json!({"status": "completed"})),
        old,
    )
    .await
    .expect("settle");
    assert_eq!(j.purge_expired(Utc::now()).await.expect("purge"), 1);
    assert!(matches!(
        j.claim(budgeted("org_1", "inv_3", json!({"i": 3})), Utc::now())
            .await
            .expect("room again"),
        ClaimOutcome::Admitted { .. }
    ));

    // The bytes bound: two 100-byte inputs fit in 250 bytes, a third does not.
    let bytes = db.open().await.journal().with_budget(JournalBudget {
        max_rows: 1000,
        max_bytes: 250,
    });
    let input = json!({"note": "x".repeat(89)});
    assert_eq!(input.to_string().len(), 100);
    for i in 0..2 {
        assert!(matches!(
            bytes
                .claim(
                    budgeted("org_3", &format!("inv_b{i}"), input.clone()),
                    Utc::now()
                )
                .await
                .expect("within budget"),
            ClaimOutcome::Admitted { .. }
        ));
    }
    let refused = bytes
        .claim(budgeted("org_3", "inv_b2", input), Utc::now())
        .await;
    assert!(
        matches!(
            &refused,
            Err(JournalError::QuotaExceeded { limit: "bytes", .. })
        ),
        "{refused:?}"
    );
    assert!(bytes.get(&scope(), "inv_b2").await.expect("get").is_none());
}

async fn concurrent_claims_never_take_a_namespace_past_its_budget(db: &TestDb) {
    let budget = JournalBudget {
        max_rows: 10,
        max_bytes: 1 << 20,
    };
    let (a, b) = (db.open().await, db.open().await);
    let journals = [
        a.journal().with_budget(budget),
        b.journal().with_budget(budget),
    ];
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            let j = journals[i % 2].clone();
            tokio::spawn(async move {
                j.claim(
                    budgeted("org_1", &format!("inv_c{i}"), json!({"i": i})),
                    Utc::now(),
                )
                .await
            })
        })
        .collect();
    let (mut admitted, mut refused) = (0, 0);
    for t in tasks {
        match t.await.expect("task") {
            Ok(ClaimOutcome::Admitted { .. }) => admitted += 1,
            Err(JournalError::QuotaExceeded { .. }) => refused += 1,
            other => panic!("unexpected claim answer {other:?}"),
        }
    }
    assert_eq!((admitted, refused), (10, 50));
    let mut stored = 0;
    for i in 0..60 {
        if journals[0]
            .get(&scope(), &format!("inv_c{i}"))
            .await
            .expect("get")
            .is_some()
        {
            stored += 1;
        }
    }
    assert_eq!(stored, 10);
}

// ── Restart safety: a real second process ─────────────────────────────────────────────

const CHILD_ROLE: &str = "CAPGATE_STORE_TEST_CHILD_ROLE";
const CHILD_URL: &str = "CAPGATE_STORE_TEST_CHILD_URL";

/// Entry point of the child process of
/// [`state_written_by_one_process_is_read_and_resumed_by_a_new_process`]; does nothing
/// unless that test started this binary with the child role set.
#[test]
fn restart_child_process_entry_point() {
    if std::env::var(CHILD_ROLE).as_deref() != Ok("write") {
        return;
    }
    let url = std::env::var(CHILD_URL).expect("child url");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let store = Store::open(&url).await.expect("store");
        store.migrate().await.expect("migrate");
        let counter = Counter::default();
        let (runtime, sink) = runtime(&store, &counter, true);
        let suspended = runtime.invoke(refund(649.0)).await;
        let approval = suspended.approval().expect("approval-required").id.clone();
        runtime
            .approvals()
            .decide(
                &approval,
                capgate_core::runtime::DecideRequest {
                    status: capgate_core::approval::DecisionStatus::Approved,
                    approver: common::priya(),
                    comment: None,
                    decider: capgate_core::runtime::Decider::Approver {
                        namespace: String::new(),
                        roles: Vec::new(),
                    },
                },
            )
            .await
            .expect("decide");
        let journal = store.journal();
        let ClaimOutcome::Admitted { claim_token, .. } = journal
            .claim(
                claim_req("inv_restart", json!({"orderId": "ord_42", "amount": 649})),
                Utc::now(),
            )
            .await
            .expect("claim")
        else {
            panic!("admitted");
        };
        journal
            .settle(
                &scope(),
                "inv_restart",
                &claim_token,
                Settlement::approval_required(&approval, json!({"status": "approval-required"})),
                Utc::now(),
            )
            .await
            .expect("settle");
        sink.flush().await.expect("audit flushed");
        println!(
            "CHILD_RESULT {}",
            json!({"approvalId": approval, "executionId": suspended.execution_id()})
        );
    });
}

async fn state_written_by_one_process_is_read_and_resumed_by_a_new_process(db: &TestDb) {
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new(exe)
        .args([
            "--exact",
            "store::restart_child_process_entry_point",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ROLE, "write")
        .env(CHILD_URL, &db.url)
        .output()
        .expect("child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("CHILD_RESULT ").map(|(_, json)| json))
        .unwrap_or_else(|| panic!("child printed no result: {stdout}"));
    let result: serde_json::Value = serde_json::from_str(line).expect("child json");
    let approval_id = result["approvalId"].as_str().expect("approval id");
    let execution_id = result["executionId"].as_str().expect("execution id");

    // This process never wrote anything: everything below comes from the database.
    let store = db.open().await;
    let record = store
        .approvals()
        .get(approval_id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(record.status, ApprovalStatus::Approved);
    assert_eq!(
        record.decision.as_ref().map(|d| d.approver.id.as_str()),
        Some("u_priya")
    );

    let events = store
        .audit_log()
        .for_execution(execution_id)
        .await
        .expect("audit");
    let types: Vec<_> = events
        .iter()
        .map(|e| e.event.as_ref().expect("well-formed").type_name())
        .collect();
    assert_eq!(
        types,
        ["capability.requested", "capability.approval_requested"]
    );
    let decisions = store
        .audit_log()
        .query(&AuditQuery {
            event_type: Some("capability.approved".into()),
            ..AuditQuery::default()
        })
        .await
        .expect("audit");
    assert_eq!(decisions.len(), 1);

    let journal = store.journal();
    let receipt = journal
        .get(&scope(), "inv_restart")
        .await
        .expect("get")
        .expect("exists");
    assert!(receipt.awaiting_approval);
    assert_eq!(receipt.approval_id.as_deref(), Some(approval_id));

    // The approval decided before the restart resumes after it, exactly once.
    let counter = Counter::default();
    let (rt, sink) = runtime(&store, &counter, true);
    let ResumeClaim::Admitted { claim_token, .. } = journal
        .claim_resume(&scope(), "inv_restart", approval_id, Utc::now())
        .await
        .expect("claim resume")
    else {
        panic!("receipt reopens");
    };
    let resumed = rt.resume(approval_id, ResumeOptions::default()).await;
    assert_eq!(resumed.status(), "completed", "{:?}", code(&resumed));
    assert_eq!(counter.get(), 1);
    journal
        .settle(
            &scope(),
            "inv_restart",
            &claim_token,
            Settlement::final_outcome(json!({"status": "completed"})),
            Utc::now(),
        )
        .await
        .expect("settle");
    let again = rt.resume(approval_id, ResumeOptions::default()).await;
    assert_eq!(code(&again), Some("APPROVAL_CONSUMED"));
    sink.flush().await.expect("flush");
    let started = store
        .audit_log()
        .for_execution(resumed.execution_id())
        .await
        .expect("audit");
    assert!(started.iter().any(|e| {
        e.event
            .as_ref()
            .is_ok_and(|e| e.type_name() == "capability.started")
    }));
}

// ── Audit strictness ───────────────────────────────────────────────────────────────────

async fn strict_audit_with_an_unreachable_store_fails_before_the_procedure_runs(db: &TestDb) {
    let store = db.unreachable_store().await;
    let counter = Counter::default();
    let (rt, _sink) = runtime(&store, &counter, true);
    let r = rt.invoke(refund(20.0)).await;
    assert_eq!(code(&r), Some("AUDIT_UNAVAILABLE"), "{}", r.status());
    assert_eq!(counter.get(), 0, "the procedure never ran");
}

async fn best_effort_audit_with_an_unreachable_store_keeps_serving_and_holds_events_for_retry(
    db: &TestDb,
) {
    let store = db.unreachable_store().await;
    let counter = Counter::default();
    let (rt, sink) = runtime(&store, &counter, false);
    for _ in 0..3 {
        let r = rt.invoke(refund(20.0)).await;
        assert_eq!(r.status(), "completed", "{:?}", code(&r));
    }
    assert_eq!(counter.get(), 3);
    assert!(rt.lost_audit_events() >= 3, "each started event failed");
    let flushed = sink.flush().await;
    let err = flushed.expect_err("the flush reports the failing write");
    assert!(err.message.contains("held for retry"), "{}", err.message);
    let stats = sink.stats();
    assert_eq!(stats.written, 0);
    // requested + started + completed per call: held for the store's return, none lost.
    assert_eq!(stats.awaiting_retry, 9, "{stats:?}");
    assert_eq!(stats.lost(), 0, "{stats:?}");
    assert!(
        !sink.is_healthy(),
        "a sink holding failed batches is not healthy"
    );
}

// ── Hostile rows ───────────────────────────────────────────────────────────────────────

async fn tampered_approval_input_fails_resume_with_input_mismatch(db: &TestDb) {
    let store = db.open().await;
    let counter = Counter::default();
    let (rt, _sink) = runtime(&store, &counter, true);
    let id = approved_refund(&rt).await;
    let n = db
        .raw_execute(
            r#"UPDATE capgate_approvals SET input = '{"orderId":"ord_42","amount":6490}' WHERE id = $1"#,
            &id,
        )
        .await;
    assert_eq!(n, 1);
    let r = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(code(&r), Some("APPROVAL_INPUT_MISMATCH"));
    assert_eq!(counter.get(), 0);
}

async fn malformed_rows_read_back_as_typed_errors(db: &TestDb) {
    let store = db.open().await;
    let counter = Counter::default();
    let (rt, sink) = runtime(&store, &counter, true);
    let id = approved_refund(&rt).await;

    // A consumed status with no consuming execution contradicts itself.
    db.raw_execute(
        "UPDATE capgate_approvals SET status = 'consumed' WHERE id = $1",
        &id,
    )
    .await;
    let got = store.approvals().get(&id).await;
    assert!(
        matches!(got, Err(ApprovalStoreError::Malformed { .. })),
        "{got:?}"
    );
    db.raw_execute(
        "UPDATE capgate_approvals SET status = 'bogus' WHERE id = $1",
        &id,
    )
    .await;
    let listed = store
        .approvals()
        .list(&ApprovalFilter::default(), Utc::now())
        .await;
    assert!(
        matches!(listed, Err(ApprovalStoreError::Malformed { .. })),
        "{listed:?}"
    );
    let r = rt.resume(&id, ResumeOptions::default()).await;
    assert_eq!(code(&r), Some("INTERNAL_ERROR"));
    assert_eq!(counter.get(), 0);

    let j = store.journal();
    j.claim(claim_req("inv_bad", json!({})), Utc::now())
        .await
        .expect("claim");
    db.raw_execute(
        "UPDATE capgate_invocations SET state = 'lost' WHERE invocation_id = $1",
        "inv_bad",
    )
    .await;
    assert!(matches!(
        j.get(&scope(), "inv_bad").await,
        Err(JournalError::Malformed { .. })
    ));

    sink.flush().await.expect("flush");
    db.raw_execute(
        "UPDATE capgate_audit_events SET type = $1",
        "capability.mystery",
    )
    .await;
    let rows = store
        .audit_log()
        .tail(10)
        .await
        .expect("tail still answers");
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r.event.is_err()));
}

async fn decide_and_consume_evaluate_expiry_against_the_callers_clock(db: &TestDb) {
    let store = db.open().await;
    let counter = Counter::default();
    let (rt, _sink) = runtime(&store, &counter, true);
    let r = rt.invoke(refund(649.0)).await;
    let summary = r.approval().expect("approval-required").clone();
    let coordinator = store.approvals();
    let after = summary.expires_at + chrono::Duration::seconds(1);
    let decision = capgate_core::approval::Decision {
        status: capgate_core::approval::DecisionStatus::Approved,
        approver: common::priya(),
        comment: None,
        decided_at: after,
        approver_namespace: None,
        via: capgate_core::approval::DecidedVia::Approver,
    };
    let late = coordinator
        .decide(&summary.id, decision.clone(), after)
        .await;
    assert!(
        matches!(
            late,
            Err(ApprovalStoreError::WrongStatus {
                status: "expired",
                ..
            })
        ),
        "{late:?}"
    );
    let expired = coordinator
        .list(
            &ApprovalFilter {
                status: Some(ApprovalStatus::Expired),
                ..ApprovalFilter::default()
            },
            after,
        )
        .await
        .expect("list");
    assert_eq!(expired.len(), 1);

    let in_time = summary.expires_at - chrono::Duration::seconds(1);
    coordinator
        .decide(&summary.id, decision.clone(), in_time)
        .await
        .expect("decided in time");
    let twice = coordinator.decide(&summary.id, decision, in_time).await;
    assert!(
        matches!(
            twice,
            Err(ApprovalStoreError::WrongStatus {
                status: "approved",
                ..
            })
        ),
        "{twice:?}"
    );
    let consume_late = coordinator
        .mark_consumed(&summary.id, "exe_late", after)
        .await;
    assert!(
        matches!(
            consume_late,
            Err(ApprovalStoreError::WrongStatus {
                status: "expired",
                ..
            })
        ),
        "{consume_late:?}"
    );
    let missing = coordinator
        .mark_consumed("apr_missing", "exe_x", in_time)
        .await;
    assert!(
        matches!(missing, Err(ApprovalStoreError::NotFound(_))),
        "{missing:?}"
    );
    let consumed = coordinator
        .mark_consumed(&summary.id, "exe_1", in_time)
        .await
        .expect("consume");
    assert_eq!(consumed.consumed_by_execution_id.as_deref(), Some("exe_1"));
}

/// The decision's `via` (approver, operator, the requester confirming their own call)
/// survives the round trip through the store.
async fn every_way_of_deciding_reads_back_as_recorded(db: &TestDb) {
    use capgate_core::approval::{DecidedVia, Decision, DecisionStatus};
    let store = db.open().await;
    let counter = Counter::default();
    let (rt, _sink) = runtime(&store, &counter, true);
    let coordinator = store.approvals();
    for via in [
        DecidedVia::Approver,
        DecidedVia::Operator,
        DecidedVia::Requester,
    ] {
        let r = rt.invoke(refund(649.0)).await;
        let id = r.approval().expect("approval-required").id.clone();
        let now = Utc::now();
        let decision = Decision {
            status: DecisionStatus::Approved,
            approver: common::priya(),
            comment: None,
            decided_at: now,
            approver_namespace: Some("org_1".into()),
            via,
        };
        coordinator
            .decide(&id, decision, now)
            .await
            .expect("decided");
        let read = coordinator.get(&id).await.expect("get").expect("stored");
        assert_eq!(read.decision.map(|d| d.via), Some(via), "{via:?}");
    }
}

/// SQLite commits concurrent writes in groups: one statement failing (a duplicate id) must
/// fail alone, with its own error, and the others must be stored.
async fn a_failing_write_among_concurrent_ones_fails_alone(db: &TestDb) {
    let store = db.open().await;
    let counter = Counter::default();
    let (rt, _sink) = runtime(&store, &counter, true);
    let existing = approved_refund(&rt).await;
    let c = store.approvals();
    let template = c
        .get(&existing)
        .await
        .expect("get")
        .expect("exists")
        .request;
    let tasks: Vec<_> = (0..41)
        .map(|i| {
            let c = c.clone();
            let mut request = template.clone();
            if i != 20 {
                request.id = format!("apr_batch_{i}");
            }
            tokio::spawn(async move { c.create(request).await })
        })
        .collect();
    let mut created = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.expect("task") {
            Ok(r) => {
                assert_ne!(i, 20, "a duplicate id was accepted");
                assert_eq!(r.status, ApprovalStatus::Pending);
                created += 1;
            }
            Err(ApprovalStoreError::Duplicate(id)) => {
                assert_eq!(i, 20);
                assert_eq!(id, existing);
            }
            Err(e) => panic!("create {i}: {e}"),
        }
    }
    assert_eq!(created, 40);
    for i in (0..41).filter(|i| *i != 20) {
        let id = format!("apr_batch_{i}");
        assert!(c.get(&id).await.expect("get").is_some(), "{id} was lost");
    }
    let kept = c.get(&existing).await.expect("get").expect("exists");
    assert_eq!(kept.status, ApprovalStatus::Approved);
}

async fn list_filters_by_status_capability_actor_and_time(db: &TestDb) {
    let store = db.open().await;
    let counter = Counter::default();
    let (rt, _sink) = runtime(&store, &counter, true);
    let before = Utc::now() - chrono::Duration::seconds(1);
    let approved = approved_refund(&rt).await;
    let pending = rt
        .invoke(refund(700.0))
        .await
        .approval()
        .expect("approval")
        .id
        .clone();
    let c = store.approvals();
    let now = Utc::now();
    let by = |f: ApprovalFilter| {
        let c = c.clone();
        async move {
            c.list(&f, now)
                .await
                .expect("list")
                .into_iter()
                .map(|r| r.request.id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        by(ApprovalFilter::default()).await,
        [pending.clone(), approved.clone()]
    );
    let status = |s| ApprovalFilter {
        status: Some(s),
        ..ApprovalFilter::default()
    };
    assert_eq!(
        by(status(ApprovalStatus::Pending)).await,
        vec![pending.clone()]
    );
    assert_eq!(
        by(status(ApprovalStatus::Approved)).await,
        vec![approved.clone()]
    );
    assert!(
        by(ApprovalFilter {
            capability_id: Some("orders.cancel".into()),
            ..ApprovalFilter::default()
        })
        .await
        .is_empty()
    );
    assert_eq!(
        by(ApprovalFilter {
            actor_id: Some("u_dana".into()),
            requested_after: Some(before),
            limit: Some(1),
            offset: Some(1),
            ..ApprovalFilter::default()
        })
        .await,
        [approved]
    );
    assert!(
        by(ApprovalFilter {
            requested_before: Some(before),
            ..ApprovalFilter::default()
        })
        .await
        .is_empty()
    );
}

async fn audit_events_are_queryable_by_execution_capability_actor_and_tailed_in_order(db: &TestDb) {
    let store = db.open().await;
    let counter = Counter::default();
    let (rt, sink) = runtime(&store, &counter, true);
    let done = rt.invoke(refund(20.0)).await;
    assert_eq!(done.status(), "completed");
    sink.flush().await.expect("flush");

    let log = store.audit_log();
    let events = log.for_execution(done.execution_id()).await.expect("audit");
    let types: Vec<_> = events
        .iter()
        .map(|e| e.event.as_ref().expect("well-formed").type_name())
        .collect();
    assert_eq!(
        types,
        [
            "capability.requested",
            "capability.started",
            "capability.completed"
        ]
    );
    let first = events[0].event.as_ref().expect("event");
    assert_eq!(first.actor.id, "u_dana");
    assert_eq!(first.capability_id.as_deref(), Some("orders.refund"));

    let by_actor = log
        .query(&AuditQuery {
            actor_id: Some("u_dana".into()),
            capability_id: Some("orders.refund".into()),
            during: capgate_core::clock::TimeRange {
                since: Some(Utc::now() - chrono::Duration::minutes(1)),
                until: Some(Utc::now() + chrono::Duration::minutes(1)),
            },
            order: AuditOrder::NewestFirst,
            ..AuditQuery::default()
        })
        .await
        .expect("query");
    assert_eq!(by_actor.len(), 3);
    assert!(by_actor[0].id > by_actor[2].id);
    assert!(
        log.query(&AuditQuery {
            actor_id: Some("u_nobody".into()),
            ..AuditQuery::default()
        })
        .await
        .expect("query")
        .is_empty()
    );

    let tail = log.tail(2).await.expect("tail");
    assert_eq!(tail.len(), 2);
    assert!(tail[0].id < tail[1].id);
    let follow = log.follow(tail[0].id, 100).await.expect("follow");
    assert_eq!(follow.len(), 1);
    assert_eq!(follow[0].id, tail[1].id);
}

/// Many emitters at once, their audit batches sharing commits with journal claims (on
/// SQLite both go through the one group writer): every event is written, each emitter's in
/// the order it emitted them, and the ones still queued when the last handle of the sink
/// is dropped (no flush) are written too.
async fn concurrent_audit_events_are_all_written_in_order_and_drained_when_the_sink_is_dropped(
    db: &TestDb,
) {
    const EMITTERS: usize = 16;
    const EACH: usize = 60;
    let store = db.open().await;
    let sink = std::sync::Arc::new(store.audit_sink(AuditSinkOptions::default()).expect("sink"));
    let journal = store.journal();
    let tasks: Vec<_> = (0..EMITTERS)
        .map(|t| {
            let (sink, journal) = (sink.clone(), journal.clone());
            tokio::spawn(async move {
                for i in 0..EACH {
                    sink.emit(&common::numbered_event(t, i))
                        .await
                        .expect("emit");
                    if i % 10 == 0 {
                        let claimed = journal
                            .claim(
                                claim_req(&format!("inv_{t}_{i}"), json!({"i": i})),
                                Utc::now(),
                            )
                            .await
                            .expect("claim");
                        assert!(matches!(claimed, ClaimOutcome::Admitted { .. }));
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("emitter");
    }
    assert_eq!(sink.stats().lost(), 0);
    // No flush: the writer must write what is queued once every handle is gone.
    drop(sink);
    let log = store.audit_log();
    let everything = AuditQuery {
        capability_id: Some("orders.refund".into()),
        limit: Some(10_000),
        ..AuditQuery::default()
    };
    let mut written = 0;
    for _ in 0..1500 {
        written = log.query(&everything).await.expect("query").len();
        if written >= EMITTERS * EACH {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        written,
        EMITTERS * EACH,
        "every event is written, none twice"
    );
    for t in 0..EMITTERS {
        let events = log.for_execution(&format!("exe_{t}")).await.expect("audit");
        let order: Vec<usize> = events
            .iter()
            .map(|e| {
                let event = e.event.as_ref().expect("well-formed");
                event
                    .correlation_id
                    .as_deref()
                    .and_then(|c| c.parse().ok())
                    .expect("numbered")
            })
            .collect();
        assert_eq!(order, (0..EACH).collect::<Vec<_>>(), "emitter {t}'s order");
        assert!(events.windows(2).all(|w| w[0].id < w[1].id));
    }
}

async fn migrate_is_idempotent_and_reports_every_migration(db: &TestDb) {
    let first = capgate_store::migrate_url(&db.url).await.expect("migrate");
    assert!(!first.applied.is_empty());
    assert!(first.status.iter().all(|m| m.applied));
    let again = capgate_store::migrate_url(&db.url)
        .await
        .expect("migrate again");
    assert!(again.applied.is_empty());
    let status = capgate_store::migration_status_url(&db.url)
        .await
        .expect("status");
    assert_eq!(status, again.status);
}

// ── Backend-independent behaviour ──────────────────────────────────────────────────────

#[tokio::test(flavor = "current_thread")]
async fn a_full_audit_queue_drops_counts_and_reports_events() {
    let db = TestDb::sqlite();
    let store = db.open().await;
    let sink = store
        .audit_sink(AuditSinkOptions {
            queue_capacity: 4,
            ..AuditSinkOptions::default()
        })
        .expect("sink");
    let event = capgate_core::audit::AuditEvent {
        timestamp: Utc::now(),
        surface: Surface::AiSdk,
        actor: common::priya(),
        execution_id: Some("exe_1".into()),
        capability_id: Some("orders.refund".into()),
        correlation_id: None,
        input_hash: None,
        payload: capgate_core::audit::EventPayload::Requested {
            side_effect: None,
            risk: None,
        },
    };
    // On a current-thread runtime the writer cannot run between these emits.
    let mut refused = 0;
    for _ in 0..10 {
        if sink.emit(&event).await.is_err() {
            refused += 1;
        }
    }
    assert_eq!(refused, 6);
    assert_eq!(sink.stats().dropped_queue_full, 6);
    let flushed = sink.flush().await.expect_err("the flush reports the drops");
    assert!(
        flushed.message.contains("6 audit events were lost"),
        "{}",
        flushed.message
    );
    assert_eq!(sink.stats().written, 4);
    sink.flush().await.expect("reported once");
}

#[tokio::test]
async fn sqlite_store_is_created_in_wal_mode_and_migrated_at_open() {
    let db = TestDb::sqlite();
    let store = Store::open(&db.url).await.expect("open creates the file");
    let status = store.migration_status().await.expect("status");
    assert!(status.iter().all(|m| m.applied));
    let mut c = <sqlx::SqliteConnection as sqlx::Connection>::connect(&db.url)
        .await
        .expect("connect");
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut c)
        .await
        .expect("pragma");
    assert_eq!(mode, "wal");
}

/// The SQLite writer never checkpoints inside a commit; its thread does between batches,
/// so the WAL stays bounded and the commits reach the database file. Reading the file alone
/// (`immutable`, which ignores the WAL) shows the rows only once a checkpoint ran; without
/// one, 2 000 commits of a claim each leave a WAL of about 40 MiB, more than twice the
/// bound (4 096 pages of 4 KiB, plus what one batch adds).
#[tokio::test]
async fn sqlite_commits_are_checkpointed_off_the_commit_path_with_a_bounded_wal() {
    let db = TestDb::sqlite();
    let store = db.open().await;
    let j: SqlInvocationJournal = store.journal();
    for i in 0..2000 {
        let out = j
            .claim(
                claim_req(&format!("inv_ckpt_{i}"), json!({"i": i})),
                Utc::now(),
            )
            .await
            .expect("claim");
        assert!(matches!(out, ClaimOutcome::Admitted { .. }));
    }
    let path = db.url.trim_start_matches("sqlite://").to_string();
    let wal = std::fs::metadata(format!("{path}-wal")).expect("wal").len();
    assert!(wal <= 20 << 20, "the WAL grew to {wal} bytes");
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .immutable(true)
        .read_only(true);
    let mut c = <sqlx::SqliteConnection as sqlx::Connection>::connect_with(&options)
        .await
        .expect("connect");
    // Before the first checkpoint even the table is only in the WAL.
    let in_file = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM capgate_invocations")
        .fetch_one(&mut c)
        .await
        .unwrap_or(0);
    assert!(in_file > 0, "no commit reached the database file");
    // The store is still open and serving.
    assert!(
        j.get(&scope(), "inv_ckpt_1999")
            .await
            .expect("get")
            .is_some()
    );
}

#[tokio::test]
async fn in_memory_sqlite_store_works_for_development() {
    let store = Store::open("sqlite::memory:").await.expect("open");
    let j: SqlInvocationJournal = store.journal();
    let out = j
        .claim(claim_req("inv_mem", json!({})), Utc::now())
        .await
        .expect("claim");
    assert!(matches!(out, ClaimOutcome::Admitted { .. }));
    assert!(j.get(&scope(), "inv_mem").await.expect("get").is_some());
}

#[tokio::test]
async fn unsupported_urls_are_refused_with_a_clear_error() {
    let err = Store::open("mysql://localhost/db")
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("sqlite://"), "{err}");
}

/// A claim whose call was concealed after it was made (hidden by an execution-phase
/// policy) is released: the record is gone, as for an id never claimed, its row leaves
/// the namespace's budget, and only the claim's own token, while it is pending, releases it.
async fn a_released_claim_is_gone_and_frees_its_budget_and_only_its_token_releases_it(db: &TestDb) {
    let j = db.open().await.journal().with_budget(JournalBudget {
        max_rows: 1,
        max_bytes: 1 << 20,
    });
    let now = Utc::now();
    let ClaimOutcome::Admitted { claim_token, .. } = j
        .claim(budgeted("org_1", "inv_r", json!({"i": 1})), now)
        .await
        .expect("claim")
    else {
        panic!("admitted");
    };
    assert!(
        !j.release(&scope(), "inv_r", "clm_forged")
            .await
            .expect("release"),
        "another token releases nothing"
    );
    assert!(j.get(&scope(), "inv_r").await.expect("get").is_some());
    assert!(
        j.release(&scope(), "inv_r", &claim_token)
            .await
            .expect("release")
    );
    assert!(j.get(&scope(), "inv_r").await.expect("get").is_none());
    assert!(
        !j.release(&scope(), "inv_r", &claim_token)
            .await
            .expect("again")
    );
    // The row left the budget: another claim fits, and the released id is claimable.
    let ClaimOutcome::Admitted { claim_token, .. } = j
        .claim(budgeted("org_1", "inv_r", json!({"i": 2})), now)
        .await
        .expect("within budget again")
    else {
        panic!("admitted");
    };
    // A settled record is never released.
    j.settle(
        &scope(),
        "inv_r",
        &claim_token,
        Settlement::final_outcome(json!({"status": "completed"})),
        now,
    )
    .await
    .expect("settle");
    assert!(
        !j.release(&scope(), "inv_r", &claim_token)
            .await
            .expect("settled")
    );
    assert!(j.get(&scope(), "inv_r").await.expect("get").is_some());
}

/// Issue 55: a new SQLite store, and the WAL beside it, are readable by their owner only.
#[cfg(unix)]
#[tokio::test]
async fn a_new_sqlite_store_is_readable_by_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("capgate.db");
    let store = Store::open(&format!("sqlite://{}", path.display()))
        .await
        .expect("open");
    store.migrate().await.expect("migrate");
    for file in [path.clone(), dir.path().join("capgate.db-wal")] {
        let mode = std::fs::metadata(&file).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}: {mode:o}", file.display());
    }
    store.close().await;
}

/// A pending approval of `namespace` with `input`, expiring `ttl` from `now`.
fn held(
    id: &str,
    namespace: &str,
    input: serde_json::Value,
    now: chrono::DateTime<Utc>,
    ttl: chrono::Duration,
) -> capgate_core::approval::ApprovalRequest {
    capgate_core::approval::ApprovalRequest {
        id: id.into(),
        capability_id: "messages.send".into(),
        surface: Surface::Mcp,
        actor: capgate_core::actor::Actor::user("u_dana", json!({"orgId": namespace})),
        input_hash: capgate_core::canonical::input_hash(&input).expect("hashable"),
        input,
        reasons: vec!["confirm".into()],
        types: vec!["human-confirmation".into()],
        policies: Vec::new(),
        risk: capgate_core::meta::Risk::Medium,
        side_effect: capgate_core::meta::SideEffect::External,
        requested_at: now,
        expires_at: now + ttl,
        execution_id: format!("exe_{id}"),
        correlation_id: None,
        namespace: namespace.into(),
        untyped: false,
        descriptor_digest: None,
    }
}

/// Issue 55: approval records (each holds a call's whole input, at every door, /mcp
/// included) count against their namespace's storage budget together with its receipts:
/// past it a new approval is refused with nothing written, another namespace is not
/// affected, and approvals expired past the horizon are purged and leave the count.
async fn approvals_count_against_their_namespaces_budget_and_leave_it_when_purged(db: &TestDb) {
    let store = db.open().await;
    let budget = JournalBudget {
        max_rows: 3,
        max_bytes: 1 << 20,
    };
    let approvals = store.approvals().with_budget(budget);
    let journal = store.journal().with_budget(budget);
    let now = Utc::now();
    let old = now - chrono::Duration::hours(48);
    // One receipt and two approvals fill org_1's three rows.
    assert!(matches!(
        journal
            .claim(budgeted("org_1", "inv_b", json!({"i": 1})), now)
            .await
            .expect("claim"),
        ClaimOutcome::Admitted { .. }
    ));
    approvals
        .create(held(
            "apr_old",
            "org_1",
            json!({"body": "hi"}),
            old,
            chrono::Duration::minutes(5),
        ))
        .await
        .expect("within budget");
    approvals
        .create(held(
            "apr_new",
            "org_1",
            json!({"body": "hi"}),
            now,
            chrono::Duration::minutes(5),
        ))
        .await
        .expect("within budget");
    let refused = approvals
        .create(held(
            "apr_over",
            "org_1",
            json!({"body": "hi"}),
            now,
            chrono::Duration::minutes(5),
        ))
        .await;
    assert!(
        matches!(&refused, Err(ApprovalStoreError::QuotaExceeded { namespace, limit: "rows" }) if namespace == "org_1"),
        "{refused:?}"
    );
    assert!(approvals.get("apr_over").await.expect("get").is_none());
    // The receipts see the approvals too.
    let claim = journal
        .claim(budgeted("org_1", "inv_c", json!({"i": 2})), now)
        .await;
    assert!(
        matches!(claim, Err(JournalError::QuotaExceeded { .. })),
        "{claim:?}"
    );
    // Another namespace has a budget of its own.
    approvals
        .create(held(
            "apr_org2",
            "org_2",
            json!({"body": "hi"}),
            now,
            chrono::Duration::minutes(5),
        ))
        .await
        .expect("org_2 is within its budget");
    // The approval that expired before the horizon is purged and leaves the count.
    let cutoff = now - chrono::Duration::hours(24);
    assert_eq!(
        approvals.purge_expired_before(cutoff).await.expect("purge"),
        1
    );
    assert!(approvals.get("apr_old").await.expect("get").is_none());
    assert!(approvals.get("apr_new").await.expect("get").is_some());
    approvals
        .create(held(
            "apr_again",
            "org_1",
            json!({"body": "hi"}),
            now,
            chrono::Duration::minutes(5),
        ))
        .await
        .expect("room again");
    // The bytes bound.
    let bytes = store.approvals().with_budget(JournalBudget {
        max_rows: 1000,
        max_bytes: 50,
    });
    let big = bytes
        .create(held(
            "apr_big",
            "org_3",
            json!({"body": "x".repeat(100)}),
            now,
            chrono::Duration::minutes(5),
        ))
        .await;
    assert!(
        matches!(&refused, Err(ApprovalStoreError::QuotaExceeded { .. }))
            && matches!(
                &big,
                Err(ApprovalStoreError::QuotaExceeded { limit: "bytes", .. })
            ),
        "{big:?}"
    );
}

/// Issue 55: a receipt nobody reconciled within the pending horizon is settled as
/// `outcome-unknown` (reconciled), so the replay horizon purges it and it stops holding its
/// namespace's budget; a receipt pending for less is kept, and a settled one is untouched.
async fn receipts_pending_past_the_pending_horizon_are_settled_unknown_and_then_purged(
    db: &TestDb,
) {
    let j = db.open().await.journal().with_budget(JournalBudget {
        max_rows: 2,
        max_bytes: 1 << 20,
    });
    let now = Utc::now();
    let old = now - chrono::Duration::hours(30);
    for id in ["inv_old", "inv_new"] {
        let at = if id == "inv_old" { old } else { now };
        assert!(matches!(
            j.claim(budgeted("org_1", id, json!({"id": id})), at)
                .await
                .expect("claim"),
            ClaimOutcome::Admitted { .. }
        ));
    }
    // The namespace is full of pending receipts.
    assert!(matches!(
        j.claim(budgeted("org_1", "inv_more", json!({})), now).await,
        Err(JournalError::QuotaExceeded { .. })
    ));
    let abandoned = j
        .abandon_pending_before(now - chrono::Duration::hours(24), now, 100)
        .await
        .expect("abandon");
    assert_eq!(abandoned.len(), 1);
    assert_eq!(abandoned[0].record.invocation_id, "inv_old");
    assert_eq!(abandoned[0].namespace.as_deref(), Some("org_1"));
    let settled = j
        .get(&scope(), "inv_old")
        .await
        .expect("get")
        .expect("kept");
    assert_eq!(settled.state, InvocationState::Settled);
    assert!(settled.reconciled);
    assert_eq!(
        settled.outcome.expect("an outcome")["status"],
        "outcome-unknown"
    );
    let kept = j
        .get(&scope(), "inv_new")
        .await
        .expect("get")
        .expect("kept");
    assert_eq!(kept.state, InvocationState::Pending);
    // Past the replay horizon it is purged, and the namespace has room again.
    assert_eq!(
        j.purge_settled_before(now + chrono::Duration::seconds(1))
            .await
            .expect("purge"),
        1
    );
    assert!(matches!(
        j.claim(budgeted("org_1", "inv_more", json!({})), now)
            .await
            .expect("room"),
        ClaimOutcome::Admitted { .. }
    ));
}
