//! `capgate audit verify` (issue 39, item 1; issue 55, item 1) over the trail a served
//! deployment wrote with `[audit] checkpointKey` read from a file: intact after a clean stop
//! (and after a clean restart), and the tail deleted afterwards named as truncated, with exit
//! status 1, in text and JSON. Seen from an attacker who can write the database but does not
//! hold the key: a forged chain, an approval rewritten with the later hashes recomputed and
//! the checkpoints from there deleted, a tail truncated with its checkpoints, a chain-less
//! row with id 0 and a deleted checkpoint each exit 1 naming the chain; a truncation back
//! to a checkpoint, which the store alone cannot show, and a rewrite with its checkpoints
//! deleted, exit 1 against the checkpoints a `jsonl` export sink copied off the box.

use crate::common::{Caller, Server, capgate_output, deployment};
use chrono::{DateTime, SecondsFormat, Utc};
use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{EncodePrivateKey, EncodePublicKey};
use serde_json::{Value, json};
use sqlx::{Connection, Row};
use std::path::Path;
use std::time::Duration;

const DANA: &str = "dana-dev-key";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_verify_checks_the_chain_a_server_wrote_and_names_a_truncated_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = SigningKey::from_bytes(&[3u8; 32]);
    let private = key.to_pkcs8_pem(LineEnding::LF).expect("pem");
    std::fs::write(dir.path().join("audit-key.pem"), private.as_bytes()).expect("write key");
    let public = dir.path().join("audit-key.pub.pem");
    let public_pem = key
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .expect("public pem");
    std::fs::write(&public, public_pem).expect("write public key");
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "[audit]\n",
                "[audit]\ncheckpointKey = { file = \"audit-key.pem\" }\ncheckpointEvents = 4\n",
            )
        },
        "",
    );
    let db = dir.path().join("capgate.db");
    let store = format!("sqlite://{}", db.display());
    let mut server = Server::start(&config, &store);
    let dana = Caller::new(DANA);
    for i in 0..3 {
        let (status, body) = dana
            .post(
                &format!("{}/agent/invoke", server.base),
                &json!({
                    "capabilityId": "orders.refund",
                    "input": {"orderId": "ord_42", "amount": 20 + i, "reason": "damaged item"},
                    "invocationId": format!("verify_{i}"),
                }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    // A clean stop flushes the trail and signs where the chain ends.
    server.terminate();
    assert!(server.wait_exit(Duration::from_secs(30)).success());

    let public = public.to_str().expect("utf-8 path");
    let verify = |extra: &[&str]| {
        let mut args = vec!["audit", "verify", "--store", &store, "--public-key", public];
        args.extend_from_slice(extra);
        capgate_output(&args)
    };
    let intact = verify(&[]);
    let text = String::from_utf8_lossy(&intact.stdout);
    assert_eq!(intact.status.code(), Some(0), "{text}");
    assert!(text.trim_end().ends_with("intact"), "{text}");
    assert!(
        !text.contains("not checked"),
        "signatures were checked: {text}"
    );

    // Delete the chain's last two events, as someone hiding the end of the day would.
    let mut c = sqlx::SqliteConnection::connect(&store)
        .await
        .expect("connect");
    sqlx::query(
        "DELETE FROM capgate_audit_events WHERE seq > \
         (SELECT max(seq) - 2 FROM capgate_audit_events)",
    )
    .execute(&mut c)
    .await
    .expect("tamper");
    c.close().await.expect("close");

    let tampered = verify(&[]);
    let text = String::from_utf8_lossy(&tampered.stdout);
    assert_eq!(tampered.status.code(), Some(1), "{text}");
    assert!(text.contains("truncated: the chain ends at seq"), "{text}");
    assert!(text.trim_end().ends_with("TAMPERED"), "{text}");
    let json = verify(&["--output", "json"]);
    assert_eq!(json.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&json.stdout).expect("one JSON document");
    assert_eq!(report["findings"][0]["kind"], "truncated", "{report}");
    assert_eq!(report["signaturesChecked"], true, "{report}");

    // A key the checkpoints were not signed with: every checkpoint is refused.
    let other = dir.path().join("other.pub.pem");
    let other_pem = SigningKey::from_bytes(&[4u8; 32])
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .expect("pem");
    std::fs::write(&other, other_pem).expect("write");
    let foreign = capgate_output(&[
        "audit",
        "verify",
        "--store",
        &store,
        "--public-key",
        other.to_str().expect("utf-8"),
    ]);
    let text = String::from_utf8_lossy(&foreign.stdout);
    assert_eq!(foreign.status.code(), Some(1), "{text}");
    assert!(text.contains("bad-checkpoint"), "{text}");
}

/// Refunds Dana asks for, one invocation each.
async fn refunds(server: &Server, from: u32, n: u32) {
    let dana = Caller::new(DANA);
    for i in from..from + n {
        let (status, body) = dana
            .post(
                &format!("{}/agent/invoke", server.base),
                &json!({
                    "capabilityId": "orders.refund",
                    "input": {"orderId": "ord_42", "amount": 20 + i, "reason": "damaged item"},
                    "invocationId": format!("tamper_{i}"),
                }),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
}

/// The `checkpoint` lines of every file in `dir`, as JSON.
fn copied_checkpoints(dir: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries {
        let text = std::fs::read_to_string(e.expect("entry").path()).unwrap_or_default();
        for line in text.lines() {
            if let Ok(v) = serde_json::from_str::<Value>(line)
                && v.get("checkpoint").is_some()
            {
                out.push(v["checkpoint"].clone());
            }
        }
    }
    out
}

/// A copy of the SQLite database (file, WAL and shared memory) named `name`, as a store URL:
/// each tamper gets its own.
fn copy_db(db: &Path, name: &str) -> String {
    let to = db.with_file_name(format!("{name}.db"));
    for suffix in ["", "-wal", "-shm"] {
        let from = format!("{}{suffix}", db.display());
        if Path::new(&from).exists() {
            std::fs::copy(&from, format!("{}{suffix}", to.display())).expect("copy the db");
        }
    }
    format!("sqlite://{}", to.display())
}

/// Run statements on `store`, each with `chain` bound to `$1` where it appears.
async fn sql(store: &str, chain: &str, statements: &[&'static str]) {
    let mut c = sqlx::SqliteConnection::connect(store)
        .await
        .expect("connect");
    for &s in statements {
        let q = sqlx::query(s);
        let q = if s.contains("$1") { q.bind(chain) } else { q };
        q.execute(&mut c).await.expect("tamper");
    }
    c.close().await.expect("close");
}

/// The documented recipe (docs/events.md): SHA-256 of the RFC 8785 JSON of an event and
/// its chain fields, from a stored row.
fn recipe(r: &sqlx::sqlite::SqliteRow, chain: &str, seq: i64, prev: Option<&str>) -> String {
    let at = DateTime::<Utc>::from_timestamp_micros(r.get("at")).expect("time");
    let data: String = r.get("data");
    let v = json!({
        "chain": chain,
        "seq": seq,
        "prev": prev,
        "type": r.get::<String, _>("type"),
        "at": at.to_rfc3339_opts(SecondsFormat::Micros, true),
        "surface": r.get::<String, _>("surface"),
        "actorId": r.get::<String, _>("actor_id"),
        "actorKind": r.get::<String, _>("actor_kind"),
        "executionId": r.get::<Option<String>, _>("execution_id"),
        "capabilityId": r.get::<Option<String>, _>("capability_id"),
        "correlationId": r.get::<Option<String>, _>("correlation_id"),
        "inputHash": r.get::<Option<String>, _>("input_hash"),
        "data": serde_json::from_str::<Value>(&data).expect("json"),
    });
    capgate_core::canonical::input_hash(&v).expect("hashes")
}

/// What a database writer who knows the recipe does after editing: recompute the hashes of
/// `chain` from `from` on, each linked to the one before.
async fn rehash_from(store: &str, chain: &str, from: i64) {
    let mut c = sqlx::SqliteConnection::connect(store)
        .await
        .expect("connect");
    let rows = sqlx::query("SELECT * FROM capgate_audit_events WHERE chain = $1 ORDER BY seq")
        .bind(chain)
        .fetch_all(&mut c)
        .await
        .expect("read");
    let mut prev: Option<String> = None;
    for r in &rows {
        let seq: i64 = r.get("seq");
        if seq < from {
            prev = Some(r.get("hash"));
            continue;
        }
        let hash = recipe(r, chain, seq, prev.as_deref());
        sqlx::query("UPDATE capgate_audit_events SET prev_hash = $1, hash = $2 WHERE id = $3")
            .bind(&prev)
            .bind(&hash)
            .bind(r.get::<i64, _>("id"))
            .execute(&mut c)
            .await
            .expect("rehash");
        prev = Some(hash);
    }
    c.close().await.expect("close");
}

/// A whole chain forged with the recipe: Priya approving, by hand.
async fn forge_chain(store: &str, chain: &str) {
    let mut c = sqlx::SqliteConnection::connect(store)
        .await
        .expect("connect");
    let at = Utc::now();
    let micros = at.timestamp_micros();
    let data = json!({"approvalId": "apr_forged", "decision": "approved"});
    let mut prev: Option<String> = None;
    for seq in 1..=2i64 {
        let v = json!({
            "chain": chain, "seq": seq, "prev": prev, "type": "approval.decided",
            "at": DateTime::<Utc>::from_timestamp_micros(micros).expect("time")
                .to_rfc3339_opts(SecondsFormat::Micros, true),
            "surface": "aiSdk", "actorId": "u_priya", "actorKind": "user",
            "executionId": "exe_forged", "capabilityId": "orders.refund",
            "correlationId": null, "inputHash": null, "data": data,
        });
        let hash = capgate_core::canonical::input_hash(&v).expect("hashes");
        sqlx::query(
            "INSERT INTO capgate_audit_events (type, at, surface, actor_id, actor_kind, \
             execution_id, capability_id, data, chain, seq, prev_hash, hash) VALUES \
             ('approval.decided', $1, 'aiSdk', 'u_priya', 'user', 'exe_forged', \
             'orders.refund', $2, $3, $4, $5, $6)",
        )
        .bind(micros)
        .bind(data.to_string())
        .bind(chain)
        .bind(seq)
        .bind(&prev)
        .bind(&hash)
        .execute(&mut c)
        .await
        .expect("forge");
        prev = Some(hash);
    }
    c.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_verify_names_each_tamper_of_a_database_writer_and_checks_the_exported_copy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = SigningKey::from_bytes(&[5u8; 32]);
    let private = key.to_pkcs8_pem(LineEnding::LF).expect("pem");
    std::fs::write(dir.path().join("audit-key.pem"), private.as_bytes()).expect("write key");
    let public = dir.path().join("audit-key.pub.pem");
    let public_pem = key
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .expect("public pem");
    std::fs::write(&public, public_pem).expect("write public key");
    let archive = dir.path().join("archive");
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "[audit]\n",
                "[audit]\ncheckpointKey = { file = \"audit-key.pem\" }\ncheckpointEvents = 4\n",
            )
        },
        &format!(
            "[audit.export.archive]\nto = \"jsonl\"\ndirectory = \"{}\"\n",
            archive.display()
        ),
    );
    let db = dir.path().join("capgate.db");
    let store = format!("sqlite://{}", db.display());
    let public = public.to_str().expect("utf-8 path").to_string();
    let verify = |store: &str, extra: &[&str]| {
        let mut args = vec![
            "audit",
            "verify",
            "--store",
            store,
            "--public-key",
            public.as_str(),
        ];
        args.extend_from_slice(extra);
        let out = capgate_output(&args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.code(), text)
    };

    // Two runs of the server, each stopped cleanly: two chains.
    let mut server = Server::start(&config, &store);
    refunds(&server, 0, 3).await;
    server.terminate();
    assert!(server.wait_exit(Duration::from_secs(30)).success());
    let json = capgate_output(&[
        "audit",
        "verify",
        "--store",
        &store,
        "--public-key",
        &public,
        "--output",
        "json",
    ]);
    let report: Value = serde_json::from_slice(&json.stdout).expect("one JSON document");
    let first = report["chains"][0]["chain"]
        .as_str()
        .expect("a chain")
        .to_string();
    let first_last = report["chains"][0]["lastSeq"].as_i64().expect("last seq");
    assert!(
        first_last >= 9,
        "three refunds, a few events each: {report}"
    );

    let mut server = Server::start(&config, &store);
    refunds(&server, 3, 2).await;
    // The exporter of the second run ships the first chain's checkpoints, its last
    // (signed at the clean stop) included.
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !copied_checkpoints(&archive)
        .iter()
        .any(|c| c["chain"] == first.as_str() && c["seq"] == first_last)
    {
        assert!(
            std::time::Instant::now() < until,
            "the first chain's last checkpoint was not exported: {:?}",
            copied_checkpoints(&archive)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.terminate();
    assert!(server.wait_exit(Duration::from_secs(30)).success());
    let copied = copied_checkpoints(&archive);
    assert!(
        copied
            .iter()
            .any(|c| c["chain"] == first.as_str() && c["kind"] == "start"),
        "{copied:?}"
    );
    let archive_arg = archive.to_str().expect("utf-8").to_string();
    // Where the first chain was signed: after 4 events without one, and whenever its
    // writer idled (after each refund, here).
    let mut signed: Vec<i64> = copied
        .iter()
        .filter(|c| c["chain"] == first.as_str() && c["kind"] == "checkpoint")
        .filter_map(|c| c["seq"].as_i64())
        .collect();
    signed.sort_unstable();
    assert!(signed.len() >= 2, "{signed:?}");
    let (first_cp, second_cp) = (signed[0], signed[1]);
    // The first event no checkpoint covers once those after `seq` are gone, and the first
    // checkpoint at or after `seq`.
    let uncovered_after = |seq: i64| signed.iter().filter(|s| **s < seq).max().unwrap_or(&0) + 1;
    let signed_from = |seq: i64| *signed.iter().find(|s| **s >= seq).expect("a checkpoint");

    // Untampered, after a clean restart: intact, alone and against the copy.
    let (code, text) = verify(&store, &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.trim_end().ends_with("intact"), "{text}");
    let (code, text) = verify(&store, &["--checkpoints", &archive_arg]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("checkpoints of the exported copy checked"),
        "{text}"
    );
    // A backfill is such a copy too: the events, then every signed record.
    let backfill = capgate_output(&["audit", "export", "--store", &store]);
    let stderr = String::from_utf8_lossy(&backfill.stderr);
    assert!(backfill.status.success(), "{stderr}");
    let records = String::from_utf8_lossy(&backfill.stdout)
        .lines()
        .filter(|l| l.starts_with("{\"checkpoint\""))
        .count();
    assert!(records >= copied.len(), "{records} < {}", copied.len());
    assert!(
        stderr.contains("signed records") && stderr.contains(&records.to_string()),
        "{stderr}"
    );
    let file = dir.path().join("backfill.jsonl");
    std::fs::write(&file, &backfill.stdout).expect("write the backfill");
    let (code, text) = verify(&store, &["--checkpoints", file.to_str().expect("utf-8")]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(&format!(
            "{records} checkpoints of the exported copy checked"
        )),
        "{text}"
    );

    // Each tamper on a copy of its own; each exits 1 naming the chain and the seq.
    let named = |text: &str, kind: &str, chain: &str, seq: i64| {
        let line = text
            .lines()
            .find(|l| l.starts_with(kind) && l.contains(&format!("(chain {chain},")))
            .unwrap_or_else(|| panic!("no {kind} finding for {chain}: {text}"));
        assert!(line.ends_with(&format!("seq {seq})")), "{line}");
        assert!(text.trim_end().ends_with("TAMPERED"), "{text}");
    };

    // (a) A whole forged chain holding Priya's approval.
    let a = copy_db(&db, "forged");
    forge_chain(&a, "forged-chain").await;
    let (code, text) = verify(&a, &[]);
    assert_eq!(code, Some(1), "{text}");
    named(&text, "unsigned", "forged-chain", 1);

    // (b) An event rewritten to another approver, the later hashes recomputed, the
    // checkpoints from that seq on deleted.
    let b = copy_db(&db, "rewritten");
    sql(
        &b,
        &first,
        &["UPDATE capgate_audit_events SET actor_id = 'u_mallory' WHERE chain = $1 AND seq = 5"],
    )
    .await;
    rehash_from(&b, &first, 5).await;
    sql(
        &b,
        &first,
        &["DELETE FROM capgate_audit_checkpoints WHERE chain = $1 AND seq >= 5"],
    )
    .await;
    let (code, text) = verify(&b, &[]);
    assert_eq!(code, Some(1), "{text}");
    named(&text, "unsigned", &first, uncovered_after(5));
    // Against the copy, the rewritten event at the first checkpoint after it is named.
    let (code, text) = verify(&b, &["--checkpoints", &archive_arg]);
    assert_eq!(code, Some(1), "{text}");
    named(&text, "edited", &first, signed_from(5));

    // (c) The tail truncated together with its checkpoints, after an event no checkpoint
    // names.
    let cut = (first_cp + 1..first_last)
        .find(|s| !signed.contains(s))
        .expect("an event between checkpoints");
    let c = copy_db(&db, "truncated");
    let mut conn = sqlx::SqliteConnection::connect(&c).await.expect("connect");
    for statement in [
        "DELETE FROM capgate_audit_events WHERE chain = $1 AND seq > $2",
        "DELETE FROM capgate_audit_checkpoints WHERE chain = $1 AND seq > $2",
    ] {
        sqlx::query(statement)
            .bind(&first)
            .bind(cut)
            .execute(&mut conn)
            .await
            .expect("truncate");
    }
    conn.close().await.expect("close");
    let (code, text) = verify(&c, &[]);
    assert_eq!(code, Some(1), "{text}");
    named(&text, "unsigned", &first, uncovered_after(cut + 1));

    // (d) A chain-less row with id 0.
    let d = copy_db(&db, "zero");
    sql(
        &d,
        &first,
        &[
            "INSERT INTO capgate_audit_events (id, type, at, surface, actor_id, actor_kind, data) \
           VALUES (0, 'approval.decided', 0, 'aiSdk', 'u_priya', 'user', '{}')",
        ],
    )
    .await;
    let (code, text) = verify(&d, &[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("inserted: event 0 ") && l.contains("event 0,")),
        "{text}"
    );
    assert!(!text.contains("predate the chain"), "{text}");

    // A deleted checkpoint (the first): the next no longer links.
    let e = copy_db(&db, "checkpoint");
    sql(
        &e,
        &first,
        &[
            "DELETE FROM capgate_audit_checkpoints WHERE chain = $1 AND kind = 'checkpoint' \
           AND seq = (SELECT min(seq) FROM capgate_audit_checkpoints WHERE chain = $1 \
           AND kind = 'checkpoint')",
        ],
    )
    .await;
    let (code, text) = verify(&e, &[]);
    assert_eq!(code, Some(1), "{text}");
    named(&text, "missing-checkpoint", &first, second_cp);

    // Truncated back to a checkpoint with the later ones: the store alone cannot tell, the
    // exported copy does.
    let f = copy_db(&db, "cut");
    sql(
        &f,
        &first,
        &[
            "DELETE FROM capgate_audit_events WHERE chain = $1 AND seq > \
             (SELECT min(seq) FROM capgate_audit_checkpoints WHERE chain = $1 \
             AND kind = 'checkpoint')",
            "DELETE FROM capgate_audit_checkpoints WHERE chain = $1 AND seq > \
             (SELECT min(seq) FROM capgate_audit_checkpoints WHERE chain = $1 \
             AND kind = 'checkpoint')",
        ],
    )
    .await;
    let (code, text) = verify(&f, &[]);
    assert_eq!(code, Some(0), "the store alone cannot show it: {text}");
    let (code, text) = verify(&f, &["--checkpoints", &archive_arg]);
    assert_eq!(code, Some(1), "{text}");
    named(&text, "truncated", &first, first_cp + 1);
}
