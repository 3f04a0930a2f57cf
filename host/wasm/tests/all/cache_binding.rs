//! The compile cache is bound to the pinned `.wasm` (issue 33, "what runs is what was
//! pinned"): an artifact capgate did not store under this key (a valid one compiled from
//! another plugin and renamed, with or without its index entry), or one another user could
//! have written, is refused and the pinned plugin compiled again; a cache directory others
//! can write is not used at all.

use crate::common;

use capgate_core::prelude::*;
use capgate_wasm::{Binding, LoadError, LoadSource, PluginDir};
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The cached artifact of a plugin (by its digest) and its index entry.
fn artifact_of(cache: &Path, digest: &str) -> (PathBuf, PathBuf) {
    let artifact = std::fs::read_dir(cache)
        .expect("list the cache")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(digest) && n.ends_with(".cwasm"))
        })
        .unwrap_or_else(|| panic!("no cached artifact for {digest}"));
    let index = PathBuf::from(format!("{}.sha256", artifact.display()));
    assert!(index.is_file(), "capgate indexes what it stores");
    (artifact, index)
}

/// What the hostile counter answers (a deny coded `calls=N`), or what the plugin did.
fn answer(plugin: &std::sync::Arc<capgate_wasm::Plugin>) -> String {
    let policy = plugin.policy(Binding::new("probe")).expect("bind");
    let ask = RefundAsk::by_dana();
    let input = serde_json::json!({"amount": 1});
    let shared = SharedJson::default();
    let req = ask.request(Some(&input), "exe_1", &shared);
    match futures::executor::block_on(policy.evaluate_raw(&req, None)) {
        Ok(PolicyDecision::Deny { code: Some(c), .. }) => c,
        other => format!("{other:?}"),
    }
}

#[test]
fn a_planted_foreign_artifact_is_refused_and_the_pinned_plugin_recompiled() {
    let cache = tempfile::tempdir().expect("tempdir");
    let dir = PluginDir::open(wasm_dir())
        .and_then(|d| d.with_cache(cache.path()))
        .expect("dir");
    let (pinned, pinned_digest) = (wasm_file("org_isolation"), digest_of("org_isolation"));
    let (foreign, foreign_digest) = (wasm_file("hostile_counter"), digest_of("hostile_counter"));
    let first = host().load(&dir, &pinned, &pinned_digest).expect("compile");
    let honest = answer(&first);
    assert_ne!(honest, "calls=1", "the pinned plugin is not the counter");
    let counter = host()
        .load(&dir, &foreign, &foreign_digest)
        .expect("compile");
    assert_eq!(answer(&counter), "calls=1");
    let (artifact, index) = artifact_of(cache.path(), &pinned_digest);
    let (foreign_artifact, foreign_index) = artifact_of(cache.path(), &foreign_digest);

    // The attacker's plant: the counter's valid artifact under the pinned plugin's key.
    std::fs::copy(&foreign_artifact, &artifact).expect("plant");
    let loaded = host().load(&dir, &pinned, &pinned_digest).expect("load");
    assert_eq!(loaded.load_source(), LoadSource::CacheRefused);
    assert_eq!(
        answer(&loaded),
        honest,
        "the plugin that runs is the pinned one"
    );
    // Recompiling stored the pinned plugin's own artifact again: the next load uses it.
    let again = host().load(&dir, &pinned, &pinned_digest).expect("load");
    assert_eq!(again.load_source(), LoadSource::Cache);
    assert_eq!(answer(&again), honest);

    // The plant with its own index entry beside it: the entry names another key.
    std::fs::copy(&foreign_artifact, &artifact).expect("plant");
    std::fs::copy(&foreign_index, &index).expect("plant the entry");
    let loaded = host().load(&dir, &pinned, &pinned_digest).expect("load");
    assert_eq!(loaded.load_source(), LoadSource::CacheRefused);
    assert_eq!(answer(&loaded), honest);

    // The plant with no index entry at all (capgate did not store it).
    std::fs::copy(&foreign_artifact, &artifact).expect("plant");
    std::fs::remove_file(&index).expect("drop the entry");
    let loaded = host().load(&dir, &pinned, &pinned_digest).expect("load");
    assert_eq!(loaded.load_source(), LoadSource::CacheRefused);
    assert_eq!(answer(&loaded), honest);

    // capgate's own artifact, made writable by the group: not trusted either.
    let mode = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).expect("chmod")
    };
    assert_eq!(
        host()
            .load(&dir, &pinned, &pinned_digest)
            .expect("load")
            .load_source(),
        LoadSource::Cache
    );
    mode(&artifact, 0o664);
    let loaded = host().load(&dir, &pinned, &pinned_digest).expect("load");
    assert_eq!(loaded.load_source(), LoadSource::CacheRefused);
    assert_eq!(answer(&loaded), honest);
    let written = std::fs::metadata(&artifact)
        .expect("artifact")
        .permissions();
    assert_eq!(written.mode() & 0o077, 0, "capgate writes artifacts 0600");
}

#[test]
fn a_cache_directory_others_can_write_is_refused_and_a_new_one_is_private() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let fresh = tmp.path().join("made-by-capgate");
    PluginDir::open(wasm_dir())
        .and_then(|d| d.with_cache(&fresh))
        .expect("a new cache");
    let made = std::fs::metadata(&fresh).expect("created").permissions();
    assert_eq!(made.mode() & 0o777, 0o700, "capgate creates its cache 0700");

    for mode in [0o770, 0o777, 0o702] {
        let shared = tmp.path().join(format!("shared-{mode:o}"));
        std::fs::create_dir(&shared).expect("mkdir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let err = PluginDir::open(wasm_dir())
            .and_then(|d| d.with_cache(&shared))
            .expect_err("a cache others can write is refused");
        assert!(
            matches!(&err, LoadError::UntrustedCache { reason, .. } if reason.contains("writable by group or others")),
            "{mode:o}: {err}"
        );
    }
}
