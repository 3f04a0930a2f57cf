//! The example served through the library as an embedder would (docs/guides/embedding.md): a
//! governed call over real HTTP, a reload that swaps the revision, a refused reload that
//! keeps the old one serving, and a stop that drains and closes the store, with the
//! reloads in the audit trail under the trigger `embedder`.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// The example, written into `dir` with `revision` and no unready delay at stop.
fn example_in(dir: &Path, revision: &str) -> PathBuf {
    capgate_testkit::paths::example_in(dir, |text| {
        text.replace(
            "revision = \"customer-support-2026-11\"",
            &format!("revision = \"{revision}\""),
        )
        // Stop without the load balancer's grace: nothing here needs it.
        .replace("[gateway]\n", "[gateway]\nshutdownUnreadyDelayMs = 0\n")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_serves_in_process_reloads_and_stops() {
    use capgate_server::serve::ReloadAnswer;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = example_in(dir.path(), "r1");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let checked = capgate_server::validate::validate(&config).expect("the example checks");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let served = capgate_server::serve::start(checked, Some(store.clone()), listener)
        .await
        .expect("serves");
    let base = format!("http://{}", served.addr());
    let http = reqwest::Client::new();
    let ready = http
        .get(format!("{base}/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status(), 200);
    // A governed call, as an agent makes it.
    let call = async |id: &str| -> Value {
        http.post(format!("{base}/agent/invoke"))
            .bearer_auth("dana-dev-key")
            .json(&json!({
                "capabilityId": "orders.refund",
                "input": {"orderId": "ord_42", "amount": 20, "reason": "damaged item"},
                "invocationId": id,
            }))
            .send()
            .await
            .expect("invoke")
            .json()
            .await
            .expect("json")
    };
    let answer = call("embedded_1").await;
    assert_eq!(answer["status"], "completed", "{answer}");

    // A reload the embedder asks for swaps in the new revision.
    example_in(dir.path(), "r2");
    let ReloadAnswer::Reloaded(body) = served.reload().await else {
        panic!("the new revision was not swapped in");
    };
    assert_eq!(body["previous"]["revision"], "r1", "{body}");
    assert_eq!(body["current"]["revision"], "r2", "{body}");
    // A broken file is refused, located, and r2 keeps serving.
    let text = std::fs::read_to_string(&config).expect("read");
    std::fs::write(
        &config,
        text.replace("[gateway]\n", "[gateway]\nmaxBodyBytes = \"big\"\n"),
    )
    .expect("write");
    let ReloadAnswer::Refused(body) = served.reload().await else {
        panic!("a broken file was not refused");
    };
    assert!(body.to_string().contains("maxBodyBytes"), "{body}");
    let answer = call("embedded_2").await;
    assert_eq!(answer["status"], "completed", "{answer}");

    // Stopping drains, flushes the trail and closes the store.
    served.stop().await.expect("a clean stop");
    assert!(
        http.get(format!("{base}/healthz")).send().await.is_err(),
        "the listener is closed"
    );
    let reloads: Vec<Value> = crate::support::audit_events(&store)
        .await
        .into_iter()
        .filter(|e| {
            e["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("capgate.config."))
        })
        .map(|e| json!([e["type"], e["data"]["trigger"]]))
        .collect();
    assert_eq!(
        reloads,
        [
            json!(["capgate.config.reloaded", "embedder"]),
            json!(["capgate.config.reload_refused", "embedder"])
        ]
    );
}
