//! Issue 33's CLI edges, through the real binary: `capgate test` never reaches a backend
//! unless the run says `--live` (a real TCP listener counts every connection), `capgate
//! keys hash` takes the key on standard input and refuses it on the command line, and a
//! compile cache others can write is refused by `capgate check`.

use crate::common;

use common::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// A deployment of one capability whose procedure is an HTTP upstream at `upstream`, sent
/// with a credential header.
const CONFIG: &str = r#"
revision = "edges-cliwasm"

[runtime]
compileCache = "@DIR@/.capgate-cache"

[[capabilities]]
id = "orders.refund"
description = "Refund an order"
expose = { aiSdk = true }
sideEffect = "write"
risk = "high"
inputSchema = { type = "object", properties = { orderId = { type = "string" }, amount = { type = "number" } }, required = ["orderId", "amount"] }
procedure = { http = { target = "orders", url = "@UPSTREAM@/refund", headers = { authorization = "Bearer backend-secret-77" } } }

[gateway]
authorize = "authenticated"
routes = [{ path = "/agent", surface = "aiSdk" }]

[[gateway.apiKeys]]
sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
namespace = "org_1"
surfaces = ["aiSdk"]
actor = { id = "u_dana", kind = "user" }
"#;

/// One scenario without a stub (it reaches the procedure), one with a stub.
const SCENARIOS: &str = r#"
[actors.dana]
id = "u_dana"
kind = "user"
namespace = "org_1"

[[scenario]]
name = "a refund, no stub"
actor = "dana"
surface = "aiSdk"
capability = "orders.refund"
input = { orderId = "ord_1", amount = 5 }
expect = { status = "completed", output = { "/refundId" = "ref_live" } }
"#;

const STUBBED: &str = r#"
[actors.dana]
id = "u_dana"
kind = "user"
namespace = "org_1"

[[scenario]]
name = "a refund, stubbed"
actor = "dana"
surface = "aiSdk"
capability = "orders.refund"
input = { orderId = "ord_1", amount = 5 }
stub = { output = { refundId = "ref_stub" } }
expect = { status = "completed", output = { "/refundId" = "ref_stub" } }
"#;

/// Connections waiting on a non-blocking listener (every one a client completed: the
/// kernel finishes the handshake before the client's `connect` returns).
fn connections_waiting(listener: &TcpListener) -> usize {
    let mut n = 0;
    while let Ok((stream, _)) = listener.accept() {
        drop(stream);
        n += 1;
    }
    n
}

/// Answer one HTTP request with a refund, returning what the client sent.
fn answer_one(listener: &TcpListener) -> String {
    listener.set_nonblocking(false).expect("blocking");
    let (mut stream, _): (TcpStream, _) = listener.accept().expect("a connection");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    // Headers, then the body its content-length announces.
    loop {
        let n = stream.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&seen).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if seen.len() >= end + 4 + length {
                break;
            }
        }
    }
    let body = r#"{"refundId":"ref_live"}"#;
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).expect("answer");
    String::from_utf8_lossy(&seen).into_owned()
}

fn run_test(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .arg("test")
        .args(args)
        .current_dir(root())
        .env("CAPGATE_LOG", "warn")
        .output()
        .expect("run capgate test");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path.display().to_string()
}

#[test]
fn capgate_test_without_live_never_reaches_a_listening_upstream_and_with_live_it_does() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the upstream");
    listener.set_nonblocking(true).expect("non-blocking");
    let upstream = format!("http://{}", listener.local_addr().expect("addr"));
    let config = write(
        dir,
        "capgate.toml",
        &CONFIG
            .replace("@DIR@", &dir.display().to_string())
            .replace("@UPSTREAM@", &upstream),
    );
    let scenarios = write(dir, "no-stub.toml", SCENARIOS);
    let stubbed = write(dir, "stubbed.toml", STUBBED);

    // Without --live: the scenario without a stub fails, saying where and what to do, and
    // nothing connected to the upstream.
    let (code, stdout, stderr) = run_test(&["--config", &config, &scenarios]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("reached the procedure of `orders.refund`")
            && stdout.contains(&format!("{scenarios}:"))
            && stdout.contains("--live")
            && stdout.contains("stub"),
        "{stdout}"
    );
    assert_eq!(
        connections_waiting(&listener),
        0,
        "capgate test reached the upstream without --live"
    );

    // A stubbed scenario passes without --live, and nothing connects either.
    let (code, stdout, stderr) = run_test(&["--config", &config, &stubbed]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert_eq!(connections_waiting(&listener), 0);

    // With --live the configured upstream is called, with its credential header.
    let server = std::thread::spawn(move || answer_one(&listener));
    let (code, stdout, stderr) = run_test(&["--config", &config, "--live", &scenarios]);
    let request = server.join().expect("the upstream");
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        request.starts_with("POST /refund ")
            && request
                .to_ascii_lowercase()
                .contains("authorization: bearer backend-secret-77"),
        "{request}"
    );
}

/// The example's support-desk scenarios exercise its real (local, Wasm) procedure: without
/// `--live` every one that reaches it fails saying so, with `--live` they all pass (what
/// `cargo xtask test` runs).
#[test]
fn the_examples_live_scenarios_fail_without_live_and_pass_with_it() {
    let _ = example_config();
    let config = "examples/customer-support/capgate.toml";
    let live = "examples/customer-support/scenarios/live";
    let (code, stdout, stderr) = run_test(&["--config", config, live]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    let failed = stdout.lines().filter(|l| l.starts_with("FAIL")).count();
    let told = stdout.matches("which it does not stub").count();
    assert!(failed >= 5 && told == failed, "{stdout}");
    let (code, stdout, stderr) = run_test(&["--live", "--config", config, live]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("5 passed, 0 failed"), "{stdout}");
}

fn keys_hash(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["keys", "hash"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run capgate keys hash");
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin).expect("stdin");
    }
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn keys_hash_reads_the_key_from_standard_input_and_refuses_it_on_the_command_line() {
    let expected = key_hash("dana-dev-key");
    for input in [&b"dana-dev-key"[..], b"dana-dev-key\n", b"dana-dev-key\r\n"] {
        let (code, stdout, stderr) = keys_hash(&[], input);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(stdout.trim(), expected);
    }
    // On the command line (where `ps` and shell history keep it): refused, nothing hashed.
    let (code, stdout, stderr) = keys_hash(&["dana-dev-key"], b"");
    assert_eq!(code, 2);
    assert!(!stdout.contains(&expected), "{stdout}");
    assert!(stderr.contains("standard input"), "{stderr}");
    // Nothing on standard input, or two lines: refused.
    for input in [&b""[..], b"\n", b"one\ntwo\n"] {
        let (code, stdout, stderr) = keys_hash(&[], input);
        assert_eq!(code, 2, "{input:?}: {stdout}");
        assert!(stderr.starts_with("error:"), "{stderr}");
    }
}

#[test]
fn check_refuses_a_compile_cache_others_can_write() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    // A cache of its own, not the suite's shared one.
    let cache = dir.join(".capgate-cache");
    let shared = format!(
        "compileCache = \"{}\"",
        capgate_testkit::paths::compile_cache().display()
    );
    let own = format!("compileCache = \"{}\"", cache.display());
    let config = deployment(dir, |t| t.replace(&shared, &own), "");
    assert!(
        std::fs::read_to_string(&config)
            .expect("read")
            .contains(&own)
    );
    std::fs::create_dir(&cache).expect("mkdir");
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let out = capgate_output(&["check", "--config", &config.display().to_string()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("runtime.compileCache") && stderr.contains("writable by group or others"),
        "{stderr}"
    );
    // Private again: the deployment checks.
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let ok = capgate(&["check", "--config", &config.display().to_string()]);
    assert!(ok.contains(": ok"), "{ok}");
}
