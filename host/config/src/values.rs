//! The value checks of a parsed configuration: numbers in their ranges (so nothing
//! overflows or makes every call fail), route paths that can be mounted, a listen address,
//! a store URL, a consistent `[mcp]` table. Each problem is located; all are reported
//! together with the type and reference problems of [`Config::load`].

use crate::keys::Keys;
use crate::located::{Located, Problem};
use crate::model::Config;
use capgate_core::actor::ActorKind;

/// The longest duration any `…Ms` setting may hold: 365 days. Far beyond any sensible
/// timeout, and far enough from the limits of the clocks that nothing overflows.
pub const MAX_MS: u64 = 365 * 24 * 3_600_000;

/// The longest replay horizon: ten years.
pub const MAX_REPLAY_HORIZON_HOURS: u64 = 10 * 365 * 24;

/// The longest console session: a week.
pub const MAX_CONSOLE_SESSION_MINUTES: u64 = 7 * 24 * 60;

/// The largest plugin memory cap: a 32-bit Wasm memory cannot grow past 4 GiB.
pub const MAX_MEMORY_MB: u64 = 4096;

/// The largest per-namespace storage budget (rows or bytes): what the store's signed
/// 64-bit counters hold.
pub const MAX_STORAGE: u64 = i64::MAX as u64;

/// A duration setting: positive (unless `zero_ok`) and at most [`MAX_MS`].
fn ms(doc: &Located, out: &mut Vec<Problem>, pointer: &str, value: u64, zero_ok: bool) {
    if value == 0 && !zero_ok {
        out.push(doc.problem(pointer, "must be a positive number of milliseconds"));
    } else if value > MAX_MS {
        out.push(doc.problem(
            pointer,
            format!("must be at most {MAX_MS} milliseconds (365 days), got {value}"),
        ));
    }
}

impl Config {
    /// Ranges and shapes of values (see the module docs).
    pub(crate) fn check_values(&self, doc: &Located, out: &mut Vec<Problem>) {
        // Every range declared on a key (`#[key(range = …)]`), wherever its table is.
        let mut ranges = Vec::new();
        self.range_problems("", &mut ranges);
        for (pointer, message) in ranges {
            out.push(doc.problem(&pointer, message));
        }
        // The tables of other crates' types declare no ranges; theirs are checked here.
        for (i, c) in self.capabilities.iter().enumerate() {
            let at = format!("/capabilities/{i}");
            if let Some(e) = c.approval.as_ref().and_then(|a| a.expires_in_ms) {
                ms(doc, out, &format!("{at}/approval/expiresInMs"), e, false);
            }
            if let Some(b) = c.retry.as_ref().and_then(|r| r.backoff_ms) {
                ms(doc, out, &format!("{at}/retry/backoffMs"), b, false);
            }
            use capgate_core::defaults::http_upstream as http;
            let stall = c.procedure.response_stall_timeout_ms;
            if !(0..=http::MAX_SAFE_STALL_TIMEOUT_MS).contains(&stall)
                || u64::try_from(stall).is_ok_and(|v| v > MAX_MS)
            {
                out.push(doc.problem(
                    &format!("{at}/procedure/responseStallTimeoutMs"),
                    format!(
                        "must be 0 (the default, {} ms) or a positive number of milliseconds up to {MAX_MS}, got {stall}",
                        http::DEFAULT_RESPONSE_STALL_TIMEOUT_MS
                    ),
                ));
            }
            if let crate::model::Procedure::Http(h) = &c.procedure.kind
                && let Some(m) = &h.request
                && !http::METHODS.contains(&m.method.0.as_str())
            {
                out.push(doc.problem(
                    &format!("{at}/procedure/http/request/method"),
                    format!(
                        "`{}` is not a method a mapping may use (one of {}, upper case)",
                        m.method.0,
                        http::METHODS.join(", ")
                    ),
                ));
            }
        }
        self.check_gateway_values(doc, out);
        self.check_mcp(doc, out);
        if let Err(e) = crate::store_url::check_url(&self.store.url).and_then(|()| {
            // The files a Postgres URL names (`sslrootcert`…), relative to this file.
            let base = self.dir();
            crate::store_url::check_postgres_files(&self.store.url, base)
        }) {
            out.push(doc.problem("/store/url", e));
        }
        self.check_exports(doc, out);
        if self.audit.retain_days.is_some() && self.audit.checkpoint_key.is_none() {
            out.push(doc.problem(
                "/audit/retainDays",
                "retention purges each chain up to a signed checkpoint and signs what it purged: set `checkpointKey` too",
            ));
        }
        if let Some(jsonl) = &self.audit.jsonl {
            let path = self.relative(jsonl);
            match path.parent().filter(|p| !p.as_os_str().is_empty()) {
                Some(dir) if !dir.is_dir() => out.push(doc.problem(
                    "/audit/jsonl",
                    format!(
                        "the directory {} does not exist (the path is relative to this file)",
                        dir.display()
                    ),
                )),
                _ if path.is_dir() => out.push(doc.problem(
                    "/audit/jsonl",
                    format!("{} is a directory, not a file", path.display()),
                )),
                _ => {}
            }
        }
    }

    /// `[audit.export.NAME]`: a name the store can key a cursor with, and the keys of its
    /// kind only.
    fn check_exports(&self, doc: &Located, out: &mut Vec<Problem>) {
        use crate::model::ExportKind;
        for (name, e) in &self.audit.export {
            let at = format!("/audit/export/{}", crate::located::seg(name));
            if !(1..=64).contains(&name.len())
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                out.push(doc.problem(
                    &at,
                    format!("`{name}`: a sink's name is letters, digits, `-` and `_`, at most 64 (it keys the sink's cursor in the store)"),
                ));
            }
            // Which keys each kind needs and takes is the section's own conversion.
            let (endpoint, ca_file, headers) = match &e.kind {
                ExportKind::Otlp {
                    endpoint,
                    headers,
                    ca_file,
                } => (endpoint.as_deref(), ca_file, Some(headers)),
                ExportKind::Webhook(w) => {
                    for (i, ev) in w.events.iter().flatten().enumerate() {
                        if !WEBHOOK_EVENTS.contains(&ev.as_str()) {
                            out.push(doc.problem(
                                &format!("{at}/events/{i}"),
                                format!(
                                    "`{ev}` is not a notification (expected one of {})",
                                    WEBHOOK_EVENTS.join(", ")
                                ),
                            ));
                        }
                    }
                    (Some(w.endpoint.as_str()), &w.ca_file, Some(&w.headers))
                }
                ExportKind::Jsonl { directory, .. } => {
                    let dir = self.relative(directory);
                    if dir.exists() && !dir.is_dir() {
                        out.push(doc.problem(
                            &format!("{at}/directory"),
                            format!("{} is not a directory", dir.display()),
                        ));
                    }
                    (None, &None, None)
                }
            };
            if let Some(url) = endpoint
                && let Err(m) = crate::telemetry::check_endpoint(url)
            {
                out.push(doc.problem(&format!("{at}/endpoint"), m));
            }
            if let Some(ca) = ca_file
                && !self.relative(ca).is_file()
            {
                out.push(doc.problem(
                    &format!("{at}/caFile"),
                    format!("{ca} is not a file (the path is relative to this file)"),
                ));
            }
            for k in headers.into_iter().flat_map(|h| h.keys()) {
                if http::HeaderName::from_bytes(k.as_bytes()).is_err() {
                    out.push(doc.problem(
                        &format!("{at}/headers/{}", crate::located::seg(k)),
                        format!("`{k}` is not an HTTP header name"),
                    ));
                }
            }
        }
    }

    fn check_gateway_values(&self, doc: &Located, out: &mut Vec<Problem>) {
        let g = &self.gateway;
        if let Err(e) = check_listen(&g.listen) {
            out.push(doc.problem("/gateway/listen", e));
        }
        if let Some(m) = &self.telemetry.metrics {
            self.check_metrics(m, doc, out);
        }
        let rl = &g.rate_limit;
        for (rate, burst, rate_key, burst_key) in [
            (
                rl.principal_per_second,
                rl.principal_burst,
                "principalPerSecond",
                "principalBurst",
            ),
            (
                rl.namespace_per_second,
                rl.namespace_burst,
                "namespacePerSecond",
                "namespaceBurst",
            ),
        ] {
            if (rate == 0) != (burst == 0) {
                let zero = if rate == 0 { rate_key } else { burst_key };
                out.push(doc.problem(
                    &format!("/gateway/rateLimit/{zero}"),
                    format!(
                        "0 here switches the limit off although the other is set; set both {rate_key} and {burst_key} to 0 to switch it off, or both to positive numbers"
                    ),
                ));
            }
        }
        let mut seen: Vec<&str> = Vec::new();
        for (i, r) in g.routes.iter().enumerate() {
            let at = format!("/gateway/routes/{i}/path");
            if seen.contains(&r.path.as_str()) {
                out.push(doc.problem(
                    &at,
                    format!(
                        "`{}` is mounted twice; each route needs its own path",
                        r.path
                    ),
                ));
            }
            seen.push(&r.path);
            let bad_segment = r.path.split('/').skip(1).any(|s| {
                !s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~'))
            });
            // Empty segments (`//`, a trailing `/`) are reported by the reference checks.
            if r.path.starts_with('/') && bad_segment {
                out.push(doc.problem(
                    &at,
                    "may contain only ASCII letters, digits, `-`, `_`, `.` and `~` between slashes",
                ));
            }
        }
    }

    fn check_metrics(
        &self,
        m: &crate::model::MetricsSection,
        doc: &Located,
        out: &mut Vec<Problem>,
    ) {
        const AT: &str = "/telemetry/metrics";
        if let Some(listen) = &m.listen {
            if let Err(e) = check_listen(listen) {
                out.push(doc.problem(&format!("{AT}/listen"), e));
            } else if *listen == self.gateway.listen {
                out.push(doc.problem(
                    &format!("{AT}/listen"),
                    "is the gateway's own listen address: leave `listen` out to serve metrics on the gateway's listener, or pick another port",
                ));
            }
        }
        let path = &m.path;
        if !is_path(path) {
            out.push(doc.problem(
                &format!("{AT}/path"),
                format!("`{path}` is not a path (like `/metrics`: ASCII letters, digits, `-`, `_`, `.`, `~` between slashes)"),
            ));
        }
        if let Some(h) = &m.bearer_token_sha256
            && !capgate_core::digest::Sha256Hex::is_valid(&h.to_ascii_lowercase())
        {
            out.push(doc.problem(
                &format!("{AT}/bearerTokenSha256"),
                "must be 64 hex digits (the SHA-256 of the token: `capgate keys hash` prints it, reading the token from standard input)",
            ));
        }
    }

    fn check_mcp(&self, doc: &Located, out: &mut Vec<Problem>) {
        let m = &self.mcp;
        match (&m.stdio_actor, &m.stdio_namespace) {
            (Some(_), None) => out.push(doc.problem(
                "/mcp/stdioActor",
                "needs `stdioNamespace` too (the namespace its calls run in)",
            )),
            (None, Some(_)) => out.push(doc.problem(
                "/mcp/stdioNamespace",
                "needs `stdioActor` too (the service actor of `capgate mcp --stdio`)",
            )),
            _ => {}
        }
        if let Some(a) = &m.stdio_actor {
            if a.id.trim().is_empty() {
                out.push(doc.problem("/mcp/stdioActor/id", "must not be empty"));
            }
            if a.kind == ActorKind::Anonymous {
                out.push(doc.problem(
                    "/mcp/stdioActor/kind",
                    "anonymous actors are rejected; use a service actor",
                ));
            }
        }
        if m.stdio_namespace
            .as_ref()
            .is_some_and(|n| n.trim().is_empty())
        {
            out.push(doc.problem("/mcp/stdioNamespace", "must not be empty"));
        }
        if !m.stdio_context.is_null() && !m.stdio_context.is_object() {
            out.push(doc.problem("/mcp/stdioContext", "must be a table"));
        }
        for (i, h) in m.allowed_hosts.iter().flatten().enumerate() {
            if h.trim().is_empty() || h.contains(['/', ' ']) {
                out.push(doc.problem(
                    &format!("/mcp/allowedHosts/{i}"),
                    "must be a host name, optionally with a port (e.g. `capgate.example` or `capgate.example:8080`)",
                ));
            }
        }
    }
}

/// Whether a listen address (`HOST:PORT`) binds only the loopback interface: a loopback IP,
/// or `localhost`.
pub fn is_path(path: &str) -> bool {
    path.starts_with('/')
        && path.len() > 1
        && path[1..].split('/').all(|s| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '~'))
        })
}

/// Whether a listen address is on a loopback interface.
pub fn is_loopback_listen(addr: &str) -> bool {
    if let Ok(a) = addr.parse::<std::net::SocketAddr>() {
        return a.ip().is_loopback();
    }
    matches!(addr.rsplit_once(':'), Some((host, _)) if host.eq_ignore_ascii_case("localhost"))
}

/// `HOST:PORT` (an IP address or a name) with a port from 0 to 65535.
pub fn check_listen(addr: &str) -> Result<(), String> {
    if addr.parse::<std::net::SocketAddr>().is_ok() {
        return Ok(());
    }
    match addr.rsplit_once(':') {
        Some((host, port))
            if !host.is_empty()
                && !host.contains(['[', ']', '/'])
                && port.parse::<u16>().is_ok() =>
        {
            Ok(())
        }
        _ => Err(format!(
            "`{addr}` is not a listen address (HOST:PORT, e.g. `127.0.0.1:8080` or `0.0.0.0:8080`)"
        )),
    }
}

/// The notifications a `webhook` sink can send (`events`).
pub const WEBHOOK_EVENTS: [&str; 4] = [
    "approval.requested",
    "approval.decided",
    "approval.expired",
    "approval.escalated",
];
