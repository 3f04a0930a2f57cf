//! A number's range is declared on its key (`#[key(range = …)]`): `Config::parse` reports
//! every value outside its range at its own key, with the file's other problems, and the
//! reference lists what each key accepts.

use capgate_config::{Config, Problem, keys};
use std::path::Path;

/// The problems of a configuration text (none when it parses and checks).
fn problems(text: &str) -> Vec<Problem> {
    match Config::parse(Path::new("capgate.toml"), text.to_string()) {
        Ok(_) => Vec::new(),
        Err(p) => p,
    }
}

/// The message at `key`, if there is one.
fn at<'a>(problems: &'a [Problem], key: &str) -> Option<&'a str> {
    problems
        .iter()
        .find(|p| p.key == key)
        .map(|p| p.message.as_str())
}

#[test]
fn every_value_outside_its_declared_range_is_reported_at_its_key_in_one_run() {
    let text = r#"
[runtime]
timeoutMs = 0

[store]
acquireTimeoutMs = 0

[plugins.limits]
path = "policy.wasm"
sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
memoryMb = 5000
reserve = 65

[gateway]
requestTimeoutMs = 31536000001
maxBodyBytes = 0
replayHorizonHours = 0
journalMaxRowsPerNamespace = 0

[gateway.console]
sessionMinutes = 0
"#;
    let found = problems(text);
    for (key, says) in [
        (
            "runtime.timeoutMs",
            "must be between 1 and 31536000000 milliseconds, got 0",
        ),
        (
            "store.acquireTimeoutMs",
            "must be between 1 and 31536000000 milliseconds, got 0",
        ),
        (
            "plugins.limits.memoryMb",
            "must be between 1 and 4096 MiB, got 5000",
        ),
        (
            "plugins.limits.reserve",
            "must be at most 64 ready instances, got 65",
        ),
        (
            "gateway.requestTimeoutMs",
            "must be between 1 and 31536000000 milliseconds, got 31536000001",
        ),
        ("gateway.maxBodyBytes", "must be at least 1, got 0"),
        (
            "gateway.replayHorizonHours",
            "must be between 1 and 87600 hours, got 0",
        ),
        (
            "gateway.journalMaxRowsPerNamespace",
            "must be between 1 and 9223372036854775807, got 0",
        ),
        (
            "gateway.console.sessionMinutes",
            "must be between 1 and 10080 minutes, got 0",
        ),
    ] {
        assert_eq!(at(&found, key), Some(says), "{key}: {found:#?}");
    }
    // Each located on its own line of the file, not on its table.
    let line = |key: &str| found.iter().find(|p| p.key == key).map(|p| p.line);
    assert_eq!(line("runtime.timeoutMs"), Some(3));
    assert_eq!(line("gateway.console.sessionMinutes"), Some(21));
}

#[test]
fn a_value_at_either_end_of_its_range_is_accepted() {
    let text = r#"
[runtime]
timeoutMs = 31536000000

[store]
acquireTimeoutMs = 1

[gateway]
auditDrainTimeoutMs = 0
shutdownUnreadyDelayMs = 0
"#;
    let found = problems(text);
    for key in [
        "runtime.timeoutMs",
        "store.acquireTimeoutMs",
        "gateway.auditDrainTimeoutMs",
        "gateway.shutdownUnreadyDelayMs",
    ] {
        assert_eq!(at(&found, key), None, "{key}: {found:#?}");
    }
}

#[test]
fn the_reference_lists_what_each_ranged_key_accepts() {
    let all = keys::all();
    let range = |pointer: &str| {
        all.iter()
            .find(|k| k.pointer == pointer)
            .and_then(|k| k.range.clone())
    };
    assert_eq!(
        range("/runtime/timeoutMs").as_deref(),
        Some("between 1 and 31536000000 milliseconds")
    );
    assert_eq!(
        range("/plugins/*/reserve").as_deref(),
        Some("at most 64 ready instances")
    );
    assert_eq!(range("/gateway/listen"), None);
    assert!(
        keys::reference().contains(
            "| `gateway.console.sessionMinutes` | integer | `480` | between 1 and 10080 minutes | reload |"
        ),
        "{}",
        keys::reference()
    );
}
