//! The audit trail's hash chains and signed checkpoints (issue 39, item 1): a trail written
//! by concurrent callers on three replicas verifies, and each kind of tampering is named
//! with the event it touched. Each test runs on SQLite and on Postgres.

use crate::common::{Kind, TestDb, numbered_event};
use capgate_core::audit::AuditSink;
use capgate_store::{
    AuditSinkOptions, CheckpointSigner, SqlAuditSink, Store, Tamper, VerifyOptions, VerifyReport,
};
use ed25519_dalek::SigningKey;

on_both_backends!(
    a_trail_written_by_concurrent_callers_on_three_replicas_verifies,
    verify_names_an_edited_deleted_inserted_and_reordered_event_and_a_truncated_tail,
);

fn signer(every: u64) -> CheckpointSigner {
    CheckpointSigner::new(SigningKey::from_bytes(&[7u8; 32]), every)
}

fn sink(store: &Store, every: u64) -> SqlAuditSink {
    store
        .audit_sink(AuditSinkOptions {
            checkpoints: Some(signer(every)),
            ..AuditSinkOptions::default()
        })
        .expect("sink")
}

async fn verify(store: &Store) -> VerifyReport {
    store
        .audit_log()
        .verify(&VerifyOptions {
            keys: vec![signer(1).verifying_key()],
            ..VerifyOptions::default()
        })
        .await
        .expect("verify runs")
}

async fn a_trail_written_by_concurrent_callers_on_three_replicas_verifies(db: &TestDb) {
    const CALLERS: usize = 4;
    const EACH: usize = 50;
    let mut replicas = Vec::new();
    for _ in 0..3 {
        let store = db.open().await;
        let sink = std::sync::Arc::new(sink(&store, 40));
        replicas.push((store, sink));
    }
    let mut tasks = Vec::new();
    for (r, (_, sink)) in replicas.iter().enumerate() {
        for c in 0..CALLERS {
            let sink = sink.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..EACH {
                    sink.emit(&numbered_event(r * CALLERS + c, i))
                        .await
                        .expect("emit");
                }
            }));
        }
    }
    for t in tasks {
        t.await.expect("caller");
    }
    for (_, sink) in &replicas {
        sink.flush().await.expect("flush");
    }
    let report = verify(&replicas[0].0).await;
    assert!(report.is_intact(), "{report:#?}");
    assert!(report.signatures_checked);
    assert_eq!(report.chains.len(), 3, "one chain per replica: {report:#?}");
    let events: u64 = report.chains.iter().map(|c| c.events).sum();
    assert_eq!(events, (3 * CALLERS * EACH) as u64);
    for chain in &report.chains {
        assert_eq!(chain.last_seq as u64, chain.events, "{chain:?}");
        assert!(
            chain.checkpoints >= 2,
            "every 40 events and at the flush: {chain:?}"
        );
    }

    // A checkpoint signed by another key does not verify.
    let other = SigningKey::from_bytes(&[9u8; 32]).verifying_key();
    let foreign = replicas[0]
        .0
        .audit_log()
        .verify(&VerifyOptions {
            keys: vec![other],
            ..VerifyOptions::default()
        })
        .await
        .expect("verify runs");
    assert_eq!(foreign.findings.len(), 3, "{foreign:#?}");
    assert!(
        foreign
            .findings
            .iter()
            .all(|f| f.kind == Tamper::BadCheckpoint)
    );
}

/// Tamper statements, one per backend (SQLite keeps times as integer microseconds).
async fn tamper(db: &TestDb, chain: &str, sqlite: &'static str, postgres: &'static str) {
    let sql = match db.kind {
        Kind::Sqlite => sqlite,
        Kind::Postgres => postgres,
    };
    db.raw_execute(sql, chain).await;
}

async fn verify_names_an_edited_deleted_inserted_and_reordered_event_and_a_truncated_tail(
    db: &TestDb,
) {
    let store = db.open().await;
    // Five writers, five chains of 30 events; one kind of tampering per chain.
    for w in 0..5 {
        let sink = sink(&store, 10);
        for i in 0..30 {
            sink.emit(&numbered_event(w, i)).await.expect("emit");
        }
        sink.flush().await.expect("flush");
    }
    let clean = verify(&store).await;
    assert!(clean.is_intact(), "{clean:#?}");
    let chains: Vec<String> = clean.chains.iter().map(|c| c.chain.clone()).collect();
    assert_eq!(chains.len(), 5);
    let id_of = |report: &VerifyReport, chain: &str| {
        report
            .findings
            .iter()
            .find(|f| f.chain.as_deref() == Some(chain))
            .cloned()
    };

    // Edited: the data of seq 7 changed.
    tamper(
        db,
        &chains[0],
        "UPDATE capgate_audit_events SET data = '{\"attempt\":2}' WHERE chain = $1 AND seq = 7",
        "UPDATE capgate_audit_events SET data = '{\"attempt\":2}'::jsonb WHERE chain = $1 AND seq = 7",
    )
    .await;
    // Deleted: seq 12 gone.
    tamper(
        db,
        &chains[1],
        "DELETE FROM capgate_audit_events WHERE chain = $1 AND seq = 12",
        "DELETE FROM capgate_audit_events WHERE chain = $1 AND seq = 12",
    )
    .await;
    // Reordered: seq 20 and 21 swapped.
    for (sqlite, postgres) in [
        (
            "UPDATE capgate_audit_events SET seq = -1 WHERE chain = $1 AND seq = 20",
            "UPDATE capgate_audit_events SET seq = -1 WHERE chain = $1 AND seq = 20",
        ),
        (
            "UPDATE capgate_audit_events SET seq = 20 WHERE chain = $1 AND seq = 21",
            "UPDATE capgate_audit_events SET seq = 20 WHERE chain = $1 AND seq = 21",
        ),
        (
            "UPDATE capgate_audit_events SET seq = 21 WHERE chain = $1 AND seq = -1",
            "UPDATE capgate_audit_events SET seq = 21 WHERE chain = $1 AND seq = -1",
        ),
    ] {
        tamper(db, &chains[2], sqlite, postgres).await;
    }
    // Truncated: the last five events (past the checkpoint at seq 30) deleted.
    tamper(
        db,
        &chains[3],
        "DELETE FROM capgate_audit_events WHERE chain = $1 AND seq > 25",
        "DELETE FROM capgate_audit_events WHERE chain = $1 AND seq > 25",
    )
    .await;
    // Inserted: an event that belongs to no chain, stored after chained ones.
    tamper(
        db,
        "mallory",
        "INSERT INTO capgate_audit_events (type, at, surface, actor_id, actor_kind, data) \
         VALUES ('capability.requested', 0, 'aiSdk', $1, 'user', '{}')",
        "INSERT INTO capgate_audit_events (type, at, surface, actor_id, actor_kind, data) \
         VALUES ('capability.requested', now(), 'aiSdk', $1, 'user', '{}'::jsonb)",
    )
    .await;

    let report = verify(&store).await;
    let edited = id_of(&report, &chains[0]).expect("edit found");
    assert_eq!(
        (edited.kind, edited.seq),
        (Tamper::Edited, Some(7)),
        "{edited:?}"
    );
    assert!(edited.event_id.is_some());
    let deleted = id_of(&report, &chains[1]).expect("deletion found");
    assert_eq!(
        (deleted.kind, deleted.seq),
        (Tamper::Deleted, Some(13)),
        "{deleted:?}"
    );
    assert!(deleted.detail.contains("12..=12"), "{deleted:?}");
    let reordered = id_of(&report, &chains[2]).expect("reorder found");
    assert_eq!(
        (reordered.kind, reordered.seq),
        (Tamper::Reordered, Some(20)),
        "{reordered:?}"
    );
    let truncated = id_of(&report, &chains[3]).expect("truncation found");
    assert_eq!(
        (truncated.kind, truncated.seq),
        (Tamper::Truncated, Some(26)),
        "{truncated:?}"
    );
    assert!(
        id_of(&report, &chains[4]).is_none(),
        "the untouched chain: {report:#?}"
    );
    let inserted = report
        .findings
        .iter()
        .find(|f| f.chain.is_none())
        .expect("insertion found");
    assert_eq!(inserted.kind, Tamper::Inserted);
    assert!(inserted.event_id.is_some());
    assert_eq!(report.findings.len(), 5, "{report:#?}");

    // Without a key the signatures are not checked, but the chains still are.
    let unsigned = store
        .audit_log()
        .verify(&VerifyOptions::default())
        .await
        .expect("verify runs");
    assert!(!unsigned.signatures_checked);
    assert_eq!(unsigned.findings, report.findings);
}
