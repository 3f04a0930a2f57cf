//! A client of `/mcp` speaking raw 2026-07-28 JSON-RPC (one HTTP request per message, the
//! per-request `_meta` and the `Mcp-Method`/`Mcp-Name` headers the transport asks for), for
//! the tests of MCP tasks (the `io.modelcontextprotocol/tasks` extension), which no SDK's
//! client implements yet; and the extension's wire shapes, checked on each answer.

use serde_json::{Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The protocol revision spoken.
pub const PROTOCOL: &str = "2026-07-28";

/// A client of `/mcp` speaking raw JSON-RPC, one HTTP request per message.
pub struct Client {
    http: reqwest::Client,
    url: String,
    token: String,
    capabilities: Value,
    next: AtomicUsize,
}

impl Client {
    /// A client with bearer `token` declaring `capabilities`.
    pub fn new(url: &str, token: &str, capabilities: Value) -> Client {
        Client {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            token: token.to_owned(),
            capabilities,
            next: AtomicUsize::new(1),
        }
    }

    /// A client that declares the tasks extension (and, with `urls`, URL elicitation).
    pub fn with_tasks(url: &str, token: &str, urls: bool) -> Client {
        let mut capabilities = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
        if urls {
            capabilities["elicitation"] = json!({"url": {}});
        }
        Client::new(url, token, capabilities)
    }

    /// Send `method` with `params` (the per-request `_meta` the protocol asks for added):
    /// the JSON-RPC response object.
    pub async fn rpc(&self, method: &str, mut params: Value) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": PROTOCOL,
            "io.modelcontextprotocol/clientCapabilities": self.capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "raw-jsonrpc", "version": "1"},
        });
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        // The 2026-07-28 transport's routing headers (SEP-2243): the method, and the tool
        // or task it names.
        let name = params["name"].as_str().or(params["taskId"].as_str());
        let mut post = self
            .http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", PROTOCOL)
            .header("mcp-method", method);
        if let Some(name) = name {
            post = post.header("mcp-name", name);
        }
        let answer = post
            .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method}: {e}"));
        let status = answer.status();
        let sse = answer
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let text = answer.text().await.unwrap_or_default();
        // A request the transport refuses (a missing capability) is a 4xx carrying the
        // JSON-RPC error.
        if !status.is_success() {
            let error: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{method}: {status}: {e}: {text}"));
            assert!(error["error"].is_object(), "{method}: {status} {text}");
            return error;
        }
        let messages: Vec<Value> = if sse {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str(d.trim()).ok())
                .collect()
        } else {
            vec![serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method}: {e}: {text}"))]
        };
        messages
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("{method}: no response in {text}"))
    }

    /// `tools/call` of `tool` with `arguments`.
    pub async fn call(&self, tool: &str, arguments: Value) -> Value {
        self.rpc("tools/call", json!({"name": tool, "arguments": arguments}))
            .await
    }

    /// `tasks/get`.
    pub async fn get(&self, task_id: &str) -> Value {
        self.rpc("tasks/get", json!({"taskId": task_id})).await
    }

    /// Poll `tasks/get` (as the task's `pollIntervalMs` says, shortened) until the task
    /// leaves `working`/`input_required`.
    pub async fn until_ended(&self, task_id: &str) -> Value {
        for _ in 0..200 {
            let answer = self.get(task_id).await;
            let status = answer["result"]["status"]
                .as_str()
                .unwrap_or("?")
                .to_owned();
            if status != "working" && status != "input_required" {
                return answer;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("task {task_id} never ended");
    }
}

/// The wire shape of a `CreateTaskResult` (SEP-2663): `resultType: "task"`, the task's
/// fields at the top level, a poll interval; the task id.
pub fn assert_task_handle(answer: &Value) -> String {
    let r = &answer["result"];
    assert_eq!(r["resultType"], "task", "{answer}");
    assert_eq!(r["status"], "working", "{answer}");
    for field in ["taskId", "createdAt", "lastUpdatedAt", "statusMessage"] {
        assert!(r[field].is_string(), "{field} in {answer}");
    }
    assert!(r["pollIntervalMs"].as_u64().is_some(), "{answer}");
    assert!(r["ttlMs"].as_u64().is_some(), "{answer}");
    r["taskId"].as_str().unwrap_or_default().to_owned()
}

/// The wire shape of a `tasks/get` answer (`GetTaskResult = Result & DetailedTask`).
pub fn assert_detailed(answer: &Value, status: &str) {
    let r = &answer["result"];
    assert_eq!(r["resultType"], "complete", "{answer}");
    assert_eq!(r["status"], status, "{answer}");
    match status {
        "completed" => assert!(r["result"].is_object(), "{answer}"),
        "failed" => assert!(r["error"]["code"].is_i64(), "{answer}"),
        "input_required" => assert!(r["inputRequests"].is_object(), "{answer}"),
        _ => {}
    }
}

/// Whether `text` has `word` as a whole word (letters, digits and `_` make words), so a
/// check that an amount never leaked is not fooled by the same digits inside a random id.
pub fn has_word(text: &str, word: &str) -> bool {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| w == word)
}
