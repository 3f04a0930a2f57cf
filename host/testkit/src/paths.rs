//! Where things are in the repository.

use std::path::PathBuf;

/// The repository's root (this crate is `host/testkit`).
pub fn repo_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.ancestors().nth(2).map(PathBuf::from).unwrap_or(here)
}

/// Where `cargo xtask build-plugins` puts the guest plugins' components.
pub fn plugin_wasm_dir() -> PathBuf {
    repo_root().join("plugins/target/wasm32-wasip2/release")
}

/// The example deployment as `cargo xtask example-config` renders it
/// (`examples/customer-support/capgate.toml`, plugins pinned).
pub fn example_config() -> PathBuf {
    let path = repo_root().join("examples/customer-support/capgate.toml");
    assert!(
        path.is_file(),
        "{} is missing: run `cargo xtask example-config` (or `cargo xtask test`) first",
        path.display()
    );
    path
}

/// The example deployment written into `dir` as `capgate.toml` after `edit`: its plugin
/// directory and schemas read from the repository, its compile cache in `dir`, so a test
/// serves it from anywhere without touching the repository's copy.
pub fn example_in(dir: &std::path::Path, edit: impl Fn(String) -> String) -> PathBuf {
    let example = example_config();
    let here = example.parent().map(PathBuf::from).unwrap_or_default();
    let text = std::fs::read_to_string(&example)
        .unwrap_or_else(|e| panic!("read {}: {e}", example.display()))
        .replace(
            "pluginDir = \"../../plugins",
            &format!("pluginDir = \"{}/../../plugins", here.display()),
        )
        .replace(
            "compileCache = \".capgate-cache\"",
            &format!("compileCache = \"{}/.capgate-cache\"", dir.display()),
        )
        .replace("\"schemas/", &format!("\"{}/schemas/", here.display()));
    let path = dir.join("capgate.toml");
    std::fs::write(&path, edit(text)).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}
