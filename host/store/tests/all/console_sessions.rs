//! The approval console's session rows (`ConsoleSessionRows`), on SQLite and Postgres: a
//! principal keeps its newest sessions (the oldest evicted), others are untouched, expired
//! rows read as missing and are purged, a deleted row is gone, oversized fields are
//! refused before anything is written, and sessions count against their namespace's
//! storage budget with its receipts.

use crate::common::TestDb;

use capgate_store::{ConsoleSessionRow, MAX_SESSION_FIELD_BYTES, SessionRowError};
use chrono::{DateTime, Duration, Utc};

on_both_backends!(a_principal_keeps_its_newest_sessions_and_expired_ones_are_gone);
on_both_backends!(console_sessions_count_against_their_namespaces_budget);

fn row(id: &str, principal: &str, created: DateTime<Utc>, ttl: Duration) -> ConsoleSessionRow {
    ConsoleSessionRow {
        id_sha256: id.into(),
        principal: principal.into(),
        credential: r#"{"kind":"apiKey","sha256":"00"}"#.into(),
        namespace: String::new(),
        created_at: created,
        expires_at: created + ttl,
    }
}

async fn a_principal_keeps_its_newest_sessions_and_expired_ones_are_gone(db: &TestDb) {
    let store = db.open().await;
    let rows = store.console_sessions();
    let t0 = DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default();
    let hour = Duration::hours(1);
    let other = row("other", "b", t0, hour);
    rows.insert(&other, 2, t0).await.expect("insert");
    for (i, id) in ["s1", "s2", "s3", "s4"].iter().enumerate() {
        let at = t0 + Duration::seconds(i64::try_from(i).unwrap_or(0) + 1);
        rows.insert(&row(id, "a", at, hour), 2, at)
            .await
            .expect("insert");
    }
    let now = t0 + Duration::seconds(10);
    assert_eq!(rows.count_for("a", now).await.expect("count"), 2);
    for (id, live) in [("s1", false), ("s2", false), ("s3", true), ("s4", true)] {
        assert_eq!(
            rows.get(id, now).await.expect("get").is_some(),
            live,
            "{id}"
        );
    }
    assert_eq!(
        rows.get("other", now).await.expect("get"),
        Some(other.clone()),
        "another principal's session is untouched and reads back as written"
    );
    // Expired: missing on read, and purged by the next sign-in.
    let later = t0 + Duration::hours(2);
    assert!(rows.get("s4", later).await.expect("get").is_none());
    rows.insert(&row("s5", "c", later, hour), 2, later)
        .await
        .expect("insert");
    assert_eq!(rows.count_for("a", t0).await.expect("count"), 0, "purged");
    rows.delete("s5").await.expect("delete");
    assert!(rows.get("s5", later).await.expect("get").is_none());
    let huge = row(&"x".repeat(MAX_SESSION_FIELD_BYTES + 1), "a", later, hour);
    assert!(matches!(
        rows.insert(&huge, 2, later).await,
        Err(SessionRowError::Malformed(_))
    ));
}

on_both_backends!(mcp_sessions_read_back_as_written_keep_their_first_opener_and_are_purged);

/// MCP session rows (`McpSessionRows`): a row reads back as written, a second write of the
/// same id keeps the first (its opener stays), a deleted row is gone, rows stored before
/// the purge horizon go and later ones stay, oversized fields are refused.
async fn mcp_sessions_read_back_as_written_keep_their_first_opener_and_are_purged(db: &TestDb) {
    use capgate_store::McpSessionRow;
    let store = db.open().await;
    let rows = store.mcp_sessions();
    let t0 = DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default();
    let row = |id: &str, principal: &str, at| McpSessionRow {
        id_sha256: id.into(),
        principal_sha256: principal.into(),
        state: r#"{"initialize_params":{"protocolVersion":"2025-06-18"}}"#.into(),
        created_at: at,
    };
    let first = row("m1", "alice", t0);
    rows.insert(&first).await.expect("insert");
    rows.insert(&row("m1", "mallory", t0 + Duration::seconds(1)))
        .await
        .expect("a second write is not an error");
    assert_eq!(rows.get("m1").await.expect("get"), Some(first));
    assert_eq!(rows.get("m0").await.expect("get"), None);
    rows.insert(&row("m2", "bob", t0 + Duration::hours(2)))
        .await
        .expect("insert");
    assert_eq!(
        rows.purge_before(t0 + Duration::hours(1))
            .await
            .expect("purge"),
        1
    );
    assert_eq!(rows.get("m1").await.expect("get"), None, "purged");
    assert!(rows.get("m2").await.expect("get").is_some(), "kept");
    rows.delete("m2").await.expect("delete");
    assert_eq!(rows.get("m2").await.expect("get"), None, "deleted");
    let huge = McpSessionRow {
        state: "x".repeat(MAX_SESSION_FIELD_BYTES + 1),
        ..row("m3", "alice", t0)
    };
    assert!(matches!(
        rows.insert(&huge).await,
        Err(SessionRowError::Malformed(_))
    ));
    assert_eq!(rows.get("m3").await.expect("get"), None);
}

/// A session of `principal` in `namespace`, opened now for an hour.
fn in_namespace(id: &str, principal: &str, namespace: &str) -> ConsoleSessionRow {
    ConsoleSessionRow {
        namespace: namespace.into(),
        ..row(id, principal, Utc::now(), Duration::hours(1))
    }
}

async fn console_sessions_count_against_their_namespaces_budget(db: &TestDb) {
    // Issue 55: each sign-in stores a row, so a key that signs in without end grew the
    // database without end. Sessions now count against their namespace's budget, with its
    // receipts and approvals.
    use capgate_core::journal::{
        ClaimOutcome, ClaimRequest, InvocationJournal, JournalBudget, JournalError,
    };
    let store = db.open().await;
    let budget = JournalBudget {
        max_rows: 3,
        max_bytes: 1 << 20,
    };
    let rows = store.console_sessions().with_budget(budget);
    let journal = store.journal().with_budget(budget);
    let now = Utc::now();
    // A receipt and two sessions fill org_2's three rows.
    let claim = |id: &str| {
        ClaimRequest::new(
            "scope_org_2",
            id,
            "orders.refund",
            serde_json::json!({"amount": 5}),
        )
        .and_then(|c| c.namespace("org_2"))
        .expect("valid claim")
    };
    assert!(matches!(
        journal.claim(claim("inv_1"), now).await.expect("claim"),
        ClaimOutcome::Admitted { .. }
    ));
    for (id, who) in [("s1", "priya"), ("s2", "omar")] {
        rows.insert(&in_namespace(id, who, "org_2"), 10, now)
            .await
            .expect("within budget");
    }
    let refused = rows
        .insert(&in_namespace("s3", "eve", "org_2"), 10, now)
        .await;
    assert!(
        matches!(&refused, Err(SessionRowError::QuotaExceeded { namespace, limit: "rows" }) if namespace == "org_2"),
        "{refused:?}"
    );
    assert!(
        rows.get("s3", now).await.expect("get").is_none(),
        "nothing stored"
    );
    assert!(
        rows.get("s1", now).await.expect("get").is_some(),
        "nobody signed out"
    );
    // The receipts see the sessions too.
    let over = journal.claim(claim("inv_2"), now).await;
    assert!(
        matches!(over, Err(JournalError::QuotaExceeded { .. })),
        "{over:?}"
    );
    // Another namespace, and a session of none (an embedder's), are not held back.
    rows.insert(&in_namespace("o1", "dana", "org_1"), 10, now)
        .await
        .expect("org_1 has a budget of its own");
    rows.insert(&in_namespace("n1", "ops", ""), 10, now)
        .await
        .expect("no namespace, no budget");
    // A signed-out session leaves the count.
    rows.delete("s2").await.expect("delete");
    rows.insert(&in_namespace("s3", "eve", "org_2"), 10, now)
        .await
        .expect("room again");
    // Bytes: a credential larger than the namespace's whole byte budget.
    let small = store.console_sessions().with_budget(JournalBudget {
        max_rows: 100,
        max_bytes: 64,
    });
    let mut big = in_namespace("b1", "zoe", "org_3");
    big.credential = format!(r#"{{"kind":"apiKey","sha256":"{}"}}"#, "0".repeat(64));
    let refused = small.insert(&big, 10, now).await;
    assert!(
        matches!(
            &refused,
            Err(SessionRowError::QuotaExceeded { limit: "bytes", .. })
        ),
        "{refused:?}"
    );
}
