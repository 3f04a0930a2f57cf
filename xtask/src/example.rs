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
    let text = load_text(root, "capgate-load.db")?;
    write(root, "capgate.load.toml", &text)
}

/// What `cargo xtask soak` serves, `capgate.soak.toml`: the load deployment (rate limits
/// off) on its own `capgate-soak.db`, plus three capabilities each guarded by a hostile test
/// policy (plugins/testing: one spins until its fuel runs out, one panics, one allocates
/// until the memory cap stops it), so the soak sends calls that must fail closed with
/// `POLICY_ERROR` and checks the host stays healthy while they do.
pub fn render_soak(root: &Path) -> anyhow::Result<PathBuf> {
    let mut text = load_text(root, "capgate-soak.db")?;
    text.push_str(&fill(
        root,
        SOAK_HOSTILE,
        "xtask/src/example.rs (SOAK_HOSTILE)",
    )?);
    write(root, "capgate.soak.toml", &text)
}

/// The hostile capabilities of the soak deployment (appended to the load deployment).
/// Each hostile plugin gets a small fuel/memory budget so a hostile call costs the server a
/// few milliseconds, not the 50 M instructions of the default.
pub const SOAK_HOSTILE: &str = r#"
# ---- soak only: hostile policies (`cargo xtask soak`), every call to these must fail closed

[plugins.hostile-spin]
path = "hostile_infinite_loop.wasm"
sha256 = "@sha256:hostile_infinite_loop.wasm@"
fuel = 2000000
timeoutMs = 1000

[plugins.hostile-panic]
path = "hostile_panic.wasm"
sha256 = "@sha256:hostile_panic.wasm@"

[plugins.hostile-memory]
path = "hostile_memory_bomb.wasm"
sha256 = "@sha256:hostile_memory_bomb.wasm@"
memoryMb = 8

[policies.hostileSpin]
plugin = "hostile-spin"

[policies.hostilePanic]
plugin = "hostile-panic"

[policies.hostileMemory]
plugin = "hostile-memory"

[[capabilities]]
id = "soak.spin"
description = "Soak only: guarded by a policy that never returns (stopped by fuel)."
expose = { aiSdk = true }
sideEffect = "read"
risk = "low"
inputSchema = { type = "object" }
policies = ["hostileSpin"]
procedure = { plugin = "support-desk" }

[[capabilities]]
id = "soak.panic"
description = "Soak only: guarded by a policy that panics (a trap)."
expose = { aiSdk = true }
sideEffect = "read"
risk = "low"
inputSchema = { type = "object" }
policies = ["hostilePanic"]
procedure = { plugin = "support-desk" }

[[capabilities]]
id = "soak.memory"
description = "Soak only: guarded by a policy that allocates until the memory cap stops it."
expose = { aiSdk = true }
sideEffect = "read"
risk = "low"
inputSchema = { type = "object" }
policies = ["hostileMemory"]
procedure = { plugin = "support-desk" }
"#;

/// The example with the rate limits off and the store at `db`.
fn load_text(root: &Path, db: &str) -> anyhow::Result<String> {
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
            out.push_str(&format!("url = \"sqlite://{db}\"\n"));
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
    Ok(out)
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
    let template = root.join("examples/customer-support/capgate.template.toml");
    let text = std::fs::read_to_string(&template)
        .with_context(|| format!("reading {}", template.display()))?;
    fill(root, &text, &template.display().to_string())
}

/// `text` with every `@sha256:FILE@` and `@keyhash:KEY@` filled in (any other `@kind:value@`
/// is an error, an `@` of anything else is text); `origin` names it in errors.
fn fill(root: &Path, text: &str, origin: &str) -> anyhow::Result<String> {
    let plugins = root.join("plugins/target/wasm32-wasip2/release");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('@') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find('@') else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let token = &after[..end];
        // A placeholder is `@kind:value@` without spaces; any other `@` (a Cedar
        // annotation such as `@stance("hide")`) is text.
        if !token.contains(':') || token.contains(char::is_whitespace) || token.contains('"') {
            out.push('@');
            rest = after;
            continue;
        }
        if let Some(file) = token.strip_prefix("sha256:") {
            let path = plugins.join(file);
            let bytes = std::fs::read(&path).with_context(|| {
                format!("{}: run `cargo xtask build-plugins` first", path.display())
            })?;
            out.push_str(&hex::encode(Sha256::digest(&bytes)));
        } else if let Some(key) = token.strip_prefix("keyhash:") {
            out.push_str(&hex::encode(Sha256::digest(key.as_bytes())));
        } else {
            bail!("{origin}: unknown placeholder `@{token}@`");
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The environment variable the packaged example reads Dana's agent key hash from.
pub const DANA_KEY_ENV: &str = "CAPGATE_DANA_KEY_SHA256";

/// The example as `cargo xtask dist` and `cargo xtask image` ship it, in `etc/capgate/` of
/// the archive and `/etc/capgate/` of the image: the rendered deployment with its plugins in
/// `plugins/` beside it, everything it writes in `../../var/lib/capgate` (the archive's
/// `var/lib/capgate`, the image's state volume `/var/lib/capgate`), so the configuration
/// directory can be read-only, and Dana's agent key (`dana-dev-key`) read from the
/// environment variable [`DANA_KEY_ENV`] as a secret of a real deployment would be.
pub fn packaged(root: &Path) -> anyhow::Result<String> {
    let text = rendered(root)?;
    let dana = format!(
        "sha256 = \"{}\"",
        hex::encode(Sha256::digest(b"dana-dev-key"))
    );
    let mut out = String::new();
    let (mut plugin_dir, mut runtime, mut key, mut dropped) = (0, 0, 0, 0);
    // The other development keys' hashes are public (their keys are in the repository):
    // an image listening on every interface must not accept them, so their tables are
    // left out of the packaged example (issue 55).
    let text = without_public_keys(&text, &dana, &mut dropped);
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        // The header goes below a `#:schema` directive, which editors read on line 1 only.
        if i == 0 && !trimmed.starts_with("#:schema") {
            out.push_str(PACKAGED_HEADER);
        }
        if trimmed.starts_with("pluginDir = ") {
            out.push_str("pluginDir = \"plugins\"\n");
            plugin_dir += 1;
            continue;
        }
        if trimmed == dana {
            out.push_str(&format!(
                "# Read from the environment when the file is loaded: `export {DANA_KEY_ENV}=$(printf %s dana-dev-key | capgate keys hash)`.\nsha256 = {{ env = \"{DANA_KEY_ENV}\" }}\n"
            ));
            key += 1;
            continue;
        }
        out.push_str(line);
        out.push('\n');
        if i == 0 && trimmed.starts_with("#:schema") {
            out.push_str(PACKAGED_HEADER);
        }
        if trimmed == "[runtime]" {
            out.push_str(
                "# Everything capgate writes (the compile cache, the SQLite store) goes to the state\n# directory: the archive's var/lib/capgate, the image's volume /var/lib/capgate. This\n# directory itself may be read-only.\nstateDir = \"../../var/lib/capgate\"\n",
            );
            runtime += 1;
        }
    }
    if dropped == 0 {
        bail!(
            "examples/customer-support/capgate.template.toml: no development key other than Dana's was found to leave out; update xtask/src/example.rs (packaged) with the template"
        );
    }
    if (plugin_dir, runtime, key) != (1, 1, 1) {
        bail!(
            "examples/customer-support/capgate.template.toml: expected one `pluginDir`, one [runtime] table and Dana's `@keyhash:dana-dev-key@` (found {plugin_dir}, {runtime}, {key}); update xtask/src/example.rs (packaged) with the template"
        );
    }
    Ok(out)
}

/// `text` without the `[[gateway.apiKeys]]` tables whose key hash is not `keep` (each such
/// table, from its header to the first blank line, becomes one comment line); `dropped`
/// counts them.
fn without_public_keys(text: &str, keep: &str, dropped: &mut usize) -> String {
    let mut out = String::new();
    let mut table: Vec<&str> = Vec::new();
    let mut in_table = false;
    let flush = |table: &mut Vec<&str>, out: &mut String, dropped: &mut usize| {
        if table.iter().any(|l| l.trim() == keep) {
            for l in table.iter() {
                out.push_str(l);
                out.push('\n');
            }
        } else if !table.is_empty() {
            *dropped += 1;
            out.push_str(
                "# (a development key whose hash is public was left out of the packaged example)\n",
            );
        }
        table.clear();
    };
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed == "[[gateway.apiKeys]]" {
            flush(&mut table, &mut out, dropped);
            in_table = true;
            table.push(line);
            continue;
        }
        if in_table && (trimmed.is_empty() || trimmed.starts_with('[')) {
            flush(&mut table, &mut out, dropped);
            in_table = false;
        }
        if in_table {
            table.push(line);
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    flush(&mut table, &mut out, dropped);
    out
}

/// What the packaged example says about itself, above the template's own comments.
const PACKAGED_HEADER: &str = "\
# The customer-support example as packaged by `cargo xtask dist` (etc/capgate/ of the archive)
# and `cargo xtask image` (/etc/capgate/ of the image). Differences from
# examples/customer-support/capgate.template.toml: the plugins are in plugins/ beside this
# file, runtime.stateDir points outside this directory, Dana's agent key is a secret from
# the environment (CAPGATE_DANA_KEY_SHA256), and the template's other development keys
# (Priya, Eve, the console and workflow keys), whose hashes are public, are left out: the
# image listens on every interface. Add your own keys (hashes from the environment) in a
# configuration of your own.
#
";

/// The plugin files the rendered example names (`path = \"…\"` under `[plugins.*]`).
pub fn plugin_files(text: &str) -> Vec<String> {
    let mut files = Vec::new();
    let mut in_plugin = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            in_plugin = trimmed.starts_with("[plugins.");
        }
        if in_plugin
            && let Some(rest) = trimmed.strip_prefix("path = \"")
            && let Some(file) = rest.strip_suffix('"')
        {
            files.push(file.to_string());
        }
    }
    files
}

#[cfg(test)]
mod tests {
    /// The plugin files are read from `[plugins.*]` tables only.
    #[test]
    fn plugin_files_are_the_plugin_tables_paths() {
        let text = "[runtime]\npluginDir = \"x\"\n[plugins.a]\npath = \"a.wasm\"\nsha256 = \"0\"\n[plugins.b]\npath = \"b.wasm\"\n[other]\npath = \"not-a-plugin.wasm\"\n";
        assert_eq!(super::plugin_files(text), ["a.wasm", "b.wasm"]);
    }

    /// Issue 55: the packaged example (the archive's, the image's, which listens on every
    /// interface) accepts none of the template's development keys whose hashes are public:
    /// only Dana's agent key, and that one from the environment.
    #[test]
    fn the_packaged_example_serves_no_public_development_key() {
        use sha2::{Digest, Sha256};
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the repository");
        let packaged = super::packaged(root).expect("the packaged example");
        for key in [
            "dana-dev-key",
            "dana-console-key",
            "priya-dev-key",
            "eve-dev-key",
            "ops-workflow-key",
        ] {
            let hash = hex::encode(Sha256::digest(key.as_bytes()));
            assert!(!packaged.contains(&hash), "{key}'s hash is served");
        }
        assert_eq!(packaged.matches("[[gateway.apiKeys]]").count(), 1);
        assert!(packaged.contains("sha256 = { env = \"CAPGATE_DANA_KEY_SHA256\" }"));
    }
}
