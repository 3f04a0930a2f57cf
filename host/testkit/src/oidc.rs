//! A real OpenID Provider on loopback: npm `oidc-provider` (a certified OpenID Connect
//! implementation) run by `tests/oidc/provider.mjs`, one Node process per
//! [`OidcProvider`], killed when the value is dropped.
//!
//! The config is `provider.mjs`'s JSON (see its header for every member): `clients`
//! (oidc-provider client metadata), `accounts` (`{login: claims}` for the login form and
//! the ID token), `clientClaims` (`{client_id: claims}` for client_credentials tokens),
//! `resources` (`{audience URL: {scope, alg}}`: JWT access tokens), `ttl` and `algs`
//! (signing keys to generate, default `["RS256"]`).
//!
//! Node and npm are needed: a test first calls [`require_node`], which skips it (with a
//! notice) when they are missing, except under `CI=true`, where it fails.
//!
//! ```no_run
//! # async fn demo() {
//! use capgate_testkit::oidc::{self, OidcProvider};
//! if !oidc::require_node() {
//!     return;
//! }
//! let op = OidcProvider::start(serde_json::json!({
//!     "clients": [{
//!         "client_id": "agent", "client_secret": "s3cret",
//!         "grant_types": ["client_credentials"], "response_types": [], "redirect_uris": [],
//!     }],
//!     "resources": { "http://127.0.0.1/capgate": { "scope": "invoke", "alg": "RS256" } },
//! }))
//! .await;
//! let token = op
//!     .client_credentials("agent", "s3cret", "http://127.0.0.1/capgate", None)
//!     .await;
//! let (_header, claims) = oidc::decode_jwt(&token);
//! assert_eq!(claims["iss"], op.issuer());
//! # }
//! ```

use crate::paths::repo_root;
use serde_json::{Value, json};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// How long the provider may take to print its ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the first start is given before a second one (see [`OidcProvider::start`]).
const FIRST_TRY: Duration = Duration::from_secs(45);

/// The header that keeps the driver's own discovery and JWKS look-ups out of [`Stats`].
const UNCOUNTED: &str = "x-oidc-harness-uncounted";

/// Whether `node` and `npm` run here (what [`OidcProvider::start`] needs).
pub fn node_available() -> bool {
    ["node", "npm"].iter().all(|tool| {
        std::process::Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// `true` when the provider can run. Without Node: a panic under `CI=true` (OIDC tests
/// never skip in CI), a printed notice and `false` otherwise (the caller returns early).
pub fn require_node() -> bool {
    if node_available() {
        return true;
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "`node` and `npm` are required by this OIDC test and missing (CI=true: no skipping)"
        );
    }
    eprintln!("SKIPPED: `node`/`npm` are not installed; this OIDC test fails under CI");
    false
}

/// Run `tests/oidc/setup.sh` (npm ci of `oidc-provider`) once per process.
fn ensure_installed() {
    static SETUP: OnceLock<Result<(), String>> = OnceLock::new();
    let outcome = SETUP.get_or_init(|| {
        let script = repo_root().join("tests/oidc/setup.sh");
        match std::process::Command::new("bash").arg(&script).status() {
            Ok(status) if status.success() => Ok(()),
            Ok(status) => Err(format!("{} failed: {status}", script.display())),
            Err(e) => Err(format!("{}: {e}", script.display())),
        }
    });
    if let Err(e) = outcome {
        panic!("installing the OpenID Provider: {e}");
    }
}

/// Request counts of the provider since it started (the driver's own look-ups excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// GETs of the JWKS (`/jwks`).
    pub jwks_requests: u64,
    /// GETs of `/.well-known/openid-configuration`.
    pub discovery_requests: u64,
}

/// A running OpenID Provider (`tests/oidc/provider.mjs`) at `http://127.0.0.1:PORT`.
///
/// Dropping it closes the process's stdin and kills it. Its stderr is collected (see
/// [`OidcProvider::log`]) and printed when the value is dropped during a panic. Use it
/// within the Tokio runtime that started it.
pub struct OidcProvider {
    issuer: String,
    http: reqwest::Client,
    log: Arc<Mutex<String>>,
    // Held for their lifetimes: the process exits when stdin closes; kill_on_drop too.
    _child: Child,
    _stdin: ChildStdin,
    _stdout: ChildStdout,
    _config: tempfile::NamedTempFile,
}

impl OidcProvider {
    /// Start a provider with `config` (installing `oidc-provider` first, once per
    /// process) and wait for it to be ready: 45 s, then, if it has said nothing, once more
    /// for up to 120 s with a fresh process (on a loaded 2-core machine, node generating
    /// its RSA keys beside a full test run has taken over 30 s, and a provider has been
    /// seen to sit silent for the whole wait). Panics, with both attempts' stderr, when it
    /// does not come up.
    pub async fn start(config: Value) -> OidcProvider {
        ensure_installed();
        let mut file = tempfile::Builder::new()
            .prefix("capgate-oidc-")
            .suffix(".json")
            .tempfile()
            .unwrap_or_else(|e| panic!("OIDC config temp file: {e}"));
        serde_json::to_writer(&mut file, &config)
            .unwrap_or_else(|e| panic!("writing the OIDC config: {e}"));
        let dir = repo_root().join("tests/oidc");
        // A node that has not printed its ready line after FIRST_TRY is started once more:
        // on CI a provider has (rarely) sat silent for the whole wait while the same
        // command started at once when run again. The second try waits the full time and
        // then fails with both attempts' stderr.
        let mut earlier = String::new();
        let (child, stdin, lines, log, issuer) = loop {
            let second = !earlier.is_empty();
            let wait = if second { READY_TIMEOUT } else { FIRST_TRY };
            let mut child = Command::new("node")
                .arg(dir.join("provider.mjs"))
                .arg(file.path())
                .current_dir(&dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .unwrap_or_else(|e| panic!("spawning node tests/oidc/provider.mjs: {e}"));
            let (Some(stdin), Some(stdout), Some(stderr)) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take())
            else {
                panic!("node tests/oidc/provider.mjs: missing stdio pipes");
            };
            let log = Arc::new(Mutex::new(String::new()));
            let stderr_done = collect(stderr, Arc::clone(&log));
            let mut lines = BufReader::new(stdout);
            let mut ready = String::new();
            let read = tokio::time::timeout(wait, lines.read_line(&mut ready)).await;
            let issuer = match &read {
                Ok(Ok(n)) if *n > 0 => serde_json::from_str::<Value>(&ready)
                    .ok()
                    .and_then(|v| v["issuer"].as_str().map(str::to_owned)),
                _ => None,
            };
            if let Some(issuer) = issuer {
                break (child, stdin, lines, log, issuer);
            }
            let _ = child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
            let _ = tokio::time::timeout(Duration::from_secs(5), stderr_done).await;
            let attempt = format!(
                "({read:?}, stdout {ready:?}); its stderr:\n{}",
                snapshot(&log)
            );
            if second {
                panic!("the OpenID Provider did not start {attempt}\n(first attempt: {earlier})");
            }
            eprintln!(
                "notice: the OpenID Provider did not start within {wait:?} {attempt}; starting it again"
            );
            earlier = attempt;
        };
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_else(|e| panic!("HTTP client: {e}"));
        OidcProvider {
            issuer,
            http,
            log,
            _child: child,
            _stdin: stdin,
            _stdout: lines.into_inner(),
            _config: file,
        }
    }

    /// The issuer, `http://127.0.0.1:PORT` (no trailing slash).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// What the provider wrote to stderr so far (oidc-provider's warnings, errors).
    pub fn log(&self) -> String {
        snapshot(&self.log)
    }

    /// The discovery document (`/.well-known/openid-configuration`), not counted in
    /// [`Stats`].
    pub async fn discovery(&self) -> Value {
        self.get_uncounted(&format!("{}/.well-known/openid-configuration", self.issuer))
            .await
    }

    /// The JWKS at discovery's `jwks_uri` (public keys, with `kid` and `alg`), not counted
    /// in [`Stats`].
    pub async fn jwks(&self) -> Value {
        let discovery = self.discovery().await;
        let Some(uri) = discovery["jwks_uri"].as_str() else {
            panic!("discovery has no jwks_uri: {discovery}");
        };
        self.get_uncounted(uri).await
    }

    /// Add a signing key of `alg` (`RS256`, `PS256`, `ES256`, `EdDSA`) that signs from now
    /// on; `keep_old: false` drops the older keys of that alg from the JWKS. Returns the
    /// new key's `kid`.
    pub async fn rotate(&self, alg: &str, keep_old: bool) -> String {
        let answer = self
            .post_test("rotate", json!({ "alg": alg, "keepOld": keep_old }))
            .await;
        string_member(&answer, "kid")
    }

    /// A JWT of exactly `claims` (nothing added), signed with the current key of `alg`,
    /// header `{alg, typ: "JWT", kid}` with the key's kid or `kid` when given. Panics when
    /// the provider has no key of `alg`.
    pub async fn mint(&self, claims: Value, alg: &str, kid: Option<&str>) -> String {
        let mut body = json!({ "claims": claims, "alg": alg });
        if let Some(kid) = kid {
            body["kid"] = json!(kid);
        }
        let answer = self.post_test("mint", body).await;
        string_member(&answer, "token")
    }

    /// GETs of the JWKS and of the discovery document since start.
    pub async fn stats(&self) -> Stats {
        let url = format!("{}/test/stats", self.issuer);
        let answer = self.json_of(self.http.get(&url), &url).await;
        let count = |name: &str| {
            answer[name]
                .as_u64()
                .unwrap_or_else(|| panic!("/test/stats without {name}: {answer}"))
        };
        Stats {
            jwks_requests: count("jwksRequests"),
            discovery_requests: count("discoveryRequests"),
        }
    }

    /// An access token from the client_credentials grant at discovery's token endpoint,
    /// for `resource` (a configured resource: a JWT with `aud` = `resource`) and `scope`.
    /// The client authenticates with `client_secret_basic` (oidc-provider's default
    /// `token_endpoint_auth_method`). Panics unless the endpoint answers 200.
    pub async fn client_credentials(
        &self,
        client_id: &str,
        client_secret: &str,
        resource: &str,
        scope: Option<&str>,
    ) -> String {
        let discovery = self.discovery().await;
        let Some(endpoint) = discovery["token_endpoint"].as_str() else {
            panic!("discovery has no token_endpoint: {discovery}");
        };
        let mut form = vec![("grant_type", "client_credentials"), ("resource", resource)];
        if let Some(scope) = scope {
            form.push(("scope", scope));
        }
        let request = self
            .http
            .post(endpoint)
            .basic_auth(form_encode(client_id), Some(form_encode(client_secret)))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form_body(&form));
        let answer = self.json_of(request, endpoint).await;
        string_member(&answer, "access_token")
    }

    async fn get_uncounted(&self, url: &str) -> Value {
        self.json_of(self.http.get(url).header(UNCOUNTED, "1"), url)
            .await
    }

    async fn post_test(&self, route: &str, body: Value) -> Value {
        let url = format!("{}/test/{route}", self.issuer);
        self.json_of(self.http.post(&url).json(&body), &url).await
    }

    /// Send `request`; its JSON answer, or a panic (with the provider's log) unless 200.
    async fn json_of(&self, request: reqwest::RequestBuilder, url: &str) -> Value {
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}\nprovider log:\n{}", self.log()));
        let status = response.status();
        let text = response
            .text()
            .await
            .unwrap_or_else(|e| panic!("{url}: reading the answer: {e}"));
        assert!(
            status.is_success(),
            "{url} answered {status}: {text}\nprovider log:\n{}",
            self.log()
        );
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: not JSON ({e}): {text}"))
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- OpenID Provider {} stderr ---\n{}",
                self.issuer,
                self.log()
            );
        }
    }
}

/// A JWT's header and claims, decoded without verifying anything. Panics on a malformed
/// token.
pub fn decode_jwt(token: &str) -> (Value, Value) {
    use base64::Engine as _;
    let decode = |part: Option<&str>, what: &str| -> Value {
        let bytes = part
            .and_then(|p| {
                base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(p)
                    .ok()
            })
            .unwrap_or_else(|| panic!("JWT {what} is not base64url: {token}"));
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("JWT {what} is not JSON ({e})"))
    };
    let mut parts = token.split('.');
    let header = decode(parts.next(), "header");
    let claims = decode(parts.next(), "claims");
    (header, claims)
}

/// Copy `stream` into `log` until it ends; the handle finishes then.
fn collect<R>(stream: R, log: Arc<Mutex<String>>) -> tokio::task::JoinHandle<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(mut log) = log.lock() {
                log.push_str(&line);
                log.push('\n');
            }
        }
    })
}

fn snapshot(log: &Mutex<String>) -> String {
    log.lock().map(|l| l.clone()).unwrap_or_default()
}

fn string_member(answer: &Value, name: &str) -> String {
    answer[name]
        .as_str()
        .unwrap_or_else(|| panic!("answer without {name}: {answer}"))
        .to_owned()
}

/// `application/x-www-form-urlencoded` encoding of one value.
fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(byte as char);
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

fn form_body(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}
