//! The store as the outbox of audit export (issue 39, item 3): every event of every
//! replica is read once per sink, in its chain's order, after the sink's cursor; a batch
//! not acknowledged comes again; one replica at a time holds a sink's lease. Each test runs
//! on SQLite and on Postgres.

use crate::common::{TestDb, numbered_event};
use capgate_core::audit::AuditSink;
use capgate_store::{AuditSinkOptions, ExportedEvent, SqlAuditSink, Store};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

on_both_backends!(
    every_event_of_every_replica_is_read_once_in_chain_order_after_the_cursor,
    one_replica_at_a_time_holds_a_sinks_lease,
    a_closed_sink_records_its_chains_end_before_the_store_closes,
);

fn sink(store: &Store) -> Arc<SqlAuditSink> {
    Arc::new(store.audit_sink(AuditSinkOptions::default()).expect("sink"))
}

/// Write `each` events from `callers` concurrent callers on every sink.
async fn write(sinks: &[Arc<SqlAuditSink>], callers: usize, each: usize, offset: usize) {
    let mut tasks = Vec::new();
    for (r, sink) in sinks.iter().enumerate() {
        for c in 0..callers {
            let sink = sink.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..each {
                    sink.emit(&numbered_event(offset + r * callers + c, i))
                        .await
                        .expect("emit");
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("caller");
    }
    for s in sinks {
        s.flush().await.expect("flush");
    }
}

/// Read and acknowledge everything `sink` has not, `batch` at a time.
async fn drain(store: &Store, sink: &str, batch: usize) -> Vec<ExportedEvent> {
    let outbox = store.audit_outbox(sink).expect("outbox");
    let mut all = Vec::new();
    loop {
        let next = outbox.next(batch).await.expect("next");
        if next.is_empty() {
            return all;
        }
        assert!(next.len() <= batch);
        outbox.acknowledge(&next).await.expect("ack");
        all.extend(next);
    }
}

/// Every chain's events are exactly 1..=n in order, and ids grow.
fn assert_whole_chains_in_order(events: &[ExportedEvent]) -> BTreeMap<String, i64> {
    let mut last: BTreeMap<String, i64> = BTreeMap::new();
    let mut ids = BTreeSet::new();
    for e in events {
        let chain = e.chain.clone().expect("chained");
        let seq = e.seq.expect("seq");
        let prev = last.insert(chain.clone(), seq).unwrap_or(0);
        assert_eq!(seq, prev + 1, "chain {chain}: {seq} after {prev}");
        assert!(ids.insert(e.id), "event {} read twice", e.id);
        assert!(e.hash.is_some());
        assert_eq!(e.event["capabilityId"], "orders.refund");
    }
    last
}

async fn every_event_of_every_replica_is_read_once_in_chain_order_after_the_cursor(db: &TestDb) {
    let stores = [db.open().await, db.open().await, db.open().await];
    let sinks: Vec<_> = stores.iter().map(sink).collect();
    write(&sinks, 2, 40, 0).await;
    // Read from a fourth process's view, 37 at a time (batches cut chains mid-way).
    let reader = db.open().await;
    let first = drain(&reader, "siem", 37).await;
    assert_eq!(first.len(), 3 * 2 * 40);
    let heads = assert_whole_chains_in_order(&first);
    assert_eq!(heads.len(), 3, "one chain per replica");
    assert!(heads.values().all(|&n| n == 80), "{heads:?}");

    // Caught up: nothing more. New events, including a fourth writer's: only those.
    let outbox = reader.audit_outbox("siem").expect("outbox");
    assert!(outbox.next(100).await.expect("next").is_empty());
    let late = db.open().await;
    let mut more = sinks.clone();
    more.push(sink(&late));
    write(&more, 1, 10, 100).await;
    let second = drain(&reader, "siem", 1000).await;
    assert_eq!(second.len(), 4 * 10);
    let mut all = first.clone();
    all.extend(second);
    let heads = assert_whole_chains_in_order(&all);
    assert_eq!(heads.len(), 4);
    assert_eq!(outbox.cursors().await.expect("cursors"), heads);

    // A batch not acknowledged comes again, the same events.
    let archive = reader.audit_outbox("archive").expect("outbox");
    let a = archive.next(25).await.expect("next");
    let b = archive.next(25).await.expect("next");
    assert_eq!(a, b);
    assert_eq!(a.len(), 25);
    assert_eq!(
        a.iter().map(|e| e.id).collect::<Vec<_>>(),
        all.iter().take(25).map(|e| e.id).collect::<Vec<_>>(),
        "another sink starts from the beginning, in the same order"
    );
    // Acknowledging moves only forwards: an old batch acknowledged late changes nothing.
    archive.acknowledge(&b).await.expect("ack");
    let c = archive.next(5).await.expect("next");
    archive.acknowledge(&c).await.expect("ack");
    archive.acknowledge(&a).await.expect("late ack");
    let d = archive.next(1).await.expect("next");
    assert_eq!(d[0].id, all[30].id);

    // Writers that stop record where their chains end; the export still ends there.
    drop(sinks);
    drop(more);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(drain(&reader, "siem", 100).await.is_empty());
    let backfill = reader
        .audit_log()
        .export_page(None, None, 0, 10_000)
        .await
        .expect("backfill");
    assert_eq!(
        backfill.iter().map(|e| e.id).collect::<Vec<_>>(),
        all.iter().map(|e| e.id).collect::<Vec<_>>(),
        "a backfill reads the same events in the same order"
    );
    assert!(reader.audit_outbox("no spaces").is_err());
}

async fn one_replica_at_a_time_holds_a_sinks_lease(db: &TestDb) {
    let (a, b) = (db.open().await, db.open().await);
    let (oa, ob) = (
        a.audit_outbox("siem").expect("outbox"),
        b.audit_outbox("siem").expect("outbox"),
    );
    let ttl = Duration::from_secs(30);
    assert!(oa.lease("a", ttl).await.expect("lease"));
    assert!(!ob.lease("b", ttl).await.expect("lease"), "a holds it");
    assert!(oa.lease("a", ttl).await.expect("renew"));
    // Another sink's lease is another row.
    let other = b.audit_outbox("archive").expect("outbox");
    assert!(other.lease("b", ttl).await.expect("lease"));
    oa.release("a").await.expect("release");
    assert!(ob.lease("b", ttl).await.expect("lease after release"));
    assert!(!oa.lease("a", ttl).await.expect("lease"), "b holds it now");
    // A lease that runs out is taken over.
    assert!(
        ob.lease("b", Duration::from_millis(1))
            .await
            .expect("short")
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(oa.lease("a", ttl).await.expect("take over"));
    assert!(!ob.lease("b", ttl).await.expect("lease"));
}

/// `SqlAuditSink::close` (what `serve`, `capgate test` and the operator commands call
/// before `Store::close`): what was queued is written and the chain's end is recorded while
/// the store is open, even though a clone of the sink is still alive; what comes later is
/// refused, never written into a chain that says it ended.
async fn a_closed_sink_records_its_chains_end_before_the_store_closes(db: &TestDb) {
    let store = db.open().await;
    let sink = sink(&store);
    let kept = sink.clone();
    for i in 0..3 {
        sink.emit(&numbered_event(0, i)).await.expect("emit");
    }
    let ended = "UPDATE capgate_audit_chains SET closed_seq = closed_seq \
                 WHERE closed_seq IS NOT NULL AND $1 = $1";
    assert_eq!(
        db.raw_execute(ended, "x").await,
        0,
        "no chain has ended yet"
    );
    sink.close().await;
    assert_eq!(
        db.raw_execute(ended, "x").await,
        1,
        "the chain's end is recorded"
    );
    assert!(
        kept.emit(&numbered_event(0, 9)).await.is_err(),
        "a closed writer takes nothing"
    );
    let events = store
        .audit_log()
        .query(&Default::default())
        .await
        .expect("query");
    assert_eq!(
        events.len(),
        3,
        "what was queued before the close is written"
    );
    store.close().await;
}
