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
