//! The software bill of materials of the `capgate` binary: a CycloneDX 1.5 JSON document
//! listing every crate the binary links (the normal dependencies of the `capgate` package,
//! transitively, on this platform, as `cargo metadata` resolves them), each with its
//! version, package URL (`pkg:cargo/NAME@VERSION`), licence and, for registry crates, the
//! SHA-256 `Cargo.lock` pins; plus the dependency graph. `cargo xtask dist` writes it into
//! the archive (`sbom.cdx.json`, covered by `SHA256SUMS`) and beside it
//! (`NAME.cdx.json`), and `cargo xtask image` into the image
//! (`/usr/share/doc/capgate/sbom.cdx.json`), where scanners (syft, trivy, grype) read it.
//!
//! Written here from `cargo metadata` rather than by `cargo cyclonedx`: the document is
//! small and fixed, and the tool would be one more crate graph for CI to build on every run.

use anyhow::{Context, bail};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// The CycloneDX document for the `capgate` package of the workspace at `root`.
pub fn capgate(root: &Path) -> anyhow::Result<Value> {
    let triple = host_triple()?;
    let out = Command::new("cargo")
        .current_dir(root)
        .args(["metadata", "--format-version", "1", "--locked"])
        .args(["--filter-platform", &triple])
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let metadata: Value = serde_json::from_slice(&out.stdout).context("cargo metadata's JSON")?;
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).context("reading Cargo.lock")?;
    build(&metadata, &checksums(&lock), "capgate")
}

/// The document for `root_name`'s package out of `cargo metadata` output.
fn build(
    metadata: &Value,
    checksums: &BTreeMap<(String, String), String>,
    root_name: &str,
) -> anyhow::Result<Value> {
    let packages: BTreeMap<&str, &Value> = metadata["packages"]
        .as_array()
        .context("metadata.packages")?
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let nodes: BTreeMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .context("metadata.resolve.nodes (cargo metadata without --no-deps)")?
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let root_id = packages
        .iter()
        .find(|(_, p)| p["name"] == root_name && p["source"].is_null())
        .map(|(id, _)| *id)
        .with_context(|| format!("no workspace package `{root_name}`"))?;
    // What the binary links: normal dependencies, transitively (build scripts and proc
    // macros run at build time; dev-dependencies never reach it).
    let mut linked: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut todo = vec![root_id];
    while let Some(id) = todo.pop() {
        if linked.contains_key(id) {
            continue;
        }
        let mut deps = BTreeSet::new();
        if let Some(node) = nodes.get(id) {
            for dep in node["deps"].as_array().into_iter().flatten() {
                let normal = dep["dep_kinds"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|k| k["kind"].is_null());
                let Some(pkg) = dep["pkg"].as_str() else {
                    continue;
                };
                let proc_macro = packages.get(pkg).is_some_and(|p| {
                    p["targets"].as_array().into_iter().flatten().any(|t| {
                        t["kind"]
                            .as_array()
                            .is_some_and(|k| k.iter().any(|k| k == "proc-macro"))
                    })
                });
                if normal && !proc_macro {
                    deps.insert(pkg);
                    todo.push(pkg);
                }
            }
        }
        linked.insert(id, deps);
    }
    let reference = |id: &str| -> anyhow::Result<String> {
        let p = packages.get(id).with_context(|| format!("package {id}"))?;
        Ok(purl(
            p["name"].as_str().unwrap_or_default(),
            p["version"].as_str().unwrap_or_default(),
        ))
    };
    let component = |id: &str, kind: &str| -> anyhow::Result<Value> {
        let p = packages.get(id).with_context(|| format!("package {id}"))?;
        let name = p["name"].as_str().unwrap_or_default();
        let version = p["version"].as_str().unwrap_or_default();
        let mut c = json!({
            "type": kind,
            "bom-ref": purl(name, version),
            "name": name,
            "version": version,
            "purl": purl(name, version),
        });
        if let Some(license) = p["license"].as_str() {
            c["licenses"] = json!([{"expression": license}]);
        }
        if let Some(description) = p["description"].as_str() {
            c["description"] = json!(description.trim());
        }
        if let Some(sum) = checksums.get(&(name.to_string(), version.to_string())) {
            c["hashes"] = json!([{"alg": "SHA-256", "content": sum}]);
        }
        if kind == "library" {
            c["scope"] = json!("required");
        }
        Ok(c)
    };
    let mut components = Vec::new();
    let mut dependencies = Vec::new();
    for (id, deps) in &linked {
        if *id != root_id {
            components.push(component(id, "library")?);
        }
        let mut depends_on = deps
            .iter()
            .map(|d| reference(d))
            .collect::<anyhow::Result<Vec<_>>>()?;
        depends_on.sort();
        depends_on.dedup();
        dependencies.push(json!({"ref": reference(id)?, "dependsOn": depends_on}));
    }
    components.sort_by(|a, b| a["bom-ref"].as_str().cmp(&b["bom-ref"].as_str()));
    dependencies.sort_by(|a, b| a["ref"].as_str().cmp(&b["ref"].as_str()));
    // The same lock file gives the same document, serial number included.
    let digest = Sha256::digest(serde_json::to_vec(&components)?);
    let hex = hex::encode(&digest[..16]);
    let serial = format!(
        "urn:uuid:{}-{}-5{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[16..20],
        &hex[20..32]
    );
    Ok(json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": serial,
        "version": 1,
        "metadata": {
            "tools": {"components": [{"type": "application", "name": "capgate xtask (cargo metadata)"}]},
            "component": component(root_id, "application")?,
        },
        "components": components,
        "dependencies": dependencies,
    }))
}

/// The package URL of a crate (`pkg:cargo/NAME@VERSION`).
fn purl(name: &str, version: &str) -> String {
    format!("pkg:cargo/{name}@{version}")
}

/// `(name, version) → checksum` of the registry packages in `Cargo.lock`.
fn checksums(lock: &str) -> BTreeMap<(String, String), String> {
    let mut out = BTreeMap::new();
    for block in lock.split("[[package]]") {
        let field = |key: &str| {
            block.lines().find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|r| r.trim().strip_prefix('='))
                    .map(|v| v.trim().trim_matches('"').to_string())
            })
        };
        if let (Some(name), Some(version), Some(sum)) =
            (field("name "), field("version "), field("checksum "))
        {
            out.insert((name, version), sum);
        }
    }
    out
}

/// This machine's target triple (`rustc -vV`'s `host:`).
fn host_triple() -> anyhow::Result<String> {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .context("running rustc -vV")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .context("rustc -vV names no host")
}

/// The crate names an SBOM lists (what the checks assert on).
pub fn crate_names(bom: &Value) -> BTreeSet<String> {
    bom["components"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_files_checksums_are_read_per_name_and_version() {
        let lock = "version = 4\n\n[[package]]\nname = \"a\"\nversion = \"1.0.0\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"abc\"\n\n[[package]]\nname = \"b\"\nversion = \"0.1.0\"\n";
        let sums = checksums(lock);
        assert_eq!(
            sums.get(&("a".into(), "1.0.0".into())).map(String::as_str),
            Some("abc")
        );
        assert_eq!(sums.len(), 1, "a path package has no checksum");
    }

    /// The binary's BOM lists what it links (the engine, the database driver, the
    /// runtime), not what only builds or tests it.
    #[test]
    fn the_bom_lists_the_linked_crates_and_not_the_dev_ones() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let bom = capgate(&root).expect("the SBOM");
        let names = crate_names(&bom);
        for linked in [
            "wasmtime",
            "sqlx-core",
            "tokio",
            "axum",
            "capgate-core",
            "serde_json",
        ] {
            assert!(names.contains(linked), "{linked} is missing");
        }
        for not_linked in [
            "capgate",
            "capgate-testkit",
            "criterion",
            "xtask",
            "thiserror-impl",
        ] {
            assert!(!names.contains(not_linked), "{not_linked} is listed");
        }
        let wasmtime = bom["components"]
            .as_array()
            .expect("components")
            .iter()
            .find(|c| c["name"] == "wasmtime")
            .expect("wasmtime");
        assert!(
            wasmtime["purl"]
                .as_str()
                .expect("purl")
                .starts_with("pkg:cargo/wasmtime@")
        );
        assert_eq!(wasmtime["hashes"][0]["alg"], "SHA-256");
        assert_eq!(bom["metadata"]["component"]["name"], "capgate");
    }
}
