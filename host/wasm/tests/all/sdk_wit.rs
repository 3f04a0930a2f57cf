//! The Rust plugin SDK (`sdk/rust`, crate `capgate-plugin`) vendors the WIT contract in
//! `sdk/rust/wit/` so the published crate builds on its own; this host binds the
//! repository's `wit/`. The two must be the same files, byte for byte, or a plugin built
//! with the SDK would be compiled against a contract the host does not serve.

use capgate_testkit::paths::repo_root;
use std::collections::BTreeMap;
use std::path::Path;

/// Every file under `dir`, by its path relative to `dir`, with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries =
            std::fs::read_dir(&d).unwrap_or_else(|e| panic!("cannot read {}: {e}", d.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path
                    .strip_prefix(dir)
                    .expect("under the root")
                    .to_string_lossy()
                    .replace('\\', "/");
                let bytes = std::fs::read(&path)
                    .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
                out.insert(rel, bytes);
            }
        }
    }
    out
}

#[test]
fn the_rust_sdk_vendors_exactly_the_wit_the_host_binds() {
    let root = repo_root();
    let host = files(&root.join("wit"));
    let sdk = files(&root.join("sdk/rust/wit"));
    assert!(
        host.keys().any(|k| k == "capgate.wit"),
        "wit/capgate.wit is missing: {:?}",
        host.keys()
    );
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&sdk),
        names(&host),
        "sdk/rust/wit/ must hold the same files as wit/: run `rm -r sdk/rust/wit && cp -r wit sdk/rust/wit`"
    );
    for (name, bytes) in &host {
        assert!(
            sdk.get(name) == Some(bytes),
            "sdk/rust/wit/{name} differs from wit/{name}: run `cp wit/{name} sdk/rust/wit/{name}`"
        );
    }
}
