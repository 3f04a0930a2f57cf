//! `cargo xtask soak`: the gateway under a fixed rate of mixed traffic for a fixed time,
//! watching the server for leaks.
//!
//! Open loop: request `i` of the run is due at `start + i / rate`, whatever happened to the
//! ones before it. A pool of keep-alive connections (one request in flight each) takes the
//! next due request as soon as it is free; when every connection is busy the schedule slips,
//! and the report says by how much (the lag of each send behind its due time, and how many
//! requests the run never sent). Every request is one HTTP call, so `--rate` is calls/s.
//!
//! The mix, by request number (every 500 requests):
//!
//! - governed invokes (`orders.refund` of 20 on `ord_43`, completed): what is left, about
//!   three quarters;
//! - approval flows: 8 in 100 requests start one (a refund of 600 answers
//!   `approval-required`); the same connection's next two requests approve it through the
//!   approvals API (`POST /approvals/{id}/decision`, the approver key) and resume it
//!   (`resumeApproval`, completed) — about 24 % of the requests with the follow-ups;
//! - replays: 8 in 100 resend an invocation id this connection already completed (answered
//!   from the journal, completed, nothing runs again);
//! - bad requests, 8 in 200: malformed JSON (HTTP 400 `BAD_REQUEST`), an unknown
//!   capability (`failed`, `CAPABILITY_NOT_FOUND`), a schema-invalid input (`failed`,
//!   `INPUT_INVALID`), a wrong API key (HTTP 401 `UNAUTHENTICATED`);
//! - one in 500 a call to a capability guarded by a hostile policy, in turn the one that
//!   spins until its fuel runs out, the one that panics and the one that allocates until the
//!   memory cap: each must fail closed (`failed`, `INTERNAL_ERROR`).
//!
//! Every answer is judged against its kind's expectation: an answer as expected counts as
//! expected (refusals included), anything else (another status or code, a broken connection)
//! as unexpected. Every `--sample-every` seconds the server's RSS, open file descriptors and
//! threads are read from /proc and its live Tokio tasks from `capgate_runtime_alive_tasks`
//! on /metrics; the series goes to a CSV and a compact table, and the report compares the
//! end of the run with its start after the warm-up.

use crate::client::{
    APPROVAL_BODY, Answer, Conn, DEFAULT_BODY, Ids, connect, error_code, excerpt, histogram, ms,
    open_fds, outcome_status, proc_status, rss_kib, split_url,
};
use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const USAGE: &str = "\
Usage: cargo xtask soak [OPTIONS]

Run the gateway under mixed load at a fixed rate for a fixed time and watch it for leaks.
Without --url it writes examples/customer-support/capgate.soak.toml, starts the release
`capgate serve` on a fresh SQLite store (capgate-soak.db) and stops it at the end.

Options:
      --minutes M            how long to run, warm-up included (decimals allowed) [default: 10]
      --rate R               calls per second, open loop [default: 2000]
      --warmup S             seconds not counted in latencies or drift [default: 60, at most a fifth of the run]
      --connections N        keep-alive connections, one call in flight each [default: 128]
      --threads N            the generator's runtime threads [default: 1]
      --sample-every S       seconds between samples of the server [default: 5]
      --csv PATH             where the samples go [default: target/soak/soak-<time>.csv]
      --server-cpus LIST     start the server under `taskset -c LIST` (e.g. 0)
      --binary PATH          the capgate to start [default: $CARGO_TARGET_DIR or target, release/capgate]
      --url URL              attach to a running gateway route instead (serve capgate.soak.toml:
                             `cargo xtask example-config --soak`)
      --pid PID              with --url: the server's pid, for /proc samples
      --metrics-url URL      with --url: its metrics [default: http://127.0.0.1:9464/metrics]
      --key KEY              the caller's API key [default: dana-dev-key]
      --approver-key KEY     who approves [default: priya-dev-key]
  -h, --help                 print this help

Exits non-zero when any answer was unexpected; the goals (rate, no unexpected answer, RSS
flat within 10 % after warm-up, no growth of fds or tasks) are printed as met / not met.";

/// A cargo-style error: what is wrong, then what to do.
fn usage_error(message: String) -> anyhow::Error {
    anyhow::anyhow!("{message}\n\nFor more information, try 'cargo xtask soak --help'.")
}

fn number<T: std::str::FromStr>(option: &str, value: &str, what: &str) -> anyhow::Result<T> {
    value.parse().map_err(|_| {
        usage_error(format!(
            "invalid value '{value}' for '{option}': expected {what}"
        ))
    })
}

struct Options {
    minutes: f64,
    rate: f64,
    warmup: Option<f64>,
    connections: usize,
    threads: usize,
    sample_every: f64,
    csv: Option<PathBuf>,
    server_cpus: Option<String>,
    binary: Option<PathBuf>,
    url: Option<String>,
    pid: Option<u32>,
    metrics_url: Option<String>,
    key: String,
    approver_key: String,
}

fn parse(args: &[String]) -> anyhow::Result<Option<Options>> {
    let mut o = Options {
        minutes: 10.0,
        rate: 2000.0,
        warmup: None,
        connections: 128,
        threads: 1,
        sample_every: 5.0,
        csv: None,
        server_cpus: None,
        binary: None,
        url: None,
        pid: None,
        metrics_url: None,
        key: "dana-dev-key".into(),
        approver_key: "priya-dev-key".into(),
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let mut value = || -> anyhow::Result<String> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => it.next().cloned().ok_or_else(|| {
                    usage_error(format!(
                        "a value is required for '{name}' but none was supplied"
                    ))
                }),
            }
        };
        match name {
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(None);
            }
            "--minutes" => o.minutes = number(name, &value()?, "minutes, e.g. 10 or 1.5")?,
            "--rate" => o.rate = number(name, &value()?, "calls per second")?,
            "--warmup" => o.warmup = Some(number(name, &value()?, "seconds")?),
            "--connections" => o.connections = number(name, &value()?, "a whole number")?,
            "--threads" => o.threads = number(name, &value()?, "a whole number")?,
            "--sample-every" => o.sample_every = number(name, &value()?, "seconds")?,
            "--csv" => o.csv = Some(PathBuf::from(value()?)),
            "--server-cpus" => o.server_cpus = Some(value()?),
            "--binary" => o.binary = Some(PathBuf::from(value()?)),
            "--url" => o.url = Some(value()?),
            "--pid" => o.pid = Some(number(name, &value()?, "a process id")?),
            "--metrics-url" => o.metrics_url = Some(value()?),
            "--key" => o.key = value()?,
            "--approver-key" => o.approver_key = value()?,
            other => {
                return Err(usage_error(format!(
                    "unexpected argument '{other}'\n\n{}",
                    USAGE.lines().next().unwrap_or_default()
                )));
            }
        }
    }
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(o.minutes) || !positive(o.rate) || !positive(o.sample_every) {
        return Err(usage_error(
            "'--minutes', '--rate' and '--sample-every' must be positive".into(),
        ));
    }
    if o.connections == 0 || o.threads == 0 {
        return Err(usage_error(
            "'--connections' and '--threads' must be at least 1".into(),
        ));
    }
    if o.url.is_none() && (o.pid.is_some() || o.metrics_url.is_some()) {
        return Err(usage_error(
            "'--pid' and '--metrics-url' describe a server you started: pass its '--url' too"
                .into(),
        ));
    }
    if o.url.is_some() && (o.server_cpus.is_some() || o.binary.is_some()) {
        return Err(usage_error(
            "'--server-cpus' and '--binary' start a server; with '--url' soak attaches to yours (pin it yourself with taskset)".into(),
        ));
    }
    Ok(Some(o))
}

/// The kinds of request, each with what its answer must be.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    Invoke,
    Replay,
    ApprovalInvoke,
    Decide,
    Resume,
    Malformed,
    UnknownCapability,
    SchemaInvalid,
    BadKey,
    HostileSpin,
    HostilePanic,
    HostileMemory,
}

/// What an answer of a kind must be: HTTP status, outcome tag (for gateway outcomes) and
/// error code (when one is due).
struct Expect {
    status: u16,
    outcome: Option<&'static str>,
    code: Option<&'static str>,
}

impl Kind {
    const ALL: [Kind; 12] = [
        Kind::Invoke,
        Kind::Replay,
        Kind::ApprovalInvoke,
        Kind::Decide,
        Kind::Resume,
        Kind::Malformed,
        Kind::UnknownCapability,
        Kind::SchemaInvalid,
        Kind::BadKey,
        Kind::HostileSpin,
        Kind::HostilePanic,
        Kind::HostileMemory,
    ];

    fn label(self) -> &'static str {
        match self {
            Kind::Invoke => "invoke",
            Kind::Replay => "replay",
            Kind::ApprovalInvoke => "invoke (approval-required)",
            Kind::Decide => "decide (approvals API)",
            Kind::Resume => "resumeApproval",
            Kind::Malformed => "bad: malformed JSON",
            Kind::UnknownCapability => "bad: unknown capability",
            Kind::SchemaInvalid => "bad: schema-invalid input",
            Kind::BadKey => "bad: wrong API key",
            Kind::HostileSpin => "hostile: fuel (spins)",
            Kind::HostilePanic => "hostile: trap (panics)",
            Kind::HostileMemory => "hostile: memory cap",
        }
    }

    fn expect(self) -> Expect {
        let ok = |outcome| Expect {
            status: 200,
            outcome,
            code: None,
        };
        let failed = |code| Expect {
            status: 200,
            outcome: Some("failed"),
            code: Some(code),
        };
        match self {
            Kind::Invoke | Kind::Replay | Kind::Resume => ok(Some("completed")),
            Kind::ApprovalInvoke => ok(Some("approval-required")),
            Kind::Decide => ok(None),
            Kind::Malformed => Expect {
                status: 400,
                outcome: None,
                code: Some("BAD_REQUEST"),
            },
            Kind::UnknownCapability => failed("CAPABILITY_NOT_FOUND"),
            Kind::SchemaInvalid => failed("INPUT_INVALID"),
            Kind::BadKey => Expect {
                status: 401,
                outcome: None,
                code: Some("UNAUTHENTICATED"),
            },
            Kind::HostileSpin | Kind::HostilePanic | Kind::HostileMemory => {
                failed("INTERNAL_ERROR")
            }
        }
    }

    /// The request kind planned for request number `i` (a follow-up of an approval flow
    /// takes precedence; see the module doc for the mix).
    fn planned(i: u64) -> Kind {
        if i % 500 == 499 {
            return match (i / 500) % 3 {
                0 => Kind::HostileSpin,
                1 => Kind::HostilePanic,
                _ => Kind::HostileMemory,
            };
        }
        match i % 200 {
            0..16 => Kind::ApprovalInvoke,
            16..32 => Kind::Replay,
            32 | 33 => Kind::Malformed,
            34 | 35 => Kind::UnknownCapability,
            36 | 37 => Kind::SchemaInvalid,
            38 | 39 => Kind::BadKey,
            _ => Kind::Invoke,
        }
    }
}

/// Describe an answer (status, outcome, code) for the error table.
fn describe(answer: &Answer) -> String {
    let mut s = format!("HTTP {}", answer.status.as_u16());
    if let Some(outcome) = outcome_status(&answer.body) {
        let _ = write!(s, ", {outcome}");
    }
    if let Some(code) = error_code(&answer.body) {
        let _ = write!(s, " {code}");
    }
    s
}

fn judge(kind: Kind, answer: &Answer) -> bool {
    let e = kind.expect();
    answer.status.as_u16() == e.status
        && e.outcome
            .is_none_or(|o| outcome_status(&answer.body) == Some(o))
        && e.code
            .is_none_or(|c| error_code(&answer.body).as_deref() == Some(c))
}

/// One request to send.
struct Req {
    kind: Kind,
    path: String,
    key: String,
    body: String,
}

/// What one connection saw.
struct Tally {
    /// Service time (send → whole answer) per kind, after the warm-up.
    service: BTreeMap<Kind, Histogram<u64>>,
    /// Due time → whole answer, every kind, after the warm-up.
    from_due: Histogram<u64>,
    /// Lag of each send behind its due time, after the warm-up.
    lag: Histogram<u64>,
    sent: BTreeMap<Kind, u64>,
    /// Answers by (kind, description, as expected?), with the first body seen.
    answers: BTreeMap<(Kind, String, bool), (u64, String)>,
    /// Broken connections by cause.
    broken: BTreeMap<String, u64>,
}

impl Tally {
    fn new() -> Self {
        Tally {
            service: Kind::ALL.iter().map(|k| (*k, histogram())).collect(),
            from_due: histogram(),
            lag: histogram(),
            sent: BTreeMap::new(),
            answers: BTreeMap::new(),
            broken: BTreeMap::new(),
        }
    }

    fn merge(&mut self, other: Tally) {
        for (k, h) in other.service {
            if let Some(mine) = self.service.get_mut(&k) {
                let _ = mine.add(h);
            }
        }
        let _ = self.from_due.add(other.from_due);
        let _ = self.lag.add(other.lag);
        for (k, n) in other.sent {
            *self.sent.entry(k).or_default() += n;
        }
        for (key, (n, example)) in other.answers {
            self.answers.entry(key).or_insert((0, example)).0 += n;
        }
        for (what, n) in other.broken {
            *self.broken.entry(what).or_default() += n;
        }
    }

    fn unexpected(&self) -> u64 {
        let answers: u64 = self
            .answers
            .iter()
            .filter(|((_, _, expected), _)| !expected)
            .map(|(_, (n, _))| n)
            .sum();
        answers + self.broken.values().sum::<u64>()
    }
}

/// The run's clock and counters, shared by the connections and the sampler.
struct Shared {
    authority: String,
    route: String,
    key: String,
    approver_key: String,
    ids: Ids,
    start: Instant,
    end: Instant,
    measure_from: Instant,
    /// Seconds between two due times.
    interval: f64,
    /// The next request number to take.
    next: AtomicU64,
    /// Requests sent, answers counted (running totals for the samples).
    sent: AtomicU64,
    answered: AtomicU64,
    unexpected: AtomicU64,
}

impl Shared {
    fn due(&self, i: u64) -> Instant {
        self.start + Duration::from_secs_f64(i as f64 * self.interval)
    }

    /// Requests due by now that no connection has taken yet (the schedule's slip).
    fn backlog(&self) -> u64 {
        let due = (self.start.elapsed().as_secs_f64() / self.interval) as u64;
        due.saturating_sub(self.next.load(Ordering::Relaxed))
    }
}

/// One keep-alive connection of the pool.
struct Worker {
    vu: usize,
    n: u64,
    conn: Conn,
    /// The rest of an approval flow this connection started.
    follow_ups: VecDeque<Req>,
    /// A completed invoke body of this connection, for replays.
    done: Option<String>,
    tally: Tally,
}

impl Worker {
    fn next_id(&mut self, s: &Shared) -> String {
        self.n += 1;
        s.ids.make(self.vu, self.n)
    }

    fn request(&mut self, s: &Shared, kind: Kind) -> Req {
        let invoke = format!("{}/invoke", s.route);
        let req = |path: &str, key: &str, body: String| Req {
            kind,
            path: path.to_string(),
            key: key.to_string(),
            body,
        };
        match kind {
            Kind::Invoke | Kind::Decide | Kind::Resume => {
                let id = self.next_id(s);
                req(&invoke, &s.key, DEFAULT_BODY.replace("@ID@", &id))
            }
            Kind::Replay => match self.done.clone() {
                Some(body) => req(&invoke, &s.key, body),
                None => self.request(s, Kind::Invoke),
            },
            Kind::ApprovalInvoke => {
                let id = self.next_id(s);
                req(&invoke, &s.key, APPROVAL_BODY.replace("@ID@", &id))
            }
            Kind::Malformed => req(
                &invoke,
                &s.key,
                r#"{"capabilityId":"orders.refund","input":{"orderId":"#.to_string(),
            ),
            Kind::UnknownCapability => {
                let id = self.next_id(s);
                req(
                    &invoke,
                    &s.key,
                    format!(
                        r#"{{"capabilityId":"orders.nosuch","input":{{}},"invocationId":"{id}"}}"#
                    ),
                )
            }
            Kind::SchemaInvalid => {
                let id = self.next_id(s);
                req(
                    &invoke,
                    &s.key,
                    format!(
                        r#"{{"capabilityId":"orders.refund","input":{{"orderId":"ord_43","amount":-5}},"invocationId":"{id}"}}"#
                    ),
                )
            }
            Kind::BadKey => {
                let id = self.next_id(s);
                req(
                    &invoke,
                    "not-a-key-of-this-deployment",
                    DEFAULT_BODY.replace("@ID@", &id),
                )
            }
            Kind::HostileSpin | Kind::HostilePanic | Kind::HostileMemory => {
                let capability = match kind {
                    Kind::HostileSpin => "soak.spin",
                    Kind::HostilePanic => "soak.panic",
                    _ => "soak.memory",
                };
                let id = self.next_id(s);
                req(
                    &invoke,
                    &s.key,
                    format!(
                        r#"{{"capabilityId":"{capability}","input":{{}},"invocationId":"{id}"}}"#
                    ),
                )
            }
        }
    }

    /// What an approval-required answer sets in motion: decide, then resume.
    fn follow(&mut self, s: &Shared, answer: &Answer, invoke_body: &str) {
        let approval = serde_json::from_slice::<serde_json::Value>(&answer.body)
            .ok()
            .and_then(|v| v["approval"]["id"].as_str().map(str::to_string));
        let id = serde_json::from_str::<serde_json::Value>(invoke_body)
            .ok()
            .and_then(|v| v["invocationId"].as_str().map(str::to_string));
        let (Some(approval), Some(id)) = (approval, id) else {
            return;
        };
        self.follow_ups.push_back(Req {
            kind: Kind::Decide,
            path: format!("/approvals/{approval}/decision"),
            key: s.approver_key.clone(),
            body: r#"{"decision":"approved","comment":"soak"}"#.to_string(),
        });
        self.follow_ups.push_back(Req {
            kind: Kind::Resume,
            path: format!("{}/resumeApproval", s.route),
            key: s.key.clone(),
            body: format!(r#"{{"approvalId":"{approval}","invocationId":"{id}"}}"#),
        });
    }
}

async fn worker(s: Arc<Shared>, vu: usize, conn: Conn) -> Tally {
    let mut w = Worker {
        vu,
        n: 0,
        conn,
        follow_ups: VecDeque::new(),
        done: None,
        tally: Tally::new(),
    };
    loop {
        let i = s.next.fetch_add(1, Ordering::Relaxed);
        let due = s.due(i);
        if due >= s.end {
            break;
        }
        let now = Instant::now();
        if now >= s.end {
            // Due before the end, but the run is over: counted as not sent.
            break;
        }
        if due > now {
            tokio::time::sleep_until(due.into()).await;
        }
        let req = match w.follow_ups.pop_front() {
            Some(r) => r,
            None => w.request(&s, Kind::planned(i)),
        };
        let sent_at = Instant::now();
        let measured = due >= s.measure_from;
        if measured {
            w.tally
                .lag
                .saturating_record(sent_at.saturating_duration_since(due).as_micros() as u64);
        }
        *w.tally.sent.entry(req.kind).or_default() += 1;
        s.sent.fetch_add(1, Ordering::Relaxed);
        match w.conn.post(&req.path, &req.key, req.body.clone()).await {
            Ok(answer) => {
                let answered = Instant::now();
                s.answered.fetch_add(1, Ordering::Relaxed);
                let expected = judge(req.kind, &answer);
                if !expected {
                    s.unexpected.fetch_add(1, Ordering::Relaxed);
                    // The flow this request belonged to cannot go on.
                    w.follow_ups.clear();
                }
                if measured {
                    if let Some(h) = w.tally.service.get_mut(&req.kind) {
                        h.saturating_record((answered - sent_at).as_micros() as u64);
                    }
                    w.tally.from_due.saturating_record(
                        answered.saturating_duration_since(due).as_micros() as u64,
                    );
                }
                w.tally
                    .answers
                    .entry((req.kind, describe(&answer), expected))
                    .or_insert_with(|| (0, excerpt(&answer.body)))
                    .0 += 1;
                if expected {
                    match req.kind {
                        Kind::Invoke => w.done = Some(req.body),
                        Kind::ApprovalInvoke => w.follow(&s, &answer, &req.body),
                        _ => {}
                    }
                }
            }
            Err(e) => {
                s.unexpected.fetch_add(1, Ordering::Relaxed);
                w.follow_ups.clear();
                *w.tally
                    .broken
                    .entry(format!(
                        "{}: connection: {}",
                        req.kind.label(),
                        e.root_cause()
                    ))
                    .or_default() += 1;
                loop {
                    if Instant::now() >= s.end {
                        return w.tally;
                    }
                    match connect(&s.authority).await {
                        Ok(c) => {
                            w.conn = c;
                            break;
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            }
        }
    }
    w.tally
}

/// One sample of the server.
#[derive(Clone, Copy, Default)]
struct Sample {
    seconds: f64,
    rss_kib: Option<u64>,
    fds: Option<u64>,
    threads: Option<u64>,
    tasks: Option<u64>,
    sent: u64,
    answered: u64,
    unexpected: u64,
    backlog: u64,
}

/// The value of an unlabelled series in a Prometheus exposition.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// `GET` the metrics exposition over a connection of its own (re-opened when it broke).
async fn scrape(conn: &mut Option<Conn>, authority: &str, path: &str) -> Option<String> {
    if conn.is_none() {
        *conn = connect(authority).await.ok();
    }
    let answer = match conn.as_mut()?.get(path).await {
        Ok(a) => a,
        Err(_) => {
            *conn = None;
            return None;
        }
    };
    (answer.status.as_u16() == 200).then(|| String::from_utf8_lossy(&answer.body).into_owned())
}

async fn sampler(
    s: Arc<Shared>,
    pid: Option<u32>,
    metrics: Option<(String, String)>,
    every: Duration,
) -> Vec<Sample> {
    let mut series = Vec::new();
    let mut conn = None;
    let mut tick = tokio::time::interval_at(s.start.into(), every);
    loop {
        tick.tick().await;
        // Only while the load runs: once it ends the connections close, and a sample then
        // would show fewer fds and tasks than any during the load (a leak would hide).
        if Instant::now() >= s.end {
            return series;
        }
        let mut sample = Sample {
            seconds: s.start.elapsed().as_secs_f64(),
            sent: s.sent.load(Ordering::Relaxed),
            answered: s.answered.load(Ordering::Relaxed),
            unexpected: s.unexpected.load(Ordering::Relaxed),
            backlog: s.backlog(),
            ..Sample::default()
        };
        if let Some(pid) = pid {
            sample.rss_kib = rss_kib(pid);
            sample.fds = open_fds(pid);
            sample.threads = proc_status(pid, "Threads");
        }
        if let Some((authority, path)) = &metrics
            && let Some(text) = scrape(&mut conn, authority, path).await
        {
            sample.tasks = metric(&text, "capgate_runtime_alive_tasks").map(|v| v as u64);
        }
        series.push(sample);
    }
}

/// The server soak started, stopped when dropped.
struct Server {
    child: Child,
    url: String,
    metrics_url: Option<String>,
    log: PathBuf,
}

impl Server {
    fn start(root: &Path, o: &Options, out: &Path) -> anyhow::Result<Server> {
        let binary = match &o.binary {
            Some(b) => b.clone(),
            None => std::env::var_os("CARGO_TARGET_DIR")
                .map_or_else(|| root.join("target"), PathBuf::from)
                .join("release/capgate"),
        };
        if !binary.exists() {
            bail!(
                "{} does not exist: build it with `cargo build --release -p capgate` (or pass --binary)",
                binary.display()
            );
        }
        let config = crate::example::render_soak(root)?;
        let dir = root.join("examples/customer-support");
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(dir.join(format!("capgate-soak.db{suffix}")));
        }
        let log = out.join("server.log");
        let stderr =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = match &o.server_cpus {
            Some(cpus) => {
                let mut c = Command::new("taskset");
                c.args(["-c", cpus]).arg(&binary);
                c
            }
            None => Command::new(&binary),
        };
        cmd.current_dir(&dir)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        eprintln!("soak: {cmd:?}");
        let mut child = cmd
            .spawn()
            .with_context(|| format!("could not start {}", binary.display()))?;
        let stdout = child.stdout.take().context("the server's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let (mut gateway, mut metrics) = (None, None);
        for line in lines.by_ref() {
            let line = line.context("reading the server's stdout")?;
            if let Some(m) = line.strip_prefix("capgate: metrics on ") {
                metrics = Some(m.trim().to_string());
            }
            if let Some(g) = line.strip_prefix("capgate: listening on ") {
                gateway = Some(g.trim().to_string());
                break;
            }
        }
        let mut server = Server {
            child,
            url: String::new(),
            metrics_url: metrics,
            log,
        };
        let Some(gateway) = gateway else {
            bail!(
                "the server exited before listening; see {}",
                server.log.display()
            );
        };
        server.url = format!("{gateway}/agent");
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(server)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM first: capgate drains and flushes the audit; then make sure.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cargo xtask soak`.
pub fn soak(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let Some(o) = parse(args)? else {
        return Ok(());
    };
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let out = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), PathBuf::from)
        .join("soak");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let csv = o
        .csv
        .clone()
        .unwrap_or_else(|| out.join(format!("soak-{stamp}.csv")));
    let (server, url) = match &o.url {
        Some(u) => (None, u.clone()),
        None => {
            let s = Server::start(root, &o, &out)?;
            let url = s.url.clone();
            (Some(s), url)
        }
    };
    let metrics_url = match (&o.metrics_url, &server) {
        (Some(m), _) => Some(m.clone()),
        (None, Some(s)) => s.metrics_url.clone(),
        (None, None) => Some("http://127.0.0.1:9464/metrics".to_string()),
    };
    let pid = o.pid.or(server.as_ref().map(Server::pid));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(o.threads)
        .enable_all()
        .build()
        .context("could not start the generator's runtime")?;
    let result = runtime.block_on(run(&o, &url, metrics_url.as_deref(), pid, &csv));
    if let Some(s) = &server {
        eprintln!("soak: the server's log is {}", s.log.display());
    }
    drop(server);
    result
}

async fn run(
    o: &Options,
    url: &str,
    metrics_url: Option<&str>,
    pid: Option<u32>,
    csv: &Path,
) -> anyhow::Result<()> {
    let target = split_url(url).map_err(|e| usage_error(format!("--url: {e}")))?;
    let metrics = match metrics_url {
        Some(m) => {
            let t = split_url(m).map_err(|e| usage_error(format!("--metrics-url: {e}")))?;
            Some((t.authority, t.route))
        }
        None => None,
    };
    let ids = Ids::new("soak");
    // One call before the load, so a wrong URL, key or deployment fails with a hint.
    let mut first = connect(&target.authority).await.map_err(|e| {
        anyhow::anyhow!("{e:#}\n\nIs the gateway running? Without --url soak starts one.")
    })?;
    let answer = first
        .post(
            &format!("{}/invoke", target.route),
            &o.key,
            DEFAULT_BODY.replace("@ID@", &ids.make(usize::MAX, 0)),
        )
        .await
        .context("the first request failed")?;
    if !judge(Kind::Invoke, &answer) {
        bail!(
            "POST {url}/invoke answered {}: {}\n\nsoak needs the customer-support example's soak deployment (`cargo xtask example-config --soak`, capgate.soak.toml)",
            describe(&answer),
            excerpt(&answer.body)
        );
    }
    let total = o.minutes * 60.0;
    let warmup = o.warmup.unwrap_or(60.0_f64.min(total / 5.0)).min(total);
    let mut conns = Vec::with_capacity(o.connections);
    for _ in 0..o.connections {
        conns.push(connect(&target.authority).await?);
    }
    println!(
        "soak: {:.0} calls/s open loop for {} (warm-up {warmup:.0} s), {} connections, {} generator thread(s), {url}{}",
        o.rate,
        duration(total),
        o.connections,
        o.threads,
        pid.map_or_else(String::new, |p| format!(", server pid {p}")),
    );
    let start = Instant::now() + Duration::from_millis(100);
    let shared = Arc::new(Shared {
        authority: target.authority,
        route: target.route,
        key: o.key.clone(),
        approver_key: o.approver_key.clone(),
        ids,
        start,
        end: start + Duration::from_secs_f64(total),
        measure_from: start + Duration::from_secs_f64(warmup),
        interval: 1.0 / o.rate,
        next: AtomicU64::new(0),
        sent: AtomicU64::new(0),
        answered: AtomicU64::new(0),
        unexpected: AtomicU64::new(0),
    });
    let sampling = tokio::spawn(sampler(
        shared.clone(),
        pid,
        metrics.clone(),
        Duration::from_secs_f64(o.sample_every),
    ));
    let workers: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(vu, c)| tokio::spawn(worker(shared.clone(), vu, c)))
        .collect();
    let mut tally = Tally::new();
    for w in workers {
        tally.merge(w.await.context("a connection's task panicked")?);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let series = sampling.await.context("the sampler panicked")?;
    let mut hostile = String::new();
    if let Some((authority, path)) = &metrics
        && let Some(text) = scrape(&mut None, authority, path).await
    {
        for l in text.lines() {
            if l.starts_with("capgate_plugin_calls_total{plugin=\"hostile") {
                let _ = writeln!(hostile, "  {l}");
            }
        }
    }
    write_csv(csv, &series)?;
    let report = Report {
        o,
        tally: &tally,
        series: &series,
        total,
        warmup,
        elapsed,
        scheduled: (total * o.rate) as u64,
        csv,
        hostile: &hostile,
    };
    print!("{}", report.render());
    let unexpected = tally.unexpected();
    if unexpected > 0 {
        bail!("{unexpected} unexpected answer(s) (see above)");
    }
    Ok(())
}

fn duration(seconds: f64) -> String {
    if seconds >= 60.0 {
        format!("{:.1} min", seconds / 60.0)
    } else {
        format!("{seconds:.0} s")
    }
}

fn write_csv(path: &Path, series: &[Sample]) -> anyhow::Result<()> {
    let mut f =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let cell = |v: Option<u64>| v.map_or_else(String::new, |v| v.to_string());
    writeln!(
        f,
        "seconds,rss_kib,open_fds,threads,tokio_alive_tasks,sent,answered,unexpected,backlog"
    )?;
    for s in series {
        writeln!(
            f,
            "{:.1},{},{},{},{},{},{},{},{}",
            s.seconds,
            cell(s.rss_kib),
            cell(s.fds),
            cell(s.threads),
            cell(s.tasks),
            s.sent,
            s.answered,
            s.unexpected,
            s.backlog
        )?;
    }
    Ok(())
}

/// First, min, max and last of a gauge after the warm-up, and the growth of its floor (the
/// minimum of the last third of the samples minus that of the first third): in-flight work
/// moves a gauge up and down, a leak raises its floor.
struct Drift {
    first: u64,
    min: u64,
    max: u64,
    last: u64,
    floor_growth: i64,
}

fn drift(values: &[u64]) -> Option<Drift> {
    let (&first, &last) = (values.first()?, values.last()?);
    let third = (values.len() / 3).max(1);
    let early = values[..third].iter().min()?;
    let late = values[values.len() - third..].iter().min()?;
    Some(Drift {
        first,
        min: *values.iter().min()?,
        max: *values.iter().max()?,
        last,
        floor_growth: *late as i64 - *early as i64,
    })
}

struct Report<'a> {
    o: &'a Options,
    tally: &'a Tally,
    series: &'a [Sample],
    total: f64,
    warmup: f64,
    elapsed: f64,
    scheduled: u64,
    csv: &'a Path,
    hostile: &'a str,
}

impl Report<'_> {
    fn render(&self) -> String {
        let t = self.tally;
        let mut out = String::new();
        let sent: u64 = t.sent.values().sum();
        let answered: u64 = t.answers.values().map(|(n, _)| n).sum();
        let measured = self.total - self.warmup;
        let _ = writeln!(
            out,
            "\nthroughput: {sent} calls sent of {} scheduled ({:.1} %), {answered} answered in {:.1} s = {:.0} calls/s (target {:.0})",
            self.scheduled,
            100.0 * sent as f64 / self.scheduled.max(1) as f64,
            self.elapsed,
            answered as f64 / self.elapsed,
            self.o.rate
        );
        let _ = writeln!(
            out,
            "behind schedule (after warm-up): lag of a send behind its due time p50 {}, p99 {}, max {}; {} call(s) never sent",
            ms(t.lag.value_at_quantile(0.5)),
            ms(t.lag.value_at_quantile(0.99)),
            ms(t.lag.max()),
            self.scheduled.saturating_sub(sent)
        );
        let _ = writeln!(
            out,
            "\nlatency after the {:.0} s warm-up ({:.0} s measured), send → answer:",
            self.warmup, measured
        );
        let _ = writeln!(
            out,
            "{:<28} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "", "calls", "p50", "p99", "p99.9", "max"
        );
        let mut all = histogram();
        let row = |out: &mut String, label: &str, h: &Histogram<u64>| {
            let _ = writeln!(
                out,
                "{:<28} {:>9} {:>9} {:>9} {:>9} {:>9}",
                label,
                h.len(),
                ms(h.value_at_quantile(0.5)),
                ms(h.value_at_quantile(0.99)),
                ms(h.value_at_quantile(0.999)),
                ms(h.max())
            );
        };
        for kind in Kind::ALL {
            if let Some(h) = t.service.get(&kind).filter(|h| !h.is_empty()) {
                let _ = all.add(h);
                row(&mut out, kind.label(), h);
            }
        }
        if !all.is_empty() {
            row(&mut out, "all", &all);
            row(&mut out, "all, due time → answer", &t.from_due);
        }
        let _ = writeln!(out, "\nanswers by kind (whole run, warm-up included):");
        let _ = writeln!(
            out,
            "{:<28} {:>9} {:>11} {:>11}  expected answer",
            "", "sent", "as expected", "unexpected"
        );
        for kind in Kind::ALL {
            let sent = t.sent.get(&kind).copied().unwrap_or_default();
            if sent == 0 {
                continue;
            }
            let (mut good, mut bad) = (0, 0);
            for ((k, _, expected), (n, _)) in &t.answers {
                if *k == kind {
                    if *expected {
                        good += n;
                    } else {
                        bad += n;
                    }
                }
            }
            bad += t
                .broken
                .iter()
                .filter(|(w, _)| w.starts_with(kind.label()))
                .map(|(_, n)| n)
                .sum::<u64>();
            let e = kind.expect();
            let mut want = format!("HTTP {}", e.status);
            if let Some(outcome) = e.outcome {
                let _ = write!(want, ", {outcome}");
            }
            if let Some(code) = e.code {
                let _ = write!(want, " {code}");
            }
            let _ = writeln!(
                out,
                "{:<28} {:>9} {:>11} {:>11}  {want}",
                kind.label(),
                sent,
                good,
                bad
            );
        }
        let expected_errors: BTreeMap<&str, u64> = t
            .answers
            .iter()
            .filter(|((_, d, e), _)| *e && (d.starts_with("HTTP 4") || d.contains("failed")))
            .fold(BTreeMap::new(), |mut m, ((_, d, _), (n, _))| {
                *m.entry(d.as_str()).or_default() += n;
                m
            });
        let _ = writeln!(out, "\nexpected refusals and errors, by status and code:");
        for (what, n) in &expected_errors {
            let _ = writeln!(out, "  {n:>9}  {what}");
        }
        let unexpected = t.unexpected();
        if unexpected == 0 {
            let _ = writeln!(out, "unexpected answers: none");
        } else {
            let _ = writeln!(out, "unexpected answers: {unexpected}");
            for ((kind, what, expected), (n, example)) in &t.answers {
                if !expected {
                    let _ = writeln!(out, "  {n:>9}  {}: {what}", kind.label());
                    let _ = writeln!(out, "             first answer: {example}");
                }
            }
            for (what, n) in &t.broken {
                let _ = writeln!(out, "  {n:>9}  {what}");
            }
        }
        if !self.hostile.is_empty() {
            let _ = writeln!(out, "the hostile plugins, as the server counted them:");
            out.push_str(self.hostile);
        }
        self.render_series(&mut out, unexpected, answered, sent);
        out
    }

    fn render_series(&self, out: &mut String, unexpected: u64, answered: u64, sent: u64) {
        let series = self.series;
        if series.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\nthe server every {} s ({} samples; all of them in {}):",
            self.o.sample_every,
            series.len(),
            self.csv.display()
        );
        let _ = writeln!(
            out,
            "{:>8} {:>9} {:>6} {:>8} {:>7} {:>9} {:>10} {:>8}",
            "time", "rss MiB", "fds", "threads", "tasks", "calls/s", "unexpected", "backlog"
        );
        let step = series.len().div_ceil(30).max(1);
        let cell = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        for (n, s) in series.iter().enumerate() {
            if n % step != 0 && n + 1 != series.len() {
                continue;
            }
            let previous = n.checked_sub(step.min(n)).map(|p| series[p]);
            let rate = match previous {
                Some(p) if s.seconds > p.seconds => {
                    (s.answered - p.answered) as f64 / (s.seconds - p.seconds)
                }
                _ => 0.0,
            };
            let _ = writeln!(
                out,
                "{:>8} {:>9} {:>6} {:>8} {:>7} {:>9.0} {:>10} {:>8}",
                format!("{:.0} s", s.seconds),
                s.rss_kib
                    .map_or_else(|| "-".into(), |k| format!("{:.1}", k as f64 / 1024.0)),
                cell(s.fds),
                cell(s.threads),
                cell(s.tasks),
                rate,
                s.unexpected,
                s.backlog
            );
        }
        let after: Vec<&Sample> = series.iter().filter(|s| s.seconds >= self.warmup).collect();
        let gauge = |f: fn(&Sample) -> Option<u64>| -> Vec<u64> {
            after.iter().filter_map(|s| f(s)).collect()
        };
        let _ = writeln!(out, "\nafter the warm-up ({} samples):", after.len());
        let mut goals: Vec<(String, bool)> = Vec::new();
        let rate_ok = sent as f64 >= 0.99 * self.scheduled as f64;
        goals.push((
            format!(
                "rate: {:.0} calls/s answered, {:.1} % of the schedule sent (goal {:.0}/s, ≥ 99 %)",
                answered as f64 / self.elapsed,
                100.0 * sent as f64 / self.scheduled.max(1) as f64,
                self.o.rate
            ),
            rate_ok,
        ));
        goals.push((
            format!("unexpected answers: {unexpected} (goal 0)"),
            unexpected == 0,
        ));
        if let Some(d) = drift(&gauge(|s| s.rss_kib)) {
            let mib = |k: u64| k as f64 / 1024.0;
            let spread = 100.0 * (d.max - d.min) as f64 / d.min.max(1) as f64;
            let change = 100.0 * (d.last as f64 - d.first as f64) / d.first.max(1) as f64;
            let _ = writeln!(
                out,
                "  rss: first {:.1} MiB, min {:.1}, max {:.1}, last {:.1}: last vs first {change:+.1} %, max vs min {spread:.1} %",
                mib(d.first),
                mib(d.min),
                mib(d.max),
                mib(d.last)
            );
            goals.push((
                format!("rss flat within 10 % after warm-up: max vs min {spread:.1} %"),
                spread <= 10.0,
            ));
        }
        for (name, values) in [
            ("open fds", gauge(|s| s.fds)),
            ("threads", gauge(|s| s.threads)),
            ("tokio tasks", gauge(|s| s.tasks)),
        ] {
            if let Some(d) = drift(&values) {
                let _ = writeln!(
                    out,
                    "  {name}: first {}, min {}, max {}, last {}; floor growth (min of the last third − min of the first third) {:+}",
                    d.first, d.min, d.max, d.last, d.floor_growth
                );
                if name != "threads" {
                    goals.push((
                        format!("no growth in {name}: floor growth {:+}", d.floor_growth),
                        d.floor_growth <= 0,
                    ));
                }
            } else if name == "tokio tasks" {
                let _ = writeln!(
                    out,
                    "  tokio tasks: not sampled (no capgate_runtime_alive_tasks on the metrics endpoint)"
                );
            }
        }
        let _ = writeln!(out, "\ngoals:");
        for (what, met) in goals {
            let _ = writeln!(out, "  {:<8} {what}", if met { "met" } else { "NOT MET" });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mix_has_every_kind_in_its_share() {
        let mut count: BTreeMap<Kind, u64> = BTreeMap::new();
        for i in 0..30_000 {
            *count.entry(Kind::planned(i)).or_default() += 1;
        }
        let share = |k| count.get(&k).copied().unwrap_or_default() as f64 / 30_000.0;
        assert!((share(Kind::ApprovalInvoke) - 0.08).abs() < 0.005);
        assert!((share(Kind::Replay) - 0.08).abs() < 0.005);
        for bad in [
            Kind::Malformed,
            Kind::UnknownCapability,
            Kind::SchemaInvalid,
            Kind::BadKey,
        ] {
            assert!((share(bad) - 0.01).abs() < 0.001, "{bad:?}");
        }
        for hostile in [Kind::HostileSpin, Kind::HostilePanic, Kind::HostileMemory] {
            assert_eq!(count.get(&hostile), Some(&20), "{hostile:?}");
        }
        // Follow-ups are never planned: they come from an approval-required answer.
        assert!(!count.contains_key(&Kind::Decide) && !count.contains_key(&Kind::Resume));
    }

    #[test]
    fn a_leak_raises_the_floor_and_noise_does_not() {
        let noisy = [10, 14, 10, 13, 11, 10, 15, 10, 12];
        assert_eq!(drift(&noisy).map(|d| d.floor_growth), Some(0));
        let leaking = [10, 14, 11, 13, 14, 16, 15, 19, 17];
        assert_eq!(drift(&leaking).map(|d| d.floor_growth), Some(5));
    }

    #[test]
    fn an_unlabelled_series_is_read_from_the_exposition() {
        let text = "# TYPE capgate_runtime_alive_tasks gauge\ncapgate_runtime_alive_tasks_x 3\ncapgate_runtime_alive_tasks 42\n";
        assert_eq!(metric(text, "capgate_runtime_alive_tasks"), Some(42.0));
        assert_eq!(metric(text, "capgate_nothing"), None);
    }
}
