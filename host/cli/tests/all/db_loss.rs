//! Database loss under load, against the real `capgate serve`: a private Postgres cluster
//! this test stops (`pg_ctl stop -m immediate`) and starts again mid-load, and a SQLite file
//! on a small tmpfs this test fills mid-load and frees again, each in strict and in
//! best-effort audit.
//!
//! Every call the load sent gets an answer within a bound (no hang): it completed, or it
//! failed closed — `AUDIT_UNAVAILABLE` (strict audit, the claim was taken but
//! `capability.started` could not be written) or a `503` whose body says the journal is
//! unavailable, nothing more. `/readyz` goes `503` while the database is away and `200`
//! after; calls complete again without restarting capgate. Then, from the store: every
//! completed call's receipt is settled and it has exactly one `capability.started` and one
//! `capability.completed`; a call refused for AUDIT_UNAVAILABLE has no `capability.started`;
//! and the test's own upstream saw every completed call exactly once and no refused call at
//! all (replaying completed invocation ids runs nothing again).

use crate::common;

use axum::Router;
use axum::routing::post;
use common::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The servers' log filter: errors, but not the gateway's one line per refused call.
const QUIET_LOG: &str = "error,capgate::gateway=off";

/// The gateway's request ceiling in these deployments.
const REQUEST_TIMEOUT_MS: u64 = 15_000;
/// No request may take longer than this to be answered (the ceiling plus slack).
const ANSWER_BOUND: Duration = Duration::from_millis(REQUEST_TIMEOUT_MS + 5_000);
/// How long the store (journal settlements, held audit events) may take to catch up, and
/// readiness to flip, once the database is back.
const RECOVERY_BOUND: Duration = Duration::from_secs(45);
/// Concurrent callers of the load.
const WORKERS: usize = 6;

/// The application's backend: counts each refund by order id (the invocation id).
struct Upstream {
    url: String,
    effects: Arc<Mutex<HashMap<String, u32>>>,
}

impl Upstream {
    async fn start() -> Upstream {
        let effects: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        let seen = effects.clone();
        let app = Router::new().route(
            "/refund",
            post(move |axum::Json(call): axum::Json<Value>| {
                let seen = seen.clone();
                async move {
                    let order = call["input"]["orderId"].as_str().unwrap_or("").to_string();
                    *seen
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .entry(order)
                        .or_default() += 1;
                    axum::Json(json!({ "refundId": "ref_1", "status": "issued" }))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Upstream {
            url: format!("http://{addr}/refund"),
            effects,
        }
    }

    fn effects(&self, order: &str) -> u32 {
        self.effects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(order)
            .copied()
            .unwrap_or(0)
    }

    fn total(&self) -> u32 {
        self.effects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .sum()
    }
}

const KEY: &str = "dana-dbloss-key";

/// A deployment with one HTTP-upstream capability, the given audit mode and a short pool
/// acquire timeout.
fn write_config(dir: &Path, upstream: &str, strict: bool) -> PathBuf {
    let config = dir.join("capgate.toml");
    let text = format!(
        r#"
revision = "db-loss-test"

[store]
acquireTimeoutMs = 1500

[audit]
strict = {strict}

[[capabilities]]
id = "orders.refund"
description = "Refund an order"
expose = {{ aiSdk = true }}
sideEffect = "write"
risk = "low"
timeoutMs = 5000
inputSchema = {{ type = "object", properties = {{ orderId = {{ type = "string" }} }}, required = ["orderId"] }}
procedure = {{ http = {{ target = "orders", url = "{upstream}" }} }}

[gateway]
authorize = "authenticated"
requestTimeoutMs = {REQUEST_TIMEOUT_MS}
auditDrainTimeoutMs = 3000
routes = [{{ path = "/agent", surface = "aiSdk" }}]

[[gateway.apiKeys]]
sha256 = "{hash}"
namespace = "org_1"
surfaces = ["aiSdk"]
actor = {{ id = "u_dana", kind = "user", attributes = {{ orgId = "org_1" }} }}
"#,
        hash = key_hash(KEY),
    );
    std::fs::write(&config, text).expect("write config");
    config
}

/// One call of the load and its answer.
#[derive(Debug, Clone)]
struct Sent {
    id: String,
    status: u16,
    body: Value,
}

/// What an answer was, or a panic naming it when it is neither completed nor fail-closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Completed,
    AuditUnavailable,
    Unavailable,
}

fn classify(s: &Sent, strict: bool) -> Answer {
    match (s.status, s.body["status"].as_str()) {
        (200, Some("completed")) => {
            assert!(
                s.body["executionId"].as_str().is_some(),
                "{}: completed without an execution id: {}",
                s.id,
                s.body
            );
            Answer::Completed
        }
        // AUDIT_UNAVAILABLE is not exposed to the model (the spec's table): the answer is
        // the public INTERNAL_ERROR; the store's account below says what it was.
        (200, Some("failed"))
            if s.body["error"]
                == json!({"code": "INTERNAL_ERROR", "message": "The operation failed.", "retryable": false}) =>
        {
            assert!(
                strict,
                "{}: a failed call in best-effort audit: {}",
                s.id, s.body
            );
            Answer::AuditUnavailable
        }
        (503, _) => {
            // The door's shared rate-limit buckets (`scope = "store"`, the default on
            // Postgres) are asked first, the journal next: either store refuses closed.
            let unavailable = |what: &str| {
                json!({"error": {
                    "code": "INTERNAL_ERROR",
                    "message": format!("The {what} is unavailable."),
                    "retryable": true,
                }})
            };
            assert!(
                s.body == unavailable("invocation journal")
                    || s.body == unavailable("rate-limit store"),
                "{}: a 503 says what is unavailable and nothing more: {}",
                s.id,
                s.body
            );
            Answer::Unavailable
        }
        _ => panic!(
            "{}: neither completed nor failed closed: {} {}",
            s.id, s.status, s.body
        ),
    }
}

fn call(id: &str) -> Value {
    json!({
        "capabilityId": "orders.refund",
        "input": { "orderId": id },
        "invocationId": id,
        "correlationId": id,
    })
}

/// Send one call; panic if it is not answered within [`ANSWER_BOUND`].
async fn send(caller: &Caller, base: &str, id: &str) -> Sent {
    let url = format!("{base}/agent/invoke");
    let started = Instant::now();
    match tokio::time::timeout(ANSWER_BOUND, caller.post(&url, &call(id))).await {
        Ok((status, body)) => Sent {
            id: id.to_string(),
            status,
            body,
        },
        Err(_) => panic!(
            "{id}: no answer within {ANSWER_BOUND:?} (after {:?})",
            started.elapsed()
        ),
    }
}

/// [`WORKERS`] callers sending fresh invocation ids until `stop`; every answer.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<Vec<Sent>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(base: &str, prefix: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
        let tasks = (0..WORKERS)
            .map(|w| {
                let (stop, sent) = (stop.clone(), sent.clone());
                let base = base.to_string();
                let prefix = prefix.to_string();
                tokio::spawn(async move {
                    let caller = Caller::new(KEY);
                    let mut n = 0u32;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let s = send(&caller, &base, &format!("{prefix}-{w}-{n}")).await;
                        let failed = s.status != 200;
                        sent.lock().unwrap_or_else(|p| p.into_inner()).push(s);
                        if failed {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                })
            })
            .collect();
        Load { stop, sent, tasks }
    }

    fn snapshot(&self) -> Vec<Sent> {
        self.sent.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Wait until an answer satisfies `pred` (bounded), while the load runs.
    async fn until(&self, what: &str, bound: Duration, pred: impl Fn(&Sent) -> bool) {
        let deadline = Instant::now() + bound;
        loop {
            if self.snapshot().iter().any(&pred) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no answer {what} within {bound:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn finish(self) -> Vec<Sent> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.expect("a load worker panicked");
        }
        Arc::try_unwrap(self.sent)
            .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
            .unwrap_or_else(|a| a.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

/// `/readyz`'s status, bounded.
async fn readyz(base: &str) -> u16 {
    let http = reqwest::Client::new();
    match tokio::time::timeout(ANSWER_BOUND, http.get(format!("{base}/readyz")).send()).await {
        Ok(Ok(r)) => r.status().as_u16(),
        Ok(Err(e)) => panic!("/readyz: {e}"),
        Err(_) => panic!("/readyz did not answer within {ANSWER_BOUND:?}"),
    }
}

async fn readyz_becomes(base: &str, want: u16, bound: Duration) {
    let deadline = Instant::now() + bound;
    loop {
        let got = readyz(base).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz stayed {got}, not {want}, for {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How the database goes away and comes back.
trait Outage {
    fn break_it(&mut self);
    fn restore(&mut self);
}

/// The drill on a running server: load, outage, recovery, then the store's account.
async fn drill(
    server: &Server,
    store_url: &str,
    upstream: &Upstream,
    outage: &mut dyn Outage,
    strict: bool,
    name: &str,
) {
    let base = server.base.clone();
    let effects_before = upstream.total();
    readyz_becomes(&base, 200, RECOVERY_BOUND).await;
    let load = Load::start(&base, name);
    load.until("completed before the outage", RECOVERY_BOUND, |s| {
        s.status == 200 && s.body["status"] == "completed"
    })
    .await;

    outage.break_it();
    let broke_at = load.snapshot().len();
    // The outage is seen: a fail-closed answer, and readiness says unready.
    let bound = RECOVERY_BOUND;
    let deadline = Instant::now() + bound;
    loop {
        let now = load.snapshot();
        if now[broke_at..]
            .iter()
            .any(|s| classify(s, strict) != Answer::Completed)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: no call failed closed within {bound:?} of the database going away"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    readyz_becomes(&base, 503, RECOVERY_BOUND).await;
    // Let the outage last under load.
    tokio::time::sleep(Duration::from_secs(2)).await;

    outage.restore();
    let restored_at = load.snapshot().len();
    // Recovery without a restart: calls sent after the return complete again.
    let deadline = Instant::now() + RECOVERY_BOUND;
    loop {
        let now = load.snapshot();
        if now[restored_at..]
            .iter()
            .any(|s| s.status == 200 && s.body["status"] == "completed")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{name}: no call completed within {RECOVERY_BOUND:?} of the database's return"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    readyz_becomes(&base, 200, RECOVERY_BOUND).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent = load.finish().await;

    // ── The account ──
    let answers: Vec<(Sent, Answer)> = sent
        .into_iter()
        .map(|s| {
            let a = classify(&s, strict);
            (s, a)
        })
        .collect();
    let count = |a: Answer| answers.iter().filter(|(_, x)| *x == a).count();
    eprintln!(
        "{name}: {} calls: {} completed, {} AUDIT_UNAVAILABLE, {} 503",
        answers.len(),
        count(Answer::Completed),
        count(Answer::AuditUnavailable),
        count(Answer::Unavailable)
    );
    assert!(count(Answer::Completed) > 0);

    // Effects: each completed call ran exactly once, each refused one never.
    for (s, a) in &answers {
        let n = upstream.effects(&s.id);
        match a {
            Answer::Completed => assert_eq!(n, 1, "{}: completed, ran {n} times", s.id),
            _ => assert_eq!(n, 0, "{}: refused ({a:?}), yet ran {n} times", s.id),
        }
    }
    assert_eq!(
        upstream.total() - effects_before,
        count(Answer::Completed) as u32,
        "{name}: an effect without a completed answer"
    );

    // Receipts: every completed call (and every AUDIT_UNAVAILABLE one) is settled, with its
    // outcome, once the store is back (settlements that failed are retried by capgate).
    let caller = Caller::new(KEY);
    let deadline = Instant::now() + RECOVERY_BOUND;
    for (s, a) in answers.iter().filter(|(_, a)| *a != Answer::Unavailable) {
        loop {
            let (status, receipt) = caller
                .post(
                    &format!("{base}/agent/getInvocation"),
                    &json!({"invocationId": s.id}),
                )
                .await;
            if status == 200 && receipt["state"] == "settled" {
                assert_eq!(
                    receipt["outcome"]["executionId"], s.body["executionId"],
                    "{}: {receipt}",
                    s.id
                );
                let want = if *a == Answer::Completed {
                    "completed"
                } else {
                    "failed"
                };
                assert_eq!(receipt["outcome"]["status"], want, "{}: {receipt}", s.id);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{}: receipt not settled after the store's return: {status} {receipt}",
                s.id
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // Audit, from the store: held events land once it is back.
    let store = capgate_store::Store::open_with(
        store_url,
        capgate_store::StoreOptions {
            read_only: true,
            ..capgate_store::StoreOptions::default()
        },
    )
    .await
    .expect("open the store");
    let deadline = Instant::now() + RECOVERY_BOUND;
    let per_execution = loop {
        let mut per: HashMap<String, HashMap<String, u32>> = HashMap::new();
        for ty in [
            "capability.started",
            "capability.completed",
            "capability.failed",
        ] {
            let mut after = None;
            loop {
                let page = store
                    .audit_log()
                    .query(&capgate_store::AuditQuery {
                        event_type: Some(ty.to_string()),
                        after_id: after,
                        limit: Some(10_000),
                        ..capgate_store::AuditQuery::default()
                    })
                    .await
                    .expect("audit query");
                let Some(last) = page.last() else { break };
                after = Some(last.id);
                for row in &page {
                    let event = row.event.as_ref().expect("a well-formed audit row");
                    if let Some(e) = &event.execution_id {
                        *per.entry(e.clone())
                            .or_default()
                            .entry(ty.to_string())
                            .or_default() += 1;
                    }
                }
            }
        }
        let missing = answers.iter().find(|(s, a)| {
            *a == Answer::Completed && {
                let e = s.body["executionId"].as_str().unwrap_or_default();
                let got = per.get(e);
                got.and_then(|m| m.get("capability.started")).is_none()
                    || got.and_then(|m| m.get("capability.completed")).is_none()
            }
        });
        match missing {
            None => break per,
            Some((s, _)) => assert!(
                Instant::now() < deadline,
                "{name}: {} completed but lacks its started/completed audit records",
                s.id
            ),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    for (s, a) in &answers {
        let Some(e) = s.body["executionId"].as_str() else {
            continue;
        };
        let events = per_execution.get(e).cloned().unwrap_or_default();
        let n = |ty: &str| events.get(ty).copied().unwrap_or(0);
        match a {
            Answer::Completed => {
                assert_eq!(n("capability.started"), 1, "{}: {events:?}", s.id);
                assert_eq!(n("capability.completed"), 1, "{}: {events:?}", s.id);
            }
            Answer::AuditUnavailable => {
                assert_eq!(
                    n("capability.started"),
                    0,
                    "{}: refused, yet started: {events:?}",
                    s.id
                );
                assert_eq!(n("capability.completed"), 0, "{}: {events:?}", s.id);
                assert_eq!(n("capability.failed"), 1, "{}: {events:?}", s.id);
            }
            Answer::Unavailable => {}
        }
    }
    store.close().await;

    // Replaying completed ids runs nothing again.
    for (s, _) in answers
        .iter()
        .filter(|(_, a)| *a == Answer::Completed)
        .take(20)
    {
        let again = send(&caller, &base, &s.id).await;
        assert_eq!(again.status, 200, "{}", again.body);
        assert_eq!(
            again.body["executionId"], s.body["executionId"],
            "{}",
            again.body
        );
        assert_eq!(upstream.effects(&s.id), 1, "{}: replay ran it again", s.id);
    }
}

// ── Postgres: a private cluster this test stops and starts ─────────────────────────────

/// A Postgres cluster of this test's own (never the shared server): initdb'd as the
/// `postgres` user in a temporary directory, on a free port, stopped and removed on drop.
struct PrivateCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

fn pg_bin() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").is_file() && b.join("pg_ctl").is_file())
        .collect();
    found.sort();
    found.pop()
}

fn as_postgres(program: &Path, args: &[&str]) -> std::process::Output {
    Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("runuser {}: {e}", program.display()))
}

impl PrivateCluster {
    fn start(bin: PathBuf) -> PrivateCluster {
        let dir = tempfile::Builder::new()
            .prefix("capgate-dbloss-pg")
            .tempdir()
            .expect("tempdir");
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(chown.success(), "chown the cluster directory");
        let data = dir.path().join("data");
        let out = as_postgres(
            &bin.join("initdb"),
            &[
                "-D",
                &data.to_string_lossy(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
            ],
        );
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = PrivateCluster {
            bin,
            port: free_port(),
            dir,
        };
        cluster.pg_ctl_start();
        cluster
    }

    fn pg_ctl_start(&self) {
        let data = self.dir.path().join("data");
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("postgres.log");
        let out = as_postgres(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                &data.to_string_lossy(),
                "-o",
                &opts,
                "-l",
                &log.to_string_lossy(),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        assert!(
            out.status.success(),
            "pg_ctl start: {} {}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    fn stop_immediate(&self) -> bool {
        let data = self.dir.path().join("data");
        as_postgres(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                &data.to_string_lossy(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ],
        )
        .status
        .success()
    }

    fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        let _ = self.stop_immediate();
    }
}

impl Outage for PrivateCluster {
    fn break_it(&mut self) {
        assert!(self.stop_immediate(), "pg_ctl stop -m immediate");
    }
    fn restore(&mut self) {
        self.pg_ctl_start();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_stopped_mid_load_loses_nothing_runs_nothing_twice_and_recovers_by_itself() {
    let test = "postgres_stopped_mid_load_loses_nothing_runs_nothing_twice_and_recovers_by_itself";
    let runuser = || on_path("runuser").is_some();
    if !debian_tools(
        &["postgresql", "util-linux"],
        || pg_bin().is_some() && runuser(),
        test,
    ) {
        return;
    }
    let Some(bin) = pg_bin() else { return };
    let mut cluster = PrivateCluster::start(bin);
    let upstream = Upstream::start().await;
    for strict in [true, false] {
        let db = if strict {
            "strict_audit"
        } else {
            "best_effort"
        };
        {
            use sqlx::Connection;
            let mut admin = sqlx::PgConnection::connect(&cluster.url("postgres"))
                .await
                .expect("connect to the private cluster");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
                .execute(&mut admin)
                .await
                .expect("CREATE DATABASE");
            let _ = admin.close().await;
        }
        let url = cluster.url(db);
        capgate_store::migrate_url(&url).await.expect("migrate");
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write_config(dir.path(), &upstream.url, strict);
        // The gateway logs every refused call while the database is away: thousands of
        // lines that say nothing the assertions do not.
        let server = Server::start_with_env(&config, &url, &[("CAPGATE_LOG", QUIET_LOG)]);
        drill(
            &server,
            &url,
            &upstream,
            &mut cluster,
            strict,
            &format!("pg-{db}"),
        )
        .await;
    }
}

// ── SQLite: a small tmpfs this test fills ──────────────────────────────────────────────

/// A small tmpfs mounted on a temporary directory, unmounted on drop.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount(size: &str) -> Option<SmallFs> {
        let dir = tempfile::Builder::new()
            .prefix("capgate-dbloss-fs")
            .tempdir()
            .expect("tempdir");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallFs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Fills a file system with a filler file; `restore` deletes it.
struct Filler {
    file: PathBuf,
}

impl Outage for Filler {
    fn break_it(&mut self) {
        use std::io::Write;
        let mut f = std::fs::File::create(&self.file).expect("create the filler");
        let chunk = vec![0u8; 64 * 1024];
        loop {
            if f.write_all(&chunk).is_err() {
                break;
            }
        }
        // The last bytes: fill to the block.
        while f.write_all(&[0u8; 512]).is_ok() {}
        let _ = f.sync_all();
    }
    fn restore(&mut self) {
        std::fs::remove_file(&self.file).expect("remove the filler");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_on_a_full_disk_loses_nothing_runs_nothing_twice_and_recovers_by_itself() {
    let Some(fs) = SmallFs::mount("32m") else {
        assert!(
            !ci(),
            "CI=true but a small tmpfs could not be mounted (the test needs root): \
             the SQLite full-disk test must run in CI"
        );
        eprintln!("SKIPPING the SQLite full-disk test: cannot mount a tmpfs (not root?)");
        return;
    };
    let upstream = Upstream::start().await;
    for strict in [true, false] {
        let name = if strict { "strict" } else { "best-effort" };
        let db = fs.path().join(format!("{name}.db"));
        let url = format!("sqlite://{}", db.display());
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write_config(dir.path(), &upstream.url, strict);
        // The gateway logs every refused call while the database is away: thousands of
        // lines that say nothing the assertions do not.
        let server = Server::start_with_env(&config, &url, &[("CAPGATE_LOG", QUIET_LOG)]);
        let mut filler = Filler {
            file: fs.path().join("filler"),
        };
        drill(
            &server,
            &url,
            &upstream,
            &mut filler,
            strict,
            &format!("sqlite-{name}"),
        )
        .await;
        drop(server);
    }
}
