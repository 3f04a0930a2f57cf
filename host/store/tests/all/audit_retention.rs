//! Retention (issue 39, item 4): a purge deletes what is older than the cutoff, only up to
//! a signed checkpoint and never past an export sink's cursor, and `audit verify` still
//! finds the trail intact; a head deleted without a signed purge record, or with a forged
//! one, is still named. Each test runs on SQLite and on Postgres.

use crate::common::{TestDb, numbered_event};
use capgate_core::audit::AuditSink;
use capgate_store::{
    AuditSinkOptions, CheckpointSigner, PurgeOptions, PurgeReport, Store, Tamper, VerifyOptions,
    VerifyReport,
};
use ed25519_dalek::SigningKey;
use std::time::Duration;

on_both_backends!(
    a_purge_up_to_a_checkpoint_keeps_the_trail_verifiable_and_an_unsigned_one_does_not,
);

fn signer() -> CheckpointSigner {
    CheckpointSigner::new(SigningKey::from_bytes(&[9u8; 32]), 10)
}

async fn verify(store: &Store) -> VerifyReport {
    store
        .audit_log()
        .verify(&VerifyOptions {
            keys: vec![signer().verifying_key()],
            ..VerifyOptions::default()
        })
        .await
        .expect("verify runs")
}

async fn a_purge_up_to_a_checkpoint_keeps_the_trail_verifiable_and_an_unsigned_one_does_not(
    db: &TestDb,
) {
    let store = db.open().await;
    let sink = store
        .audit_sink(AuditSinkOptions {
            checkpoints: Some(signer()),
            ..AuditSinkOptions::default()
        })
        .expect("sink");
    // Every flush signs a checkpoint: at seq 10 and 20 before the cutoff, 30 and 35 after.
    let write = async |from: usize, to: usize| {
        for i in from..to {
            sink.emit(&numbered_event(1, i)).await.expect("emit");
        }
        sink.flush().await.expect("flush");
    };
    write(0, 10).await;
    write(10, 20).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cutoff = chrono::Utc::now();
    tokio::time::sleep(Duration::from_millis(50)).await;
    write(20, 30).await;
    write(30, 35).await;
    let chain = verify(&store).await.chains[0].chain.clone();
    // The checkpoints as an export sink kept them before any purge.
    let copy = store
        .audit_outbox("archive")
        .expect("outbox")
        .next_checkpoints(100)
        .await
        .expect("checkpoints");

    // An export sink that acknowledged the first 12 events holds the purge at the
    // checkpoint of seq 10.
    let outbox = store.audit_outbox("siem").expect("outbox");
    let first = outbox.next(12).await.expect("next");
    outbox.acknowledge(&first).await.expect("ack");
    let log = store.audit_log();
    let purge = |keep_for: Vec<String>| PurgeOptions {
        before: cutoff,
        signer: signer(),
        keep_for,
    };
    let held = log.purge(&purge(vec!["siem".into()])).await.expect("purge");
    assert_eq!(
        held,
        PurgeReport {
            chains: 1,
            events: 10,
            unchained: 0
        }
    );
    let report = verify(&store).await;
    assert!(report.is_intact(), "{report:#?}");
    assert_eq!(report.chains[0].purged_through, 10);

    // Without the sink: up to the last checkpoint signed before the cutoff (seq 20).
    let more = log.purge(&purge(Vec::new())).await.expect("purge");
    assert_eq!(more.events, 10, "{more:?}");
    let again = log.purge(&purge(Vec::new())).await.expect("purge");
    assert_eq!(
        again,
        PurgeReport::default(),
        "nothing more before the cutoff"
    );
    let report = verify(&store).await;
    assert!(report.is_intact(), "{report:#?}");
    let c = &report.chains[0];
    assert_eq!(
        (c.purged_through, c.events, c.last_seq),
        (20, 15, 35),
        "{c:?}"
    );
    // The copy taken before the purges still agrees: retention removed what it vouched
    // for on purpose, and signed that it did.
    let checked = store
        .audit_log()
        .verify(&VerifyOptions {
            keys: vec![signer().verifying_key()],
            copy: copy.clone(),
            ..VerifyOptions::default()
        })
        .await
        .expect("verify runs");
    assert!(checked.is_intact(), "{checked:#?}");
    assert_eq!(
        checked.copy_checkpoints, 5,
        "start, 10, 20, 30, 35: {copy:#?}"
    );
    // The export reads on after what was purged.
    let rest = outbox.next(100).await.expect("next");
    assert_eq!(rest.first().and_then(|e| e.seq), Some(21));

    // Deleting the next events by hand is still a deletion.
    db.raw_execute(
        "DELETE FROM capgate_audit_events WHERE chain = $1 AND seq <= 23",
        &chain,
    )
    .await;
    let report = verify(&store).await;
    assert_eq!(report.findings.len(), 1, "{report:#?}");
    assert_eq!(report.findings[0].kind, Tamper::Deleted);
    assert_eq!(report.findings[0].seq, Some(24));
    assert!(
        report.findings[0]
            .detail
            .contains("events 21..=23 are missing"),
        "{report:#?}"
    );

    // A purge record not signed with the key is refused, whatever it claims.
    db.raw_execute(
        "UPDATE capgate_audit_purges SET seq = 23 WHERE chain = $1",
        &chain,
    )
    .await;
    let report = verify(&store).await;
    assert_eq!(
        report.findings[0].kind,
        Tamper::BadCheckpoint,
        "{report:#?}"
    );
    assert!(
        report.findings[0].detail.starts_with("purge record "),
        "{report:#?}"
    );
}
