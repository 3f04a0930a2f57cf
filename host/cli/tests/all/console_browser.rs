//! The approval console in a real browser: Debian's headless Chromium, driven
//! through Debian's chromedriver (installed with apt-get when missing and the test runs as
//! root; required under CI=true, skipped loudly otherwise), against the real `capgate serve`
//! of the customer-support example on SQLite.
//!
//! - Dana's agent asks for the $649 refund; Priya signs in with her key, sees the card with
//!   the reason, the policy that asked and the input as redactors left it, approves it with
//!   a comment through the confirmation step (the refund is high risk); Dana's host resumes
//!   and the refund completes; Priya's history shows her decision, her comment and the
//!   completed outcome.
//! - A held `messages.send` whose body carries `<img onerror>` and `<script>` renders as
//!   text and runs nothing; so does a comment carrying the same.
//! - A decision POSTed without the CSRF token is refused 403, from inside the page and from
//!   outside it with the session cookie.
//! - Marco (an approver who also asks) is offered no decision of his own request, and a
//!   forced POST carrying his CSRF token is 403. Olga (org_2's approver) never sees org_1's
//!   approval, not in her queue and not through its link. Dana, no approver, gets an
//!   explanation instead of a queue and confirms her own `messages.send` via its link.
//! - A decision made in another tab shows up in the first one without a reload; a decision
//!   from a stale tab shows who decided first.
//! - Signing out ends the session: the old cookie replayed is 401.
//! - Screenshots of the queue at 1440 and 375 px wide go to `target/console-screenshots/`.
//!
//! The example's refund redactor strips `/gatewayRef`, a field the refund's input schema
//! does not allow, so to see a redaction in the approver's view this test adds the example's
//! own `maskContactDetails` redactor to `orders.refund` and puts an e-mail address in the
//! refund's reason.

use crate::common;

use common::*;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DANA: &str = "dana-dev-key";
/// Dana's own console credential (her agent's key cannot confirm the agent's calls).
const DANA_CONSOLE: &str = "dana-console-key";
const PRIYA: &str = "priya-dev-key";
/// An approver and manager of org_1 who also asks (an agent's surface on his key).
const MARCO: &str = "marco-test-key";

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long the page gets to show something (it polls every 2 s).
const UI_WAIT: Duration = Duration::from_secs(20);

const CUSTOMER_EMAIL: &str = "jane.doe@example.com";
const COMMENT: &str = "Damaged on arrival; photo in ticket 4411.";
const XSS_BODY: &str = "<img src=x onerror=\"window.__pwned='img'\"><script>window.__pwned='script'</script> Your refund is on its way.";
const XSS_COMMENT: &str = "<b>no</b><img src=x onerror=\"window.__pwned='comment'\">";

/// Whether Debian's Chromium and chromedriver are there (installed now, as root, when
/// missing). `false` (the test is skipped, loudly) only outside CI; under CI=true a missing
/// browser fails the test.
fn browser_available() -> bool {
    debian_tools(
        &["chromium", "chromium-driver"],
        || Path::new(CHROMIUM).is_file() && Path::new(CHROMEDRIVER).is_file(),
        "the approval console's browser test",
    )
}

/// Debian's chromedriver on a free loopback port, in a process group of its own so that
/// dropping it ends the browsers it started too.
struct Chromedriver {
    child: Child,
    url: String,
}

impl Chromedriver {
    async fn start() -> Chromedriver {
        use std::os::unix::process::CommandExt;
        let port = free_port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let driver = Chromedriver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = http.get(format!("{}/status", driver.url)).send().await
                && let Ok(v) = r.json::<Value>().await
                && v["value"]["ready"] == true
            {
                return driver;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not answer /status within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        // The whole group: chromedriver and every Chromium it started.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// chromedriver's log endpoint: what the page wrote to the browser console (errors
/// included), drained on each read.
#[derive(Debug)]
struct BrowserLog;

impl fantoccini::wd::WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/se/log",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (
            http::Method::POST,
            Some(r#"{"type":"browser"}"#.to_string()),
        )
    }
}

/// `[data-testid="T"]`
fn tid(testid: &str) -> String {
    format!("[data-testid=\"{testid}\"]")
}

/// The element of test id `testid` inside the card (or history item) of approval `id`.
fn in_card(id: &str, testid: &str) -> String {
    format!("[data-approval-id=\"{id}\"] [data-testid=\"{testid}\"]")
}

fn card(id: &str) -> String {
    format!("[data-testid=\"approval-card\"][data-approval-id=\"{id}\"]")
}

/// One headless Chromium with a fresh profile (its own cookie jar).
struct Browser {
    client: Client,
    _profile: tempfile::TempDir,
    who: &'static str,
}

impl Browser {
    async fn open(driver: &Chromedriver, who: &'static str) -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let args = vec![
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--window-size=1440,1000".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let caps = json!({
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        });
        let Value::Object(caps) = caps else {
            unreachable!("a JSON object")
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&driver.url)
            .await
            .expect("a WebDriver session with headless Chromium");
        Browser {
            client,
            _profile: profile,
            who,
        }
    }

    async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("navigate");
    }

    async fn js(&self, script: &str) -> Value {
        self.client
            .execute(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("[{}] script failed: {e}\n{script}", self.who))
    }

    /// Run `script` with its completion callback as the last argument.
    async fn js_async(&self, script: &str) -> Value {
        self.client
            .execute_async(script, vec![])
            .await
            .unwrap_or_else(|e| panic!("[{}] async script failed: {e}\n{script}", self.who))
    }

    /// The visible text of the first element matching `css`, if there is one.
    async fn text(&self, css: &str) -> Option<String> {
        let el = self.client.find(Locator::Css(css)).await.ok()?;
        el.text().await.ok()
    }

    async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(Locator::Css(css))
            .await
            .map(|v| v.len())
            .unwrap_or(0)
    }

    async fn displayed(&self, css: &str) -> bool {
        match self.client.find(Locator::Css(css)).await {
            Ok(el) => el.is_displayed().await.unwrap_or(false),
            Err(_) => false,
        }
    }

    /// Until the element matching `css` is displayed and its text satisfies `ok`; its text.
    async fn wait_text(&self, css: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + UI_WAIT;
        let mut last = None;
        loop {
            if self.displayed(css).await
                && let Some(t) = self.text(css).await
            {
                if ok(&t) {
                    return t;
                }
                last = Some(t);
            }
            if Instant::now() > deadline {
                let shot = self.screenshot(&format!("failure-{}", self.who)).await;
                panic!(
                    "[{}] {what}: `{css}` never showed it within {UI_WAIT:?}; last text: {last:?} \
                     (screenshot: {})",
                    self.who,
                    shot.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_contains(&self, css: &str, needle: &str) -> String {
        self.wait_text(css, &format!("text containing {needle:?}"), |t| {
            t.contains(needle)
        })
        .await
    }

    async fn wait_displayed(&self, css: &str, what: &str) {
        self.wait_text(css, what, |_| true).await;
    }

    /// Until `check` (a script returning true or false) is true.
    async fn wait_js(&self, what: &str, check: &str) {
        let deadline = Instant::now() + UI_WAIT;
        loop {
            if self.js(check).await == json!(true) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "[{}] {what}: `{check}` never became true within {UI_WAIT:?}",
                self.who
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn click(&self, css: &str) {
        self.wait_displayed(css, "something to click").await;
        self.client
            .find(Locator::Css(css))
            .await
            .expect("find")
            .click()
            .await
            .unwrap_or_else(|e| panic!("[{}] click {css}: {e}", self.who));
    }

    async fn type_into(&self, css: &str, text: &str) {
        self.wait_displayed(css, "a field to type into").await;
        self.client
            .find(Locator::Css(css))
            .await
            .expect("find")
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("[{}] type into {css}: {e}", self.who));
    }

    /// Sign in at `console` with `credential` from the keyboard (the form submits on
    /// Enter); waits until the header names `actor`.
    async fn sign_in(&self, console: &str, credential: &str, actor: &str) {
        self.goto(console).await;
        self.wait_displayed(&tid("signin-form"), "the sign-in form")
            .await;
        let label = self
            .js(
                "const i = document.querySelector('[data-testid=\"signin-credential\"]'); \
                 return [i.type, i.labels.length > 0 ? i.labels[0].textContent : ''];",
            )
            .await;
        assert_eq!(
            label[0], "password",
            "the credential field hides what is pasted"
        );
        assert!(
            label[1].as_str().is_some_and(|l| !l.trim().is_empty()),
            "the credential field has a label: {label}"
        );
        self.type_into(
            &tid("signin-credential"),
            &format!("{credential}{}", char::from(fantoccini::key::Key::Enter)),
        )
        .await;
        self.wait_contains(&tid("whoami"), actor).await;
    }

    async fn sign_out(&self) {
        self.click(&tid("signout")).await;
        self.wait_displayed(&tid("signin-form"), "the sign-in form after signing out")
            .await;
    }

    /// The session cookie's value, read through WebDriver (the page itself cannot: HttpOnly).
    async fn session_cookie(&self) -> String {
        let c = self
            .client
            .get_named_cookie("capgate_console")
            .await
            .unwrap_or_else(|e| panic!("[{}] no session cookie: {e}", self.who));
        assert!(
            c.http_only().unwrap_or(false),
            "the session cookie is HttpOnly"
        );
        assert_eq!(
            format!("{:?}", c.same_site()),
            "Some(Strict)",
            "the session cookie is SameSite=Strict"
        );
        c.value().to_string()
    }

    /// Resize the window and wait until the page lays out at that width.
    async fn resize(&self, width: u32, height: u32) {
        self.client
            .set_window_size(width, height)
            .await
            .expect("resize");
        self.wait_js(
            &format!("a {width} px wide viewport"),
            &format!("return window.innerWidth === {width};"),
        )
        .await;
    }

    async fn screenshot(&self, name: &str) -> PathBuf {
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        let path = dir.join(format!("{name}.png"));
        if let Ok(png) = self.client.screenshot().await {
            let _ = std::fs::write(&path, png);
        }
        path
    }

    /// What the page logged as errors since the last call, leaving out the browser's own
    /// lines about HTTP answers (a 401 from `GET P/session` before sign-in is expected).
    async fn script_errors(&self) -> Vec<Value> {
        let log = self
            .client
            .issue_cmd(BrowserLog)
            .await
            .expect("read the browser log");
        log.as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e["level"] == "SEVERE" && e["source"] != "network")
            .collect()
    }

    /// A `fetch` from inside the page; its status.
    async fn page_fetch(&self, method: &str, path: &str, headers: Value, body: Value) -> u64 {
        let script = format!(
            "const done = arguments[arguments.length - 1];\
             fetch({path}, {{method: {method}, headers: {headers}, body: {body}, credentials: 'same-origin'}})\
               .then(r => done(r.status), e => done('error: ' + e));",
            path = json!(path),
            method = json!(method),
            body = json!(body.to_string()),
        );
        let status = self.js_async(&script).await;
        status
            .as_u64()
            .unwrap_or_else(|| panic!("[{}] fetch {method} {path}: {status}", self.who))
    }
}

/// A key pressed on whatever has the focus.
async fn press(browser: &Browser, key: fantoccini::key::Key) {
    browser
        .client
        .active_element()
        .await
        .expect("a focused element")
        .send_keys(&char::from(key).to_string())
        .await
        .expect("press a key");
}

fn screenshot_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("console-screenshots")
}

fn invoke(capability: &str, input: Value, invocation_id: &str) -> Value {
    json!({"capabilityId": capability, "input": input, "invocationId": invocation_id})
}

/// An invocation that must be held for approval; the approval id.
async fn held(caller: &Caller, agent: &str, body: Value) -> String {
    let (status, answer) = caller.post(&format!("{agent}/invoke"), &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "approval-required", "{answer}");
    answer["approval"]["id"]
        .as_str()
        .expect("approval id")
        .to_string()
}

fn refund(order: &str, amount: u32, reason: &str) -> Value {
    json!({"orderId": order, "amount": amount, "reason": reason})
}

/// A plain HTTP client presenting only a console session cookie.
async fn with_cookie(
    method: reqwest::Method,
    url: &str,
    cookie: &str,
    csrf: Option<&str>,
) -> (u16, Value) {
    let post = method == reqwest::Method::POST;
    let mut r = reqwest::Client::new()
        .request(method, url)
        .header("cookie", format!("capgate_console={cookie}"));
    if let Some(t) = csrf {
        r = r.header("x-csrf-token", t);
    }
    if post {
        r = r
            .header("content-type", "application/json")
            .body(json!({"decision": "approved"}).to_string());
    }
    let r = r.send().await.expect("send");
    let status = r.status().as_u16();
    let text = r.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| json!({ "raw": text })),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_approval_console_in_a_real_browser() {
    if !browser_available() {
        return;
    }
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = format!(
        "{}\n{}\n",
        key(
            MARCO,
            "u_marco",
            "org_1",
            &["approver", "manager"],
            &["aiSdk"],
            "org_1"
        ),
        olga_key(),
    );
    let config = deployment(
        dir.path(),
        |text| {
            let masked = text.replace(
                "redactors = [\"stripGatewayRef\"]",
                "redactors = [\"stripGatewayRef\", \"maskContactDetails\"]",
            );
            assert_ne!(
                masked, text,
                "the example's refund names its redactors as expected"
            );
            masked
        },
        &extra,
    );
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&config, &store);
    let console = format!("{}/console", server.base);
    let agent = format!("{}/agent", server.base);
    let dana = Caller::new(DANA);
    let marco = Caller::new(MARCO);
    let priya_api = Caller::new(PRIYA);

    // Act 1: Dana's agent asks for the $649 refund (the customer's address in the reason);
    // Marco, who is an approver too, asks for one of his own.
    let refund_1 = held(
        &dana,
        &agent,
        json!({
            "capabilityId": "orders.refund",
            "input": refund("ord_42", 649, &format!("damaged item; customer wrote from {CUSTOMER_EMAIL}")),
            "invocationId": "call_1",
            "correlationId": "run_1"
        }),
    )
    .await;
    let marcos = held(
        &marco,
        &agent,
        invoke(
            "orders.refund",
            refund("ord_77", 720, "late delivery"),
            "marco_1",
        ),
    )
    .await;

    let driver = Chromedriver::start().await;
    let priya = Browser::open(&driver, "priya").await;

    // Act 2: Priya signs in and reviews the refund.
    priya.sign_in(&console, PRIYA, "u_priya").await;
    priya.wait_contains(&tid("whoami"), "org_1").await;
    priya
        .wait_text(
            &in_card(&refund_1, "card-capability"),
            "the refund's card",
            |t| t == "orders.refund",
        )
        .await;
    priya
        .wait_contains(
            &in_card(&refund_1, "card-reasons"),
            "Refund of $649 exceeds $500",
        )
        .await;
    priya
        .wait_contains(&in_card(&refund_1, "card-policies"), "refundLimit")
        .await;
    priya
        .wait_contains(&in_card(&refund_1, "card-requester"), "u_dana")
        .await;
    let shown = priya
        .wait_contains(&in_card(&refund_1, "card-input"), "\"amount\": 649")
        .await;
    assert!(
        shown.contains("[email]"),
        "the redactor masked the address: {shown}"
    );
    assert!(
        !shown.contains(CUSTOMER_EMAIL),
        "no raw address on the page: {shown}"
    );
    let shown: Value = serde_json::from_str(&shown).expect("the card shows the input as JSON");
    let (status, api_view) = priya_api
        .get(&format!("{}/approvals/{refund_1}", server.base))
        .await;
    assert_eq!(status, 200, "{api_view}");
    assert_eq!(
        shown, api_view["input"],
        "the card shows what the approvals API shows"
    );
    // The countdown is live.
    let first = priya
        .wait_text(&in_card(&refund_1, "card-countdown"), "a countdown", |t| {
            t.ends_with("left")
        })
        .await;
    priya
        .wait_text(
            &in_card(&refund_1, "card-countdown"),
            "the countdown moving",
            |t| t != first,
        )
        .await;
    // Marco's request is in Priya's queue too, newest first.
    priya
        .wait_displayed(&card(&marcos), "Marco's request")
        .await;
    let order = priya
        .js("return [...document.querySelectorAll('[data-testid=\"approval-card\"]')].map(c => c.dataset.approvalId);")
        .await;
    assert_eq!(order, json!([marcos, refund_1]), "newest first");
    // The filters are built from the data and filter on the client.
    let options = priya
        .js("return [...document.querySelector('[data-testid=\"filter-requester\"]').options].map(o => o.value);")
        .await;
    assert_eq!(
        options,
        json!(["", "u_dana", "u_marco"]),
        "requesters offered"
    );
    priya
        .client
        .find(Locator::Css(&tid("filter-requester")))
        .await
        .expect("requester filter")
        .select_by_value("u_marco")
        .await
        .expect("filter by requester");
    priya
        .wait_js(
            "the requester filter hides Dana's card",
            &format!(
                "return document.querySelector('{}').hidden === true;",
                card(&refund_1).replace('\'', "\\'")
            ),
        )
        .await;
    assert!(priya.displayed(&card(&marcos)).await, "Marco's card stays");
    priya
        .client
        .find(Locator::Css(&tid("filter-requester")))
        .await
        .expect("requester filter")
        .select_by_value("")
        .await
        .expect("clear the filter");
    priya
        .wait_displayed(&card(&refund_1), "Dana's card back")
        .await;

    // Screenshots of the queue at both widths (and no horizontal scrolling at 375 px).
    priya
        .js("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0);")
        .await;
    priya.resize(1440, 1580).await;
    let wide = priya.screenshot("queue-1440").await;
    priya.resize(375, 1400).await;
    let overflow = priya
        .js("return document.documentElement.scrollWidth - document.documentElement.clientWidth;")
        .await;
    assert_eq!(overflow, json!(0), "nothing wider than a 375 px screen");
    let narrow = priya.screenshot("queue-375").await;
    priya.resize(1440, 1000).await;
    eprintln!("screenshots: {} {}", wide.display(), narrow.display());

    // Act 3: approve with a comment, through the confirmation step (high risk). Cancelling
    // the first time decides nothing.
    priya
        .type_into(&in_card(&refund_1, "card-comment"), COMMENT)
        .await;
    priya.click(&in_card(&refund_1, "card-approve")).await;
    priya
        .wait_displayed(&tid("confirm-dialog"), "the confirmation dialog")
        .await;
    // From the keyboard: the dialog has the focus, Escape cancels it and gives the focus
    // back to the button, Enter on that button asks again.
    let focused = "return document.activeElement && document.activeElement.dataset.testid;";
    assert_eq!(
        priya.js(focused).await,
        json!("confirm-no"),
        "the focus is in the dialog"
    );
    press(&priya, fantoccini::key::Key::Escape).await;
    priya
        .wait_js(
            "the dialog closing",
            "return document.querySelector('[data-testid=\"confirm-dialog\"]').open === false;",
        )
        .await;
    assert_eq!(
        priya.js(focused).await,
        json!("card-approve"),
        "the focus is back"
    );
    let (_, still) = priya_api
        .get(&format!("{}/approvals/{refund_1}", server.base))
        .await;
    assert_eq!(
        still["status"], "pending",
        "cancelling decides nothing: {still}"
    );
    press(&priya, fantoccini::key::Key::Enter).await;
    priya
        .wait_contains(&tid("confirm-dialog"), "orders.refund")
        .await;
    priya.click(&tid("confirm-yes")).await;
    priya
        .wait_contains(&in_card(&refund_1, "card-result"), "Approved by u_priya")
        .await;
    assert_eq!(
        priya.count(&in_card(&refund_1, "card-approve")).await,
        0,
        "a decided card offers no decision"
    );

    // Acts 4-5: Dana's host resumes and the refund completes.
    let (status, done) = dana
        .post(
            &format!("{agent}/resumeApproval"),
            &json!({"approvalId": refund_1, "invocationId": "call_1"}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"]["status"], "issued", "{done}");

    // The history: who decided, when, the comment, and how the resumed call ended.
    priya.click(&tid("tab-history")).await;
    priya
        .wait_contains(
            &in_card(&refund_1, "history-decision"),
            "Approved by u_priya",
        )
        .await;
    let comment = priya
        .wait_text(&in_card(&refund_1, "history-comment"), "the comment", |t| {
            t == COMMENT
        })
        .await;
    assert_eq!(comment, COMMENT);
    priya
        .wait_contains(&in_card(&refund_1, "history-outcome"), "completed")
        .await;
    assert!(
        priya.js("return location.pathname;").await == json!("/console/history"),
        "the history has its own address"
    );

    // Markup in what a requester wrote is text, never HTML: a held message whose body
    // carries an <img onerror> and a <script>.
    let message = held(
        &dana,
        &agent,
        invoke(
            "messages.send",
            json!({"customerId": "cus_1", "body": format!("{XSS_BODY} {} END-OF-MESSAGE", "More text. ".repeat(80))}),
            "msg_1",
        ),
    )
    .await;
    priya.click(&tid("tab-queue")).await;
    let input = priya
        .wait_contains(&in_card(&message, "card-input"), "<script>")
        .await;
    assert!(
        input.contains("<img src=x onerror="),
        "the markup is shown literally: {input}"
    );
    let dom = priya
        .js("return [typeof window.__pwned, document.querySelectorAll('main img, main script').length];")
        .await;
    assert_eq!(
        dom,
        json!(["undefined", 0]),
        "nothing ran, no element was made"
    );
    // The long body is cut, with a way to see all of it.
    assert!(
        input.ends_with('…') && !input.contains("END-OF-MESSAGE"),
        "a long input is truncated: {input}"
    );
    priya.click(&in_card(&message, "card-expand")).await;
    priya
        .wait_contains(&in_card(&message, "card-input"), "END-OF-MESSAGE")
        .await;
    let expanded = priya
        .js(&format!(
            "return document.querySelector('{}').getAttribute('aria-expanded');",
            in_card(&message, "card-expand")
        ))
        .await;
    assert_eq!(expanded, json!("true"), "the button says it expanded");
    // Priya rejects it with markup in her comment (medium risk: no confirmation step).
    priya
        .type_into(&in_card(&message, "card-comment"), XSS_COMMENT)
        .await;
    priya.click(&in_card(&message, "card-reject")).await;
    priya
        .wait_contains(&in_card(&message, "card-result"), "Rejected by u_priya")
        .await;
    priya.click(&tid("tab-history")).await;
    priya
        .wait_text(
            &in_card(&message, "history-comment"),
            "the literal comment",
            |t| t == XSS_COMMENT,
        )
        .await;
    let dom = priya
        .js("return [typeof window.__pwned, document.querySelectorAll('main img, main script').length];")
        .await;
    assert_eq!(dom, json!(["undefined", 0]), "a comment is text too");
    priya.click(&tid("tab-queue")).await;
    priya
        .wait_displayed(&card(&marcos), "the queue again")
        .await;

    // No decision without the CSRF token: from inside the page (the browser sends the
    // cookie, same origin) and from outside it with the session cookie.
    let decision = format!("/console/api/approvals/{marcos}/decision");
    let status = priya
        .page_fetch(
            "POST",
            &decision,
            json!({"Content-Type": "application/json"}),
            json!({"decision": "rejected"}),
        )
        .await;
    assert_eq!(status, 403, "a POST without the CSRF header is refused");
    let status = priya
        .page_fetch(
            "POST",
            &decision,
            json!({"Content-Type": "application/json", "X-CSRF-Token": "0".repeat(64)}),
            json!({"decision": "rejected"}),
        )
        .await;
    assert_eq!(status, 403, "a POST with a wrong CSRF token is refused");
    let cookie = priya.session_cookie().await;
    let (status, body) = with_cookie(
        reqwest::Method::POST,
        &format!("{}{decision}", server.base),
        &cookie,
        None,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "FORBIDDEN", "{body}");
    let (_, still) = priya_api
        .get(&format!("{}/approvals/{marcos}", server.base))
        .await;
    assert_eq!(still["status"], "pending", "nothing was decided: {still}");

    // Marco is offered no decision of his own request, and forcing one is refused.
    let other = Browser::open(&driver, "other").await;
    other.sign_in(&console, MARCO, "u_marco").await;
    other
        .wait_text(
            &in_card(&marcos, "card-note"),
            "why Marco cannot decide",
            |t| !t.trim().is_empty(),
        )
        .await;
    assert_eq!(other.count(&in_card(&marcos, "card-approve")).await, 0);
    assert_eq!(other.count(&in_card(&marcos, "card-reject")).await, 0);
    let forced = other
        .js_async(&format!(
            "const done = arguments[arguments.length - 1];\
             fetch('/console/session').then(r => r.json()).then(s =>\
               fetch({decision}, {{method: 'POST', credentials: 'same-origin',\
                 headers: {{'Content-Type': 'application/json', 'X-CSRF-Token': s.csrfToken}},\
                 body: JSON.stringify({{decision: 'approved'}})}}))\
             .then(r => done(r.status), e => done('error: ' + e));",
            decision = json!(decision),
        ))
        .await;
    assert_eq!(forced, json!(403), "Marco cannot approve his own refund");
    // Signing out ends the session: the old cookie replayed is refused.
    let marco_cookie = other.session_cookie().await;
    other.sign_out().await;
    for path in ["/console/session", "/console/api/approvals"] {
        let (status, body) = with_cookie(
            reqwest::Method::GET,
            &format!("{}{path}", server.base),
            &marco_cookie,
            None,
        )
        .await;
        assert_eq!(status, 401, "{path} with a signed-out cookie: {body}");
    }

    // Olga, org_2's approver, never sees org_1's approvals.
    other.sign_in(&console, OLGA, "u_olga").await;
    other.wait_contains(&tid("whoami"), "org_2").await;
    other
        .wait_displayed(&tid("empty-queue"), "Olga's empty queue")
        .await;
    assert_eq!(other.count(&tid("approval-card")).await, 0);
    other.goto(&format!("{console}/approvals/{marcos}")).await;
    other
        .wait_displayed(&tid("not-found"), "not found for another namespace")
        .await;
    assert_eq!(other.count(&tid("approval-card")).await, 0);
    other.sign_out().await;

    // Dana, no approver, with her console credential: an explanation instead of a queue,
    // and her own self-confirmable message confirmed through its link (the requester door).
    let confirm = held(
        &dana,
        &agent,
        invoke(
            "messages.send",
            json!({"customerId": "cus_1", "body": "Your refund of $649 is issued."}),
            "msg_2",
        ),
    )
    .await;
    other.sign_in(&console, DANA_CONSOLE, "u_dana").await;
    other
        .wait_displayed(&tid("not-approver"), "the not-approver explanation")
        .await;
    assert_eq!(other.count(&tid("approval-card")).await, 0);
    other.goto(&format!("{console}/approvals/{confirm}")).await;
    other.click(&in_card(&confirm, "card-approve")).await;
    other
        .wait_contains(&in_card(&confirm, "card-result"), "Approved by u_dana")
        .await;
    let errors = other.script_errors().await;
    assert!(
        errors.is_empty(),
        "script errors in the second browser: {errors:?}"
    );

    // A decision made in another tab shows up in the first one without a reload.
    let refund_4 = held(
        &dana,
        &agent,
        invoke(
            "orders.refund",
            refund("ord_42", 810, "wrong size"),
            "call_4",
        ),
    )
    .await;
    priya
        .wait_displayed(
            &in_card(&refund_4, "card-approve"),
            "the new refund in the queue",
        )
        .await;
    priya.js("window.__sameDocument = true;").await;
    let first_tab = priya.client.window().await.expect("window");
    let tab = priya.client.new_window(true).await.expect("new tab");
    priya
        .client
        .switch_to_window(tab.handle.clone())
        .await
        .expect("switch to the new tab");
    priya.goto(&format!("{console}/approvals/{refund_4}")).await;
    priya.click(&in_card(&refund_4, "card-approve")).await;
    priya.click(&tid("confirm-yes")).await;
    priya
        .wait_contains(&in_card(&refund_4, "card-result"), "Approved by u_priya")
        .await;
    priya.client.close_window().await.expect("close the tab");
    priya
        .client
        .switch_to_window(first_tab.clone())
        .await
        .expect("back to the first tab");
    priya
        .wait_contains(&in_card(&refund_4, "card-result"), "Approved by u_priya")
        .await;
    assert_eq!(
        priya.js("return window.__sameDocument === true;").await,
        json!(true),
        "no reload"
    );

    // A stale tab: the page stops polling while hidden; with nothing in flight, another
    // approver decides, then Priya's click learns who was first.
    let refund_6 = held(
        &dana,
        &agent,
        invoke(
            "orders.refund",
            refund("ord_42", 820, "second parcel"),
            "call_6",
        ),
    )
    .await;
    priya
        .wait_displayed(
            &in_card(&refund_6, "card-reject"),
            "another refund in the queue",
        )
        .await;
    priya
        .js(
            "const f = window.fetch; window.__inflight = 0; window.__fetches = 0;\
             window.fetch = function (...a) { window.__inflight++; window.__fetches++;\
               return f.apply(this, a).finally(() => { window.__inflight--; }); };",
        )
        .await;
    priya
        .wait_js("a poll after instrumenting", "return window.__fetches > 0;")
        .await;
    priya
        .js("Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'hidden'});")
        .await;
    priya
        .wait_js("no request in flight", "return window.__inflight === 0;")
        .await;
    let (status, first) = marco
        .post(
            &format!("{}/approvals/{refund_6}/decision", server.base),
            &json!({"decision": "approved", "comment": "checked with the courier"}),
        )
        .await;
    assert_eq!(status, 200, "{first}");
    assert!(
        priya.count(&in_card(&refund_6, "card-reject")).await == 1,
        "the tab is stale"
    );
    priya.click(&in_card(&refund_6, "card-reject")).await;
    priya.click(&tid("confirm-yes")).await;
    priya
        .wait_contains(
            &in_card(&refund_6, "card-result"),
            "Already approved by u_marco",
        )
        .await;
    priya.js("delete document.visibilityState;").await;

    let errors = priya.script_errors().await;
    assert!(
        errors.is_empty(),
        "script errors in Priya's browser: {errors:?}"
    );

    // Signing out ends Priya's session too.
    let cookie = priya.session_cookie().await;
    priya.sign_out().await;
    let (status, body) = with_cookie(
        reqwest::Method::GET,
        &format!("{console}/session"),
        &cookie,
        None,
    )
    .await;
    assert_eq!(status, 401, "{body}");

    let _ = priya.client.close().await;
    let _ = other.client.close().await;
    eprintln!(
        "the approval console's browser test took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Single sign-on in a real browser against a real OpenID Provider (npm `oidc-provider`,
/// started on loopback by `capgate_testkit::oidc`): the console offers "Sign in with
/// Corp SSO"; Priya signs in at the provider's login page (the authorization-code flow with
/// PKCE), comes back signed in as the principal her ID token's nested claims map to, and
/// approves Dana's held $649 refund as that approver; the session ends no later than the
/// ID token, and signing out ends it (the old cookie replayed is 401). An account whose
/// token opens a model door (an agent's identity) is sent back with an explanation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_console_signs_an_approver_in_with_the_identity_provider() {
    use capgate_testkit::oidc::{OidcProvider, require_node};
    if !browser_available() || !require_node() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let callback = format!("{base}/console/oidc/callback");
    let id_token_ttl = 900;
    let idp = OidcProvider::start(json!({
        "clients": [{
            "client_id": "capgate-console",
            "client_secret": "console-secret-0123456789abcdef",
            "redirect_uris": [callback],
            "grant_types": ["authorization_code"],
            "response_types": ["code"],
        }],
        "accounts": {
            "priya": {
                "name": "Priya",
                "corp": { "tenant": "org_1", "groups": ["approver", "manager"] },
            },
            "agent-bot": {
                "corp": { "tenant": "org_1", "groups": [], "surfaces": ["aiSdk"] },
            },
        },
        "ttl": { "IdToken": id_token_ttl },
    }))
    .await;
    let extra = format!(
        r#"
[gateway.jwt]
discovery = true
issuer = "{issuer}"
audience = "capgate-api"

[gateway.jwt.claims]
namespace = "/corp/tenant"
roles = "/corp/groups"
surfaces = "/corp/surfaces"
attributes = {{ name = "/name" }}

[gateway.console.oidc]
clientId = "capgate-console"
clientSecret = {{ env = "CAPGATE_TEST_OIDC_SECRET" }}
redirectUrl = "{callback}"
displayName = "Corp SSO"
"#,
        issuer = idp.issuer()
    );
    let config = deployment(dir.path(), |text| text, &extra);
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start_at(
        &config,
        &store,
        &format!("127.0.0.1:{port}"),
        &[(
            "CAPGATE_TEST_OIDC_SECRET",
            "console-secret-0123456789abcdef",
        )],
    );
    assert_eq!(server.base, base);
    let console = format!("{base}/console");
    let agent = format!("{base}/agent");
    let dana = Caller::new(DANA);
    let priya_api = Caller::new(PRIYA);
    let refund_1 = held(
        &dana,
        &agent,
        invoke(
            "orders.refund",
            refund("ord_42", 649, "damaged item"),
            "sso_1",
        ),
    )
    .await;

    let driver = Chromedriver::start().await;
    let priya = Browser::open(&driver, "priya-sso").await;
    priya.goto(&console).await;
    priya
        .wait_text(&tid("signin-oidc"), "the SSO button", |t| {
            t == "Sign in with Corp SSO"
        })
        .await;
    // Pasting a key stays available beside it.
    priya
        .wait_displayed(&tid("signin-form"), "the key form")
        .await;
    priya.click(&tid("signin-oidc")).await;
    // The provider's own login page.
    priya
        .wait_displayed("input[name=login]", "the provider's login form")
        .await;
    let at = priya.js("return location.origin;").await;
    assert_eq!(at, json!(idp.issuer()), "the browser is at the provider");
    priya.type_into("input[name=login]", "priya").await;
    priya
        .type_into("input[name=password]", "any password")
        .await;
    priya.click("button[type=submit]").await;
    // Back on the console, signed in as the mapped principal.
    priya.wait_contains(&tid("whoami"), "priya").await;
    priya.wait_contains(&tid("whoami"), "org_1").await;
    let session = priya
        .js_async(
            "const done = arguments[arguments.length - 1]; \
             fetch('/console/session').then(r => r.json()).then(done, e => done(String(e)));",
        )
        .await;
    assert_eq!(session["actor"]["id"], "priya", "{session}");
    assert_eq!(
        session["roles"],
        json!(["approver", "manager"]),
        "{session}"
    );
    assert_eq!(session["approver"], true, "{session}");
    let expires =
        chrono::DateTime::parse_from_rfc3339(session["expiresAt"].as_str().expect("expiresAt"))
            .expect("RFC 3339");
    let latest = chrono::Utc::now() + chrono::Duration::seconds(id_token_ttl + 5);
    assert!(
        expires <= latest,
        "the session ends with the ID token ({expires} > {latest})"
    );
    // She decides Dana's refund as the signed-in approver (high risk: confirmed).
    priya
        .wait_contains(&in_card(&refund_1, "card-requester"), "u_dana")
        .await;
    priya.click(&in_card(&refund_1, "card-approve")).await;
    priya
        .wait_displayed(&tid("confirm-dialog"), "the confirmation dialog")
        .await;
    priya.click(&tid("confirm-yes")).await;
    priya
        .wait_contains(&in_card(&refund_1, "card-result"), "Approved by priya")
        .await;
    let (status, decided) = priya_api.get(&format!("{base}/approvals/{refund_1}")).await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["status"], "approved", "{decided}");
    assert_eq!(decided["decision"]["approver"]["id"], "priya", "{decided}");
    let (status, done) = dana
        .post(
            &format!("{agent}/resumeApproval"),
            &json!({"approvalId": refund_1, "invocationId": "sso_1"}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["status"], "completed", "{done}");
    // Signing out ends the session: the old cookie replayed is refused.
    let cookie = priya
        .client
        .get_named_cookie("capgate_console")
        .await
        .expect("the session cookie")
        .value()
        .to_owned();
    priya.sign_out().await;
    let replay = reqwest::Client::new()
        .get(format!("{console}/session"))
        .header("cookie", format!("capgate_console={cookie}"))
        .send()
        .await
        .expect("an answer");
    assert_eq!(replay.status(), 401, "the signed-out session still works");

    // An identity whose token opens a model door cannot sign in here.
    let bot = Browser::open(&driver, "agent-bot-sso").await;
    bot.goto(&console).await;
    bot.click(&tid("signin-oidc")).await;
    bot.wait_displayed("input[name=login]", "the provider's login form")
        .await;
    bot.type_into("input[name=login]", "agent-bot").await;
    bot.type_into("input[name=password]", "x").await;
    bot.click("button[type=submit]").await;
    bot.wait_contains(&tid("signin-error"), "cannot decide approvals")
        .await;
    let path = bot.js("return location.pathname + location.search;").await;
    assert_eq!(
        path,
        json!("/console/"),
        "the error code is taken off the address"
    );
}

/// The agent host's side of an MCP task: `tests/mcp/task_client_check.py`, the official MCP
/// Python SDK with the tasks extension as a client extension, one JSON event per line.
struct TaskClient {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl TaskClient {
    fn start(base: &str, key: &str, cancel: bool) -> TaskClient {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut cmd = tokio::process::Command::new(repo.join("tests/mcp/.venv/bin/python"));
        cmd.arg(repo.join("tests/mcp/task_client_check.py"))
            .args([&format!("{base}/mcp"), key])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        if cancel {
            cmd.arg("--cancel");
        }
        let mut child = cmd.spawn().expect("start the Python MCP client");
        let stdout = child.stdout.take().expect("stdout");
        TaskClient {
            child,
            lines: tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout)),
        }
    }

    /// The next event, within a minute.
    async fn next(&mut self, what: &str) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("the Python client said nothing for a minute ({what})"))
            .expect("read the Python client")
            .unwrap_or_else(|| panic!("the Python client ended before {what}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{what}: {e}: {line}"))
    }

    async fn finished(mut self) {
        let status = self.child.wait().await.expect("wait");
        assert!(status.success(), "the Python client failed: {status}");
    }
}

/// The approval id a held task's status message names.
fn approval_in(task: &Value) -> String {
    let message = task["statusMessage"].as_str().unwrap_or_default();
    let start = message.find("apr_").unwrap_or_else(|| panic!("{task}"));
    message[start..]
        .split(|c: char| c.is_whitespace() || c == ':')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Issue 58: a held MCP call as an MCP task, end to end on the example (served in process
/// on SQLite). Dana's agent host calls `orders_refund` for $649 with the official Python
/// SDK, which declares the tasks extension: the answer is a task, and the SDK polls it.
/// Priya approves in the console in a real browser; the task completes with the refund's
/// result and the approval is consumed once. Then a second held call is cancelled by the
/// client: its task ends `cancelled`, its approval is withdrawn, and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_task_completes_when_priya_approves_it_in_the_console() {
    if !browser_available() {
        return;
    }
    let setup = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp/setup.sh"))
        .arg("python")
        .status()
        .expect("tests/mcp/setup.sh");
    assert!(setup.success(), "tests/mcp/setup.sh python: {setup}");
    let dir = tempfile::tempdir().expect("tempdir");
    // Metrics on the gateway's own listener: the example's fixed port may be taken by a
    // test serving beside this one. No load balancer's grace at the stop.
    let config = deployment(
        dir.path(),
        |text| {
            text.replace(
                "[telemetry.metrics]\nlisten = \"127.0.0.1:9464\"\n",
                "[telemetry.metrics]\n",
            )
            .replace("[gateway]\n", "[gateway]\nshutdownUnreadyDelayMs = 0\n")
        },
        "",
    );
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let checked = capgate_server::validate::validate(&config).expect("the example checks");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listen");
    let served = capgate_server::serve::start(checked, Some(store), listener)
        .await
        .expect("serves");
    let base = format!("http://{}", served.addr());
    let priya_api = Caller::new(PRIYA);

    let mut agent = TaskClient::start(&base, DANA, false);
    let task = agent.next("the task").await;
    assert_eq!(task["event"], "task", "{task}");
    let approval = approval_in(&task);
    let message = task["statusMessage"].as_str().unwrap_or_default();
    assert!(
        !capgate_testkit::mcp_tasks::has_word(message, "649") && !message.contains("ord_42"),
        "the task's status says what it waits for, not the input: {message}"
    );

    let driver = Chromedriver::start().await;
    let priya = Browser::open(&driver, "priya").await;
    priya
        .sign_in(&format!("{base}/console"), PRIYA, "u_priya")
        .await;
    priya
        .wait_contains(&in_card(&approval, "card-requester"), "u_dana")
        .await;
    priya.click(&in_card(&approval, "card-approve")).await;
    priya
        .wait_displayed(&tid("confirm-dialog"), "the confirmation dialog")
        .await;
    priya.click(&tid("confirm-yes")).await;
    priya
        .wait_contains(&in_card(&approval, "card-result"), "Approved by u_priya")
        .await;

    let done = agent.next("the task's end").await;
    assert_eq!(done["event"], "done", "{done}");
    assert_eq!(done["isError"], false, "{done}");
    assert_eq!(done["structured"]["status"], "completed", "{done}");
    assert_eq!(done["structured"]["output"]["amount"], 649, "{done}");
    assert_eq!(done["statuses"], json!(["completed", "working"]), "{done}");
    agent.finished().await;
    let (status, record) = priya_api.get(&format!("{base}/approvals/{approval}")).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["status"], "consumed", "ran once: {record}");

    // The client cancels the next one before anyone decides: nothing can run it.
    let mut agent = TaskClient::start(&base, DANA, true);
    let task = agent.next("the second task").await;
    let withdrawn = approval_in(&task);
    let done = agent.next("the cancelled task's end").await;
    assert_eq!(done["isError"], true, "{done}");
    assert_eq!(done["statuses"], json!(["cancelled"]), "{done}");
    agent.finished().await;
    let (_, record) = priya_api
        .get(&format!("{base}/approvals/{withdrawn}"))
        .await;
    assert_eq!(record["status"], "cancelled", "withdrawn: {record}");
    let (status, refused) = priya_api
        .post(
            &format!("{base}/approvals/{withdrawn}/decision"),
            &json!({"decision": "approved"}),
        )
        .await;
    assert_eq!(
        status, 409,
        "a withdrawn approval cannot be decided: {refused}"
    );
    served.stop().await.expect("a clean stop");
}
