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

/// The compile cache every test shares (`<target>/capgate-test-cache`): plugins are compiled
/// once for the whole suite instead of once per test (a cold compile of the example's
/// plugins takes seconds; a cached load a fraction of one). capgate writes it atomically
/// (a private temporary file renamed over the entry), so concurrent tests and processes may
/// share it; the tests of the cache itself use a directory of their own.
pub fn compile_cache() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            // A test binary runs from <target>/<profile>/deps/.
            let exe = std::env::current_exe().ok()?;
            let deps = exe.parent()?;
            (deps.file_name()? == "deps").then(|| deps.parent()?.parent().map(PathBuf::from))?
        })
        .unwrap_or_else(|| repo_root().join("target"));
    let target = if target.is_relative() {
        repo_root().join(target)
    } else {
        target
    };
    target.join("capgate-test-cache")
}

/// The example deployment written into `dir` as `capgate.toml` after `edit`: its plugin
/// directory and schemas read from the repository, its compile cache the suite's shared
/// one ([`compile_cache`]), so a test serves it from anywhere without touching the
/// repository's copy.
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
            &format!("compileCache = \"{}\"", compile_cache().display()),
        )
        .replace("\"schemas/", &format!("\"{}/schemas/", here.display()));
    let path = dir.join("capgate.toml");
    std::fs::write(&path, edit(text)).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}
