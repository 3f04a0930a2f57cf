//! `capgate test`: the shipped customer-support scenarios pass against the example; a
//! deliberately broken policy fails them with a readable diff; JUnit output is well-formed
//! XML; a malformed scenario file or a refused configuration is reported with its places and
//! exit status 2. Every run is the real binary on the real Wasm plugins.

use crate::common;

use common::*;
use std::process::Command;

/// The example as the documentation writes it (relative to the repository root).
const EXAMPLE: &str = "examples/customer-support/capgate.toml";
const SCENARIOS: &str = "examples/customer-support/scenarios";

struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `capgate test ARGS`, from the repository root.
fn test(args: &[&str]) -> Ran {
    let _ = example_config(); // a clear message when the example is not rendered
    let out = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .arg("test")
        .args(args)
        .current_dir(root())
        .env("CAPGATE_LOG", "warn")
        .output()
        .expect("run capgate test");
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The example with refundLimit's limit raised from $500 to $1000: the walkthrough's $649
/// refund no longer needs a manager.
fn broken_refund_limit(dir: &std::path::Path) -> String {
    let config = deployment(
        dir,
        |t| {
            let broken = t.replace(
                "config = { maxAmount = 500, approvalType = \"manager\" }",
                "config = { maxAmount = 1000, approvalType = \"manager\" }",
            );
            assert_ne!(broken, t, "the example's refundLimit config changed");
            broken
        },
        "",
    );
    config.display().to_string()
}

#[test]
fn the_shipped_scenarios_all_pass_against_the_example() {
    let ran = test(&["--config", EXAMPLE, SCENARIOS]);
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    let summary = ran.stdout.lines().last().unwrap_or_default();
    let passed: usize = summary
        .split(" passed")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no summary line: {}", ran.stdout));
    assert!(passed >= 15, "{summary}");
    assert!(summary.contains(" 0 failed"), "{summary}");
    // Issue 57: a clean run says nothing on stderr (it printed a `WARN … closed pool` line
    // per scenario, in colour, when redirected), and never an ANSI escape into a file.
    assert!(ran.stderr.trim().is_empty(), "{}", ran.stderr);
    assert!(!ran.stdout.contains('\u{1b}'), "{}", ran.stdout);
    assert!(
        !ran.stdout.lines().any(|l| l.starts_with("FAIL")),
        "{}",
        ran.stdout
    );
    // The walkthrough and every failure branch are among them.
    for name in [
        "walkthrough: Dana's $649 refund",
        "CAPABILITY_NOT_FOUND",
        "INPUT_INVALID",
        "APPROVAL_REJECTED",
        "APPROVAL_EXPIRED",
        "APPROVAL_CONSUMED",
        "TIMEOUT",
        "CANCELLED",
    ] {
        assert!(
            ran.stdout
                .lines()
                .any(|l| l.starts_with("PASS") && l.contains(name)),
            "no passing scenario for {name}:\n{}",
            ran.stdout
        );
    }
}

#[test]
fn a_broken_refund_limit_fails_the_walkthrough_with_a_diff_naming_each_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = broken_refund_limit(dir.path());
    let ran = test(&["--config", &config, SCENARIOS, "--filter", "walkthrough"]);
    assert_eq!(ran.code, 1, "{}\n{}", ran.stdout, ran.stderr);
    let out = &ran.stdout;
    assert!(
        out.contains("FAIL  walkthrough: Dana's $649 refund waits for a manager"),
        "{out}"
    );
    // Where the scenario is, then each field with what was expected and what happened.
    assert!(
        out.contains("at examples/customer-support/scenarios/walkthrough.toml:"),
        "{out}"
    );
    for (field, expected, actual) in [
        (
            "call orders.refund: status",
            "\"approval-required\"",
            "\"completed\"",
        ),
        (
            "call orders.refund: policies.refundLimit",
            "\"require-approval\"",
            "\"allow\"",
        ),
        (
            "call orders.refund: envelope/approval/reasons",
            "[\"Refund of $649 exceeds $500\"]",
            "(absent)",
        ),
    ] {
        let block = format!("{field}\n        expected: {expected}\n        actual:   {actual}\n");
        assert!(out.contains(&block), "no diff block\n{block}in\n{out}");
    }
    assert!(
        out.contains("        - capability.approval_requested\n        - capability.approved\n          capability.started"),
        "{out}"
    );
    assert!(
        out.lines().last().unwrap_or_default().contains("1 failed"),
        "{out}"
    );
}

#[test]
fn junit_output_is_well_formed_with_one_testcase_per_scenario_and_the_diff_as_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = broken_refund_limit(dir.path());
    let ran = test(&[
        "--config",
        &config,
        SCENARIOS,
        "--filter",
        "walkthrough",
        "--format",
        "junit",
    ]);
    assert_eq!(ran.code, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stderr.contains("2 passed, 1 failed"), "{}", ran.stderr);
    let xml = roxmltree::Document::parse(&ran.stdout)
        .unwrap_or_else(|e| panic!("not well-formed XML ({e}):\n{}", ran.stdout));
    let root = xml.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    assert_eq!(root.attribute("tests"), Some("3"));
    assert_eq!(root.attribute("failures"), Some("1"));
    let cases: Vec<_> = xml
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    assert_eq!(cases.len(), 3);
    let failed: Vec<_> = cases
        .iter()
        .filter(|c| c.children().any(|f| f.has_tag_name("failure")))
        .collect();
    assert_eq!(failed.len(), 1);
    let case = failed[0];
    // Markup characters in names survive the round trip.
    assert!(
        case.attribute("name")
            .is_some_and(|n| n.starts_with("walkthrough: Dana's $649 refund")),
        "{:?}",
        case.attribute("name")
    );
    let text = case
        .children()
        .find(|f| f.has_tag_name("failure"))
        .and_then(|f| f.text())
        .unwrap_or_default();
    assert!(
        text.contains(
            "policies.refundLimit\n  expected: \"require-approval\"\n  actual:   \"allow\""
        ),
        "{text}"
    );
}

/// A scenario in which dana asks for `capability` (the refund's input) in `org`'s context and
/// is answered exactly as for an unknown capability, with these `policies` verdicts.
fn not_found_scenario(name: &str, capability: &str, org: &str, policies: &str) -> String {
    format!(
        r#"
[[scenario]]
name = "{name}"
actor = "dana"
surface = "aiSdk"
capability = "{capability}"
input = {{ orderId = "ord_43", amount = 120 }}
context = {{ orgId = "{org}" }}
events = ["capability.requested", "capability.denied"]
[scenario.expect]
status = "failed"
error = "CAPABILITY_NOT_FOUND"
policies = {policies}
envelope = {{ "/error/message" = "Capability not found.", "/error/retryable" = false }}
"#
    )
}

#[test]
fn a_policy_hide_answers_exactly_like_an_unknown_capability() {
    // The example's orgIsolation denies a mismatch; this variant hides instead (SI-8).
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "config = { actorAttribute = \"/orgId\", contextPath = \"/orgId\" }",
                "config = { actorAttribute = \"/orgId\", contextPath = \"/orgId\", onMismatch = \"hide\" }",
            )
        },
        "",
    );
    let scenarios = dir.path().join("hide.toml");
    let file = [
        r#"
[actors.dana]
id = "u_dana"
kind = "user"
namespace = "org_1"
attributes = { orgId = "org_1", permissions = ["orders:refund"] }
"#
        .to_string(),
        not_found_scenario(
            "a session of another organisation: orgIsolation hides the refund",
            "orders.refund",
            "org_2",
            r#"{ orgIsolation = "hide", refundLimit = "allow" }"#,
        ),
        not_found_scenario("an id nobody registered", "orders.refundd", "org_1", "{}"),
    ]
    .concat();
    std::fs::write(&scenarios, file).expect("write scenarios");
    let ran = test(&[
        "--config",
        &config.display().to_string(),
        &scenarios.display().to_string(),
    ]);
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("2 passed, 0 failed"), "{}", ran.stdout);
}

#[test]
fn a_malformed_scenario_file_is_refused_with_every_problem_located_and_nothing_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        r#"[actors.dana]
id = "u_dana"
kind = "user"
namespace = "org_1"

[[scenario]]
name = "one"
actor = "dana"
surface = "aiSdk"
capability = "orders.refund"
events = ["capability.requested", "capability.finished"]

[[scenario.steps]]
decide = "approve"
by = "nobody"

[[scenario]]
name = "two"
actor = "dana"
surface = "web"
capability = "orders.refund"
"#,
    )
    .expect("write scenario file");
    let path = file.display().to_string();
    let ran = test(&["--config", EXAMPLE, &path]);
    assert_eq!(ran.code, 2, "{}\n{}", ran.stdout, ran.stderr);
    for (line, col, key, says) in [
        (
            11,
            35,
            "scenario.0.events.1",
            "`capability.finished` is no event type",
        ),
        (15, 1, "scenario.0.steps.0.by", "no actor `nobody`"),
        (20, 1, "scenario.1.surface", "unknown variant `web`"),
    ] {
        let want = format!("{path}:{line}:{col}: {key}: {says}");
        assert!(ran.stderr.contains(&want), "no `{want}` in\n{}", ran.stderr);
    }
    assert!(
        ran.stderr
            .contains("3 problem(s) in the scenario files; nothing was run."),
        "{}",
        ran.stderr
    );
    assert!(!ran.stdout.contains("PASS"), "{}", ran.stdout);
}

#[test]
fn a_refused_configuration_is_reported_as_check_reports_it_and_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(
        dir.path(),
        |t| t.replace("risk = \"high\"", "risk = \"extreme\""),
        "",
    );
    let ran = test(&["--config", &config.display().to_string(), SCENARIOS]);
    assert_eq!(ran.code, 2, "{}\n{}", ran.stdout, ran.stderr);
    assert!(
        ran.stderr
            .lines()
            .any(|l| l.contains("capgate.toml:") && l.contains("risk") && l.contains("extreme")),
        "{}",
        ran.stderr
    );
    assert!(ran.stdout.is_empty(), "{}", ran.stdout);
}
