//! Build the shipped plugins (plugins/cel, plugins/cedar, plugins/redact) for `wasm32-wasip2` from source, in the guest
//! workspace's own target directory (shared with `cargo xtask build-plugins`, so CI builds
//! them once), and pin each by its SHA-256 for `include_bytes!`.
//!
//! Each is built in a cargo run of its own: cargo unifies features across the packages of
//! one build, and cedar turns on serde_json's `preserve_order`, which would otherwise reach
//! `cel` and `redact` too. `cargo xtask build-plugins` builds these three the same way
//! (its `BUILT_ALONE`), so the two builds share their artifacts.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

const TARGET: &str = "wasm32-wasip2";
/// (package in plugins/, file it builds)
const SHIPPED: &[(&str, &str)] = &[
    ("cel-policy", "cel_policy.wasm"),
    ("cedar-policy-plugin", "cedar_policy_plugin.wasm"),
    ("redact", "redact.wasm"),
];

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest.join("../..");
    let plugins = root.join("plugins");
    for watched in [
        "plugins/cel",
        "plugins/cedar",
        "plugins/redact",
        "plugins/Cargo.toml",
        "plugins/Cargo.lock",
        "sdk/rust/src",
        "sdk/rust/Cargo.toml",
        "wit",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    ensure_target();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    for (package, _) in SHIPPED {
        let mut build = Command::new(&cargo);
        build.current_dir(&plugins).args([
            "build",
            "--release",
            "--locked",
            "--target",
            TARGET,
            "-p",
            package,
        ]);
        // The host build's settings must not reach the guest build: its flags are for the
        // host target, its target directory is locked by the outer cargo, and clippy's
        // wrapper would lint guest code.
        for var in [
            "RUSTFLAGS",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "RUSTC_WORKSPACE_WRAPPER",
            "CARGO_PRIMARY_PACKAGE",
        ] {
            build.env_remove(var);
        }
        let status = build
            .status()
            .unwrap_or_else(|e| panic!("cannot run `{cargo} build` in {}: {e}", plugins.display()));
        assert!(
            status.success(),
            "building the shipped plugin {package} in {} failed ({status})",
            plugins.display()
        );
    }
    let built = plugins.join("target").join(TARGET).join("release");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    for (_, file) in SHIPPED {
        let bytes = std::fs::read(built.join(file))
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", built.join(file).display()));
        let digest: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        write(&out.join(file), &bytes);
        write(&out.join(format!("{file}.sha256")), digest.as_bytes());
    }
}

fn write(path: &Path, bytes: &[u8]) {
    // Rewritten only when changed, so dependants do not rebuild for nothing.
    if std::fs::read(path).ok().as_deref() != Some(bytes) {
        std::fs::write(path, bytes)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }
}

/// Install the guest target with rustup if it is missing (as `cargo xtask build-plugins`
/// does), so a plain `cargo build` works on a fresh machine.
fn ensure_target() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let libdir = Command::new(&rustc)
        .args(["--print", "target-libdir", "--target", TARGET])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if libdir.is_some_and(|d| d.exists()) {
        return;
    }
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .status();
    assert!(
        status.as_ref().is_ok_and(|s| s.success()),
        "the {TARGET} target is missing and `rustup target add {TARGET}` failed ({status:?}); install it to build capgate's shipped plugins"
    );
}
