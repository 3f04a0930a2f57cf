//! The plugins that ship with capgate. The CEL policy (`plugin = "cel"`) decides every case
//! of the refund-limit conformance file as the Rust, JavaScript and Python refund-limit
//! plugins do (each case's config translated into CEL rules), `capgate check` places a
//! syntax error, a type error and an unknown input field at their line and column,
//! `inspect` shows the rules, and the example's CEL twin of refundLimit passes every
//! shipped scenario, and in shadow mode records where it would have decided otherwise. The
//! declarative redactor (`plugin = "redact"`) passes its cases, and a
//! pointer its capability's output schema lacks is refused by `check`. The Cedar policy
//! (`plugin = "cedar"`) decides the refund-limit cases alike wherever Cedar can represent
//! the request (and fails closed where it cannot), `check` places its errors, its twin of
//! refundLimit passes every shipped scenario, and a `policiesFile` is pinned by SHA-256.

use crate::common;

use common::*;
use serde_json::{Value, json};
use std::process::Command;

/// A JSON pointer as a CEL access on `input` (`/items/1/amount` → `input["items"][1]["amount"]`).
fn access(pointer: &str) -> String {
    if pointer.is_empty() {
        return "input".into();
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        // Not a pointer: refund-limit finds nothing and fails; a CEL rule that reads an
        // undeclared variable fails on every call the same way (`capgate check` would
        // refuse it first).
        return "amountPath_is_not_a_json_pointer".into();
    };
    let mut out = String::from("input");
    for seg in rest.split('/') {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        if seg.parse::<u64>().is_ok() {
            out.push_str(&format!("[{seg}]"));
        } else {
            out.push_str(&format!(
                "[{}]",
                serde_json::to_string(&seg).expect("a string")
            ));
        }
    }
    out
}

/// refund-limit's config as one CEL rule. A config refund-limit refuses becomes one the CEL
/// policy refuses for the same reason: an unknown key stays unknown, a missing `maxAmount`
/// leaves the rule without `when`, a value of the wrong type stays in its place.
fn cel_twin(config: &Value) -> Value {
    let Some(c) = config.as_object() else {
        return config.clone();
    };
    let mut rule = serde_json::Map::new();
    rule.insert("stance".into(), json!("require-approval"));
    let amount = access(
        c.get("amountPath")
            .and_then(Value::as_str)
            .unwrap_or("/amount"),
    );
    for (k, v) in c {
        match k.as_str() {
            "maxAmount" => {
                rule.insert(
                    "when".into(),
                    json!(format!("phase != 'discovery' && {amount} > {v}")),
                );
            }
            "amountPath" => {}
            "approvalType" if !v.is_null() => {
                rule.insert("type".into(), v.clone());
            }
            "expiresInMs" if !v.is_null() => {
                rule.insert("expiresInMs".into(), v.clone());
            }
            "approvalType" | "expiresInMs" | "label" => {}
            other => {
                rule.insert(other.into(), v.clone());
            }
        }
    }
    let limit = c.get("maxAmount").map(Value::to_string).unwrap_or_default();
    let reason = match c.get("label") {
        None => json!(format!("Refund of $${{{amount}}} exceeds ${limit}")),
        Some(Value::String(label)) => json!(format!("{label} of $${{{amount}}} exceeds ${limit}")),
        Some(other) => other.clone(),
    };
    rule.insert("reason".into(), reason);
    json!({"rules": [rule]})
}

fn to_json(v: &toml::Value) -> Value {
    serde_json::to_value(v).expect("TOML is JSON")
}

/// `plugins/conformance/refund-limit.toml` with every case's config replaced by its CEL twin.
fn translated_cases() -> String {
    translated_cases_with(cel_twin, &[])
}

/// The case file with every config replaced by `twin(config)`, and each case named in
/// `fails_closed` expecting a policy error instead of what it expects.
fn translated_cases_with(twin: fn(&Value) -> Value, fails_closed: &[&str]) -> String {
    let text = std::fs::read_to_string(root().join("plugins/conformance/refund-limit.toml"))
        .expect("read the refund-limit cases");
    let mut doc: toml::Table = toml::from_str(&text).expect("the case file parses");
    let defaults = doc
        .get_mut("defaults")
        .and_then(toml::Value::as_table_mut)
        .expect("[defaults]");
    let default_config = to_json(&defaults.remove("config").expect("defaults.config"));
    let cases = doc
        .get_mut("case")
        .and_then(toml::Value::as_array_mut)
        .expect("[[case]]");
    assert!(cases.len() >= 40, "{} cases", cases.len());
    for case in cases.iter_mut() {
        let case = case.as_table_mut().expect("a case is a table");
        let config = match (case.remove("config"), case.remove("config_json")) {
            (Some(c), _) => to_json(&c),
            (None, Some(text)) => {
                serde_json::from_str(text.as_str().expect("config_json is text")).expect("JSON")
            }
            (None, None) => default_config.clone(),
        };
        case.insert(
            "config_json".into(),
            toml::Value::String(twin(&config).to_string()),
        );
        let name = case
            .get("name")
            .and_then(toml::Value::as_str)
            .unwrap_or_default();
        if fails_closed.contains(&name) {
            let expected = case
                .get("expect")
                .and_then(|e| e.get("decision"))
                .and_then(toml::Value::as_str);
            assert_ne!(expected, Some("error"), "{name} already expects an error");
            let mut expect = toml::Table::new();
            expect.insert("decision".into(), toml::Value::String("error".into()));
            case.insert("expect".into(), toml::Value::Table(expect));
        }
    }
    let names: Vec<&str> = cases
        .iter()
        .filter_map(|c| c.get("name").and_then(toml::Value::as_str))
        .collect();
    for name in fails_closed {
        assert!(names.contains(name), "no case named {name:?}");
    }
    toml::to_string(&doc).expect("serialize")
}

/// A JSON pointer as a Cedar access on `context.input` (`/refund/total` →
/// `context.input["refund"]["total"]`), and as a `@reason` hole path
/// (`context.input.refund.total`). Cedar sets have no index: `/items/1` has no access.
fn cedar_access(pointer: &str) -> (String, String) {
    if pointer.is_empty() {
        return ("context.input".into(), "context.input".into());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        // Not a pointer: a missing attribute, an error on every call, as refund-limit's.
        return (
            "context.input.amountPath_is_not_a_json_pointer".into(),
            "context.input.amountPath_is_not_a_json_pointer".into(),
        );
    };
    let (mut access, mut hole) = (String::from("context.input"), String::from("context.input"));
    for seg in rest.split('/') {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        access.push_str(&format!(
            "[{}]",
            serde_json::to_string(&seg).expect("a string")
        ));
        hole.push('.');
        hole.push_str(&seg);
    }
    (access, hole)
}

/// A Cedar string literal (the escapes Cedar reads: `\\`, `\"`).
fn cedar_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// refund-limit's config as a Cedar policy set: permit everything, and forbid, with
/// `@stance("require-approval")`, an amount over the limit outside discovery. A config
/// refund-limit refuses becomes one the Cedar policy refuses: an unknown key stays, a
/// missing `maxAmount` leaves no `policies`, a wrong type lands where Cedar rejects it.
fn cedar_twin(config: &Value) -> Value {
    let Some(c) = config.as_object() else {
        return config.clone();
    };
    let mut out = serde_json::Map::new();
    let (access, hole) = cedar_access(
        c.get("amountPath")
            .and_then(Value::as_str)
            .unwrap_or("/amount"),
    );
    let mut notes = String::from("@stance(\"require-approval\")\n");
    for (k, v) in c {
        match (k.as_str(), v) {
            ("maxAmount" | "amountPath" | "label", _) => {}
            ("approvalType" | "expiresInMs", Value::Null) => {}
            ("approvalType", Value::String(t)) => {
                notes.push_str(&format!("@type({})\n", cedar_string(t)))
            }
            ("expiresInMs", v) => notes.push_str(&format!("@expiresInMs(\"{v}\")\n")),
            (other, v) => {
                out.insert(other.into(), v.clone());
            }
        }
    }
    let limit = c.get("maxAmount").map(Value::to_string).unwrap_or_default();
    match c.get("label") {
        None => notes.push_str(&format!(
            "@reason({})\n",
            cedar_string(&format!("Refund of $${{{hole}}} exceeds ${limit}"))
        )),
        Some(Value::String(label)) => notes.push_str(&format!(
            "@reason({})\n",
            cedar_string(&format!("{label} of $${{{hole}}} exceeds ${limit}"))
        )),
        // Not a string: a hole that names nothing the request has, refused as refund-limit
        // refuses it.
        Some(other) => notes.push_str(&format!("@reason(\"${{{other}}}\")\n")),
    }
    match c.get("maxAmount") {
        None => {}
        Some(Value::Number(n)) => {
            let text = n.to_string();
            let literal = if text.contains(['.', 'e', 'E']) {
                text
            } else {
                format!("{text}.0")
            };
            out.insert(
                "policies".into(),
                json!(format!(
                    "permit(principal, action, resource);\n{notes}forbid(principal, action, resource)\n\
                     when {{ context.phase != \"discovery\" && {access}.greaterThan(decimal(\"{literal}\")) }};\n"
                )),
            );
        }
        // Not a number: not Cedar either.
        Some(other) => {
            out.insert("policies".into(), json!(other.to_string()));
        }
    }
    Value::Object(out)
}

/// The refund-limit cases the Cedar policy fails closed on (a policy error where
/// refund-limit decides): Cedar has no floating point, its `decimal` holds four decimals
/// up to ±922337203685477, and its sets have no index.
const CEDAR_CANNOT_REPRESENT: &[&str] = &[
    "huge: 2^53 + 1 prints exactly",
    "huge: u64::MAX prints exactly",
    "huge: an integer past u64 becomes a double (1e+23)",
    "huge: 1e300",
    "huge limit, small amount",
    "tiny: 1e-7 over a zero limit",
    "amountPath through an array index",
];

#[test]
fn cedar_decides_every_refund_limit_case_it_can_represent_like_the_refund_limit_plugins() {
    cases_pass(
        "cedar",
        &translated_cases_with(cedar_twin, CEDAR_CANNOT_REPRESENT),
    );
}

/// `capgate plugin test PLUGIN --cases` over `cases` passes every case.
fn cases_pass(plugin: &str, cases: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cases.toml");
    std::fs::write(&file, cases).expect("write cases");
    let out = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["plugin", "test", plugin, "--cases"])
        .arg(&file)
        .output()
        .expect("run capgate plugin test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}

#[test]
fn cel_decides_every_refund_limit_case_like_the_refund_limit_plugins() {
    // The same cases, unchanged, pass against the Rust build (so the translation is what
    // differs, not the cases); the conformance module runs all three languages.
    cases_pass("cel", &translated_cases());
}

#[test]
fn check_places_a_syntax_error_a_type_error_and_an_unknown_field_at_their_character() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(
        dir.path(),
        |t| {
            t.replace(
                "policies = [\"orgIsolation\", \"refundLimit\"]",
                "policies = [\"orgIsolation\", \"refundLimit\", \"rules\"]",
            )
        },
        "[policies.rules]\nplugin = \"cel\"\n\n\
         [[policies.rules.config.rules]]\n\
         when = \"input.amount > > 500\"\n\
         stance = \"deny\"\n\n\
         [[policies.rules.config.rules]]\n\
         when = \"input.amount > '500'\"\n\
         stance = \"deny\"\n\n\
         [[policies.rules.config.rules]]\n\
         when = \"input.amout > 500\"\n\
         stance = \"require-approval\"\n\
         reason = \"Refund of $${input.amount} needs a manager\"\n",
    );
    let stderr = refused_by_check(&config);
    let text = std::fs::read_to_string(&config).expect("read");
    // Where each `when` value starts in the file (1-based line; column of its first character).
    let place = |needle: &str, char_in_value: usize| {
        let at = text.find(needle).expect("the rule is in the file");
        let line = text[..at].matches('\n').count() + 1;
        let column = at - text[..at].rfind('\n').map_or(0, |i| i + 1) + 1 + char_in_value;
        format!("{}:{line}:{column}:", config.display())
    };
    for (needle, offset, what) in [
        ("input.amount > > 500", 15, "CEL syntax error"),
        (
            "input.amount > '500'",
            13,
            "CEL type error: cannot order a number against a string",
        ),
        (
            "input.amout > 500",
            5,
            "`input.amout` is not in the input schema of capability `orders.refund`",
        ),
    ] {
        let at = place(needle, offset);
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with(&at) && l.contains(what)),
            "no `{what}` at {at}:\n{stderr}"
        );
    }
}

#[test]
fn inspect_shows_the_rules_of_a_cel_and_a_cedar_policy() {
    let out = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["inspect", "--config"])
        .arg(example_config())
        .args(["--output", "json"])
        .output()
        .expect("run capgate inspect");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inventory: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(inventory["rules"][0]["policy"], "refundLimitCedar");
    assert_eq!(inventory["rules"][0]["plugin"], "cedar");
    assert!(
        inventory["rules"][0]["policies"]
            .as_str()
            .is_some_and(|p| p.contains("@stance(\"require-approval\")")),
        "{inventory}"
    );
    assert_eq!(
        inventory["rules"].as_array().expect("rules")[1..],
        json!([{
            "policy": "refundLimitCel",
            "plugin": "cel",
            "rules": [{
                "when": "phase != 'discovery' && input.amount > 500",
                "stance": "require-approval",
                "type": "manager",
                "reason": "Refund of $${input.amount} exceeds $500",
            }],
        }])
        .as_array()
        .expect("an array")[..]
    );
    let out = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["inspect", "--config"])
        .arg(example_config())
        .output()
        .expect("run capgate inspect");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("policy refundLimitCedar (cedar): a satisfied forbid decides")
            && table.contains("  | @stance(\"require-approval\")")
            && table.contains("policy refundLimitCel (cel): 1 rules")
            && table.contains("1. when phase != 'discovery' && input.amount > 500  =>  require-approval (manager): Refund of $${input.amount} exceeds $500"),
        "{table}"
    );
}

#[test]
fn the_cel_twin_of_refund_limit_passes_every_shipped_scenario() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(dir.path(), |t| with_twin(t, "refundLimitCel", "cel"), "");
    shipped_scenarios_pass(&config);
}

#[test]
fn the_redact_redactor_passes_its_cases() {
    let out = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["plugin", "test", "redact", "--cases"])
        .arg(root().join("plugins/conformance/redact.toml"))
        .output()
        .expect("run capgate plugin test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("8 passed, 0 failed"), "{stdout}");
}

#[test]
fn a_redact_binding_strips_the_example_output_and_check_refuses_a_pointer_the_schema_lacks() {
    let dir = tempfile::tempdir().expect("tempdir");
    // stripGatewayRef becomes a `redact` binding: the example's scenarios still pass, and
    // they check that `/gatewayRef` is absent from every refund answer whose stubbed
    // payment service sent one.
    let swap = |t: String| {
        let swapped = t.replace(
            "[redactors.stripGatewayRef]\nplugin = \"pii-redactor\"\nconfig = { paths = [\"/gatewayRef\"], emails = false, phones = false, cards = false }",
            "[redactors.stripGatewayRef]\nplugin = \"redact\"\nconfig = { drop = [\"/gatewayRef\"] }",
        );
        assert_ne!(swapped, t, "the example's stripGatewayRef changed");
        swapped
    };
    shipped_scenarios_pass(&deployment(dir.path(), swap, ""));

    let typo = tempfile::tempdir().expect("tempdir");
    let config = deployment(
        typo.path(),
        |t| {
            swap(t).replace(
                "config = { drop = [\"/gatewayRef\"] }",
                "config = { drop = [\"/gatewayRefs\"] }",
            )
        },
        "",
    );
    let stderr = refused_by_check(&config);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("redactors.stripGatewayRef.config.drop")
                && l.contains(
                    "`/gatewayRefs` is not in the output schema of capability `orders.refund`"
                )),
        "{stderr}"
    );
}

/// `capgate test --config CONFIG` over the example's shipped scenarios passes, the
/// walkthrough among them.
fn shipped_scenarios_pass(config: &std::path::Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["test", "--config"])
        .arg(config)
        .arg("examples/customer-support/scenarios")
        .current_dir(root())
        .env("CAPGATE_LOG", "warn")
        .output()
        .expect("run capgate test");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(summary.contains(" 0 failed"), "{summary}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("PASS") && l.contains("walkthrough: Dana's $649 refund")),
        "{stdout}"
    );
}

/// `capgate check --config CONFIG` refuses the file (exit 1); its stderr.
fn refused_by_check(config: &std::path::Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["check", "--config"])
        .arg(config)
        .output()
        .expect("run capgate check");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cel_policy_in_shadow_mode_records_where_it_would_have_decided_otherwise() {
    // The rollout step before enforcing a stricter limit: the CEL twin with a $100 limit
    // rides along refundLimit in shadow mode. A $120 refund completes (refundLimit allows
    // it) and records one divergence naming the CEL policy; a $50 refund records none.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(
        dir.path(),
        |t| {
            let edited = t
                .replace(
                    "policies = [\"orgIsolation\", \"refundLimit\"]",
                    "policies = [\"orgIsolation\", \"refundLimit\", \"refundLimitCel\"]",
                )
                .replace(
                    "[policies.refundLimitCel]\nplugin = \"cel\"\n",
                    "[policies.refundLimitCel]\nplugin = \"cel\"\nmode = \"shadow\"\n",
                )
                .replace(
                    "when = \"phase != 'discovery' && input.amount > 500\"",
                    "when = \"phase != 'discovery' && input.amount > 100\"",
                );
            assert_eq!(edited.matches("input.amount > 100").count(), 1);
            edited
        },
        "",
    );
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start(&config, &store);
    let agent = format!("{}/agent/invoke", server.base);
    let dana = Caller::new("dana-dev-key");
    let mut executions = Vec::new();
    for (i, amount) in [120, 50].into_iter().enumerate() {
        let (status, body) = dana
            .post(
                &agent,
                &json!({"capabilityId": "orders.refund", "invocationId": format!("cel-{i}"),
                        "input": {"orderId": "ord_43", "amount": amount, "reason": "late"}}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "completed", "{body}");
        executions.push(
            body["executionId"]
                .as_str()
                .expect("executionId")
                .to_string(),
        );
    }
    let out = capgate(&[
        "audit",
        "query",
        "--store",
        &store,
        "--type",
        "capgate.policy.shadow_divergence",
    ]);
    let events: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(events.len(), 1, "{out}");
    assert_eq!(events[0]["executionId"], executions[0].as_str());
    assert_eq!(events[0]["data"]["policy"], "refundLimitCel");
    assert_eq!(events[0]["data"]["wouldBe"], "require-approval");
    assert_eq!(events[0]["data"]["outcome"], "allow");
}

#[test]
fn a_plugins_section_named_like_a_shipped_plugin_is_refused() {
    // What capgate's build pinned cannot be replaced by a file of the same name.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(
        dir.path(),
        |t| t,
        &format!(
            "[plugins.cel]\npath = \"refund_limit.wasm\"\nsha256 = \"{}\"\n",
            "0".repeat(64)
        ),
    );
    let stderr = refused_by_check(&config);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains(": plugins.cel: `cel` ships with capgate")),
        "{stderr}"
    );
}

/// The example with refundLimit's binding replaced by the binding `twin` of the shipped
/// `plugin`, under refundLimit's name (the scenarios' events name it).
fn with_twin(t: String, twin: &str, plugin: &str) -> String {
    let swapped = t
        .replace(
            "[policies.refundLimit]\nplugin = \"refund-limit\"\nconfig = { maxAmount = 500, approvalType = \"manager\" }\n",
            "",
        )
        .replace(&format!("[policies.{twin}]"), "[policies.refundLimit]")
        .replace(&format!("[[policies.{twin}."), "[[policies.refundLimit.");
    assert!(
        !swapped.contains("refund-limit\"") && swapped.contains(&format!("plugin = \"{plugin}\"")),
        "the example's refundLimit bindings changed"
    );
    swapped
}

/// [`with_twin`] for the Cedar twin, its `config.policies` replaced by `config`.
fn with_cedar_twin(t: String, config: Option<&str>) -> String {
    let mut swapped = with_twin(t, "refundLimitCedar", "cedar");
    if let Some(config) = config {
        let start = swapped
            .find("config.policies = '''")
            .expect("the twin's policies");
        let end = start + swapped[start..].find("'''\n\n").expect("their end") + 5;
        swapped.replace_range(start..end, config);
    }
    swapped
}

#[test]
fn the_cedar_twin_of_refund_limit_passes_every_shipped_scenario() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(dir.path(), |t| with_cedar_twin(t, None), "");
    shipped_scenarios_pass(&config);
}

#[test]
fn a_cedar_policies_file_is_pinned_by_its_sha256() {
    use sha2::{Digest, Sha256};
    let text = "permit(principal, action, resource);\n\n\
        @stance(\"require-approval\")\n@type(\"manager\")\n\
        @reason(\"Refund of $${context.input.amount} exceeds $500\")\n\
        forbid(principal, action == Action::\"orders.refund\", resource)\n\
        when { context.phase != \"discovery\" && context.input.amount.greaterThan(decimal(\"500.0\")) };\n";
    let digest: String = Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // Pinned: every shipped scenario passes with the policies read from the file.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("refund.cedar"), text).expect("write the policies");
    let pinned =
        format!("config = {{ policiesFile = \"refund.cedar\", sha256 = \"{digest}\" }}\n\n");
    let config = deployment(dir.path(), |t| with_cedar_twin(t, Some(&pinned)), "");
    shipped_scenarios_pass(&config);
    // The file changed after it was pinned: refused at `sha256`, naming both digests.
    std::fs::write(
        dir.path().join("refund.cedar"),
        text.replace("500.0", "5000.0"),
    )
    .expect("edit the policies");
    let stderr = refused_by_check(&config);
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("policies.refundLimit.config.sha256")
                && l.contains("refund.cedar has SHA-256")
                && l.contains(&format!("the configuration pins {digest}"))),
        "{stderr}"
    );
    // A validation error inside the file is placed in the file.
    let typo = text.replace("context.input.amount.", "context.input.amout.");
    assert_ne!(typo, text);
    std::fs::write(dir.path().join("refund.cedar"), &typo).expect("write the typo");
    let digest: String = Sha256::digest(typo.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let pinned =
        format!("config = {{ policiesFile = \"refund.cedar\", sha256 = \"{digest}\" }}\n\n");
    let config = deployment(dir.path(), |t| with_cedar_twin(t, Some(&pinned)), "");
    let stderr = refused_by_check(&config);
    assert!(
        stderr.lines().any(|l| l.contains("refund.cedar:7:")
            && l.contains("Cedar validation error")
            && l.contains("amout")),
        "{stderr}"
    );
}

#[test]
fn check_places_a_cedar_syntax_error_a_type_error_and_an_unknown_field_at_their_character() {
    for (policy, needle, what) in [
        (
            "forbid(principal, action, resource) when { context.input.amount >> decimal(\"1.0\") };",
            "> decimal",
            "Cedar syntax error",
        ),
        (
            "forbid(principal, action, resource) when { context.input.amount > 500 };",
            "context.input.amount > 500",
            "Cedar validation error",
        ),
        (
            "forbid(principal, action, resource) when { context.input.amout.greaterThan(decimal(\"1.0\")) };",
            "context.input.amout",
            "Cedar validation error",
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = deployment(
            dir.path(),
            |t| {
                t.replace(
                    "policies = [\"orgIsolation\", \"refundLimit\"]",
                    "policies = [\"orgIsolation\", \"refundLimit\", \"rules\"]",
                )
            },
            &format!(
                "[policies.rules]\nplugin = \"cedar\"\nconfig.policies = '''\npermit(principal, action, resource);\n{policy}\n'''\n"
            ),
        );
        let stderr = refused_by_check(&config);
        let text = std::fs::read_to_string(&config).expect("read");
        let at = text.find(policy).expect("the policy is in the file")
            + policy.find(needle).expect("the needle is in the policy");
        let line = text[..at].matches('\n').count() + 1;
        let column = at - text[..at].rfind('\n').map_or(0, |i| i + 1) + 1;
        let place = format!("{}:{line}:{column}:", config.display());
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with(&place) && l.contains(what)),
            "no `{what}` at {place} for {policy}:\n{stderr}"
        );
    }
}

/// A deployment of one capability, `orders.refund`, governed by `policies` (TOML sections
/// naming shipped policies, attached as `policies = [...]` lists).
fn hiding_config(dir: &std::path::Path, policies: &str, attached: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
revision = "r1"

[runtime]
compileCache = "{cache}"

{policies}

[[capabilities]]
id = "orders.refund"
description = "Refund an order"
expose = {{ aiSdk = true }}
sideEffect = "write"
risk = "high"
inputSchema = {{ type = "object", properties = {{ amount = {{ type = "number" }} }}, required = ["amount"] }}
policies = [{attached}]
procedure = {{ http = {{ target = "orders", url = "http://127.0.0.1:9/refund" }} }}

[gateway]
authorize = "authenticated"
routes = [{{ path = "/agent", surface = "aiSdk" }}]

[[gateway.apiKeys]]
sha256 = "{key}"
namespace = "org_1"
surfaces = ["aiSdk"]
actor = {{ id = "u_dana", kind = "user" }}
"#,
        cache = capgate_testkit::paths::compile_cache().display(),
        key = key_hash("dana-dev-key"),
    );
    let path = dir.join("capgate.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// What `describe` lists on the AI SDK surface for a user with `attributes`.
async fn listed(rt: &capgate_core::runtime::Runtime, attributes: Value) -> Vec<String> {
    use capgate_core::prelude::*;
    rt.describe(
        Surface::AiSdk,
        DescribeOptions {
            namespace: String::new(),
            actor: Actor::user("u_dana", attributes),
            context: Value::Null,
            scope: None,
        },
    )
    .await
    .expect("describe")
    .into_iter()
    .map(|d| d.id)
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hide_rule_without_phases_hides_in_discovery_as_well_as_when_called() {
    // Issue 55: a hide rule ran at invocation only, so the capability stayed listed and
    // then answered not-found. A cel (or cedar) binding with a hide rule and no `phases`
    // now runs in discovery and invocation.
    let cel = r#"[policies.goldOnly]
plugin = "cel"
[[policies.goldOnly.config.rules]]
when = "input.amount > 1000000"
stance = "deny"
reason = "too big"
[[policies.goldOnly.config.rules]]
when = "actor.attributes.tier != 'gold'"
stance = "hide""#;
    let cedar = r#"[policies.goldOnly]
plugin = "cedar"
config.policies = '''
permit(principal, action, resource);
forbid(principal, action, resource) when { context.input.amount.greaterThan(decimal("1000000.0")) };
@stance("hide")
forbid(principal, action, resource) when { !(principal.attributes has tier && principal.attributes.tier == "gold") };
'''
config.actorAttributes = { tier = "String" }"#;
    for (plugin, policies) in [("cel", cel), ("cedar", cedar)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = hiding_config(dir.path(), policies, "\"goldOnly\"");
        let checked = capgate::validate::validate(&config)
            .unwrap_or_else(|r| panic!("{plugin}: {:?}", r.problems));
        assert!(
            checked.warnings.is_empty(),
            "{plugin}: {:?}",
            checked.warnings
        );
        let rt = checked.scratch_runtime().expect("runtime");
        assert_eq!(
            listed(&rt, json!({"tier": "silver"})).await,
            Vec::<String>::new(),
            "{plugin}: a non-gold actor must not see it listed"
        );
        assert_eq!(
            listed(&rt, json!({"tier": "gold"})).await,
            ["orders.refund"],
            "{plugin}: a gold actor sees it"
        );
        // And when called, not found for the silver actor as before.
        use capgate_core::prelude::*;
        let called = rt
            .invoke(InvokeRequest::new(
                Surface::AiSdk,
                "orders.refund",
                json!({"amount": 5}),
                Actor::user("u_dana", json!({"tier": "silver"})),
            ))
            .await;
        assert_eq!(
            called.error().map(|e| e.code()),
            Some(ErrorCode::CapabilityNotFound),
            "{plugin}: {called:?}"
        );
        // `phases` given: what it says (invocation only: listed again).
        let explicit = policies.replacen("\n", "\nphases = [\"invocation\"]\n", 1);
        let config = hiding_config(dir.path(), &explicit, "\"goldOnly\"");
        let rt = capgate::validate::validate(&config)
            .unwrap_or_else(|r| panic!("{plugin}: {:?}", r.problems))
            .scratch_runtime()
            .expect("runtime");
        assert_eq!(
            listed(&rt, json!({"tier": "silver"})).await,
            ["orders.refund"],
            "{plugin}: explicit phases win"
        );
    }
}

#[test]
fn check_warns_where_a_hide_rule_that_reads_the_input_runs_in_discovery() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = hiding_config(
        dir.path(),
        r#"[policies.bigHidden]
plugin = "cel"
config = { rules = [{ when = "input.amount > 5", stance = "hide" }] }"#,
        "\"bigHidden\"",
    );
    let checked = capgate::validate::validate(&config).expect("it loads: a warning only");
    let warnings: Vec<String> = checked.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("capgate.toml:")
            && warnings[0].contains("bigHidden")
            && warnings[0].contains("reads `input`"),
        "{warnings:?}"
    );
    let out = capgate_output(&["check", "--config", &config.display().to_string()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: ") && stderr.contains("reads `input`"),
        "{stderr}"
    );
}

#[test]
fn check_warns_where_a_reason_of_an_attached_policy_reads_the_input() {
    // Issue 55 (SI-10): a reason that reads the input is filled in for the approver only;
    // the trail records the policy's name. `check` says so where the policy governs a
    // capability, and says nothing of an unattached one or a reason without the input.
    let dir = tempfile::tempdir().expect("tempdir");
    let policies = r#"[policies.bigCel]
plugin = "cel"
config = { rules = [{ when = "input.amount > 500", stance = "require-approval", type = "manager", reason = "Refund of $${input.amount} exceeds $500" }] }

[policies.bigCedar]
plugin = "cedar"
config.policies = '''
permit(principal, action, resource);
@stance("require-approval")
@type("manager")
@reason("Refund of $${context.input.amount} exceeds $500")
forbid(principal, action, resource) when { context.input.amount.greaterThan(decimal("500.0")) };
'''

[policies.plainCel]
plugin = "cel"
config = { rules = [{ when = "input.amount > 500", stance = "require-approval", type = "manager", reason = "Refund over $500 (${actor.id})" }] }

[policies.unattachedCel]
plugin = "cel"
config = { rules = [{ when = "input.amount > 5", stance = "deny", reason = "${input.amount} is too much" }] }"#;
    let config = hiding_config(dir.path(), policies, r#""bigCel", "bigCedar", "plainCel""#);
    let checked = capgate::validate::validate(&config)
        .unwrap_or_else(|r| panic!("it loads: warnings only: {:?}", r.problems));
    let warnings: Vec<String> = checked.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    for (policy, what) in [("bigCel", "`input`"), ("bigCedar", "`context.input`")] {
        assert!(
            warnings.iter().any(|w| w.contains("capgate.toml:")
                && w.contains(policy)
                && w.contains(what)
                && w.contains("reason code")),
            "{policy}: {warnings:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cedar_set_asking_a_manager_and_finance_holds_for_both_through_the_configuration() {
    // Issue 55: a $20 000 refund the set gives to a manager (1 h) and to finance (15 min)
    // asked only for the manager, and Priya's approval alone ran it.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = hiding_config(
        dir.path(),
        r#"[policies.limits]
plugin = "cedar"
config.policies = '''
permit(principal, action, resource);
@stance("require-approval") @type("manager") @expiresInMs("3600000")
@reason("Refund of ${context.input.amount} needs a manager")
forbid(principal, action, resource) when { context.input.amount.greaterThan(decimal("10000.0")) };
@stance("require-approval") @type("finance") @expiresInMs("900000")
@reason("Refund of ${context.input.amount} needs finance")
forbid(principal, action, resource) when { context.input.amount.greaterThan(decimal("5000.0")) };
'''"#,
        "\"limits\"",
    );
    let rt = capgate::validate::validate(&config)
        .unwrap_or_else(|r| panic!("{:?}", r.problems))
        .scratch_runtime()
        .expect("runtime");
    use capgate_core::prelude::*;
    let held = rt
        .invoke(InvokeRequest::new(
            Surface::AiSdk,
            "orders.refund",
            json!({"amount": 20_000}),
            Actor::user("u_dana", json!({})),
        ))
        .await;
    let approval = held.approval().unwrap_or_else(|| panic!("held: {held:?}"));
    assert_eq!(approval.types, ["manager", "finance"]);
    assert_eq!(
        approval.reasons,
        [
            "Refund of 20000 needs a manager",
            "Refund of 20000 needs finance"
        ]
    );
    assert_eq!(
        (approval.expires_at - approval.requested_at).num_minutes(),
        15
    );
}
