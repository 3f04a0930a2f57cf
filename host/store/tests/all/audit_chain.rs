//! The audit trail's hash chains and signed checkpoints (issue 39, item 1; issue 55, item
//! 1): a trail written by concurrent callers on three replicas verifies, and each kind of
//! tampering is named with the event it touched. Seen from an attacker who can write the
//! database but does not hold the signing key: a forged chain, a rewritten approval with
//! the later hashes recomputed, an appended or truncated tail, a deleted checkpoint and a
//! chain-less row with id 0 are each named with the chain; what the store alone cannot
//! show (a chain truncated back to a checkpoint together with the later ones, a whole chain
//! deleted) the exported copy of the checkpoints shows; a writer restarted cleanly or idle
//! leaves every chain ending on a checkpoint. Each test runs on SQLite and on Postgres.

use crate::common::{Kind, TestDb, numbered_event};
use capgate_core::audit::AuditSink;
use capgate_store::{
    AuditSinkOptions, CheckpointSigner, ExportedCheckpoint, Finding, SqlAuditSink, Store, Tamper,
    VerifyOptions, VerifyReport,
};
use chrono::{DateTime, SecondsFormat, Utc};
use ed25519_dalek::SigningKey;
use serde_json::{Value, json};
use sqlx::{Connection, Row};
use std::time::Duration;

on_both_backends!(
    a_trail_written_by_concurrent_callers_on_three_replicas_verifies,
    verify_names_an_edited_deleted_inserted_and_reordered_event_and_a_truncated_tail,
    a_database_writer_without_the_key_cannot_forge_rewrite_truncate_or_insert,
    the_exported_checkpoint_copy_catches_what_the_store_alone_cannot,
    restarted_and_idle_writers_leave_every_chain_ending_on_a_checkpoint,
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

/// `verify` with the key and `copy` as the exported checkpoints.
async fn verify_with_copy(store: &Store, copy: &[ExportedCheckpoint]) -> VerifyReport {
    store
        .audit_log()
        .verify(&VerifyOptions {
            keys: vec![signer(1).verifying_key()],
            copy: copy.to_vec(),
            ..VerifyOptions::default()
        })
        .await
        .expect("verify runs")
}

/// The finding about `chain`, if any.
fn finding<'a>(report: &'a VerifyReport, chain: &str) -> Option<&'a Finding> {
    report
        .findings
        .iter()
        .find(|f| f.chain.as_deref() == Some(chain))
}

/// A chain of 30 events checkpointed every 10 (and at the flush), written by a writer with
/// the key that then stops.
async fn signed_chain(store: &Store, w: usize) {
    let sink = sink(store, 10);
    for i in 0..30 {
        sink.emit(&numbered_event(w, i)).await.expect("emit");
    }
    sink.flush().await.expect("flush");
}

/// Every chain's name, in the report's order.
async fn chain_names(store: &Store) -> Vec<String> {
    verify(store)
        .await
        .chains
        .iter()
        .map(|c| c.chain.clone())
        .collect()
}

/// One stored event, as an attacker reads it to recompute its hash.
struct Stored {
    id: i64,
    ty: String,
    at: DateTime<Utc>,
    surface: String,
    actor_id: String,
    actor_kind: String,
    execution_id: Option<String>,
    capability_id: Option<String>,
    correlation_id: Option<String>,
    input_hash: Option<String>,
    data: Value,
    seq: i64,
}

impl Stored {
    /// The documented recipe (docs/events.md): SHA-256 of the RFC 8785 JSON of the event
    /// and its chain fields.
    fn hash(&self, chain: &str, prev: Option<&str>) -> String {
        let v = json!({
            "chain": chain,
            "seq": self.seq,
            "prev": prev,
            "type": self.ty,
            "at": self.at.to_rfc3339_opts(SecondsFormat::Micros, true),
            "surface": self.surface,
            "actorId": self.actor_id,
            "actorKind": self.actor_kind,
            "executionId": self.execution_id,
            "capabilityId": self.capability_id,
            "correlationId": self.correlation_id,
            "inputHash": self.input_hash,
            "data": self.data,
        });
        capgate_core::canonical::input_hash(&v).expect("hashes")
    }
}

/// What a database writer who knows the recipe does after editing an event: recompute the
/// hashes of `chain` from `from` on, each linked to the one before.
async fn rehash_from(db: &TestDb, chain: &str, from: i64) {
    const SELECT: &str = "SELECT id, type, at, surface, actor_id, actor_kind, execution_id, \
         capability_id, correlation_id, input_hash, data, seq, hash FROM capgate_audit_events \
         WHERE chain = $1 ORDER BY seq";
    let (rows, hashes): (Vec<Stored>, Vec<String>) = match db.kind {
        Kind::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&db.url)
                .await
                .expect("connect");
            let rows = sqlx::query(SELECT)
                .bind(chain)
                .fetch_all(&mut c)
                .await
                .expect("read");
            let _ = c.close().await;
            rows.iter()
                .map(|r| {
                    let data: String = r.get("data");
                    (
                        Stored {
                            id: r.get("id"),
                            ty: r.get("type"),
                            at: DateTime::from_timestamp_micros(r.get("at")).expect("time"),
                            surface: r.get("surface"),
                            actor_id: r.get("actor_id"),
                            actor_kind: r.get("actor_kind"),
                            execution_id: r.get("execution_id"),
                            capability_id: r.get("capability_id"),
                            correlation_id: r.get("correlation_id"),
                            input_hash: r.get("input_hash"),
                            data: serde_json::from_str(&data).expect("json"),
                            seq: r.get("seq"),
                        },
                        r.get::<String, _>("hash"),
                    )
                })
                .unzip()
        }
        Kind::Postgres => {
            let mut c = sqlx::PgConnection::connect(&db.url).await.expect("connect");
            let rows = sqlx::query(SELECT)
                .bind(chain)
                .fetch_all(&mut c)
                .await
                .expect("read");
            let _ = c.close().await;
            rows.iter()
                .map(|r| {
                    (
                        Stored {
                            id: r.get("id"),
                            ty: r.get("type"),
                            at: r.get("at"),
                            surface: r.get("surface"),
                            actor_id: r.get("actor_id"),
                            actor_kind: r.get("actor_kind"),
                            execution_id: r.get("execution_id"),
                            capability_id: r.get("capability_id"),
                            correlation_id: r.get("correlation_id"),
                            input_hash: r.get("input_hash"),
                            data: r.get("data"),
                            seq: r.get("seq"),
                        },
                        r.get::<String, _>("hash"),
                    )
                })
                .unzip()
        }
    };
    let mut prev: Option<String> = None;
    let mut updates = Vec::new();
    for (row, old) in rows.iter().zip(hashes) {
        if row.seq < from {
            prev = Some(old);
            continue;
        }
        let hash = row.hash(chain, prev.as_deref());
        updates.push((row.id, prev.clone(), hash.clone()));
        prev = Some(hash);
    }
    const UPDATE: &str = "UPDATE capgate_audit_events SET prev_hash = $1, hash = $2 WHERE id = $3";
    macro_rules! apply {
        ($conn:ty) => {{
            let mut c = <$conn>::connect(&db.url).await.expect("connect");
            for (id, prev, hash) in &updates {
                sqlx::query(UPDATE)
                    .bind(prev)
                    .bind(hash)
                    .bind(id)
                    .execute(&mut c)
                    .await
                    .expect("rehash");
            }
            let _ = c.close().await;
        }};
    }
    match db.kind {
        Kind::Sqlite => apply!(sqlx::SqliteConnection),
        Kind::Postgres => apply!(sqlx::PgConnection),
    }
}

async fn a_database_writer_without_the_key_cannot_forge_rewrite_truncate_or_insert(db: &TestDb) {
    let store = db.open().await;
    // Four chains written and signed by the deployment (checkpoints at 10, 20 and 30).
    for w in 0..4 {
        signed_chain(&store, w).await;
    }
    let chains = chain_names(&store).await;
    assert_eq!(chains.len(), 4);

    // (a) A whole chain forged with the documented recipe: what a writer without the key
    // (the attacker running capgate's own code) writes. It has no signed start record and
    // no checkpoint.
    let forger = store.audit_sink(AuditSinkOptions::default()).expect("sink");
    for i in 0..3 {
        forger.emit(&numbered_event(9, i)).await.expect("emit");
    }
    forger.flush().await.expect("flush");
    drop(forger);
    let forged = chain_names(&store)
        .await
        .into_iter()
        .find(|c| !chains.contains(c))
        .expect("the forged chain");

    // (b) An event (say Priya's approval) rewritten to another approver, the later hashes
    // recomputed, and the checkpoints from that seq on deleted.
    tamper(
        db,
        &chains[0],
        "UPDATE capgate_audit_events SET actor_id = 'u_mallory' WHERE chain = $1 AND seq = 15",
        "UPDATE capgate_audit_events SET actor_id = 'u_mallory' WHERE chain = $1 AND seq = 15",
    )
    .await;
    rehash_from(db, &chains[0], 15).await;
    db.raw_execute(
        "DELETE FROM capgate_audit_checkpoints WHERE chain = $1 AND seq >= 15",
        &chains[0],
    )
    .await;

    // (c) The tail truncated together with its checkpoints.
    db.raw_execute(
        "DELETE FROM capgate_audit_events WHERE chain = $1 AND seq > 25",
        &chains[1],
    )
    .await;
    db.raw_execute(
        "DELETE FROM capgate_audit_checkpoints WHERE chain = $1 AND seq > 25",
        &chains[1],
    )
    .await;

    // A checkpoint in the middle deleted (the one at seq 10).
    db.raw_execute(
        "DELETE FROM capgate_audit_checkpoints WHERE chain = $1 AND seq = 10",
        &chains[2],
    )
    .await;

    // Events appended to a chain's tail with the recipe: a row copied after seq 30.
    tamper(
        db,
        &chains[3],
        "INSERT INTO capgate_audit_events (type, at, surface, actor_id, actor_kind, data, chain, \
         seq, prev_hash, hash) SELECT type, at, surface, actor_id, actor_kind, data, chain, 31, \
         hash, hash FROM capgate_audit_events WHERE chain = $1 AND seq = 30",
        "INSERT INTO capgate_audit_events (type, at, surface, actor_id, actor_kind, data, chain, \
         seq, prev_hash, hash) SELECT type, at, surface, actor_id, actor_kind, data, chain, 31, \
         hash, hash FROM capgate_audit_events WHERE chain = $1 AND seq = 30",
    )
    .await;
    rehash_from(db, &chains[3], 31).await;

    // (d) A chain-less row with id 0 ("older events predate the chain").
    tamper(
        db,
        "u_priya",
        "INSERT INTO capgate_audit_events (id, type, at, surface, actor_id, actor_kind, data) \
         VALUES (0, 'approval.decided', 0, 'aiSdk', $1, 'user', '{}')",
        "INSERT INTO capgate_audit_events (id, type, at, surface, actor_id, actor_kind, data) \
         OVERRIDING SYSTEM VALUE VALUES (0, 'approval.decided', now(), 'aiSdk', $1, 'user', \
         '{}'::jsonb)",
    )
    .await;

    let report = verify(&store).await;
    let named = |chain: &str| finding(&report, chain).cloned().expect("a finding");
    let a = named(&forged);
    assert_eq!((a.kind, a.seq), (Tamper::Unsigned, Some(1)), "{a:?}");
    let b = named(&chains[0]);
    assert_eq!((b.kind, b.seq), (Tamper::Unsigned, Some(11)), "{b:?}");
    assert!(b.detail.contains("11..=30"), "{b:?}");
    let c = named(&chains[1]);
    assert_eq!((c.kind, c.seq), (Tamper::Unsigned, Some(21)), "{c:?}");
    let deleted = named(&chains[2]);
    assert_eq!(
        (deleted.kind, deleted.seq),
        (Tamper::MissingCheckpoint, Some(20)),
        "{deleted:?}"
    );
    let appended = named(&chains[3]);
    assert_eq!(
        (appended.kind, appended.seq),
        (Tamper::Unsigned, Some(31)),
        "{appended:?}"
    );
    let d = report
        .findings
        .iter()
        .find(|f| f.event_id == Some(0))
        .expect("the row with id 0");
    assert_eq!(d.kind, Tamper::Inserted, "{d:?}");
    assert_eq!(report.findings.len(), 6, "{report:#?}");
    assert_eq!(report.unchained_before, 0, "{report:#?}");

    // A chain-less row with an ordinary id, on a store that had chains from the start.
    db.raw_execute(
        "DELETE FROM capgate_audit_events WHERE id = 0 AND actor_id = $1",
        "u_priya",
    )
    .await;
    tamper(
        db,
        "u_priya",
        "INSERT INTO capgate_audit_events (type, at, surface, actor_id, actor_kind, data) \
         VALUES ('approval.decided', 0, 'aiSdk', $1, 'user', '{}')",
        "INSERT INTO capgate_audit_events (type, at, surface, actor_id, actor_kind, data) \
         VALUES ('approval.decided', now(), 'aiSdk', $1, 'user', '{}'::jsonb)",
    )
    .await;
    let report = verify(&store).await;
    let inserted = report
        .findings
        .iter()
        .find(|f| f.chain.is_none())
        .expect("the chain-less row");
    assert_eq!(inserted.kind, Tamper::Inserted, "{inserted:?}");
    assert_eq!(report.unchained_before, 0, "{report:#?}");
}

async fn the_exported_checkpoint_copy_catches_what_the_store_alone_cannot(db: &TestDb) {
    let store = db.open().await;
    for w in 0..4 {
        signed_chain(&store, w).await;
    }
    let chains = chain_names(&store).await;
    // The copy off the box: what an export sink received.
    let outbox = store.audit_outbox("archive").expect("outbox");
    let copy = outbox.next_checkpoints(10_000).await.expect("checkpoints");
    outbox.acknowledge_checkpoints(&copy).await.expect("ack");
    assert_eq!(
        copy.len(),
        4 * 4,
        "a start record and checkpoints at 10, 20, 30 per chain: {copy:#?}"
    );
    assert!(
        outbox.next_checkpoints(10).await.expect("next").is_empty(),
        "acknowledged"
    );
    let clean = verify_with_copy(&store, &copy).await;
    assert!(clean.is_intact(), "{clean:#?}");
    assert_eq!(clean.copy_checkpoints, 16);

    // Truncated back to a checkpoint, with the later checkpoints: the store alone cannot
    // tell this from a chain that ended there.
    db.raw_execute(
        "DELETE FROM capgate_audit_events WHERE chain = $1 AND seq > 20",
        &chains[0],
    )
    .await;
    db.raw_execute(
        "DELETE FROM capgate_audit_checkpoints WHERE chain = $1 AND seq > 20",
        &chains[0],
    )
    .await;
    // A whole chain deleted with its checkpoints.
    for sql in [
        "DELETE FROM capgate_audit_events WHERE chain = $1",
        "DELETE FROM capgate_audit_checkpoints WHERE chain = $1",
        "DELETE FROM capgate_audit_chains WHERE chain = $1",
    ] {
        db.raw_execute(sql, &chains[1]).await;
    }
    // An approval rewritten with the later hashes recomputed, the checkpoints from there
    // on deleted, and the tail cut back to the last checkpoint left.
    tamper(
        db,
        &chains[2],
        "UPDATE capgate_audit_events SET actor_id = 'u_mallory' WHERE chain = $1 AND seq = 5",
        "UPDATE capgate_audit_events SET actor_id = 'u_mallory' WHERE chain = $1 AND seq = 5",
    )
    .await;
    rehash_from(db, &chains[2], 5).await;
    db.raw_execute(
        "DELETE FROM capgate_audit_checkpoints WHERE chain = $1 AND seq >= 5",
        &chains[2],
    )
    .await;
    let alone = verify(&store).await;
    assert!(finding(&alone, &chains[0]).is_none(), "{alone:#?}");
    assert!(finding(&alone, &chains[1]).is_none(), "{alone:#?}");
    assert!(finding(&alone, &chains[2]).is_some(), "{alone:#?}");

    let report = verify_with_copy(&store, &copy).await;
    let named = |chain: &str| finding(&report, chain).cloned().expect("a finding");
    let truncated = named(&chains[0]);
    assert_eq!(
        (truncated.kind, truncated.seq),
        (Tamper::Truncated, Some(21)),
        "{truncated:?}"
    );
    assert!(truncated.detail.contains("exported copy"), "{truncated:?}");
    let gone = named(&chains[1]);
    assert_eq!(gone.kind, Tamper::Truncated, "{gone:?}");
    let rewritten = named(&chains[2]);
    assert_eq!(
        (rewritten.kind, rewritten.seq),
        (Tamper::Edited, Some(10)),
        "{rewritten:?}"
    );
    assert!(finding(&report, &chains[3]).is_none(), "{report:#?}");

    // A copy whose records were altered does not vouch for anything.
    let mut forged = copy.clone();
    for r in forged.iter_mut().filter(|r| r.chain == chains[3]) {
        r.seq += 1;
    }
    let report = verify_with_copy(&store, &forged).await;
    assert_eq!(
        finding(&report, &chains[3]).map(|f| f.kind),
        Some(Tamper::BadCheckpoint),
        "{report:#?}"
    );
}

async fn restarted_and_idle_writers_leave_every_chain_ending_on_a_checkpoint(db: &TestDb) {
    let store = db.open().await;
    // A writer that stops cleanly (every handle dropped) and one started after it.
    for w in 0..2 {
        let sink = sink(&store, 1000);
        for i in 0..7 {
            sink.emit(&numbered_event(w, i)).await.expect("emit");
        }
        drop(sink);
        for _ in 0..100 {
            if verify(&store).await.is_intact() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let report = verify(&store).await;
    assert!(report.is_intact(), "{report:#?}");
    assert_eq!(report.chains.len(), 2);

    // A running writer that is never flushed signs its head about a second after its
    // last commit.
    let live = sink(&store, 1000);
    for i in 0..5 {
        live.emit(&numbered_event(5, i)).await.expect("emit");
    }
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let report = verify(&store).await;
    assert!(report.is_intact(), "{report:#?}");
    assert_eq!(report.chains.len(), 3);
    assert!(report.chains.iter().all(|c| c.events == 7 || c.events == 5));

    // Its checkpoint interval is exact: 25 events with a checkpoint every 10 are signed at
    // 10 and 20 whatever the batches, then at the flush.
    let every = sink(&store, 10);
    for i in 0..25 {
        every.emit(&numbered_event(6, i)).await.expect("emit");
    }
    every.flush().await.expect("flush");
    let report = verify(&store).await;
    assert!(report.is_intact(), "{report:#?}");
    let outbox = store.audit_outbox("every").expect("outbox");
    let records = outbox.next_checkpoints(10_000).await.expect("checkpoints");
    let chain = report
        .chains
        .iter()
        .find(|c| c.events == 25)
        .expect("the chain")
        .chain
        .clone();
    let seqs: Vec<i64> = records
        .iter()
        .filter(|r| r.chain == chain)
        .map(|r| r.seq)
        .collect();
    assert_eq!(seqs, vec![0, 10, 20, 25], "{records:#?}");
}
