//! Loading refuses what it must: wrong digests, missing exports, paths outside the plugin
//! directory; and a restart loads compiled code from the cache instead of recompiling.

use crate::common;

use capgate_wasm::{Binding, LoadError, LoadSource, PluginDir};
use common::*;

#[test]
fn digest_mismatch_is_refused_naming_both_digests() {
    let file = wasm_file("refund_limit");
    let actual = digest_of("refund_limit");
    let pinned = "0".repeat(64);
    let err = host()
        .load(&plugin_dir(), &file, &pinned)
        .expect_err("must refuse");
    assert!(matches!(err, LoadError::DigestMismatch { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&pinned) && msg.contains(&actual), "{msg}");
    assert!(msg.contains("refund_limit.wasm"), "{msg}");
}

#[test]
fn pin_with_sha256_prefix_and_uppercase_is_accepted() {
    let file = wasm_file("refund_limit");
    let pin = format!("sha256:{}", digest_of("refund_limit").to_uppercase());
    host().load(&plugin_dir(), &file, &pin).expect("load");
}

#[test]
fn missing_export_is_refused_naming_the_export() {
    let plugin = load("refund_limit");
    let err = plugin
        .redactor(Binding::new("oops"))
        .expect_err("must refuse");
    let msg = err.to_string();
    assert!(
        msg.contains("does not export `capgate:plugin/redactor@0.1.0`"),
        "{msg}"
    );
    assert!(
        msg.contains("capgate:plugin/policy@0.1.0"),
        "lists what it has: {msg}"
    );
    let err = load("pii_redactor")
        .policy(Binding::new("oops"))
        .expect_err("must refuse");
    assert!(
        err.to_string().contains("`capgate:plugin/policy@0.1.0`"),
        "{err}"
    );
}

#[test]
fn paths_cannot_escape_the_plugin_directory() {
    let dir = plugin_dir();
    for escape in [
        "../release/refund_limit.wasm",
        "/etc/passwd",
        "../../../../Cargo.toml",
    ] {
        let err = host()
            .load(&dir, escape, &"0".repeat(64))
            .expect_err("must refuse");
        assert!(matches!(err, LoadError::Io { .. }), "{escape}: {err:?}");
    }
}

#[test]
fn second_load_comes_from_the_compiled_cache() {
    let cache = tempfile::tempdir().expect("tempdir");
    let dir = PluginDir::open(wasm_dir())
        .and_then(|d| d.with_cache(cache.path()))
        .expect("dir");
    let file = wasm_file("org_isolation");
    let digest = digest_of("org_isolation");
    let first = host().load(&dir, &file, &digest).expect("compile");
    assert_eq!(first.load_source(), LoadSource::Compiled);
    let second = host().load(&dir, &file, &digest).expect("cached");
    assert_eq!(second.load_source(), LoadSource::Cache);
    assert!(
        second.load_time() < first.load_time(),
        "{:?} vs {:?}",
        second.load_time(),
        first.load_time()
    );
    // A corrupt cache entry is recompiled, never trusted.
    for entry in std::fs::read_dir(cache.path()).expect("list") {
        std::fs::write(entry.expect("entry").path(), b"garbage").expect("corrupt");
    }
    let third = host().load(&dir, &file, &digest).expect("recompiled");
    assert_eq!(third.load_source(), LoadSource::CacheRefused);
}

/// `cargo xtask build-plugins` builds the shipped plugins (cel, cedar, redact) in cargo runs
/// of their own: built with them, every plugin got their dependencies' features, among them
/// serde_json's `preserve_order`, whose hash maps import a WASI random seed and made the
/// benchmark's plugins slower (docs/contributing/benchmarks.md "Guests built for speed"). The
/// control is cel, which needs that seed itself.
#[test]
fn plugins_are_built_without_the_features_of_the_shipped_ones() {
    const SEED: &str = "wasi:random/insecure-seed@";
    let seeded = |name: &str| load(name).imports().iter().any(|i| i.starts_with(SEED));
    assert!(
        seeded("cel_policy"),
        "cel: {:?}",
        load("cel_policy").imports()
    );
    for name in ["refund_limit", "org_isolation", "pii_redactor", "redact"] {
        assert!(!seeded(name), "{name}: {:?}", load(name).imports());
    }
}

/// A component with one more custom section at its end, as the JavaScript and Python SDK
/// builds write a declared config schema.
fn with_section(component: &[u8], name: &str, data: &[u8]) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            out.push(if n == 0 { b } else { b | 0x80 });
            if n == 0 {
                break;
            }
        }
    }
    let mut payload = Vec::new();
    leb(name.len(), &mut payload);
    payload.extend_from_slice(name.as_bytes());
    payload.extend_from_slice(data);
    let mut out = component.to_vec();
    out.push(0);
    leb(payload.len(), &mut out);
    out.extend_from_slice(&payload);
    out
}

/// Issue 57: a plugin declares its config's JSON Schema; the Rust SDK's
/// `config_schema!` puts it in the core module, and the host finds it there.
#[test]
fn the_rust_sdk_declares_the_config_schema_in_the_component() {
    let plugin = load("refund_limit");
    let schema = plugin
        .config_schema()
        .expect("refund-limit declares a schema");
    assert_eq!(schema["required"], serde_json::json!(["maxAmount"]));
    assert_eq!(schema["additionalProperties"], false);
    // A plugin that declares nothing keeps today's behaviour.
    assert!(load("support_desk").config_schema().is_none());
}

/// The attacker's cases: whoever builds (or tampers with, before pinning) a component
/// cannot make the host run with a schema nobody can read. A section that is not JSON,
/// not a schema, over the size cap, or declared twice differently refuses the plugin.
#[test]
fn a_declared_config_schema_that_is_not_one_json_schema_refuses_the_plugin() {
    let base = std::fs::read(wasm_dir().join(wasm_file("support_desk"))).expect("read");
    let section = capgate_wasm::CONFIG_SCHEMA_SECTION;
    let good = with_section(&base, section, br#"{"type":"object"}"#);
    let plugin = host()
        .load_unpinned("good.wasm", &good)
        .expect("a JSON schema loads");
    assert_eq!(
        plugin.config_schema(),
        Some(&serde_json::json!({"type": "object"}))
    );
    let oversize = format!("\"{}\"", "x".repeat(capgate_wasm::MAX_CONFIG_SCHEMA_BYTES));
    let twice = with_section(&good, section, br#"{"type":"array"}"#);
    for (what, bytes) in [
        ("not JSON", with_section(&base, section, b"{not json")),
        ("not a schema", with_section(&base, section, b"[1, 2]")),
        (
            "over the cap",
            with_section(&base, section, oversize.as_bytes()),
        ),
        ("twice, differently", twice),
    ] {
        let err = host()
            .load_unpinned("hostile.wasm", &bytes)
            .expect_err(what);
        assert!(
            matches!(err, LoadError::BadConfigSchema { .. }),
            "{what}: {err:?}"
        );
        assert!(err.to_string().contains(section), "{what}: {err}");
    }
    // The same section twice with the same contents (a linker's duplicate) is one schema.
    let same = with_section(&good, section, br#"{"type":"object"}"#);
    assert!(host().load_unpinned("same.wasm", &same).is_ok());
}
