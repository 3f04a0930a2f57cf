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
