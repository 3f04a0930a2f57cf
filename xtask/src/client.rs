//! What `cargo xtask load` and `cargo xtask soak` share: one HTTP/1.1 keep-alive connection
//! per virtual user (hyper's per-connection client), the gateway URL, HDR histograms,
//! unique invocation ids, reading an answer's outcome, and sampling a process from /proc.

use anyhow::Context;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::net::TcpStream;

/// The invoke body of the customer-support example that completes: a refund of 20 on
/// `ord_43` (both Wasm policies allow it, the Wasm procedure refunds, the redactor strips the
/// gateway reference). `@ID@` is replaced by a unique invocation id.
pub const DEFAULT_BODY: &str = r#"{"capabilityId":"orders.refund","input":{"orderId":"ord_43","amount":20,"reason":"late"},"invocationId":"@ID@"}"#;
/// A refund of 600 on `ord_42`: over refundLimit's 500, so it answers `approval-required`.
pub const APPROVAL_BODY: &str = r#"{"capabilityId":"orders.refund","input":{"orderId":"ord_42","amount":600,"reason":"damaged"},"invocationId":"@ID@"}"#;

/// A gateway route split for the socket and the request line.
pub struct Target {
    /// `host:port`, for the socket and the Host header.
    pub authority: String,
    /// `/agent` (no trailing slash).
    pub route: String,
}

/// Split `http://HOST:PORT/ROUTE`; the error says what is wrong with `url` (the caller names
/// the option).
pub fn split_url(url: &str) -> Result<Target, String> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(format!(
            "invalid value '{url}': expected http://HOST:PORT/ROUTE (plain HTTP; https is not supported)"
        ));
    };
    let (authority, route) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.is_empty() || !authority.contains(':') {
        return Err(format!(
            "invalid value '{url}': name the port too, e.g. http://127.0.0.1:8080/agent"
        ));
    }
    Ok(Target {
        authority: authority.to_string(),
        route: route.trim_end_matches('/').to_string(),
    })
}

/// An empty latency histogram: 1 µs .. 60 s, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// One answer: HTTP status and body.
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// The whole body.
    pub body: Bytes,
}

/// One keep-alive connection.
pub struct Conn {
    send: SendRequest<Full<Bytes>>,
    authority: String,
}

/// Open a keep-alive connection to `authority` (`host:port`).
pub async fn connect(authority: &str) -> anyhow::Result<Conn> {
    let tcp = TcpStream::connect(authority)
        .await
        .with_context(|| format!("could not connect to {authority}"))?;
    tcp.set_nodelay(true)?;
    let (send, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .context("HTTP/1.1 handshake")?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(Conn {
        send,
        authority: authority.to_string(),
    })
}

impl Conn {
    /// `POST path` with a bearer key and a JSON body (sent as given, valid or not).
    pub async fn post(&mut self, path: &str, key: &str, body: String) -> anyhow::Result<Answer> {
        self.request(Method::POST, path, Some(key), body).await
    }

    /// `GET path` without credentials.
    pub async fn get(&mut self, path: &str) -> anyhow::Result<Answer> {
        self.request(Method::GET, path, None, String::new()).await
    }

    async fn request(
        &mut self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: String,
    ) -> anyhow::Result<Answer> {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.authority);
        if let Some(key) = key {
            request = request
                .header(hyper::header::AUTHORIZATION, format!("Bearer {key}"))
                .header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .context("building the request")?;
        self.send.ready().await.context("connection closed")?;
        let response = self.send.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Answer { status, body })
    }
}

/// The invocation ids of this run: unique across runs and virtual users.
pub struct Ids {
    prefix: String,
}

impl Ids {
    /// Ids prefixed with `what`, this process and the time.
    pub fn new(what: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        Ids {
            prefix: format!("{what}-{}-{nanos:x}", std::process::id()),
        }
    }

    /// The `n`th id of virtual user `vu`.
    pub fn make(&self, vu: usize, n: u64) -> String {
        format!("{}-{vu}-{n}", self.prefix)
    }
}

/// The outcome tag of a gateway answer: `{"status":"completed",…}` (the tag is the first
/// field the gateway writes).
pub fn outcome_status(body: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(body).ok()?;
    let rest = text.strip_prefix("{\"status\":\"")?;
    rest.split('"').next()
}

/// The error code of an answer (`{"error":{"code":…}}`, outcome or HTTP error), if any.
pub fn error_code(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
}

/// The first 300 bytes of a body, for error reports.
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    if body.len() > 300 { text + "…" } else { text }
}

/// A numeric field of `/proc/PID/status` (`VmRSS` in KiB, `Threads`).
pub fn proc_status(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The resident set of `pid`, KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    proc_status(pid, "VmRSS")
}

/// Open file descriptors of `pid` (entries of /proc/PID/fd).
pub fn open_fds(pid: u32) -> Option<u64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64)
}

/// Microseconds as milliseconds for a table.
pub fn ms(us: u64) -> String {
    if us >= 100_000 {
        format!("{:.0} ms", us as f64 / 1000.0)
    } else {
        format!("{:.2} ms", us as f64 / 1000.0)
    }
}
