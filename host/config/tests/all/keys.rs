//! Every key is declared once, classified for reload, documented, and listed in the
//! checked-in reference (docs/configuration.md).

use capgate_config::keys::{self, Key, KeyDefault};
use serde_json::Value;
use std::path::{Path, PathBuf};

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The declared key at `pointer` (each `*` of a declaration stands for any one segment).
fn declared<'a>(all: &'a [Key], pointer: &str) -> Option<&'a Key> {
    let segs: Vec<&str> = pointer.split('/').collect();
    all.iter().find(|k| {
        let ks: Vec<&str> = k.pointer.split('/').collect();
        ks.len() == segs.len() && ks.iter().zip(&segs).all(|(k, s)| *k == "*" || k == s)
    })
}

/// Whether `pointer` is one entry of an array or a map of tables (`/capabilities/0`): a
/// declaration lies below it through a `*`.
fn is_entry(all: &[Key], pointer: &str) -> bool {
    let segs: Vec<&str> = pointer.split('/').collect();
    all.iter().any(|k| {
        let ks: Vec<&str> = k.pointer.split('/').collect();
        ks.len() > segs.len()
            && ks[segs.len() - 1] == "*"
            && ks.iter().zip(&segs).all(|(k, s)| *k == "*" || k == s)
    })
}

/// Whether a declared key is a table with keys of its own below it.
fn is_table(all: &[Key], key: &Key) -> bool {
    let below = format!("{}/", key.pointer);
    all.iter().any(|k| k.pointer.starts_with(&below))
}

/// Every key written in `value` at `pointer`, checked against the declarations.
pub(crate) fn walk(all: &[Key], value: &Value, pointer: &str, undeclared: &mut Vec<String>) {
    if !pointer.is_empty() {
        match declared(all, pointer) {
            Some(key) if !is_table(all, key) => return,
            Some(_) => {}
            None if is_entry(all, pointer) => {}
            None => {
                undeclared.push(pointer.to_string());
                return;
            }
        }
    }
    match value {
        Value::Object(m) => {
            for (k, v) in m {
                walk(
                    all,
                    v,
                    &format!("{pointer}/{}", k.replace('~', "~0").replace('/', "~1")),
                    undeclared,
                );
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                walk(all, v, &format!("{pointer}/{i}"), undeclared);
            }
        }
        _ => {}
    }
}

#[test]
fn every_key_is_classified_for_reload_and_documented() {
    let all = keys::all();
    assert!(all.len() > 100, "only {} keys declared", all.len());
    for k in &all {
        assert!(!k.doc.trim().is_empty(), "{} has no doc comment", k.pointer);
        if let Some(why) = k.restart {
            assert!(
                !why.trim().is_empty(),
                "{} restarts without saying why",
                k.pointer
            );
        }
    }
    let mut pointers: Vec<&str> = all.iter().map(|k| k.pointer.as_str()).collect();
    pointers.sort_unstable();
    let before = pointers.len();
    pointers.dedup();
    assert_eq!(before, pointers.len(), "a key is declared twice");
}

#[test]
fn the_keys_a_reload_refuses_are_the_ones_fixed_at_start() {
    let restart: Vec<String> = keys::restart_keys().into_iter().map(|(p, _)| p).collect();
    for expected in [
        "/gateway/listen",
        "/store",
        "/audit/jsonl",
        "/audit/checkpointKey",
        "/audit/checkpointEvents",
        "/audit/export",
        "/audit/retainDays",
        "/gateway/replayHorizonHours",
        "/gateway/pendingHorizonHours",
        "/gateway/journalMaxRowsPerNamespace",
        "/gateway/journalMaxBytesPerNamespace",
        "/telemetry",
        "/gateway/shutdownUnreadyDelayMs",
        "/gateway/shutdownDrainMs",
        "/runtime/stateDir",
    ] {
        assert!(
            restart.iter().any(|p| p == expected),
            "{expected} is not a restart key: {restart:?}"
        );
    }
    assert_eq!(restart.len(), 15, "{restart:?}");
    // A key inside a fixed table shares its class without being compared on its own.
    let all = keys::all();
    let url = declared(&all, "/store/url").expect("store.url");
    assert!(url.inherited && url.restart.is_some());
}

#[test]
fn every_key_the_shipped_files_write_is_declared() {
    let all = keys::all();
    for file in [
        "examples/customer-support/capgate.toml",
        "examples/customer-support/capgate.template.toml",
        // The ConfigMap of the Kubernetes manifests.
        "deploy/kubernetes/base/capgate.toml",
    ] {
        let path = repo().join(file);
        let text = std::fs::read_to_string(&path).expect("read the example");
        let doc = capgate_config::Located::parse(&path, text).expect("TOML");
        let mut undeclared = Vec::new();
        walk(&all, &doc.json, "", &mut undeclared);
        assert!(
            undeclared.is_empty(),
            "{file}: keys with no declaration: {undeclared:?}"
        );
    }
    // And the walk does catch a key nobody declared.
    let mut undeclared = Vec::new();
    walk(
        &all,
        &serde_json::json!({"gateway": {"lisen": "x"}}),
        "",
        &mut undeclared,
    );
    assert_eq!(undeclared, ["/gateway/lisen"]);
}

/// Compares a checked-in generated file with what the declarations generate now, and
/// rewrites it first under `CAPGATE_BLESS=1`.
pub(crate) fn check_generated(file: &str, generated: &str) {
    let path = repo().join(file);
    if std::env::var_os("CAPGATE_BLESS").is_some() {
        std::fs::write(&path, generated).expect("write the generated file");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{file} is not what the key declarations generate; run `CAPGATE_BLESS=1 cargo test -p capgate-config --test all`"
    );
}

#[test]
fn the_checked_in_reference_is_generated_from_the_declarations() {
    check_generated("docs/configuration.md", &keys::reference_document());
}

/// Issue 57: the reference lists the sub-keys of what a capability writes inline (capgate-core's
/// `expose`, `retry`, `approval`, `adapters`), and a redactor's keys without the
/// policies-only `mode` and `phases` (which `check` refuses on a redactor).
#[test]
fn the_reference_lists_inline_settings_and_only_a_redactors_own_keys() {
    let all = keys::all();
    for pointer in [
        "/capabilities/*/expose/aiSdk",
        "/capabilities/*/retry/maxAttempts",
        "/capabilities/*/retry/retryOn",
        "/capabilities/*/approval/type",
        "/capabilities/*/approval/expiresInMs",
        "/capabilities/*/adapters/mcp",
        "/capabilities/*/procedure/http/connectTimeoutMs",
        "/redactors/*/plugin",
        "/redactors/*/config",
        "/policies/*/mode",
        "/policies/*/phases",
    ] {
        assert!(
            declared(&all, pointer).is_some(),
            "{pointer} is not in the reference"
        );
    }
    for pointer in ["/redactors/*/mode", "/redactors/*/phases"] {
        assert!(
            declared(&all, pointer).is_none(),
            "{pointer} is listed but refused"
        );
    }
    let retry = declared(&all, "/capabilities/*/retry/maxAttempts").expect("maxAttempts");
    assert_eq!(retry.range.as_deref(), Some("at most 10 attempts"));
    let schema = capgate_config::schema::json_schema();
    let redactor = &schema["properties"]["redactors"]["additionalProperties"]["properties"];
    assert!(
        redactor.get("mode").is_none() && redactor.get("plugin").is_some(),
        "{redactor}"
    );
}

/// Issue 57: a key's doc is Rust doc and Markdown at once, so a rustdoc link
/// (`` [`NAME`] ``) would render as literal brackets in the reference: none may be there.
#[test]
fn no_key_doc_carries_a_rustdoc_link_into_the_reference() {
    let linked: Vec<String> = keys::all()
        .iter()
        .filter(|k| {
            k.doc.split("[`").skip(1).any(|rest| {
                rest.split_once("`]")
                    .is_some_and(|(name, after)| !name.contains(' ') && !after.starts_with('('))
            })
        })
        .map(|k| format!("{}: {}", k.pointer, k.doc))
        .collect();
    assert!(linked.is_empty(), "rustdoc links in key docs: {linked:#?}");
}

#[test]
fn the_reference_shows_each_keys_default() {
    let all = keys::all();
    let default = |pointer: &str| declared(&all, pointer).expect(pointer).default.clone();
    let value = |v: serde_json::Value| KeyDefault::Value(v);
    assert_eq!(default("/gateway/listen"), value("127.0.0.1:8080".into()));
    assert_eq!(
        default("/gateway/console/secureCookie"),
        value("auto".into())
    );
    assert_eq!(default("/runtime/rejectSelfApproval"), value(true.into()));
    assert_eq!(default("/telemetry/traces/enabled"), value(true.into()));
    assert_eq!(default("/policies/*/mode"), value("enforce".into()));
    assert_eq!(
        default("/capabilities/*/tags"),
        value(serde_json::json!([]))
    );
    assert_eq!(default("/gateway/routes"), value(serde_json::json!([])));
    assert_eq!(default("/plugins"), value(serde_json::json!({})));
    assert_eq!(default("/plugins/*/path"), KeyDefault::Required);
    assert_eq!(default("/capabilities/*/procedure"), KeyDefault::Required);
    assert_eq!(default("/store/acquireTimeoutMs"), KeyDefault::Absent);
    assert_eq!(default("/gateway/authorize"), KeyDefault::Absent);
    assert_eq!(default("/gateway/jwt"), KeyDefault::Absent);
    assert_eq!(default("/gateway/console"), KeyDefault::Table);
    let reference = keys::reference();
    assert!(
        reference.contains(
            "| `gateway.listen` | string | `\"127.0.0.1:8080\"` |  | restart | Listen address. |"
        ),
        "{reference}"
    );
    assert!(
        reference.contains("| `plugins.*.isolation` | string | absent | `fresh`, `pooled` |"),
        "{reference}"
    );
}
