//! The metrics as a platform team consumes them:
//!
//! - a real Prometheus (Debian's `prometheus` package; installed with apt-get when missing
//!   and the test runs as root, required under CI=true) scrapes the real `capgate serve` of
//!   the customer-support example on loopback while the walkthrough runs over HTTP, loads
//!   the shipped rules of `examples/observability/`, and its query API answers the counts
//!   the walkthrough made: completed, approval-required and refused calls, a latency
//!   histogram, and the pending-approvals gauge going 1 → 0;
//! - 1 000 distinct unknown capability ids and random URL paths add no series (label
//!   values come from the configuration, never from requests);
//! - a bearer token on the metrics listener, and `/readyz` naming its checks;
//! - the runtime's live-task gauge (what `cargo xtask soak` watches for a task leak) rises
//!   with open connections and falls when they close.

use crate::common;

use common::*;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const DANA: &str = "dana-dev-key";
const PRIYA: &str = "priya-dev-key";
const EVE: &str = "eve-dev-key";
/// A support agent of org_1 whose session context names another organisation (a session
/// that moved): orgIsolation denies every call of theirs at stage 7.
const MOVED: &str = "moved-session-key";

/// How long Prometheus gets to show what capgate counted (it scrapes every second).
const PROM_WAIT: Duration = Duration::from_secs(45);

/// The `prometheus` binary: on PATH, or Debian's package installed now (as root). `None`
/// (the test is skipped, loudly) only outside CI; under CI=true a missing Prometheus fails.
fn prometheus_binary() -> Option<PathBuf> {
    static FOUND: OnceLock<bool> = OnceLock::new();
    let present = *FOUND.get_or_init(|| {
        debian_tools(
            &["prometheus"],
            || on_path("prometheus").is_some(),
            "the real-Prometheus end-to-end test",
        )
    });
    present.then(|| on_path("prometheus")).flatten()
}

/// `http://HOST:PORT/PATH` -> (`HOST:PORT`, `/PATH`).
fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (authority, path) = rest.split_once('/').expect("a path");
    (authority.to_string(), format!("/{path}"))
}

/// `q` percent-encoded for a URL's query string.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A real Prometheus server scraping one target every second, with its own configuration
/// and TSDB in a temporary directory; killed on drop.
struct Prometheus {
    child: Child,
    base: String,
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl Prometheus {
    fn start(binary: &Path, metrics_url: &str, rules: &Path) -> Prometheus {
        let dir = tempfile::tempdir().expect("tempdir");
        let (target, path) = split_url(metrics_url);
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {rules}\n\
                 scrape_configs:\n  - job_name: capgate\n    metrics_path: {path}\n    \
                 static_configs:\n      - targets: ['{target}']\n",
                rules = rules.display(),
            ),
        )
        .expect("write prometheus.yml");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let mut prom = Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
            dir,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("client"),
        };
        prom.wait_ready();
        prom
    }

    fn log(&self) -> String {
        let mut s = String::new();
        let _ = std::fs::File::open(self.dir.path().join("prometheus.log"))
            .and_then(|mut f| f.read_to_string(&mut s));
        s
    }

    /// Until `/-/ready` answers 200 (the TSDB is open and the config loaded).
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "prometheus exited ({status}) before it was ready:\n{}",
                    self.log()
                );
            }
            if http_ok(&format!("{}/-/ready", self.base)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("prometheus was not ready within 60 s:\n{}", self.log());
    }

    /// An instant query: each series' labels and value.
    async fn query(&self, q: &str) -> Vec<(Value, f64)> {
        let r = self
            .http
            .get(format!("{}/api/v1/query?query={}", self.base, encode(q)))
            .send()
            .await
            .expect("query prometheus");
        let body: Value = r.json().await.expect("query answer");
        assert_eq!(body["status"], "success", "{q}: {body}");
        body["data"]["result"]
            .as_array()
            .map(|all| {
                all.iter()
                    .map(|s| {
                        let v = s["value"][1]
                            .as_str()
                            .and_then(|v| v.parse::<f64>().ok())
                            .unwrap_or(f64::NAN);
                        (s["metric"].clone(), v)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The single value of `q` (a query that sums to one series), or `None` while empty.
    async fn scalar(&self, q: &str) -> Option<f64> {
        self.query(q).await.first().map(|(_, v)| *v)
    }

    /// Poll `q` until `ok` holds for its answer (bounded by [`PROM_WAIT`]).
    async fn wait_for(&self, q: &str, what: &str, ok: impl Fn(&[(Value, f64)]) -> bool) {
        let deadline = Instant::now() + PROM_WAIT;
        loop {
            let answer = self.query(q).await;
            if ok(&answer) {
                return;
            }
            if Instant::now() > deadline {
                let calls = self.query("capgate_calls_total").await;
                panic!(
                    "Prometheus did not show {what} within {PROM_WAIT:?}\n  {q} = {answer:?}\n  \
                     capgate_calls_total = {calls:#?}\n  prometheus log:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Poll until the single value of `q` equals `want`.
    async fn wait_value(&self, q: &str, want: f64) {
        self.wait_for(q, &format!("{want}"), |a| {
            a.len() == 1 && (a[0].1 - want).abs() < 1e-9
        })
        .await;
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking `GET` (the readiness poll runs before any async work): whether it answered
/// 200.
fn http_ok(url: &str) -> bool {
    let Some((authority, path)) = url.strip_prefix("http://").and_then(|r| r.split_once('/'))
    else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect(authority) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /{path} HTTP/1.0\r\nHost: {authority}\r\n\r\n");
    let mut head = [0u8; 12];
    s.write_all(request.as_bytes()).is_ok()
        && s.read_exact(&mut head).is_ok()
        && head.starts_with(b"HTTP/1.")
        && &head[9..12] == b"200"
}

fn invoke(capability: &str, input: Value, invocation_id: &str) -> Value {
    json!({"capabilityId": capability, "input": input, "invocationId": invocation_id})
}

fn refund(order: &str, amount: u32) -> Value {
    json!({"orderId": order, "amount": amount, "reason": "damaged item"})
}

/// The example with one more agent key whose session context no longer matches the actor.
fn example_with_moved_session(dir: &Path) -> PathBuf {
    deployment(
        dir,
        |t| t,
        &format!(
            "[[gateway.apiKeys]]\nsha256 = \"{}\"\nnamespace = \"org_1\"\nsurfaces = [\"aiSdk\"]\n\
             actor = {{ id = \"u_moved\", kind = \"user\", attributes = {{ orgId = \"org_1\", permissions = [\"orders:refund\"] }} }}\n\
             context = {{ orgId = \"org_9\" }}\n",
            key_hash(MOVED)
        ),
    )
}

/// `sum(capgate_calls_total{capability="orders.refund", SELECTOR})`.
fn refunds(selector: &str) -> String {
    format!("sum(capgate_calls_total{{capability=\"orders.refund\",{selector}}})")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_real_prometheus_scrapes_the_walkthrough() {
    let Some(binary) = prometheus_binary() else {
        return;
    };
    let version = Command::new(&binary).arg("--version").output();
    if let Ok(v) = version {
        eprintln!(
            "notice: {}",
            String::from_utf8_lossy(&v.stdout)
                .lines()
                .next()
                .unwrap_or("")
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&example_with_moved_session(dir.path()), &store);
    let metrics_url = server
        .metrics
        .clone()
        .expect("the example serves metrics on a listener of its own");
    let rules = root().join("examples/observability/capgate.rules.yml");
    let prom = Prometheus::start(&binary, &metrics_url, &rules);

    // Prometheus reaches capgate and parses its exposition.
    prom.wait_value("up{job=\"capgate\"}", 1.0).await;

    let agent = format!("{}/agent", server.base);
    let (dana, eve, moved) = (Caller::new(DANA), Caller::new(EVE), Caller::new(MOVED));

    // Act 1: Dana's $649 refund is held for a manager.
    let (status, held) = dana
        .post(
            &format!("{agent}/invoke"),
            &invoke("orders.refund", refund("ord_42", 649), "prom_649"),
        )
        .await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["status"], "approval-required", "{held}");
    let approval_id = held["approval"]["id"].as_str().expect("approval id");

    // Refused: Eve of org_2 asks for org_1's order (the procedure says FORBIDDEN at stage
    // 11), a session whose context moved is denied by orgIsolation (stage 7), and an id the
    // registry does not know is not found.
    let (_, forbidden) = eve
        .post(
            &format!("{agent}/invoke"),
            &invoke("orders.refund", refund("ord_42", 100), "prom_eve"),
        )
        .await;
    assert_eq!(forbidden["status"], "outcome-unknown", "{forbidden}");
    let (_, denied) = moved
        .post(
            &format!("{agent}/invoke"),
            &invoke("orders.refund", refund("ord_43", 20), "prom_moved"),
        )
        .await;
    assert_eq!(denied["status"], "failed", "{denied}");
    assert_eq!(denied["error"]["code"], "POLICY_DENIED", "{denied}");
    let (_, unknown) = dana
        .post(
            &format!("{agent}/invoke"),
            &invoke("orders.delete", json!({}), "prom_unknown"),
        )
        .await;
    assert_eq!(
        unknown["error"]["code"], "CAPABILITY_NOT_FOUND",
        "{unknown}"
    );

    // A small refund completes at once.
    let (_, small) = dana
        .post(
            &format!("{agent}/invoke"),
            &invoke("orders.refund", refund("ord_43", 20), "prom_20"),
        )
        .await;
    assert_eq!(small["status"], "completed", "{small}");

    // While the $649 refund waits, one approval is pending in org_1.
    let pending = "sum(capgate_approvals_pending{namespace=\"org_1\"})";
    prom.wait_value(pending, 1.0).await;
    prom.wait_value(&refunds("outcome=\"approval-required\""), 1.0)
        .await;
    prom.wait_value(&refunds("outcome=\"completed\""), 1.0)
        .await;

    // Acts 2–5: Priya approves, Dana resumes, the refund completes.
    let (status, decided) = Caller::new(PRIYA)
        .post(
            &format!("{}/approvals/{approval_id}/decision", server.base),
            &json!({"decision": "approved", "comment": "damaged on arrival"}),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    let (_, done) = dana
        .post(
            &format!("{agent}/resumeApproval"),
            &json!({"approvalId": approval_id, "invocationId": "prom_649"}),
        )
        .await;
    assert_eq!(done["status"], "completed", "{done}");

    // The backlog is empty again, and every call is counted by how it ended.
    prom.wait_value(pending, 0.0).await;
    prom.wait_value(&refunds("outcome=\"completed\""), 2.0)
        .await;
    prom.wait_value(&refunds("outcome=\"approval-required\""), 1.0)
        .await;
    prom.wait_value(&refunds("code=\"POLICY_DENIED\""), 1.0)
        .await;
    prom.wait_value(&refunds("code=\"FORBIDDEN\""), 1.0).await;
    prom.wait_value(
        "sum(capgate_calls_total{capability=\"(unknown)\",code=\"CAPABILITY_NOT_FOUND\"})",
        1.0,
    )
    .await;
    prom.wait_value(
        "sum(capgate_calls_total{capability=\"orders.refund\",outcome=~\"failed|outcome-unknown\"})",
        2.0,
    )
    .await;
    for (event, n) in [("created", 1.0), ("approved", 1.0), ("consumed", 1.0)] {
        prom.wait_value(
            &format!("sum(capgate_approvals_total{{event=\"{event}\"}})"),
            n,
        )
        .await;
    }

    // The latency histogram: five refunds observed, with every bucket up to +Inf.
    prom.wait_value(
        "sum(capgate_call_duration_seconds_count{capability=\"orders.refund\"})",
        5.0,
    )
    .await;
    let buckets = prom
        .query(
            "capgate_call_duration_seconds_bucket{capability=\"orders.refund\",surface=\"aiSdk\"}",
        )
        .await;
    let les: Vec<&str> = buckets
        .iter()
        .filter_map(|(m, _)| m["le"].as_str())
        .collect();
    assert_eq!(les.len(), 16, "15 buckets and +Inf: {les:?}");
    assert!(
        les.contains(&"+Inf") && les.contains(&"0.0005") && les.contains(&"30"),
        "{les:?}"
    );
    let inf = buckets
        .iter()
        .find(|(m, _)| m["le"] == "+Inf")
        .map(|(_, v)| *v);
    assert_eq!(inf, Some(5.0), "{buckets:?}");
    let p99 = prom
        .scalar("histogram_quantile(0.99, sum by (le) (capgate_call_duration_seconds_bucket{capability=\"orders.refund\"}))")
        .await
        .expect("a p99");
    assert!(p99 > 0.0 && p99 <= 30.0, "p99 = {p99}");

    // The rest of the pipeline was watched too: policies, plugins, the store, the audit
    // trail, HTTP routes and the invocation journal.
    for q in [
        "sum(capgate_policy_evaluations_total{policy=\"refundLimit\",stance=\"require-approval\"})",
        "sum(capgate_policy_evaluations_total{policy=\"orgIsolation\",stance=\"deny\"})",
        // `plugin` is the binding: a policy's or redactor's name, a procedure's capability.
        "sum(capgate_plugin_calls_total{plugin=\"refundLimit\",result=\"ok\"})",
        "sum(capgate_plugin_calls_total{plugin=\"orders.refund\",result=\"ok\"})",
        "sum(capgate_plugin_fuel_consumed_total)",
        "sum(capgate_store_operation_duration_seconds_count{backend=\"sqlite\"})",
        "sum(capgate_audit_events_total{result=\"written\"})",
        "sum(capgate_http_requests_total{route=\"/agent/invoke\",method=\"POST\",status=\"200\"})",
        "sum(capgate_journal_claims_total{result=\"admitted\"})",
    ] {
        prom.wait_for(q, "a positive value", |a| a.len() == 1 && a[0].1 > 0.0)
            .await;
    }
    // Nothing was lost and no plugin failed (a result never seen has no series: 0).
    for q in [
        "sum(capgate_audit_events_total{result=~\"dropped|lost|write_through_failed\"})",
        "sum(capgate_plugin_calls_total{result=~\"trap|fuel|deadline|memory|instantiate\"}) or vector(0)",
    ] {
        prom.wait_value(q, 0.0).await;
    }

    // The shipped rules load and evaluate cleanly against real series, and their recording
    // rules produce the figures the dashboard plots.
    prom.wait_for(
        "capability:capgate_calls:rate5m{capability=\"orders.refund\"}",
        "the call rate recording rule",
        |a| !a.is_empty(),
    )
    .await;
    prom.wait_value(
        "namespace:capgate_approvals_pending:max{namespace=\"org_1\"}",
        0.0,
    )
    .await;
    let rules: Value = prom
        .http
        .get(format!("{}/api/v1/rules", prom.base))
        .send()
        .await
        .expect("rules")
        .json()
        .await
        .expect("rules JSON");
    let groups = rules["data"]["groups"].as_array().expect("rule groups");
    assert!(!groups.is_empty(), "{rules}");
    let all: Vec<&Value> = groups
        .iter()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .collect();
    assert!(all.len() >= 10, "{rules}");
    for r in &all {
        assert_ne!(
            r["health"], "err",
            "rule {} failed: {}",
            r["name"], r["lastError"]
        );
    }
    let firing: Vec<&Value> = all
        .iter()
        .filter(|r| r["type"] == "alerting" && r["state"] == "firing")
        .copied()
        .collect();
    assert!(
        firing.is_empty(),
        "no alert fires on a healthy walkthrough: {firing:#?}"
    );

    // Every query of the dashboard is valid PromQL (a query that fails to parse answers an
    // error status, which `query` refuses).
    let dashboard = root().join("examples/observability/capgate-dashboard.json");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(dashboard).expect("read the dashboard"))
            .expect("the dashboard is JSON");
    let exprs: Vec<&str> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .collect();
    assert!(exprs.len() >= 10, "{exprs:?}");
    for e in exprs {
        let _ = prom.query(e).await;
    }

    // Issue 57: the exposition passes Prometheus' own linter (every series has `# HELP`),
    // carries the build and the process' own series, as a standard pipeline expects.
    let text = scrape(&reqwest::Client::new(), &metrics_url).await;
    for want in [
        "# HELP capgate_calls_total ",
        "# HELP capgate_http_requests_total ",
        "capgate_build_info{version=\"",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_cpu_seconds_total ",
    ] {
        assert!(text.contains(want), "no `{want}` in:\n{text}");
    }
    let promtool = binary.with_file_name("promtool");
    let mut lint = Command::new(if promtool.is_file() {
        promtool
    } else {
        PathBuf::from("promtool")
    })
    .args(["check", "metrics"])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("run promtool check metrics");
    {
        let mut stdin = lint.stdin.take().expect("promtool's stdin");
        stdin.write_all(text.as_bytes()).expect("feed promtool");
    }
    let linted = lint.wait_with_output().expect("promtool");
    assert!(
        linted.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&linted.stdout),
        String::from_utf8_lossy(&linted.stderr)
    );

    drop(prom);
    drop(server);
}

/// Every series line of an exposition (comments and blank lines left out).
fn series(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

async fn scrape(http: &reqwest::Client, url: &str) -> String {
    let r = http.get(url).send().await.expect("scrape");
    assert_eq!(r.status(), 200);
    r.text().await.expect("exposition")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_unknown_capability_ids_add_no_series() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&example_config(), &store);
    let metrics = server.metrics.clone().expect("metrics listener");
    let http = reqwest::Client::new();
    let dana = Caller::new(DANA);
    let agent = format!("{}/agent/invoke", server.base);

    // Every kind of request once (a known call, an unknown id, a random path), so that the
    // series they make exist before counting.
    let (_, known) = dana
        .post(
            &agent,
            &invoke("customers.search", json!({"query": "Alice"}), "known"),
        )
        .await;
    assert_eq!(known["status"], "completed", "{known}");
    let mut sent = 0;
    let mut send_unknown = async |upto: usize| {
        while sent < upto {
            let id = format!("nosuch.capability_{sent}_{}", uuid::Uuid::new_v4().simple());
            let (status, answer) = dana
                .post(
                    &agent,
                    &invoke(&id, json!({"n": sent}), &format!("unknown_{sent}")),
                )
                .await;
            assert_eq!(status, 200, "{answer}");
            assert_eq!(answer["error"]["code"], "CAPABILITY_NOT_FOUND", "{answer}");
            if sent % 10 == 0 {
                let path = format!("{}/agent/x{}/{}", server.base, sent, uuid::Uuid::new_v4());
                let (status, _) = dana.post(&path, &json!({})).await;
                assert!(status >= 400, "{path}: {status}");
                let (status, _) = dana.get(&format!("{}/probe-{sent}", server.base)).await;
                assert!(status >= 400, "{status}");
            }
            sent += 1;
        }
    };
    send_unknown(10).await;
    let _ = scrape(&http, &metrics).await;
    let after_10 = scrape(&http, &metrics).await;
    send_unknown(1_000).await;
    let _ = scrape(&http, &metrics).await;
    let after_1000 = scrape(&http, &metrics).await;

    let names = |text: &str| -> Vec<String> {
        series(text)
            .iter()
            .map(|l| l.rsplit_once(' ').map_or(*l, |(s, _)| s).to_string())
            .collect()
    };
    let (before, after) = (names(&after_10), names(&after_1000));
    let new: Vec<&String> = after.iter().filter(|s| !before.contains(s)).collect();
    assert!(
        new.is_empty() && before.len() == after.len(),
        "{} series after 10 unknown ids, {} after 1 000; new: {new:#?}",
        before.len(),
        after.len()
    );
    assert!(
        after_1000.contains("capability=\"(unknown)\"")
            && after_1000.contains("CAPABILITY_NOT_FOUND"),
        "unknown ids are counted under one label"
    );
    assert!(
        !after_1000.contains("nosuch.capability") && !after_1000.contains("probe-"),
        "no request data in any label"
    );
    let unknown_calls: f64 = series(&after_1000)
        .iter()
        .filter(|l| l.starts_with("capgate_calls_total{") && l.contains("(unknown)"))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum();
    assert_eq!(unknown_calls, 1_000.0, "every unknown call is counted once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_behind_a_bearer_token_and_readyz_with_named_checks() {
    const TOKEN: &str = "prometheus-scrape-token";
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(
        dir.path(),
        |t| {
            assert!(
                t.contains("[telemetry.metrics]\n"),
                "the example turns metrics on"
            );
            t.replace(
                "[telemetry.metrics]\n",
                &format!(
                    "[telemetry.metrics]\nbearerTokenSha256 = \"{}\"\n",
                    key_hash(TOKEN)
                ),
            )
        },
        "",
    );
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&config, &store);
    let metrics = server.metrics.clone().expect("metrics listener");
    let http = reqwest::Client::new();

    let status =
        |r: Result<reqwest::Response, reqwest::Error>| r.expect("answer").status().as_u16();
    assert_eq!(status(http.get(&metrics).send().await), 401, "no token");
    assert_eq!(
        status(http.get(&metrics).bearer_auth("wrong-token").send().await),
        401,
        "a wrong token"
    );
    assert_eq!(
        status(http.get(&metrics).bearer_auth(key_hash(TOKEN)).send().await),
        401,
        "the digest is not the token"
    );
    let ok = http
        .get(&metrics)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("scrape");
    assert_eq!(ok.status(), 200);
    assert!(
        ok.headers()["content-type"]
            .to_str()
            .is_ok_and(|c| c.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        ok.headers()
    );
    let text = ok.text().await.expect("exposition");
    assert!(text.contains("capgate_plugin_instances{"), "{text}");

    // The metrics have their own listener: the agents' port does not serve them.
    let (status_on_gateway, _) = Caller::new(DANA)
        .get(&format!("{}/metrics", server.base))
        .await;
    assert_eq!(status_on_gateway, 404);

    // Health: /healthz is cheap, /readyz names each check.
    let (code, health) = Caller::new("anyone")
        .get(&format!("{}/healthz", server.base))
        .await;
    assert_eq!(code, 200, "{health}");
    let (code, ready) = Caller::new("anyone")
        .get(&format!("{}/readyz", server.base))
        .await;
    assert_eq!(code, 200, "{ready}");
    assert_eq!(
        ready,
        json!({"status": "ready", "checks": {"shutdown": "ok", "store": "ok", "audit": "ok", "plugins": "ok"}})
    );
}

/// The value of one series line of an exposition (`NAME{LABELS}`), if present.
fn sample(text: &str, series_name: &str) -> Option<f64> {
    series(text)
        .iter()
        .find_map(|l| l.strip_prefix(series_name)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_pending_gauge_and_store_latency_on_postgres() {
    let Some(db) = postgres_db().await else {
        return;
    };
    capgate(&["migrate", "--store", &db.url]);
    let server = Server::start(&example_config(), &db.url);
    let metrics = server.metrics.clone().expect("metrics listener");
    let http = reqwest::Client::new();
    let (_, held) = Caller::new(DANA)
        .post(
            &format!("{}/agent/invoke", server.base),
            &invoke("orders.refund", refund("ord_42", 649), "pg_649"),
        )
        .await;
    assert_eq!(held["status"], "approval-required", "{held}");
    let approval_id = held["approval"]["id"].as_str().expect("approval id");
    let text = scrape(&http, &metrics).await;
    let pending = "capgate_approvals_pending{namespace=\"org_1\"}";
    assert_eq!(sample(&text, pending), Some(1.0), "{text}");
    assert!(
        text.contains("capgate_store_operation_duration_seconds_count{backend=\"postgres\",operation=\"approvals.create\"}"),
        "{text}"
    );
    let (status, _) = Caller::new(PRIYA)
        .post(
            &format!("{}/approvals/{approval_id}/decision", server.base),
            &json!({"decision": "rejected", "comment": "no photo"}),
        )
        .await;
    assert_eq!(status, 200);
    let text = scrape(&http, &metrics).await;
    assert_eq!(sample(&text, pending), Some(0.0), "{text}");
    assert!(
        text.contains("capgate_approvals_total{event=\"rejected\"} 1"),
        "{text}"
    );
}

#[test]
fn metrics_listen_is_refused_when_the_deployment_has_metrics_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(
        dir.path(),
        |t| {
            let off = t.replace(
                "[telemetry.metrics]\n",
                "[telemetry.metrics]\nenabled = false\n",
            );
            assert_ne!(off, t, "the example turns metrics on");
            off
        },
        "",
    );
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let out = capgate_output(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--store",
        &store,
        "--config",
        &config.display().to_string(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("--metrics-listen: metrics are off"), "{err}");
    assert!(
        !dir.path().join("capgate.db").exists(),
        "nothing was created"
    );
}

/// The value of an unlabelled series of an exposition.
fn gauge(text: &str, name: &str) -> Option<f64> {
    series(text)
        .iter()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_runtime_gauges_follow_live_tasks_up_and_back_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&example_config(), &store);
    let metrics = server.metrics.clone().expect("metrics listener");
    let http = reqwest::Client::new();
    let tasks = async || {
        let text = scrape(&http, &metrics).await;
        gauge(&text, "capgate_runtime_alive_tasks")
            .unwrap_or_else(|| panic!("no capgate_runtime_alive_tasks in the exposition:\n{text}"))
    };
    let first = scrape(&http, &metrics).await;
    let workers = gauge(&first, "capgate_runtime_workers").expect("capgate_runtime_workers");
    assert!(workers >= 1.0, "workers {workers}");
    let idle = tasks().await;
    assert!(idle >= 1.0, "a serving runtime has live tasks: {idle}");

    // 40 open keep-alive connections to the gateway: the server holds a task for each.
    let addr = server
        .base
        .strip_prefix("http://")
        .expect("http base")
        .to_string();
    let mut held = Vec::new();
    for _ in 0..40 {
        let mut s = std::net::TcpStream::connect(&addr).expect("connect");
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("request");
        let mut buf = [0u8; 12];
        s.read_exact(&mut buf).expect("status line");
        assert_eq!(&buf, b"HTTP/1.1 200", "a keep-alive /healthz");
        held.push(s);
    }
    // One task per connection; the idle count may have included a short-lived task or two
    // (a request finishing, a background tick), hence the margin.
    let loaded = tasks().await;
    assert!(
        loaded >= idle + 35.0,
        "40 open connections are about 40 more live tasks: {idle} idle, {loaded} with them"
    );
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut now = tasks().await;
    while now > loaded - 35.0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        now = tasks().await;
    }
    assert!(
        now <= loaded - 35.0,
        "closed connections' tasks end: {idle} idle, {loaded} with 40 connections, {now} after closing them"
    );
}
