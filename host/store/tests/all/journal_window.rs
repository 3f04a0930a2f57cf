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

on_both_backends!(the_operators_list_filters_by_state_namespace_capability_id_and_scope,);

/// `SqlInvocationJournal::list` (what `capgate invocations list` and `show ID` read): every
/// filter that is set holds, oldest first, at most `limit`; one id used by two callers is
/// found twice until its scope (or namespace) picks one.
async fn the_operators_list_filters_by_state_namespace_capability_id_and_scope(db: &TestDb) {
    use capgate_core::journal::InvocationState;
    use capgate_core::journal::Settlement;
    use capgate_store::InvocationFilter;
    let store = db.open().await;
    let journal = store.journal();
    let t0: DateTime<Utc> = "2026-12-01T00:00:00Z".parse().expect("a time");
    let mut tokens = Vec::new();
    for (i, (scope, ns, id, capability)) in [
        ("scope_a", "org_1", "call_1", "orders.refund"),
        ("scope_b", "org_2", "call_1", "orders.refund"),
        ("scope_a", "org_1", "call_2", "customers.search"),
        ("scope_c", "org_1", "call_3", "orders.refund"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut req = ClaimRequest::new(scope, id, capability, json!({"i": i})).expect("a claim");
        req.namespace = Some(ns.into());
        let ClaimOutcome::Admitted { claim_token, .. } = journal
            .claim(req, t0 + TimeDelta::seconds(i as i64))
            .await
            .expect("claim")
        else {
            panic!("{id} not admitted");
        };
        tokens.push((scope, id, claim_token));
    }
    // call_2 settles; the others stay pending.
    let (scope, id, token) = &tokens[2];
    journal
        .settle(
            scope,
            id,
            token,
            Settlement::final_outcome(json!({"status": "completed", "invocationId": id})),
            t0 + TimeDelta::seconds(10),
        )
        .await
        .expect("settle");

    let ids = |rows: Vec<capgate_store::RecordedInvocation>| -> Vec<String> {
        rows.into_iter()
            .map(|r| {
                format!(
                    "{}/{}",
                    r.namespace.unwrap_or_default(),
                    r.record.invocation_id
                )
            })
            .collect()
    };
    let list = |f: InvocationFilter| {
        let journal = journal.clone();
        async move {
            journal
                .list(&InvocationFilter { limit: 100, ..f })
                .await
                .expect("list")
        }
    };
    assert_eq!(
        ids(list(InvocationFilter::default()).await),
        [
            "org_1/call_1",
            "org_2/call_1",
            "org_1/call_2",
            "org_1/call_3"
        ]
    );
    let pending = InvocationFilter {
        state: Some(InvocationState::Pending),
        ..InvocationFilter::default()
    };
    assert_eq!(
        ids(list(pending.clone()).await),
        ["org_1/call_1", "org_2/call_1", "org_1/call_3"]
    );
    let settled = list(InvocationFilter {
        state: Some(InvocationState::Settled),
        ..InvocationFilter::default()
    })
    .await;
    assert_eq!(settled.len(), 1);
    assert_eq!(
        settled[0]
            .record
            .outcome
            .as_ref()
            .map(|o| o["status"].clone()),
        Some(json!("completed"))
    );
    assert_eq!(
        ids(list(InvocationFilter {
            namespace: Some("org_1".into()),
            capability: Some("orders.refund".into()),
            ..pending.clone()
        })
        .await),
        ["org_1/call_1", "org_1/call_3"]
    );
    let by_id = InvocationFilter {
        invocation_id: Some("call_1".into()),
        ..InvocationFilter::default()
    };
    assert_eq!(
        ids(list(by_id.clone()).await).len(),
        2,
        "one id, two callers"
    );
    assert_eq!(
        ids(list(InvocationFilter {
            scope: Some("scope_b".into()),
            ..by_id.clone()
        })
        .await),
        ["org_2/call_1"]
    );
    assert!(
        list(InvocationFilter {
            invocation_id: Some("call_nope".into()),
            ..InvocationFilter::default()
        })
        .await
        .is_empty()
    );
    let first = journal
        .list(&InvocationFilter {
            limit: 1,
            ..pending
        })
        .await
        .expect("list");
    assert_eq!(ids(first), ["org_1/call_1"]);
    store.close().await;
}
