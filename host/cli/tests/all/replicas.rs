//! Three `capgate serve` replicas on one Postgres behave as one deployment
//! (docs/guides/replicas.md): a principal's rate limit is the deployment's, not each replica's
//! (`gateway.rateLimit.scope` defaults to `store` on Postgres), and an MCP session opened on one
//! replica is served by the others with no sticky routing, still bound to the principal that opened
//! it.

use crate::common;

use common::walkthrough::DANA;
use common::*;
use serde_json::json;

const EVE: &str = "eve-dev-key";
/// Dana's burst in this test: small enough that three replicas each admitting it would
/// be plain (3 × 20), at 1 request per second so refill during the test stays small.
const BURST: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_on_one_postgres_share_rate_limits_and_mcp_sessions() {
    let Some(db) = postgres_db().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(
        dir.path(),
        |text| {
            text.replace("principalPerSecond = 1000", "principalPerSecond = 1")
                .replace(
                    "principalBurst = 2000",
                    &format!("principalBurst = {BURST}"),
                )
        },
        "",
    );
    let migrate = capgate_output(&["migrate", "--store", &db.url]);
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    let servers: Vec<Server> = (0..3).map(|_| Server::start(&config, &db.url)).collect();

    // MCP: initialize on replica 0; list and call on replicas 1 and 2, which never saw the
    // session (they restore it from the store).
    let mut eve = Mcp::connect(&servers[0].base, EVE).await;
    let session = eve.session().expect("a session id").to_string();
    eve.at(&servers[1].base);
    let tools = eve.request("tools/list", json!({})).await;
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(names.contains(&"customers_search"), "replica 1: {tools}");
    eve.at(&servers[2].base);
    let called = eve.call("customers_search", json!({"query": "acme"})).await;
    assert!(
        called["result"]["structuredContent"].is_object(),
        "replica 2: {called}"
    );
    assert_eq!(
        eve.session(),
        Some(session.as_str()),
        "one session throughout"
    );
    // Another principal presenting Eve's session id on a replica that did not open it:
    // the session is not hers (404, as an unknown session).
    let hijack = reqwest::Client::new()
        .post(format!("{}/mcp", servers[1].base))
        .bearer_auth(DANA)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .json(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}}))
        .send()
        .await
        .expect("send");
    assert_eq!(hijack.status().as_u16(), 404, "another principal's session");

    // Rate limits: Dana has spent one token (the refused hijack passed her door). Her next
    // requests, round-robin over the three replicas, are admitted BURST - 1 times in all
    // (plus at most one per second elapsed), then refused with 429.
    let dana = Caller::new(DANA);
    let start = std::time::Instant::now();
    let mut statuses = Vec::new();
    for i in 0..(3 * BURST) {
        let (status, body) = dana
            .post(
                &format!("{}/agent/describe", servers[i % 3].base),
                &json!({}),
            )
            .await;
        assert!(
            status == 200 || (status == 429 && body["error"]["code"] == "RATE_LIMITED"),
            "request {i}: {status} {body}"
        );
        statuses.push(status);
    }
    let refill = usize::try_from(start.elapsed().as_secs()).unwrap_or(usize::MAX);
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    assert!(
        (BURST - 1..=BURST - 1 + refill).contains(&admitted),
        "{admitted} admitted over three replicas (burst {BURST}, {refill} s elapsed): {statuses:?}"
    );
    assert!(
        statuses[..BURST - 1].iter().all(|s| *s == 200),
        "the burst is admitted first: {statuses:?}"
    );
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    // Another principal's bucket is untouched.
    let (status, _) = Caller::new(EVE)
        .post(&format!("{}/agent/describe", servers[2].base), &json!({}))
        .await;
    assert_eq!(status, 200);
    drop(servers);
}
