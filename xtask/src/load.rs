//! `cargo xtask load`: a closed-loop load generator for the HTTP gateway.
//!
//! Each virtual user owns one HTTP/1.1 keep-alive connection (hyper's per-connection client)
//! and sends its next request as soon as the previous answer arrived. Every invoke carries a
//! fresh `invocationId`, so every call is claimed in the journal, governed, executed,
//! settled and audited. Latencies go into HDR histograms (µs, 3 significant digits), one per
//! request kind, merged at the end; nothing is recorded during the warm-up.
//!
//! ```sh
//! cargo xtask demo &        # or any `capgate serve`
//! cargo xtask load --connections 16 --seconds 20 --warmup 5
//! taskset -c 1 cargo xtask load --threads 1 --mode mixed --pid "$(pgrep -f 'capgate serve')"
//! ```
//!
//! Modes:
//!
//! - `invoke` (default): `orders.refund` of 20 on `ord_43` (both Wasm policies allow it, the
//!   Wasm procedure refunds, the redactor strips the gateway reference).
//! - `mixed`: per virtual user, a repeating cycle of ten steps — eight governed invokes as
//!   above, one approval flow (a refund of 600 on `ord_42` is over refundLimit's 500, so it
//!   answers `approval-required`; the approver key approves it through
//!   `POST /approvals/{id}/decision`; the requester resumes it with `resumeApproval`), and
//!   one replay of an invocation id this user already completed (answered from the journal,
//!   nothing runs again).
//!
//! The generator runs on its own Tokio runtime (`--threads`, default 1) so it can be pinned
//! to a core the server does not use (`taskset -c 1 …`).

use crate::client::{
    APPROVAL_BODY, Answer, Conn, DEFAULT_BODY, Ids, connect, error_code, excerpt, histogram, ms,
    outcome_status, rss_kib, split_url,
};
use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use hyper::StatusCode;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const USAGE: &str = "\
Usage: cargo xtask load [OPTIONS]

Load-test a running capgate gateway (start one with `cargo xtask demo`).

Options:
      --url URL              the gateway route [default: http://127.0.0.1:8080/agent]
      --key KEY              the caller's API key [default: dana-dev-key]
      --approver-key KEY     who approves in --mode mixed [default: priya-dev-key]
      --connections N        virtual users, one keep-alive connection each [default: 16]
      --seconds S            measured time [default: 10]
      --warmup S             load before measuring, not recorded [default: 2]
      --threads N            the generator's runtime threads [default: 1]
      --mode invoke|mixed    invokes only, or invokes + approval flows + replays [default: invoke]
      --pid PID              sample this process's RSS every second and print the series
      --body JSON            the invoke body; `@ID@` is replaced by a unique invocation id
  -h, --help                 print this help

The example limits each principal to 1 000 requests/s ([gateway.rateLimit]); to measure the
gateway rather than its rate limiter, serve `cargo xtask example-config --load`'s config.";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Invoke,
    Mixed,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Invoke => "invoke",
            Mode::Mixed => "mixed",
        }
    }
}

struct Options {
    /// `host:port`, for the socket and the Host header.
    authority: String,
    /// `/agent` (no trailing slash).
    route: String,
    key: String,
    approver_key: String,
    connections: usize,
    seconds: u64,
    warmup: u64,
    threads: usize,
    mode: Mode,
    pid: Option<u32>,
    body: String,
}

/// A cargo-style error: what is wrong, then what to do.
fn usage_error(message: String) -> anyhow::Error {
    anyhow::anyhow!("{message}\n\nFor more information, try 'cargo xtask load --help'.")
}

fn number<T: std::str::FromStr>(option: &str, value: &str, what: &str) -> anyhow::Result<T> {
    value.parse().map_err(|_| {
        usage_error(format!(
            "invalid value '{value}' for '{option}': expected {what}"
        ))
    })
}

fn parse(args: &[String]) -> anyhow::Result<Option<Options>> {
    let mut url = "http://127.0.0.1:8080/agent".to_string();
    let mut key = "dana-dev-key".to_string();
    let mut approver_key = "priya-dev-key".to_string();
    let mut connections: usize = 16;
    let mut seconds: u64 = 10;
    let mut warmup: u64 = 2;
    let mut threads: usize = 1;
    let mut mode = Mode::Invoke;
    let mut pid = None;
    let mut body = DEFAULT_BODY.to_string();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        // `--name=value` and `--name value` both work.
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
            "--url" => url = value()?,
            "--key" => key = value()?,
            "--approver-key" => approver_key = value()?,
            "--connections" | "--workers" => {
                connections = number(name, &value()?, "a whole number of connections")?
            }
            "--seconds" => seconds = number(name, &value()?, "a whole number of seconds")?,
            "--warmup" => warmup = number(name, &value()?, "a whole number of seconds")?,
            "--threads" => threads = number(name, &value()?, "a whole number of threads")?,
            "--mode" => {
                mode = match value()?.as_str() {
                    "invoke" => Mode::Invoke,
                    "mixed" => Mode::Mixed,
                    other => {
                        return Err(usage_error(format!(
                            "invalid value '{other}' for '--mode': expected `invoke` or `mixed`"
                        )));
                    }
                }
            }
            "--pid" => pid = Some(number(name, &value()?, "a process id")?),
            "--body" => body = value()?,
            other => {
                return Err(usage_error(format!(
                    "unexpected argument '{other}'\n\n{}",
                    USAGE.lines().next().unwrap_or_default()
                )));
            }
        }
    }
    if connections == 0 {
        return Err(usage_error(
            "'--connections' must be at least 1".to_string(),
        ));
    }
    if seconds == 0 {
        return Err(usage_error("'--seconds' must be at least 1".to_string()));
    }
    if threads == 0 {
        return Err(usage_error("'--threads' must be at least 1".to_string()));
    }
    if !body.contains("@ID@") {
        return Err(usage_error(
            "'--body' has no `@ID@`: every request needs its own invocationId, so put \"invocationId\":\"@ID@\" in the body".to_string(),
        ));
    }
    let target = split_url(&url).map_err(|e| usage_error(format!("--url: {e}")))?;
    if let Some(pid) = pid
        && !std::path::Path::new(&format!("/proc/{pid}/status")).exists()
    {
        return Err(usage_error(format!(
            "invalid value '{pid}' for '--pid': no such process; pass the server's pid, e.g. --pid \"$(pgrep -f 'capgate serve')\""
        )));
    }
    Ok(Some(Options {
        authority: target.authority,
        route: target.route,
        key,
        approver_key,
        connections,
        seconds,
        warmup,
        threads,
        mode,
        pid,
        body,
    }))
}

/// The kinds of request, each with its own histogram.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    Invoke,
    ApprovalInvoke,
    Decide,
    Resume,
    Replay,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Invoke,
        Kind::ApprovalInvoke,
        Kind::Decide,
        Kind::Resume,
        Kind::Replay,
    ];

    fn label(self) -> &'static str {
        match self {
            Kind::Invoke => "invoke",
            Kind::ApprovalInvoke => "invoke (approval-required)",
            Kind::Decide => "decide (approvals API)",
            Kind::Resume => "resumeApproval",
            Kind::Replay => "replay (same invocationId)",
        }
    }
}

/// What one virtual user saw.
struct Tally {
    latency: BTreeMap<Kind, Histogram<u64>>,
    /// Failed requests by what went wrong, with the first answer seen.
    errors: BTreeMap<String, (u64, String)>,
    ok: u64,
}

impl Tally {
    fn new() -> Self {
        Tally {
            latency: Kind::ALL.iter().map(|k| (*k, histogram())).collect(),
            errors: BTreeMap::new(),
            ok: 0,
        }
    }

    fn error(&mut self, what: String, example: impl FnOnce() -> String) {
        self.errors.entry(what).or_insert_with(|| (0, example())).0 += 1;
    }

    fn merge(&mut self, other: Tally) {
        for (k, h) in other.latency {
            if let Some(mine) = self.latency.get_mut(&k) {
                let _ = mine.add(h);
            }
        }
        for (what, (n, example)) in other.errors {
            self.errors.entry(what).or_insert((0, example)).0 += n;
        }
        self.ok += other.ok;
    }
}

/// Check an answer: HTTP 200 with the expected outcome status (when one is expected).
fn judge(answer: &Answer, expected: Option<&str>) -> Result<(), String> {
    if answer.status != StatusCode::OK {
        return Err(format!("HTTP {}", answer.status.as_u16()));
    }
    match expected {
        None => Ok(()),
        Some(want) => match outcome_status(&answer.body) {
            Some(got) if got == want => Ok(()),
            Some(got) => Err(match error_code(&answer.body) {
                Some(code) => format!("HTTP 200, outcome {got} ({code})"),
                None => format!("HTTP 200, outcome {got}"),
            }),
            None => Err("HTTP 200, not an outcome".to_string()),
        },
    }
}

struct Shared {
    o: Options,
    ids: Ids,
    stop: AtomicBool,
    measure_from: Instant,
}

/// One step's requests; returns Err on a broken connection (the caller reconnects).
struct User {
    vu: usize,
    n: u64,
    conn: Conn,
    /// A completed invoke of this user: (invocation id, its body), for replays.
    done: Option<String>,
    tally: Tally,
}

impl User {
    fn next_id(&mut self, shared: &Shared) -> String {
        self.n += 1;
        shared.ids.make(self.vu, self.n)
    }

    /// Send one request, time it, judge it. `Ok(None)` is a failed request (counted),
    /// `Err` a broken connection.
    async fn exchange(
        &mut self,
        shared: &Shared,
        kind: Kind,
        path: &str,
        key: &str,
        body: String,
        expected: Option<&str>,
    ) -> anyhow::Result<Option<Answer>> {
        let started = Instant::now();
        let answer = self.conn.post(path, key, body).await?;
        let took = started.elapsed();
        let measured = started >= shared.measure_from;
        match judge(&answer, expected) {
            Ok(()) => {
                if measured {
                    self.tally.ok += 1;
                    if let Some(h) = self.tally.latency.get_mut(&kind) {
                        h.saturating_record(took.as_micros() as u64);
                    }
                }
                Ok(Some(answer))
            }
            Err(what) => {
                if measured {
                    self.tally.error(format!("{}: {what}", kind.label()), || {
                        excerpt(&answer.body)
                    });
                }
                Ok(None)
            }
        }
    }

    async fn invoke(&mut self, shared: &Shared) -> anyhow::Result<()> {
        let id = self.next_id(shared);
        let body = shared.o.body.replace("@ID@", &id);
        let path = format!("{}/invoke", shared.o.route);
        let key = shared.o.key.clone();
        if self
            .exchange(
                shared,
                Kind::Invoke,
                &path,
                &key,
                body.clone(),
                Some("completed"),
            )
            .await?
            .is_some()
        {
            self.done = Some(body);
        }
        Ok(())
    }

    async fn replay(&mut self, shared: &Shared) -> anyhow::Result<()> {
        let Some(body) = self.done.clone() else {
            return self.invoke(shared).await;
        };
        let path = format!("{}/invoke", shared.o.route);
        let key = shared.o.key.clone();
        self.exchange(shared, Kind::Replay, &path, &key, body, Some("completed"))
            .await?;
        Ok(())
    }

    async fn approval_flow(&mut self, shared: &Shared) -> anyhow::Result<()> {
        let o = &shared.o;
        let id = self.next_id(shared);
        let path = format!("{}/invoke", o.route);
        let Some(answer) = self
            .exchange(
                shared,
                Kind::ApprovalInvoke,
                &path,
                &o.key,
                APPROVAL_BODY.replace("@ID@", &id),
                Some("approval-required"),
            )
            .await?
        else {
            return Ok(());
        };
        let approval = serde_json::from_slice::<serde_json::Value>(&answer.body)
            .ok()
            .and_then(|v| v["approval"]["id"].as_str().map(str::to_string));
        let Some(approval) = approval else {
            if Instant::now() >= shared.measure_from {
                self.tally.error(
                    format!("{}: no approval id", Kind::ApprovalInvoke.label()),
                    || excerpt(&answer.body),
                );
            }
            return Ok(());
        };
        if self
            .exchange(
                shared,
                Kind::Decide,
                &format!("/approvals/{approval}/decision"),
                &o.approver_key,
                r#"{"decision":"approved","comment":"load test"}"#.to_string(),
                None,
            )
            .await?
            .is_none()
        {
            return Ok(());
        }
        self.exchange(
            shared,
            Kind::Resume,
            &format!("{}/resumeApproval", o.route),
            &o.key,
            format!(r#"{{"approvalId":"{approval}","invocationId":"{id}"}}"#),
            Some("completed"),
        )
        .await?;
        Ok(())
    }

    async fn step(&mut self, shared: &Shared, i: u64) -> anyhow::Result<()> {
        match (shared.o.mode, i % 10) {
            (Mode::Invoke, _) => self.invoke(shared).await,
            (Mode::Mixed, 8) => self.approval_flow(shared).await,
            (Mode::Mixed, 9) => self.replay(shared).await,
            (Mode::Mixed, _) => self.invoke(shared).await,
        }
    }
}

/// A virtual user: steps until told to stop; reconnects (counting the error) when its
/// connection breaks.
async fn virtual_user(shared: Arc<Shared>, vu: usize, conn: Conn) -> Tally {
    let mut user = User {
        vu,
        n: 0,
        conn,
        done: None,
        tally: Tally::new(),
    };
    // Users start at different points of the mixed cycle.
    let mut i = vu as u64;
    while !shared.stop.load(Ordering::Relaxed) {
        if let Err(e) = user.step(&shared, i).await {
            if Instant::now() >= shared.measure_from {
                user.tally
                    .error(format!("connection: {}", root_cause(&e)), String::new);
            }
            loop {
                if shared.stop.load(Ordering::Relaxed) {
                    return user.tally;
                }
                match connect(&shared.o.authority).await {
                    Ok(c) => {
                        user.conn = c;
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
        i += 1;
    }
    user.tally
}

fn root_cause(e: &anyhow::Error) -> String {
    e.root_cause().to_string()
}

/// One request before the load, so a wrong URL, key or server fails with a hint instead of
/// a screen of errors.
async fn preflight(o: &Options, ids: &Ids) -> anyhow::Result<()> {
    let mut conn = connect(&o.authority).await.map_err(|e| {
        anyhow::anyhow!(
            "{e:#}\n\nIs the gateway running? Start it with `cargo xtask demo`, or point --url at it."
        )
    })?;
    let path = format!("{}/invoke", o.route);
    let body = o.body.replace("@ID@", &ids.make(usize::MAX, 0));
    let answer = conn
        .post(&path, &o.key, body)
        .await
        .context("the first request failed")?;
    let hint = match answer.status.as_u16() {
        200 => None,
        401 => Some(format!(
            "the gateway refused the key '{}': pass --key with an API key of the deployment (the demo's is dana-dev-key)",
            o.key
        )),
        404 | 405 => Some(format!(
            "no gateway route at {path}: --url must name a [gateway] route, e.g. http://127.0.0.1:8080/agent"
        )),
        429 => Some(
            "rate limited before the load started: wait a second, or serve a config without rate limits (`cargo xtask example-config --load`)".to_string(),
        ),
        _ => Some("see the answer above".to_string()),
    };
    if let Some(hint) = hint {
        bail!(
            "POST http://{}{path} answered HTTP {}: {}\n\n{hint}",
            o.authority,
            answer.status.as_u16(),
            excerpt(&answer.body)
        );
    }
    if outcome_status(&answer.body) != Some("completed") && o.body == DEFAULT_BODY {
        bail!(
            "POST http://{}{path} did not complete the refund: {}\n\nServe the customer-support example (`cargo xtask demo`) or pass --body for your deployment.",
            o.authority,
            excerpt(&answer.body)
        );
    }
    Ok(())
}

/// Sample the RSS every second until `stop`; (seconds since start, KiB).
fn sample_rss(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<(u64, u64)>> {
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut series = Vec::new();
        let mut next = started;
        while !stop.load(Ordering::Relaxed) {
            if Instant::now() >= next {
                if let Some(kib) = rss_kib(pid) {
                    series.push((started.elapsed().as_secs(), kib));
                }
                next += Duration::from_secs(1);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(kib) = rss_kib(pid) {
            series.push((started.elapsed().as_secs(), kib));
        }
        series
    })
}

/// Run the load; prints a summary. Fails (after printing it) when any request failed.
pub fn load(args: &[String]) -> anyhow::Result<()> {
    let Some(o) = parse(args)? else {
        return Ok(());
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(o.threads)
        .enable_all()
        .build()
        .context("could not start the generator's runtime")?;
    runtime.block_on(run(o))
}

async fn run(o: Options) -> anyhow::Result<()> {
    let ids = Ids::new("load");
    preflight(&o, &ids).await?;
    println!(
        "load: mode {}, {} connections (keep-alive), {} generator thread(s), {} s warm-up + {} s measured, POST http://{}{}/invoke",
        o.mode.name(),
        o.connections,
        o.threads,
        o.warmup,
        o.seconds,
        o.authority,
        o.route
    );
    let mut conns = Vec::with_capacity(o.connections);
    for _ in 0..o.connections {
        conns.push(connect(&o.authority).await?);
    }
    let rss_stop = Arc::new(AtomicBool::new(false));
    let sampler = o.pid.map(|pid| sample_rss(pid, rss_stop.clone()));
    let started = Instant::now();
    let measure_from = started + Duration::from_secs(o.warmup);
    let end = measure_from + Duration::from_secs(o.seconds);
    let shared = Arc::new(Shared {
        o,
        ids,
        stop: AtomicBool::new(false),
        measure_from,
    });
    let users: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(vu, conn)| tokio::spawn(virtual_user(shared.clone(), vu, conn)))
        .collect();
    tokio::time::sleep_until(end.into()).await;
    shared.stop.store(true, Ordering::Relaxed);
    let mut total = Tally::new();
    for u in users {
        total.merge(u.await.context("a virtual user panicked")?);
    }
    // The last requests started before `end` finished by now.
    let measured = measure_from.elapsed().as_secs_f64();
    rss_stop.store(true, Ordering::Relaxed);
    let rss = match sampler {
        Some(s) => Some(
            s.join()
                .map_err(|_| anyhow::anyhow!("the RSS sampler panicked"))?,
        ),
        None => None,
    };
    report(&shared.o, &total, measured, rss.as_deref());
    let failed: u64 = total.errors.values().map(|(n, _)| n).sum();
    if failed > 0 {
        bail!("{failed} request(s) failed (see errors above)");
    }
    if total.ok == 0 {
        bail!("no request completed in the measured time");
    }
    Ok(())
}

fn report(o: &Options, t: &Tally, measured: f64, rss: Option<&[(u64, u64)]>) {
    let failed: u64 = t.errors.values().map(|(n, _)| n).sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<28} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "", "requests", "/s", "p50", "p90", "p99", "p99.9", "max"
    );
    let mut all = histogram();
    for kind in Kind::ALL {
        let Some(h) = t.latency.get(&kind) else {
            continue;
        };
        if h.is_empty() {
            continue;
        }
        let _ = all.add(h);
        let _ = writeln!(
            out,
            "{:<28} {:>9} {:>9.0} {:>9} {:>9} {:>9} {:>9} {:>9}",
            kind.label(),
            h.len(),
            h.len() as f64 / measured,
            ms(h.value_at_quantile(0.5)),
            ms(h.value_at_quantile(0.9)),
            ms(h.value_at_quantile(0.99)),
            ms(h.value_at_quantile(0.999)),
            ms(h.max()),
        );
    }
    if o.mode == Mode::Mixed && !all.is_empty() {
        let _ = writeln!(
            out,
            "{:<28} {:>9} {:>9.0} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "all",
            all.len(),
            all.len() as f64 / measured,
            ms(all.value_at_quantile(0.5)),
            ms(all.value_at_quantile(0.9)),
            ms(all.value_at_quantile(0.99)),
            ms(all.value_at_quantile(0.999)),
            ms(all.max()),
        );
    }
    let _ = writeln!(
        out,
        "load: {} ok + {failed} failed requests in {measured:.1} s = {:.0} ok/s",
        t.ok,
        t.ok as f64 / measured
    );
    if t.errors.is_empty() {
        let _ = writeln!(out, "errors: none");
    } else {
        let _ = writeln!(out, "errors by status:");
        for (what, (n, example)) in &t.errors {
            let _ = writeln!(out, "  {n:>9}  {what}");
            if !example.is_empty() {
                let _ = writeln!(out, "             first answer: {example}");
            }
        }
        if t.errors.keys().any(|k| k.contains("HTTP 429")) {
            let _ = writeln!(
                out,
                "hint: 429 is the gateway's rate limit ([gateway.rateLimit]; the example allows 1 000/s per principal). To measure the gateway itself, serve `cargo xtask example-config --load`'s config, which switches the limits off."
            );
        }
    }
    if let (Some(series), Some(pid)) = (rss, o.pid) {
        let mib = |kib: u64| kib as f64 / 1024.0;
        let _ = writeln!(
            out,
            "rss of pid {pid}, MiB, every second from the start of the warm-up:"
        );
        for chunk in series.chunks(15) {
            let line: Vec<String> = chunk
                .iter()
                .map(|(_, k)| format!("{:.1}", mib(*k)))
                .collect();
            let _ = writeln!(out, "  {}", line.join(" "));
        }
        if let (Some(min), Some(max)) = (
            series.iter().map(|(_, k)| *k).min(),
            series.iter().map(|(_, k)| *k).max(),
        ) {
            let first = series.first().map(|(_, k)| *k).unwrap_or_default();
            let last = series.last().map(|(_, k)| *k).unwrap_or_default();
            let _ = writeln!(
                out,
                "rss: min {:.1} MiB, max {:.1} MiB, first {:.1} MiB, last {:.1} MiB ({} samples)",
                mib(min),
                mib(max),
                mib(first),
                mib(last),
                series.len()
            );
        }
    }
    print!("{out}");
}
