//! MCP task rows (`McpTaskRows`, migration 0014), on SQLite and Postgres: a task reads back
//! only for the principal that created it, leaves `working` once (one claim, one end, a
//! cancel that loses to an end and an end that loses to a cancel), a principal holds a
//! bounded number of working tasks, tasks count against their namespace's storage budget
//! (the outcome's bytes too) and leave it when purged.

use crate::common::TestDb;

use capgate_core::journal::JournalBudget;
use capgate_store::{MAX_TASK_FIELD_BYTES, McpTaskRow, McpTaskRowError};
use chrono::{Duration, Utc};

on_both_backends!(a_task_is_its_principals_and_ends_once);
on_both_backends!(a_principal_holds_a_bounded_number_of_working_tasks);
on_both_backends!(tasks_count_against_their_namespaces_budget_and_leave_it_when_purged);

fn task(id: &str, principal: &str, namespace: &str) -> McpTaskRow {
    let now = Utc::now();
    McpTaskRow {
        id: id.into(),
        principal_sha256: principal.into(),
        namespace: namespace.into(),
        approval_id: Some(format!("apr_{id}")),
        capability_id: "orders.refund".into(),
        status: "working".into(),
        status_message: "Awaiting approval.".into(),
        outcome: None,
        input_answered: false,
        claim: None,
        run_deadline: None,
        created_at: now,
        updated_at: now,
        purge_after: now + Duration::hours(1),
    }
}

async fn a_task_is_its_principals_and_ends_once(db: &TestDb) {
    let store = db.open().await;
    let rows = store.mcp_tasks();
    let now = Utc::now();
    rows.insert(&task("t1", "dana", "org_1"), 10)
        .await
        .expect("insert");
    let read = rows.get("t1", "dana").await.expect("get").expect("hers");
    assert_eq!(read.status, "working");
    assert_eq!(read.approval_id.as_deref(), Some("apr_t1"));
    assert!(
        rows.get("t1", "eve").await.expect("get").is_none(),
        "another principal reads it as unknown"
    );
    assert!(
        rows.cancel("t1", "eve", "no", now)
            .await
            .expect("cancel")
            .is_none()
    );
    assert!(!rows.answer_input("t1", "eve", now).await.expect("answer"));
    assert!(rows.answer_input("t1", "dana", now).await.expect("answer"));
    // One claim wins.
    assert!(rows.claim("t1", "run-a", now, now).await.expect("claim"));
    assert!(!rows.claim("t1", "run-b", now, now).await.expect("claim"));
    // Only the claim's holder reports on it and ends it, once.
    assert!(
        !rows
            .report("t1", "run-b", "half", now)
            .await
            .expect("report")
    );
    assert!(
        rows.report("t1", "run-a", "half", now)
            .await
            .expect("report")
    );
    assert_eq!(
        rows.get("t1", "dana")
            .await
            .expect("get")
            .map(|t| t.status_message),
        Some("half".into())
    );
    assert!(
        !rows
            .finish("t1", "completed", "done", "{}", Some("run-b"), now)
            .await
            .expect("finish")
    );
    assert!(
        rows.finish(
            "t1",
            "completed",
            "done",
            r#"{"isError":false}"#,
            Some("run-a"),
            now
        )
        .await
        .expect("finish")
    );
    assert!(
        !rows
            .finish("t1", "failed", "again", "{}", Some("run-a"), now)
            .await
            .expect("finish")
    );
    assert!(
        rows.cancel("t1", "dana", "late", now)
            .await
            .expect("cancel")
            .is_none()
    );
    let ended = rows.get("t1", "dana").await.expect("get").expect("hers");
    assert_eq!(
        (
            ended.status.as_str(),
            ended.outcome.as_deref(),
            ended.input_answered
        ),
        ("completed", Some(r#"{"isError":false}"#), true)
    );
    // A cancel first: the run's end is discarded.
    rows.insert(&task("t2", "dana", "org_1"), 10)
        .await
        .expect("insert");
    assert!(rows.claim("t2", "run-c", now, now).await.expect("claim"));
    let cancelled = rows
        .cancel("t2", "dana", "stop", now)
        .await
        .expect("cancel");
    assert_eq!(cancelled.map(|t| t.status), Some("cancelled".into()));
    assert!(
        !rows
            .finish("t2", "completed", "done", "{}", Some("run-c"), now)
            .await
            .expect("finish")
    );
    assert_eq!(
        rows.get("t2", "dana").await.expect("get").map(|t| t.status),
        Some("cancelled".into())
    );
    // An oversized field is refused before anything is written.
    let huge = "x".repeat(MAX_TASK_FIELD_BYTES + 1);
    let refused = rows.finish("t2", "failed", "m", &huge, None, now).await;
    assert!(
        matches!(refused, Err(McpTaskRowError::Malformed(_))),
        "{refused:?}"
    );
}

async fn a_principal_holds_a_bounded_number_of_working_tasks(db: &TestDb) {
    let store = db.open().await;
    let rows = store.mcp_tasks();
    let now = Utc::now();
    for id in ["a", "b"] {
        rows.insert(&task(id, "dana", "org_1"), 2)
            .await
            .expect("within");
    }
    let third = rows.insert(&task("c", "dana", "org_1"), 2).await;
    assert!(
        matches!(third, Err(McpTaskRowError::TooMany { limit: 2 })),
        "{third:?}"
    );
    assert!(
        rows.get("c", "dana").await.expect("get").is_none(),
        "nothing stored"
    );
    // Another principal is not held back, and an ended task frees a place.
    rows.insert(&task("d", "omar", "org_1"), 2)
        .await
        .expect("omar's own");
    rows.finish("a", "failed", "m", "{}", None, now)
        .await
        .expect("finish");
    rows.insert(&task("c", "dana", "org_1"), 2)
        .await
        .expect("a place freed");
    assert_eq!(rows.working("dana").await.expect("count"), 2);
}

async fn tasks_count_against_their_namespaces_budget_and_leave_it_when_purged(db: &TestDb) {
    let store = db.open().await;
    let budget = JournalBudget {
        max_rows: 3,
        max_bytes: 4096,
    };
    let rows = store.mcp_tasks().with_budget(budget);
    let now = Utc::now();
    rows.insert(&task("a", "dana", "org_2"), 10)
        .await
        .expect("within");
    rows.insert(&task("b", "omar", "org_2"), 10)
        .await
        .expect("within");
    // An outcome's bytes count: a large result leaves no room for another task.
    rows.finish("a", "completed", "done", &"y".repeat(4045), None, now)
        .await
        .expect("finish");
    let over = rows.insert(&task("c", "priya", "org_2"), 10).await;
    assert!(
        matches!(&over, Err(McpTaskRowError::QuotaExceeded { namespace, limit: "bytes" }) if namespace == "org_2"),
        "{over:?}"
    );
    assert!(
        rows.get("c", "priya").await.expect("get").is_none(),
        "nothing stored"
    );
    // The namespace's console sessions see the tasks too.
    let session = capgate_store::ConsoleSessionRow {
        id_sha256: "s1".into(),
        principal: "priya".into(),
        credential: "{}".into(),
        namespace: "org_2".into(),
        created_at: now,
        expires_at: now + Duration::hours(1),
    };
    let refused = store
        .console_sessions()
        .with_budget(budget)
        .insert(&session, 5, now)
        .await;
    assert!(refused.is_err(), "{refused:?}");
    // Purged past their horizon: the namespace has room again, up to its rows.
    let purged = rows.purge(now + Duration::hours(2)).await.expect("purge");
    assert_eq!(purged, 2);
    for id in ["c", "d", "e"] {
        rows.insert(&task(id, "priya", "org_2"), 10)
            .await
            .expect("room again after the purge");
    }
    let full = rows.insert(&task("f", "priya", "org_2"), 10).await;
    assert!(
        matches!(
            &full,
            Err(McpTaskRowError::QuotaExceeded { limit: "rows", .. })
        ),
        "{full:?}"
    );
    // Another namespace is not held back.
    rows.insert(&task("g", "dana", "org_1"), 10)
        .await
        .expect("org_1's own budget");
    let counts = rows.count_by_status().await.expect("count");
    assert_eq!(counts, [("working".to_owned(), 4)]);
}
