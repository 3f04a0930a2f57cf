//! `capgate import openapi` end to end: a small pet store service started from its own
//! OpenAPI document (tests/fixtures/openapi/petstore.yaml), the real binary imports the
//! document, `capgate check` accepts the entries, and `capgate serve` calls the service
//! through them exactly as its own clients would: path (a value needing percent-encoding
//! stays one segment), query, header and JSON body; a declared 404 becomes the declared
//! error code and the service's body never reaches the caller.

use crate::common;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use common::*;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// Every request the service received: method, raw path, the path parameter as the
/// service's router decoded it, query, tenant header, body.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Value>>>);

impl Seen {
    fn record(
        &self,
        method: &Method,
        uri: &Uri,
        pet: Option<&str>,
        headers: &HeaderMap,
        body: &str,
    ) {
        self.0.lock().expect("lock").push(json!({
            "method": method.as_str(),
            "path": uri.path(),
            "petId": pet,
            "query": uri.query(),
            "tenant": headers.get("x-tenant").and_then(|v| v.to_str().ok()),
            "body": body,
        }));
    }

    fn last(&self) -> Value {
        self.0
            .lock()
            .expect("lock")
            .last()
            .cloned()
            .expect("a request")
    }

    fn count(&self) -> usize {
        self.0.lock().expect("lock").len()
    }
}

/// The pet store: the document's four operations, under `/v1`.
async fn pet_store(seen: Seen) -> String {
    async fn pets(
        State(seen): State<Seen>,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: String,
    ) -> Response {
        seen.record(&method, &uri, None, &headers, &body);
        if method == Method::POST {
            let new: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            return (
                StatusCode::CREATED,
                axum::Json(json!({ "id": "p2", "name": new["name"], "tag": new["tag"] })),
            )
                .into_response();
        }
        axum::Json(json!([{ "id": "p1", "name": "Rex" }])).into_response()
    }
    async fn pet(
        State(seen): State<Seen>,
        Path(pet_id): Path<String>,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: String,
    ) -> Response {
        seen.record(&method, &uri, Some(&pet_id), &headers, &body);
        if pet_id == "missing" {
            return (
                StatusCode::NOT_FOUND,
                axum::Json(json!({ "message": "pet missing not in shard db-7 (internal detail)" })),
            )
                .into_response();
        }
        if method == Method::DELETE {
            return StatusCode::NO_CONTENT.into_response();
        }
        axum::Json(json!({ "id": pet_id, "name": "Rex" })).into_response()
    }
    let app = Router::new()
        .route("/v1/pets", get(pets).post(pets))
        .route("/v1/pets/{petId}", get(pet).delete(pet))
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the pet store");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/v1")
}

const GATEWAY: &str = r#"
revision = "openapi-import-test"

[gateway]
authorize = "authenticated"
routes = [{ path = "/agent", surface = "aiSdk" }]

[[gateway.apiKeys]]
sha256 = "@KEYHASH@"
namespace = "org_1"
surfaces = ["aiSdk", "mcp"]
actor = { id = "u_dana", kind = "user", attributes = { orgId = "org_1" } }
"#;

fn fixture() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/openapi/petstore.yaml")
}

fn invoke(capability: &str, input: Value, id: &str) -> Value {
    json!({"capabilityId": capability, "input": input, "invocationId": id, "correlationId": id})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn imported_openapi_operations_pass_check_and_call_the_service_as_its_clients_do() {
    let seen = Seen::default();
    let base = pet_store(seen.clone()).await;
    let doc = fixture();
    let doc = doc.to_str().expect("UTF-8 path");

    // The real binary imports the document: entries on stdout, nothing skipped.
    let out = capgate_output(&[
        "import",
        "openapi",
        doc,
        "--base-url",
        &base,
        "--prefix",
        "petstore",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    let entries = String::from_utf8(out.stdout).expect("UTF-8");
    for (comment, id) in [
        ("# GET /pets\n", "petstore.listPets"),
        ("# POST /pets\n", "petstore.createPet"),
        ("# GET /pets/{petId}\n", "petstore.getPet"),
        ("# DELETE /pets/{petId}\n", "petstore.deletePet"),
    ] {
        assert!(entries.contains(comment), "{comment}: {entries}");
        assert!(
            entries.contains(&format!("id = \"{id}\"")),
            "{id}: {entries}"
        );
    }
    let parsed: Value = toml::from_str(&entries).expect("the output is TOML");
    let caps = parsed["capabilities"].as_array().expect("capabilities");
    assert_eq!(caps.len(), 4);
    for c in caps {
        // Offered nowhere until the operator says where.
        assert_eq!(c["expose"], json!({}), "{c}");
    }
    let by_id = |id: &str| caps.iter().find(|c| c["id"] == id).cloned().expect(id);
    assert_eq!(by_id("petstore.getPet")["sideEffect"], "read");
    assert_eq!(by_id("petstore.deletePet")["risk"], "high");
    assert_eq!(
        by_id("petstore.deletePet")["procedure"]["http"]["errors"],
        json!({ "404": "PET_NOT_FOUND" })
    );

    // Pasted as printed into a deployment, the operator turning the AI SDK surface on.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("capgate.toml");
    let key_hash = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(b"dana-dev-key"))
    };
    let exposed = expose_everything(&entries);
    std::fs::write(
        &config,
        format!("{}\n{exposed}", GATEWAY.replace("@KEYHASH@", &key_hash)),
    )
    .expect("write config");
    let checked = capgate_output(&["check", "--config", config.to_str().expect("path")]);
    assert!(
        checked.status.success(),
        "check refused the imported entries:\n{}\n{}",
        String::from_utf8_lossy(&checked.stderr),
        std::fs::read_to_string(&config).unwrap_or_default()
    );

    let store_url = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&config, &store_url);
    let url = format!("{}/agent/invoke", server.base);
    let dana = Caller::new("dana-dev-key");

    // GET with a path value that must stay one segment, and a query parameter.
    let (status, got) = dana
        .post(
            &url,
            &invoke(
                "petstore.getPet",
                json!({ "petId": "a/b", "verbose": true }),
                "o1",
            ),
        )
        .await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["status"], "completed", "{got}");
    assert_eq!(got["output"], json!({ "id": "a/b", "name": "Rex" }));
    let s = seen.last();
    assert_eq!(s["method"], "GET");
    assert_eq!(s["path"], "/v1/pets/a%2Fb", "{s}");
    assert_eq!(
        s["petId"], "a/b",
        "the service's router saw one segment: {s}"
    );
    assert_eq!(s["query"], "verbose=true");
    assert_eq!(s["body"], "");

    // GET with a query parameter and a header parameter.
    let (_, got) = dana
        .post(
            &url,
            &invoke(
                "petstore.listPets",
                json!({ "limit": 5, "X-Tenant": "t_9" }),
                "o2",
            ),
        )
        .await;
    assert_eq!(got["status"], "completed", "{got}");
    assert_eq!(got["output"], json!([{ "id": "p1", "name": "Rex" }]));
    let s = seen.last();
    assert_eq!(
        (s["method"].clone(), s["path"].clone()),
        (json!("GET"), json!("/v1/pets"))
    );
    assert_eq!(s["query"], "limit=5");
    assert_eq!(s["tenant"], "t_9");

    // POST with the JSON body.
    let (_, got) = dana
        .post(
            &url,
            &invoke(
                "petstore.createPet",
                json!({ "body": { "name": "Fido", "tag": "dog" } }),
                "o3",
            ),
        )
        .await;
    assert_eq!(got["status"], "completed", "{got}");
    assert_eq!(
        got["output"],
        json!({ "id": "p2", "name": "Fido", "tag": "dog" })
    );
    let s = seen.last();
    assert_eq!(s["method"], "POST");
    assert_eq!(s["query"], Value::Null);
    assert_eq!(
        serde_json::from_str::<Value>(s["body"].as_str().expect("body")).expect("JSON body"),
        json!({ "name": "Fido", "tag": "dog" })
    );

    // The input schema is the operation's: a body without its required `name` is refused
    // before the service is called.
    let before = seen.count();
    let (_, refused) = dana
        .post(
            &url,
            &invoke(
                "petstore.createPet",
                json!({ "body": { "tag": "dog" } }),
                "o4",
            ),
        )
        .await;
    assert_eq!(refused["status"], "failed", "{refused}");
    assert_eq!(refused["error"]["code"], "INPUT_INVALID", "{refused}");
    assert_eq!(seen.count(), before);

    // DELETE: 204 completes.
    let (_, got) = dana
        .post(
            &url,
            &invoke("petstore.deletePet", json!({ "petId": "p1" }), "o5"),
        )
        .await;
    assert_eq!(got["status"], "completed", "{got}");
    assert_eq!(seen.last()["method"], "DELETE");

    // A declared 404: the service's body never reaches the caller. The /agent door settles
    // receipts, so a failure after the procedure was entered is `outcome-unknown` there
    // whatever the procedure said; the MCP door answers with the run's own result, where
    // the model reads the declared code.
    let (_, missing) = dana
        .post(
            &url,
            &invoke("petstore.deletePet", json!({ "petId": "missing" }), "o6"),
        )
        .await;
    assert_eq!(seen.last()["path"], "/v1/pets/missing");
    let text = missing.to_string();
    assert!(
        !text.contains("shard") && !text.contains("internal detail"),
        "{missing}"
    );
    let answer = mcp_call(
        &server.base,
        "dana-dev-key",
        "petstore_deletePet",
        json!({ "petId": "missing" }),
    )
    .await;
    assert_eq!(seen.last()["method"], "DELETE");
    assert_eq!(seen.last()["path"], "/v1/pets/missing");
    let result = &answer["result"];
    assert_eq!(result["isError"], true, "{answer}");
    let error = &result["structuredContent"]["error"];
    assert_eq!(error["code"], "EXECUTION_FAILED", "{answer}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("PET_NOT_FOUND")),
        "{answer}"
    );
    let text = answer.to_string();
    assert!(
        !text.contains("shard") && !text.contains("internal detail"),
        "{answer}"
    );
}

/// One MCP `tools/call` on a fresh session of `/mcp` (initialize, initialized, call).
async fn mcp_call(base: &str, key: &str, tool: &str, args: Value) -> Value {
    let http = reqwest::Client::new();
    let url = format!("{base}/mcp");
    let mut session: Option<String> = None;
    let mut send = async |body: Value| -> Option<Value> {
        let mut req = http
            .post(&url)
            .bearer_auth(key)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(s) = &session {
            req = req.header("mcp-session-id", s);
        }
        let r = req.send().await.expect("send");
        assert!(r.status().is_success(), "MCP HTTP {}", r.status());
        if let Some(s) = r
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            session = Some(s.to_string());
        }
        let text = r.text().await.expect("body");
        let id = body.get("id").cloned()?;
        text.lines()
            .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v.get("id") == Some(&id))
    };
    let init = send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "openapi-import", "version": "0"}}}),
    )
    .await;
    assert!(
        init.is_some_and(|i| i.get("result").is_some()),
        "initialize"
    );
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": tool, "arguments": args}}))
    .await
    .expect("an answer to tools/call")
}

/// The operator's edit: every imported entry's `expose = {}` turned on for the AI SDK and
/// MCP doors.
fn expose_everything(entries: &str) -> String {
    let out = entries.replace("expose = {}", "expose = { aiSdk = true, mcp = true }");
    assert_eq!(
        out.matches("expose = { aiSdk = true, mcp = true }").count(),
        4,
        "each entry says `expose = {{}}`: {entries}"
    );
    out
}
