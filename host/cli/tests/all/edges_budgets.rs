//! Budgets on every door (issue 55, item 3), against the real `capgate serve`: one key
//! cannot hold the memory every tenant shares through MCP sessions.

use crate::common::{Server, deployment};
use serde_json::json;

const DANA: &str = "dana-dev-key";
const EVE: &str = "eve-dev-key";

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// 4 000 `initialize` handshakes with one key: the first `maxSessionsPerPrincipal` (8
/// here) open sessions, every other is refused `429` with a JSON-RPC error saying what to
/// do, and the server's memory stays bounded (well under what 4 000 sessions of about
/// 120 KB each would hold). Another principal still opens a session; ending one frees a
/// place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_cannot_open_more_mcp_sessions_than_its_cap() {
    const HANDSHAKES: usize = 4_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let config = deployment(
        dir.path(),
        |t| {
            t.replacen("[mcp]\n", "[mcp]\nmaxSessionsPerPrincipal = 8\n", 1)
                .replace(
                    "principalPerSecond = 1000\nprincipalBurst = 2000\nnamespacePerSecond = 5000\nnamespaceBurst = 10000",
                    "principalPerSecond = 0\nprincipalBurst = 0\nnamespacePerSecond = 0\nnamespaceBurst = 0",
                )
        },
        "",
    );
    let s = Server::start(&config, &store);
    let http = reqwest::Client::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "session-flood", "version": "1"}}});
    let handshake = |key: &'static str| {
        http.post(format!("{}/mcp", s.base))
            .bearer_auth(key)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(initialize.to_string())
            .send()
    };
    // Warm up (plugins compiled, pools filled) before measuring.
    let first = handshake(DANA).await.expect("send");
    assert_eq!(first.status(), 200);
    let first_id = first
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id")
        .to_string();
    let before = rss_kib(s.pid());
    let (mut opened, mut refused) = (1usize, 0usize);
    let mut refusal = None;
    for _ in 1..HANDSHAKES {
        let r = handshake(DANA).await.expect("send");
        match r.status().as_u16() {
            200 => opened += 1,
            429 => {
                refused += 1;
                if refusal.is_none() {
                    assert!(r.headers().get("retry-after").is_some());
                    refusal = Some(r.text().await.expect("body"));
                }
            }
            other => panic!("handshake answered {other}"),
        }
    }
    let after = rss_kib(s.pid());
    assert_eq!(opened, 8, "the cap");
    assert_eq!(refused, HANDSHAKES - 8);
    let refusal = refusal.expect("a refusal");
    assert!(refusal.contains("most allowed"), "{refusal}");
    // 4 000 sessions would hold about 480 MB; the refused ones are closed at once.
    let grown_mib = after.saturating_sub(before) / 1024;
    assert!(grown_mib < 64, "the server grew by {grown_mib} MiB");

    // Another principal is not affected by Dana's sessions.
    assert_eq!(handshake(EVE).await.expect("send").status(), 200);
    // Ending one of Dana's frees a place.
    let ended = http
        .delete(format!("{}/mcp", s.base))
        .bearer_auth(DANA)
        .header("mcp-session-id", &first_id)
        .send()
        .await
        .expect("send");
    assert!(ended.status().is_success(), "{}", ended.status());
    assert_eq!(handshake(DANA).await.expect("send").status(), 200);
    assert_eq!(handshake(DANA).await.expect("send").status(), 429);
}
