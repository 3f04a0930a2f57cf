//! `capgate audit verify` (issue 39, item 1) over the trail a served deployment wrote with
//! `[audit] checkpointKey` read from a file: intact after a clean stop, and the tail
//! deleted afterwards named as truncated, with exit status 1, in text and JSON.

use crate::common::{Caller, Server, capgate_output, deployment};
use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{EncodePrivateKey, EncodePublicKey};
use serde_json::{Value, json};
use sqlx::Connection;
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
