//! `SqlInvocationJournal::recorded` (what `capgate replay` reads): the records created in
//! a window, inputs and namespaces included, oldest first, each exactly once however the
//! pages fall (records created at the same instant are ordered by scope and id, so a page
//! boundary between them loses and repeats nothing). On SQLite and Postgres.

use crate::common::TestDb;
use capgate_core::journal::{ClaimOutcome, ClaimRequest, InvocationJournal};
use capgate_store::RecordedPage;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;

on_both_backends!(every_record_of_a_window_is_read_once_in_order_across_pages,);

async fn every_record_of_a_window_is_read_once_in_order_across_pages(db: &TestDb) {
    let store = db.open().await;
    let journal = store.journal();
    let t0: DateTime<Utc> = "2026-12-01T00:00:00Z".parse().expect("a time");
    // Three instants; five records share the middle one, across two scopes.
    let at = |s: i64| t0 + TimeDelta::seconds(s);
    let records: Vec<(&str, &str, i64)> = vec![
        ("scope_b", "before", -10),
        ("scope_a", "first", 0),
        ("scope_b", "tie_3", 5),
        ("scope_a", "tie_2", 5),
        ("scope_a", "tie_1", 5),
        ("scope_b", "tie_4", 5),
        ("scope_c", "tie_5", 5),
        ("scope_a", "last", 9),
        ("scope_a", "at_until", 10),
    ];
    for (scope, id, s) in &records {
        let mut req =
            ClaimRequest::new(*scope, *id, "orders.refund", json!({"amount": s, "id": id}))
                .expect("a claim");
        req.namespace = Some(format!("ns_{scope}"));
        let outcome = journal.claim(req, at(*s)).await.expect("claim");
        assert!(matches!(outcome, ClaimOutcome::Admitted { .. }), "{id}");
    }
    let expected = ["first", "tie_1", "tie_2", "tie_3", "tie_4", "tie_5", "last"];

    for limit in [1, 2, 3, 100] {
        let mut page = RecordedPage {
            since: at(0),
            after: None,
            until: at(10),
            limit,
        };
        let mut read = Vec::new();
        loop {
            let rows = journal.recorded(&page).await.expect("a page");
            assert!(rows.len() <= limit as usize);
            let Some(last) = rows.last() else { break };
            page = page.next_after(&last.record);
            for r in rows {
                let scope = r.record.scope.clone();
                assert_eq!(r.namespace, Some(format!("ns_{scope}")));
                assert_eq!(r.record.input["id"], r.record.invocation_id.as_str());
                read.push(r.record.invocation_id);
            }
        }
        assert_eq!(read, expected, "pages of {limit}");
    }
}
