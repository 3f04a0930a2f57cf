//! `cargo xtask load`: a small closed-loop load generator for the gateway. Each worker
//! thread keeps one HTTP/1.1 keep-alive connection and sends governed invokes back to back
//! (a fresh invocation id per call, so every call is claimed, executed, settled and
//! audited); at the end it prints throughput and latency percentiles.
//!
//! ```sh
//! cargo xtask demo &    # or any `capgate serve`
//! cargo xtask load --url http://127.0.0.1:8080/agent --key dana-dev-key --workers 32 --seconds 10
//! ```
//!
//! Plain std (no async runtime, no HTTP crate): the generator must cost less than the server
//! it measures, and must not share the server's tuning.

use anyhow::{Context, bail};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Options {
    host: String,
    path: String,
    key: String,
    workers: usize,
    seconds: u64,
    body: String,
}

fn parse(args: &[String]) -> anyhow::Result<Options> {
    let mut url = "http://127.0.0.1:8080/agent".to_string();
    let mut key = "dana-dev-key".to_string();
    let mut workers = 32;
    let mut seconds = 10;
    let mut body = r#"{"capabilityId":"orders.refund","input":{"orderId":"ord_43","amount":20,"reason":"late"},"invocationId":"@ID@"}"#.to_string();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .with_context(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--url" => url = value()?,
            "--key" => key = value()?,
            "--workers" => workers = value()?.parse().context("--workers")?,
            "--seconds" => seconds = value()?.parse().context("--seconds")?,
            "--body" => body = value()?,
            other => bail!(
                "unknown option {other}\nusage: cargo xtask load [--url http://HOST:PORT/ROUTE] [--key KEY] [--workers N] [--seconds S] [--body JSON with @ID@]"
            ),
        }
    }
    let rest = url
        .strip_prefix("http://")
        .context("--url must start with http://")?;
    let (host, route) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if workers == 0 || seconds == 0 {
        bail!("--workers and --seconds must be positive");
    }
    Ok(Options {
        host: host.to_string(),
        path: format!("{}/invoke", route.trim_end_matches('/')),
        key,
        workers,
        seconds,
        body,
    })
}

/// One request/response on a keep-alive connection; returns the status.
fn exchange(
    stream: &mut BufReader<TcpStream>,
    o: &Options,
    body: &str,
) -> anyhow::Result<(u16, Vec<u8>)> {
    let request = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
        o.path,
        o.host,
        o.key,
        body.len(),
        body
    );
    stream.get_mut().write_all(request.as_bytes())?;
    let mut line = String::new();
    stream.read_line(&mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("bad status line {line:?}"))?;
    let mut length = 0usize;
    loop {
        line.clear();
        stream.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse().context("content-length")?;
        }
    }
    let mut buf = vec![0; length];
    stream.read_exact(&mut buf)?;
    Ok((status, buf))
}

/// Run the load; prints a summary.
pub fn load(args: &[String]) -> anyhow::Result<()> {
    let o = Arc::new(parse(args)?);
    let stop = Arc::new(AtomicBool::new(false));
    let all: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let nonce = std::process::id();
    println!(
        "load: {} workers, {} s, POST http://{}{} (keep-alive)",
        o.workers, o.seconds, o.host, o.path
    );
    let started = Instant::now();
    let threads: Vec<_> = (0..o.workers)
        .map(|w| {
            let (o, stop, all, errors) = (o.clone(), stop.clone(), all.clone(), errors.clone());
            std::thread::spawn(move || {
                let mut lat = Vec::with_capacity(100_000);
                let mut run = || -> anyhow::Result<()> {
                    let tcp = TcpStream::connect(&o.host)
                        .with_context(|| format!("connect {}", o.host))?;
                    tcp.set_nodelay(true)?;
                    let mut stream = BufReader::new(tcp);
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let body = o.body.replace("@ID@", &format!("load-{nonce}-{w}-{i}"));
                        let t = Instant::now();
                        let (status, response) = exchange(&mut stream, &o, &body)?;
                        lat.push(t.elapsed());
                        if status != 200 || !response.starts_with(b"{\"status\":\"completed\"") {
                            bail!(
                                "status {status}: {}",
                                String::from_utf8_lossy(&response[..response.len().min(300)])
                            );
                        }
                        i += 1;
                    }
                    Ok(())
                };
                if let Err(e) = run() {
                    errors.lock().map(|mut v| v.push(format!("{e:#}"))).ok();
                }
                all.lock().map(|mut v| v.extend(lat)).ok();
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(o.seconds));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let elapsed = started.elapsed();
    let mut lat = std::mem::take(&mut *all.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);
    let errors = errors.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    if lat.is_empty() {
        bail!("no request completed: {errors:?}");
    }
    lat.sort();
    let p = |q: f64| lat[((lat.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "load: {} calls in {:.1} s = {:.0} governed invokes/s; latency p50 {:?}, p90 {:?}, p99 {:?}, max {:?}",
        lat.len(),
        elapsed.as_secs_f64(),
        lat.len() as f64 / elapsed.as_secs_f64(),
        p(0.5),
        p(0.9),
        p(0.99),
        p(1.0)
    );
    if !errors.is_empty() {
        bail!(
            "{} worker(s) stopped on an error; first: {}",
            errors.len(),
            errors[0]
        );
    }
    Ok(())
}
