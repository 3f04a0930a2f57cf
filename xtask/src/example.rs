//! The customer-support example's deployment file: `capgate.template.toml` with every
//! `@sha256:FILE@` replaced by the digest of the plugin just built and every `@keyhash:KEY@`
//! by the SHA-256 of a development API key.

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Render `examples/customer-support/capgate.toml`; returns its path.
pub fn render(root: &Path) -> anyhow::Result<PathBuf> {
    let dir = root.join("examples/customer-support");
    let template = dir.join("capgate.template.toml");
    let text = std::fs::read_to_string(&template)
        .with_context(|| format!("reading {}", template.display()))?;
    let plugins = root.join("plugins/target/wasm32-wasip2/release");
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(start) = rest.find('@') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find('@') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let token = &after[..end];
        if let Some(file) = token.strip_prefix("sha256:") {
            let path = plugins.join(file);
            let bytes = std::fs::read(&path).with_context(|| {
                format!("{}: run `cargo xtask build-plugins` first", path.display())
            })?;
            out.push_str(&hex::encode(Sha256::digest(&bytes)));
        } else if let Some(key) = token.strip_prefix("keyhash:") {
            out.push_str(&hex::encode(Sha256::digest(key.as_bytes())));
        } else {
            bail!("{}: unknown placeholder `@{token}@`", template.display());
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    let target = dir.join("capgate.toml");
    std::fs::write(&target, out).with_context(|| format!("writing {}", target.display()))?;
    println!(
        "wrote {} (plugins pinned to the files just built)",
        target.display()
    );
    Ok(target)
}
