//! The customer-support example's deployment file: `capgate.template.toml` with every
//! `@sha256:FILE@` replaced by the digest of the plugin just built and every `@keyhash:KEY@`
//! by the SHA-256 of a development API key.

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Render `examples/customer-support/capgate.toml`; returns its path.
pub fn render(root: &Path) -> anyhow::Result<PathBuf> {
    let text = rendered(root)?;
    write(root, "capgate.toml", &text)
}

/// `cargo xtask example-config --load`: the same deployment for `cargo xtask load`, written
/// to `capgate.load.toml` beside it, with two differences: the rate limits are off (the
/// example's 1 000 requests/s per principal would measure the limiter, not the gateway) and
/// the store is `capgate-load.db`, so a load run never fills the demo's database.
pub fn render_load(root: &Path) -> anyhow::Result<PathBuf> {
    let text = rendered(root)?;
    let mut out = String::with_capacity(text.len());
    let mut in_rate_limit = false;
    let mut limits = 0;
    let mut store = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            in_rate_limit = trimmed.starts_with("[gateway.rateLimit]");
        }
        if in_rate_limit && let Some((key, _)) = trimmed.split_once('=') {
            out.push_str(&format!("{} = 0\n", key.trim()));
            limits += 1;
            continue;
        }
        if trimmed.starts_with("url = \"sqlite://capgate.db\"") {
            out.push_str("url = \"sqlite://capgate-load.db\"\n");
            store = true;
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    if limits == 0 || !store {
        bail!(
            "examples/customer-support/capgate.template.toml: expected a [gateway.rateLimit] table and `url = \"sqlite://capgate.db\"`; update xtask/src/example.rs with the template"
        );
    }
    write(root, "capgate.load.toml", &out)
}

fn write(root: &Path, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    let target = root.join("examples/customer-support").join(name);
    std::fs::write(&target, text).with_context(|| format!("writing {}", target.display()))?;
    println!(
        "wrote {} (plugins pinned to the files just built)",
        target.display()
    );
    Ok(target)
}

/// The template with every placeholder filled in.
fn rendered(root: &Path) -> anyhow::Result<String> {
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
    Ok(out)
}
