//! The one admission order of every door (issue 33: concealment through the journal,
//! nothing stored before validation, the namespace budget, resume edges), against the real
//! `capgate serve` over HTTP and MCP, on SQLite and Postgres where the store matters.

use crate::common;

use common::*;
use serde_json::{Value, json};
use sha2::Digest;
use std::path::{Path, PathBuf};
use std::time::Duration;

const DANA: &str = "dana-dev-key";
const PRIYA: &str = "priya-dev-key";
const EVE: &str = "eve-dev-key";
/// The back-office workflow's key: the only one that opens `/workflow`.
const WORKFLOW: &str = "ops-workflow-key";

/// The side-effect gate's plugin table and a policy that hides destructive capabilities on
/// every model-facing surface (discovery and invocation), plus `vault.read`, exposed on
/// all three and hidden by it from everyone.
fn hidden_vault() -> String {
    let gate = root().join("plugins/target/wasm32-wasip2/release/side_effect_gate.wasm");
    let digest = hex::encode(sha2::Sha256::digest(
        std::fs::read(&gate).expect("side_effect_gate.wasm: run `cargo xtask build-plugins`"),
    ));
    format!(
        r#"
[plugins.side-effect-gate]
path = "side_effect_gate.wasm"
sha256 = "{digest}"

[policies.hideDestructive]
plugin = "side-effect-gate"
config = {{ sideEffects = ["destructive"], surfaces = ["aiSdk", "mcp", "workflow"], action = "hide" }}
phases = ["discovery", "invocation"]

[[capabilities]]
id = "vault.read"
description = "Read the vault."
expose = {{ aiSdk = true, mcp = true, workflow = true }}
sideEffect = "destructive"
risk = "critical"
inputSchema = {{ type = "object" }}
policies = ["hideDestructive"]
procedure = {{ plugin = "support-desk" }}
"#
    )
}

/// An outcome or tool result serialized as received, its own execution id blanked: what
/// would tell one refusal from another, if anything did.
fn blanked(v: &Value) -> String {
    let text = serde_json::to_string(v).expect("serialize");
    let mut out = text.clone();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("exe_") {
        let id: String = rest[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .collect();
        out = out.replace(&id, "exe_");
        rest = &rest[i + id.len()..];
    }
    out
}

fn invoke_body(capability: &str, id: &str, input: Value) -> Value {
    json!({"capabilityId": capability, "invocationId": id, "input": input})
}

/// Audit events, read from the store the moment this is called.
fn audit(store: &str, filter: &[&str]) -> Vec<Value> {
    let mut args = vec!["audit", "query", "--store", store, "--limit", "10000"];
    args.extend_from_slice(filter);
    capgate(&args)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON event per line"))
        .collect()
}

fn types(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

/// Run `test` on a SQLite file and on a fresh Postgres database.
async fn on_both_stores(test: impl AsyncFn(&str)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = format!("sqlite://{}", dir.path().join("capgate.db").display());
    test(&sqlite).await;
    let pg = postgres_db().await;
    assert!(
        pg.is_some() || !ci(),
        "CI=true but {PG_ENV} is not set: these tests must run on Postgres too"
    );
    if let Some(pg) = pg {
        capgate(&["migrate", "--store", &pg.url]);
        test(&pg.url).await;
    }
}

// ── 1. Concealment holds afterwards too ────────────────────────────────────────────────

async fn hidden_is_unknown_on_every_route(store: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(dir.path(), |t| t, &hidden_vault());
    let s = Server::start(&config, store);
    for (route, key) in [("agent", DANA), ("workflow", WORKFLOW)] {
        let c = Caller::new(key);
        let url = |op: &str| format!("{}/{route}/{op}", s.base);
        let call = async |capability: &str, id: &str, input: Value| {
            let (status, answer) = c
                .post(&url("invoke"), &invoke_body(capability, id, input))
                .await;
            assert_eq!(status, 200, "{route} {capability}: {answer}");
            answer
        };
        let receipt = async |id: &str| {
            let (status, receipt) = c
                .post(&url("getInvocation"), &json!({"invocationId": id}))
                .await;
            assert_eq!(status, 200, "{receipt}");
            receipt
        };

        // A fresh id, first for the unknown name and then, the very same id, for the hidden
        // one: both the concealed not-found, byte for byte, and nothing stored.
        let unknown = call("no.such", "inv_fresh", json!({})).await;
        assert_eq!(
            unknown["error"]["code"], "CAPABILITY_NOT_FOUND",
            "{unknown}"
        );
        let hidden = call("vault.read", "inv_fresh", json!({})).await;
        assert_eq!(blanked(&hidden), blanked(&unknown), "{route}: SI-8");
        assert_eq!(receipt("inv_fresh").await, Value::Null, "{route}");

        // A hidden call's id reads exactly like one never used, and reusing it with other
        // input is answered as for an unknown capability, never INVOCATION_CONFLICT.
        let hidden_first = call("vault.read", "inv_hidden", json!({"a": 1})).await;
        assert_eq!(receipt("inv_hidden").await, receipt("inv_never_used").await);
        let reused_hidden = call("vault.read", "inv_hidden", json!({"b": 2})).await;
        let reused_unknown = call("no.such", "inv_hidden", json!({"b": 2})).await;
        let unknown_first = call("no.such", "inv_hidden", json!({"a": 1})).await;
        assert_eq!(blanked(&hidden_first), blanked(&unknown_first), "{route}");
        assert_eq!(
            reused_hidden["error"]["code"], "CAPABILITY_NOT_FOUND",
            "{reused_hidden}"
        );
        assert_eq!(blanked(&reused_hidden), blanked(&reused_unknown), "{route}");
        assert_eq!(receipt("inv_hidden").await, Value::Null, "{route}");

        // An id bound to a call the caller could see: reusing it for either name is the
        // same INVOCATION_CONFLICT.
        let bound = call("customers.search", "inv_bound", json!({"query": "acme"})).await;
        assert_eq!(bound["status"], "completed", "{bound}");
        let over_hidden = call("vault.read", "inv_bound", json!({})).await;
        let over_unknown = call("no.such", "inv_bound", json!({})).await;
        assert_eq!(
            over_hidden["error"]["code"], "INVOCATION_CONFLICT",
            "{over_hidden}"
        );
        assert_eq!(blanked(&over_hidden), blanked(&over_unknown), "{route}");

        // Audited alike: requested, then denied (the true reason in the audit only).
        for (answer, reason) in [(&unknown, "unknown"), (&hidden, "hidden")] {
            let execution = answer["executionId"].as_str().expect("executionId");
            let events = audit(store, &["--execution", execution]);
            assert_eq!(
                types(&events),
                ["capability.requested", "capability.denied"],
                "{route}: {events:?}"
            );
            assert_eq!(events[1]["data"]["reason"], reason, "{route}");
        }
    }

    // /mcp: the hidden tool and an unknown one are one answer.
    let mut mcp = Mcp::connect(&s.base, DANA).await;
    let unknown = mcp.call("no_such_tool", json!({})).await;
    let hidden = mcp.call("vault_read", json!({})).await;
    assert_eq!(
        hidden["result"]["structuredContent"]["error"]["code"], "CAPABILITY_NOT_FOUND",
        "{hidden}"
    );
    assert_eq!(
        blanked(&hidden["result"]),
        blanked(&unknown["result"]),
        "mcp: SI-8"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_policy_hidden_capability_is_answered_audited_and_stored_like_an_unknown_one() {
    on_both_stores(hidden_is_unknown_on_every_route).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_authorizer_refusal_for_a_name_the_caller_cannot_discover_is_the_concealed_not_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let wasm = root().join("plugins/target/wasm32-wasip2/release/namespace_gate.wasm");
    let digest = hex::encode(sha2::Sha256::digest(
        std::fs::read(&wasm).expect("namespace-gate plugin built"),
    ));
    // The authorizer refuses every invoke of org_1.
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "authorize = \"authenticated\"",
                "authorize = { plugin = \"gate\", config = { denyOperations = [\"invoke\"] } }",
            )
        },
        &format!(
            "[plugins.gate]\npath = \"namespace_gate.wasm\"\nsha256 = \"{digest}\"\n{}",
            hidden_vault()
        ),
    );
    let s = Server::start(&config, &store);
    let dana = Caller::new(DANA);
    let url = format!("{}/agent/invoke", s.base);
    // A capability she can discover: the authorizer's 403.
    let (status, refused) = dana
        .post(
            &url,
            &invoke_body("customers.search", "inv_1", json!({"query": "acme"})),
        )
        .await;
    assert_eq!(status, 403, "{refused}");
    // One she cannot discover and one that does not exist: the same concealed not-found.
    let (status, unknown) = dana
        .post(&url, &invoke_body("no.such", "inv_2", json!({})))
        .await;
    assert_eq!(status, 200, "{unknown}");
    let (status, hidden) = dana
        .post(&url, &invoke_body("vault.read", "inv_2", json!({})))
        .await;
    assert_eq!(status, 200, "{hidden}");
    assert_eq!(
        unknown["error"]["code"], "CAPABILITY_NOT_FOUND",
        "{unknown}"
    );
    assert_eq!(blanked(&hidden), blanked(&unknown));

    let mut mcp = Mcp::connect(&s.base, DANA).await;
    let visible = mcp.call("customers_search", json!({"query": "acme"})).await;
    assert!(visible.get("error").is_some(), "{visible}");
    let unknown = mcp.call("no_such_tool", json!({})).await;
    let hidden = mcp.call("vault_read", json!({})).await;
    assert_eq!(
        unknown["result"]["structuredContent"]["error"]["code"], "CAPABILITY_NOT_FOUND",
        "{unknown}"
    );
    assert_eq!(blanked(&hidden["result"]), blanked(&unknown["result"]));
}

/// Issue 55 (SI-8, seed 004): a principal the authorizer refuses everything (it may not even
/// describe) cannot tell a real capability id from an unknown one: on `/agent` and on
/// `/mcp`, both answer the same concealed not-found, and the authorizer is asked for both.
#[tokio::test(flavor = "multi_thread")]
async fn a_principal_refused_everything_cannot_tell_real_capability_ids_from_unknown_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let wasm = root().join("plugins/target/wasm32-wasip2/release/namespace_gate.wasm");
    let digest = hex::encode(sha2::Sha256::digest(
        std::fs::read(&wasm).expect("namespace-gate plugin built"),
    ));
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "authorize = \"authenticated\"",
                "authorize = { plugin = \"gate\", config = { denyOperations = [\"invoke\", \"describe\"] } }",
            )
        },
        &format!("[plugins.gate]\npath = \"namespace_gate.wasm\"\nsha256 = \"{digest}\"\n"),
    );
    let s = Server::start(&config, &store);
    let dana = Caller::new(DANA);
    let url = format!("{}/agent/invoke", s.base);
    let (real_status, real) = dana
        .post(
            &url,
            &invoke_body("customers.search", "inv_1", json!({"query": "acme"})),
        )
        .await;
    let (unknown_status, unknown) = dana
        .post(
            &url,
            &invoke_body("no.such", "inv_2", json!({"query": "acme"})),
        )
        .await;
    assert_eq!(real_status, unknown_status, "{real} vs {unknown}");
    assert_eq!(real["error"]["code"], "CAPABILITY_NOT_FOUND", "{real}");
    let same = |mut v: serde_json::Value| {
        v["invocationId"] = json!("*");
        blanked(&v)
    };
    assert_eq!(same(real), same(unknown));

    let mut mcp = Mcp::connect(&s.base, DANA).await;
    let real = mcp.call("customers_search", json!({"query": "acme"})).await;
    let unknown = mcp.call("no_such_tool", json!({"query": "acme"})).await;
    assert_eq!(
        real["result"]["structuredContent"]["error"]["code"], "CAPABILITY_NOT_FOUND",
        "{real}"
    );
    assert_eq!(blanked(&real["result"]), blanked(&unknown["result"]));
}

// ── 2. Nothing stored before validation; the namespace budget ─────────────────────────────

/// Bytes of the stopped server's SQLite database once its WAL is checkpointed into it and
/// truncated: what it stores, not the WAL's reusable space.
async fn db_bytes(dir: &Path) -> u64 {
    use sqlx::Connection;
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(dir.join("capgate.db"));
    let mut db = sqlx::SqliteConnection::connect_with(&options)
        .await
        .expect("open the database");
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut db)
        .await
        .expect("checkpoint");
    db.close().await.expect("close");
    ["capgate.db", "capgate.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// Stop `server` the way an orchestrator does (SIGTERM): the store is closed, so SQLite
/// checkpoints its WAL into the database file and what is measured is what is stored.
fn stop(mut server: Server) {
    server.terminate();
    assert!(server.wait_exit(Duration::from_secs(120)).success());
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_oversized_invalid_inputs_leave_the_database_size_unchanged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let config = deployment(dir.path(), |t| t, "");
    let dana = Caller::new(DANA);
    // customers.search allows a 200-character query; this one is a megabyte (the body stays
    // under the 1 MiB body limit).
    let query = "q".repeat(1_000_000);
    let body = |i: usize| {
        serde_json::to_vec(&invoke_body(
            "customers.search",
            &format!("inv_big_{i}"),
            json!({"query": query}),
        ))
        .expect("body")
    };
    assert!(body(0).len() < 1 << 20);
    // Warm up (the schema, the first audit pages), then measure what is stored.
    let s = Server::start(&config, &store);
    let (status, warm) = dana
        .post_raw(&format!("{}/agent/invoke", s.base), body(1000))
        .await;
    assert_eq!(status, 200, "{warm}");
    stop(s);
    let before = db_bytes(dir.path()).await;

    let s = Server::start(&config, &store);
    let url = format!("{}/agent/invoke", s.base);
    for i in 0..200 {
        let (status, answer) = dana.post_raw(&url, body(i)).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["error"]["code"], "INPUT_INVALID", "{answer}");
    }
    let (status, receipt) = dana
        .post(
            &format!("{}/agent/getInvocation", s.base),
            &json!({"invocationId": "inv_big_7"}),
        )
        .await;
    assert_eq!((status, receipt), (200, Value::Null));
    stop(s);
    let after = db_bytes(dir.path()).await;
    assert!(
        after.saturating_sub(before) < 1_000_000,
        "the database grew by {} bytes for 200 invalid inputs",
        after.saturating_sub(before)
    );
}

async fn budget_refusal(store: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(
        dir.path(),
        |t| {
            t.replacen(
                "[gateway]\n",
                "[gateway]\njournalMaxRowsPerNamespace = 3\n",
                1,
            )
        },
        "",
    );
    let s = Server::start(&config, store);
    let url = |op: &str| format!("{}/agent/{op}", s.base);
    let dana = Caller::new(DANA);
    let search = |i: u32| {
        invoke_body(
            "customers.search",
            &format!("inv_q{i}"),
            json!({"query": "acme"}),
        )
    };
    let mut first = Value::Null;
    for i in 0..3 {
        let (status, answer) = dana.post(&url("invoke"), &search(i)).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["status"], "completed", "{answer}");
        if i == 0 {
            first = answer;
        }
    }
    // The fourth record would take org_1 past its budget: 507, nothing stored, nothing run.
    let (status, refused) = dana.post(&url("invoke"), &search(3)).await;
    assert_eq!(status, 507, "{refused}");
    assert_eq!(
        refused["error"]["code"], "STORAGE_QUOTA_EXCEEDED",
        "{refused}"
    );
    assert_eq!(refused["error"]["retryable"], false, "{refused}");
    let (_, receipt) = dana
        .post(&url("getInvocation"), &json!({"invocationId": "inv_q3"}))
        .await;
    assert_eq!(receipt, Value::Null);
    let started = audit(
        store,
        &["--actor", "u_dana", "--type", "capability.started"],
    );
    assert_eq!(started.len(), 3, "only the admitted calls ran: {started:?}");
    // What is stored still replays; an invalid input is still answered (it stores nothing).
    let (status, replayed) = dana.post(&url("invoke"), &search(0)).await;
    assert_eq!(status, 200);
    assert_eq!(replayed, first);
    let (status, invalid) = dana
        .post(
            &url("invoke"),
            &invoke_body("customers.search", "inv_bad", json!({"nope": 1})),
        )
        .await;
    assert_eq!(status, 200, "{invalid}");
    assert_eq!(invalid["error"]["code"], "INPUT_INVALID", "{invalid}");
    // Another namespace has a budget of its own.
    let (status, other) = Caller::new(EVE).post(&url("invoke"), &search(9)).await;
    assert_eq!(status, 200, "{other}");
    assert_ne!(other["error"]["code"], "STORAGE_QUOTA_EXCEEDED", "{other}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_namespace_over_its_journal_budget_is_refused_507_with_nothing_stored_or_run() {
    on_both_stores(budget_refusal).await;
}

// ── 3 and 4. Resume ──────────────────────────────────────────────────────────────────────

/// A deployment that can be rewritten and reloaded with SIGHUP.
struct Reloadable {
    dir: tempfile::TempDir,
    store: String,
    server: Server,
}

impl Reloadable {
    fn start(store: Option<&str>, edit: &dyn Fn(String) -> String) -> Reloadable {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store.map_or_else(
            || format!("sqlite://{}", dir.path().join("capgate.db").display()),
            str::to_string,
        );
        let config = write_config(dir.path(), edit);
        let server = Server::start(&config, &store);
        Reloadable { dir, store, server }
    }

    /// Rewrite the configuration and reload it; returns once the reload is recorded.
    async fn reload(&self, edit: &dyn Fn(String) -> String) {
        let before = audit(&self.store, &["--type", "capgate.config.reloaded"]).len();
        write_config(self.dir.path(), edit);
        let sent = std::process::Command::new("kill")
            .args(["-HUP", &self.server.pid().to_string()])
            .status()
            .expect("kill -HUP");
        assert!(sent.success());
        for _ in 0..240 {
            if audit(&self.store, &["--type", "capgate.config.reloaded"]).len() > before {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("the reload was not recorded");
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.base)
    }
}

fn write_config(dir: &Path, edit: &dyn Fn(String) -> String) -> PathBuf {
    deployment(dir, edit, "")
}

/// Held refunds of $649 (refundLimit's `manager` approval), and a helper to approve.
async fn held_refund(r: &Reloadable, id: &str, correlation: Option<&str>) -> String {
    let mut body = invoke_body(
        "orders.refund",
        id,
        json!({"orderId": "ord_42", "amount": 649, "reason": "damaged item"}),
    );
    if let Some(c) = correlation {
        body["correlationId"] = json!(c);
    }
    let (status, held) = Caller::new(DANA).post(&r.url("/agent/invoke"), &body).await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["status"], "approval-required", "{held}");
    held["approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_string()
}

async fn approve(r: &Reloadable, approval: &str) {
    let (status, decided) = Caller::new(PRIYA)
        .post(
            &r.url(&format!("/approvals/{approval}/decision")),
            &json!({"decision": "approved"}),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
}

async fn resume(r: &Reloadable, approval: &str, id: &str) -> Value {
    let (status, answer) = Caller::new(DANA)
        .post(
            &r.url("/agent/resumeApproval"),
            &json!({"approvalId": approval, "invocationId": id}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    answer
}

const REVISION: &str = "revision = \"customer-support-2026-11\"";

async fn revision_bump(store: &str) {
    let r = Reloadable::start(Some(store), &|t| t);
    let kept = held_refund(&r, "inv_kept", None).await;
    let changed = held_refund(&r, "inv_changed", None).await;
    // A revision-only bump: every contract digest changes, orders.refund's own does not.
    r.reload(&|t| t.replace(REVISION, "revision = \"customer-support-2026-12\""))
        .await;
    approve(&r, &kept).await;
    let done = resume(&r, &kept, "inv_kept").await;
    assert_eq!(done["status"], "completed", "{done}");
    // A change to orders.refund itself strands its approval.
    r.reload(&|t| {
        t.replace(REVISION, "revision = \"customer-support-2026-12\"")
            .replace(
                "description = \"Refund an order.\"",
                "description = \"Refund an order (v2).\"",
            )
    })
    .await;
    approve(&r, &changed).await;
    let stale = resume(&r, &changed, "inv_changed").await;
    assert_eq!(stale["error"]["code"], "CONTRACT_MISMATCH", "{stale}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pending_approval_survives_a_revision_only_bump_but_not_a_change_to_its_capability() {
    on_both_stores(revision_bump).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_require_approval_on_resume_is_satisfied_only_by_an_approval_of_its_types() {
    // orders.refund also needs a human confirmation; refundLimit's maximum is high enough
    // that the call asks for that type only.
    let static_confirmation = |t: String| {
        t.replace(
            "policies = [\"orgIsolation\", \"refundLimit\"]",
            "policies = [\"orgIsolation\", \"refundLimit\"]\napproval = { required = true, type = \"human-confirmation\" }",
        )
    };
    let r = Reloadable::start(None, &|t| {
        static_confirmation(t).replace("maxAmount = 500", "maxAmount = 1000")
    });
    let (_, held) = Caller::new(DANA)
        .post(
            &r.url("/agent/invoke"),
            &invoke_body(
                "orders.refund",
                "inv_typed",
                json!({"orderId": "ord_42", "amount": 649, "reason": "damaged item"}),
            ),
        )
        .await;
    assert_eq!(
        held["approval"]["types"],
        json!(["human-confirmation"]),
        "{held}"
    );
    let approval = held["approval"]["id"].as_str().expect("id").to_string();
    approve(&r, &approval).await;
    // The maximum drops (the contract digest covers policy names, not their settings): the
    // resume's fresh check now requires a `manager` approval, which this one is not.
    r.reload(&|t| static_confirmation(t)).await;
    let refused = resume(&r, &approval, "inv_typed").await;
    assert_eq!(refused["status"], "failed", "{refused}");
    assert_eq!(refused["error"]["code"], "POLICY_DENIED", "{refused}");
    let execution = refused["executionId"].as_str().expect("executionId");
    let events = audit(&r.store, &["--execution", execution]);
    assert_eq!(types(&events), ["capability.denied"], "{events:?}");
    assert!(
        audit(&r.store, &["--type", "capability.started"]).is_empty(),
        "nothing ran"
    );
    // Left unconsumed: the approval is still just approved.
    let (status, view) = Caller::new(PRIYA)
        .get(&r.url(&format!("/approvals/{approval}")))
        .await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["status"], "approved", "{view}");
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_resume_makes_the_contract_check_of_the_http_door_and_audits_its_refusal() {
    let r = Reloadable::start(None, &|t| t);
    let mut mcp = Mcp::connect(&r.server.base, DANA).await;
    let asked = mcp
        .call(
            "orders_refund",
            json!({"orderId": "ord_42", "amount": 649, "reason": "damaged item"}),
        )
        .await;
    let approval = asked["result"]["structuredContent"]["approval"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("an approval over MCP: {asked}"))
        .to_string();
    approve(&r, &approval).await;
    r.reload(&|t| {
        t.replace(
            "description = \"Refund an order.\"",
            "description = \"Refund an order (v2).\"",
        )
    })
    .await;
    let mut mcp = Mcp::connect(&r.server.base, DANA).await;
    let refused = mcp
        .call("approvals_resume", json!({"approvalId": approval}))
        .await;
    let outcome = &refused["result"]["structuredContent"];
    assert_eq!(outcome["status"], "failed", "{refused}");
    assert_eq!(outcome["error"]["code"], "CONTRACT_MISMATCH", "{refused}");
    let failed: Vec<Value> = audit(&r.store, &["--type", "capability.failed"])
        .into_iter()
        .filter(|e| e["data"]["approvalId"] == approval.as_str())
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["data"]["code"], "ADAPTER_ERROR", "{failed:?}");
    assert_eq!(failed[0]["surface"], "mcp");
    assert!(
        audit(&r.store, &["--type", "capability.started"]).is_empty(),
        "nothing ran"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_resume_refusal_answered_before_the_runtime_is_audited() {
    let r = Reloadable::start(None, &|t| t);
    let approval = held_refund(&r, "inv_pending", Some("run-1")).await;
    let failed_for = |approval: &str| -> Vec<Value> {
        audit(&r.store, &["--type", "capability.failed"])
            .into_iter()
            .filter(|e| e["data"]["approvalId"] == approval)
            .collect()
    };

    // Still pending.
    let pending = resume(&r, &approval, "inv_pending").await;
    assert_eq!(pending["error"]["code"], "APPROVAL_PENDING", "{pending}");
    let events = failed_for(&approval);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["data"]["code"], "APPROVAL_PENDING");
    assert_eq!(events[0]["capabilityId"], "orders.refund");
    assert_eq!(events[0]["correlationId"], "run-1");

    // An approval id nobody issued.
    let unknown = resume(&r, "apr_nobody", "inv_pending").await;
    assert_eq!(unknown["error"]["code"], "INTERNAL_ERROR", "{unknown}");
    let events = failed_for("apr_nobody");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["data"]["code"], "INTERNAL_ERROR");
    assert_eq!(events[0]["actor"]["id"], "u_dana");

    // A stale digest from the caller.
    approve(&r, &approval).await;
    let (_, stale) = Caller::new(DANA)
        .post(
            &r.url("/agent/resumeApproval"),
            &json!({"approvalId": approval, "invocationId": "inv_pending", "contractDigest": "sha256:stale"}),
        )
        .await;
    assert_eq!(stale["error"]["code"], "CONTRACT_MISMATCH", "{stale}");
    let events = failed_for(&approval);
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(
        events.iter().any(|e| e["data"]["code"] == "ADAPTER_ERROR"),
        "{events:?}"
    );

    // Over MCP the runtime answers these itself, audited the same way.
    let mut mcp = Mcp::connect(&r.server.base, DANA).await;
    let refused = mcp
        .call("approvals_resume", json!({"approvalId": "apr_nobody_mcp"}))
        .await;
    assert_eq!(
        refused["result"]["structuredContent"]["status"], "failed",
        "{refused}"
    );
    let events = failed_for("apr_nobody_mcp");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["surface"], "mcp");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resume_keeps_the_original_correlation_id_and_records_its_own_beside_it() {
    let r = Reloadable::start(None, &|t| t);
    let approval = held_refund(&r, "inv_corr", Some("run-original")).await;
    approve(&r, &approval).await;
    let (status, done) = Caller::new(DANA)
        .post(
            &r.url("/agent/resumeApproval"),
            &json!({"approvalId": approval, "invocationId": "inv_corr", "correlationId": "run-resume"}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    let execution = done["executionId"].as_str().expect("executionId");
    let events = audit(&r.store, &["--execution", execution]);
    assert!(!events.is_empty());
    for e in &events {
        assert_eq!(e["correlationId"], "run-original", "{e}");
    }
    let started = events
        .iter()
        .find(|e| e["type"] == "capability.started")
        .expect("capability.started");
    assert_eq!(
        started["data"]["resumeCorrelationId"], "run-resume",
        "{started}"
    );
    let (_, receipt) = Caller::new(DANA)
        .post(
            &r.url("/agent/getInvocation"),
            &json!({"invocationId": "inv_corr"}),
        )
        .await;
    assert_eq!(receipt["correlationId"], "run-original", "{receipt}");
}
