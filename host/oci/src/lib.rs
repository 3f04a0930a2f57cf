//! Plugins from an OCI registry: `path = "oci://REGISTRY/REPOSITORY@sha256:HEX"`.
//!
//! The digest names the artifact's **manifest** (the OCI convention, what `docker`,
//! `crane` and `wkg` print). capgate fetches that manifest, checks that its SHA-256 is the
//! digest, takes its one Wasm layer (`application/wasm`), fetches that blob and checks its
//! SHA-256 against the layer digest the manifest names — so the configured digest pins the
//! Wasm bytes transitively. A plugin's `sha256`, optional here, must then be the digest of
//! the Wasm bytes (the layer digest), as for a local file.
//!
//! Both are cached under the configured cache directory ([`Settings::cache`]) by digest (content-addressed, each file
//! written to a temporary name and renamed into place) and re-verified on every start; a
//! start with everything cached needs no registry. Signatures: see [`sign`].

pub mod auth;
pub mod bundle;
mod reference;
pub mod registry;
pub mod sign;

pub use reference::{Reference, is_oci, plugin_reference};

use base64::Engine;
use capgate_core::digest::Sha256Hex;
pub(crate) use capgate_core::digest::sha256_hex;
use registry::Registry;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The scheme of a plugin path that names a registry artifact.
pub const SCHEME: &str = "oci://";
/// The OCI image manifest media type (what is pushed and accepted).
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The OCI image index media type: refused with a hint (a plugin is one artifact).
pub(crate) const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// The config media type of a Wasm component artifact (CNCF TAG Runtime's Wasm OCI
/// artifact layout, as wasm-pkg-tools writes it).
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The layer media type of a Wasm component.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The older layer media type of wasm-to-oci, accepted on pull.
const LEGACY_WASM_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// The largest manifest read.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 10;
/// The largest Wasm component fetched or pushed (a componentize-py plugin is tens of MiB).
pub const MAX_PLUGIN_BYTES: u64 = 128 << 20;

/// Why a registry plugin could not be fetched, verified or pushed.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// Not an `oci://` reference capgate takes.
    #[error("`{reference}`: {reason}")]
    Reference {
        /// What was given.
        reference: String,
        /// What is wrong.
        reason: String,
    },
    /// The registry could not be reached or answered with an error.
    #[error("registry {host}: {message}")]
    Registry {
        /// The registry host.
        host: String,
        /// What happened.
        message: String,
    },
    /// The registry has no manifest with that digest.
    #[error(
        "the registry has no manifest {digest} in {repository} (wrong digest, or not pushed there)"
    )]
    NotFound {
        /// The repository.
        repository: String,
        /// The digest asked for.
        digest: String,
    },
    /// More bytes than allowed.
    #[error("{what} is larger than {limit} bytes; refusing it")]
    TooLarge {
        /// What.
        what: String,
        /// The bound.
        limit: u64,
    },
    /// Fetched bytes whose SHA-256 is not the digest that named them.
    #[error(
        "{what} has digest sha256:{actual}, not the sha256:{expected} that names it; refusing it"
    )]
    DigestMismatch {
        /// What.
        what: String,
        /// The naming digest (hex).
        expected: String,
        /// The bytes' digest (hex).
        actual: String,
    },
    /// The manifest is not a Wasm artifact capgate can load.
    #[error("not a Wasm plugin artifact: {0}")]
    Artifact(String),
    /// Credentials were misconfigured.
    #[error("registry credentials: {0}")]
    Credentials(String),
    /// The cache directory could not be written.
    #[error("the OCI cache {path}: {source}")]
    Cache {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The signature policy refused the artifact.
    #[error("{0}")]
    Signature(String),
    /// The plugin's `sha256` pin is not the digest of the artifact's Wasm bytes.
    #[error(
        "pinned to sha256 {pin}, but the artifact's Wasm layer has sha256 {actual}; refusing it"
    )]
    Pin {
        /// The configured pin.
        pin: String,
        /// The layer digest (hex).
        actual: String,
    },
}

/// What the OCI settings of a deployment resolve to.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The cache directory.
    pub cache: PathBuf,
    /// Plain-HTTP registries besides loopback.
    pub insecure: Vec<String>,
    /// Accepted signers.
    pub keys: Vec<sign::PublicKey>,
    /// `requireSignature`: every plugin needs a valid signature, local plugin files (which
    /// cannot carry one) are refused. Registry plugins need one whenever `keys` is not
    /// empty, whatever this says: a configured signer is never advisory.
    pub require: bool,
}

/// A verified plugin artifact in the cache.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The directory holding the Wasm file.
    pub dir: PathBuf,
    /// The Wasm file's name in it.
    pub file: String,
    /// The Wasm bytes' SHA-256 (hex): the layer digest.
    pub wasm_sha256: String,
    /// Whether anything came from the registry now (else all from the cache).
    pub downloaded: bool,
    /// The key whose signature was verified, if any.
    pub signed_by: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    schema_version: u32,
    #[serde(default)]
    media_type: Option<String>,
    layers: Vec<Descriptor>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

pub(crate) fn digest_hex(d: &str) -> Result<String, OciError> {
    d.strip_prefix("sha256:")
        .map(str::to_ascii_lowercase)
        .filter(|h| Sha256Hex::is_valid(h))
        .ok_or_else(|| OciError::Artifact(format!("`{d}` is not a sha256 digest")))
}

pub(crate) fn verify_digest(what: &str, bytes: &[u8], expected: &str) -> Result<(), OciError> {
    let actual = sha256_hex(bytes);
    if actual == expected {
        Ok(())
    } else {
        Err(OciError::DigestMismatch {
            what: what.to_string(),
            expected: expected.to_string(),
            actual,
        })
    }
}

/// The Wasm layer of a plugin manifest: (layer digest hex, size).
fn wasm_layer(bytes: &[u8]) -> Result<(String, u64), OciError> {
    let m: Manifest = serde_json::from_slice(bytes).map_err(|e| {
        OciError::Artifact(format!("the manifest is not an OCI image manifest: {e}"))
    })?;
    if m.schema_version != 2 {
        return Err(OciError::Artifact(format!(
            "manifest schemaVersion {} (expected 2)",
            m.schema_version
        )));
    }
    match m.media_type.as_deref() {
        None | Some(MANIFEST_MEDIA_TYPE) => {}
        Some(INDEX_MEDIA_TYPE) => {
            return Err(OciError::Artifact(
                "the digest names an image index; use the digest of the Wasm artifact's manifest"
                    .into(),
            ));
        }
        Some(other) => {
            return Err(OciError::Artifact(format!(
                "manifest media type `{other}` (expected {MANIFEST_MEDIA_TYPE})"
            )));
        }
    }
    let wasm: Vec<&Descriptor> = m
        .layers
        .iter()
        .filter(|l| {
            l.media_type == WASM_LAYER_MEDIA_TYPE || l.media_type == LEGACY_WASM_LAYER_MEDIA_TYPE
        })
        .collect();
    let [layer] = wasm.as_slice() else {
        return Err(OciError::Artifact(format!(
            "expected exactly one `{WASM_LAYER_MEDIA_TYPE}` layer, found {} (layers: {})",
            wasm.len(),
            m.layers
                .iter()
                .map(|l| l.media_type.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    if layer.size > MAX_PLUGIN_BYTES {
        return Err(OciError::TooLarge {
            what: "the Wasm layer".into(),
            limit: MAX_PLUGIN_BYTES,
        });
    }
    Ok((digest_hex(&layer.digest)?, layer.size))
}

/// The cache's files.
struct Cache {
    root: PathBuf,
}

impl Cache {
    fn manifest(&self, hex: &str) -> PathBuf {
        self.root
            .join("manifests")
            .join(format!("sha256-{hex}.json"))
    }
    fn blobs(&self) -> PathBuf {
        self.root.join("blobs")
    }
    fn blob_name(hex: &str) -> String {
        format!("sha256-{hex}.wasm")
    }
    /// The verified signatures of `hex` found in `repository` (`registry/repo`): keyed by
    /// both, as a signature is looked up in the artifact's own repository.
    fn signatures(&self, repository: &str, hex: &str) -> PathBuf {
        let repo = &sha256_hex(repository.as_bytes())[..16];
        self.root
            .join("signatures")
            .join(repo)
            .join(format!("sha256-{hex}.json"))
    }

    /// A cached file, at most `limit` bytes; `None` when absent (or unreadable: the
    /// registry is asked again).
    fn read(path: &Path, limit: u64) -> Option<Vec<u8>> {
        use std::io::Read;
        let f = std::fs::File::open(path).ok()?;
        let mut buf = Vec::new();
        f.take(limit + 1).read_to_end(&mut buf).ok()?;
        (buf.len() as u64 <= limit).then_some(buf)
    }

    /// Write a file atomically: a temporary name in the same directory, then rename.
    fn write(path: &Path, bytes: &[u8]) -> Result<(), OciError> {
        use std::io::Write;
        let err = |source| OciError::Cache {
            path: path.to_path_buf(),
            source,
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(err)?;
        let tmp = dir.join(format!(
            ".{}.tmp{}-{}",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ));
        let written = std::fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
            .and_then(|()| std::fs::rename(&tmp, path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.map_err(err)
    }
}

/// Fetch (or find in the cache) and verify the plugin artifact `r` names, check the
/// plugin's `pin` of its Wasm bytes (if any), then apply the signature policy. Blocking:
/// the registry is asked on a thread of its own, so this works inside or outside an async
/// runtime. Call it at startup only.
pub fn fetch(r: &Reference, settings: &Settings, pin: Option<&str>) -> Result<Fetched, OciError> {
    let Some(manifest_hex) = r.digest.clone() else {
        return Err(OciError::Reference {
            reference: format!("{SCHEME}{}", r.name()),
            reason: "no digest".into(),
        });
    };
    let cache = Cache {
        root: settings.cache.clone(),
    };
    // The artifact: from the cache when both files are there and verify.
    let cached = Cache::read(&cache.manifest(&manifest_hex), MAX_MANIFEST_BYTES)
        .filter(|m| sha256_hex(m) == manifest_hex)
        .and_then(|m| wasm_layer(&m).ok())
        .filter(|(layer, _)| {
            Cache::read(
                &cache.blobs().join(Cache::blob_name(layer)),
                MAX_PLUGIN_BYTES,
            )
            .is_some_and(|b| sha256_hex(&b) == *layer)
        });
    let mut downloaded = false;
    let layer_hex = match cached {
        Some((layer, _)) => layer,
        None => {
            downloaded = true;
            let (manifest, layer, wasm) = on_thread(pull_artifact(r, &manifest_hex, settings))?;
            // Blob first: a cached manifest is only trusted with its blob beside it.
            Cache::write(&cache.blobs().join(Cache::blob_name(&layer)), &wasm)?;
            Cache::write(&cache.manifest(&manifest_hex), &manifest)?;
            layer
        }
    };
    if let Some(pin) = pin
        && !pin.eq_ignore_ascii_case(&layer_hex)
    {
        return Err(OciError::Pin {
            pin: pin.to_string(),
            actual: layer_hex,
        });
    }
    // No key listed: unsigned plugins load (pinned by digest); any key listed: a valid
    // signature by one is required.
    let signed_by = if settings.keys.is_empty() {
        if settings.require {
            return Err(OciError::Signature(
                "runtime.oci.requireSignature is set but runtime.oci.publicKeys lists no key"
                    .into(),
            ));
        }
        None
    } else {
        Some(signature(
            r,
            &manifest_hex,
            settings,
            &cache,
            &mut downloaded,
        )?)
    };
    Ok(Fetched {
        dir: cache.blobs(),
        file: Cache::blob_name(&layer_hex),
        wasm_sha256: layer_hex,
        downloaded,
        signed_by,
    })
}

/// The signature check of one artifact when `publicKeys` lists a key: the signer's name, or
/// a refusal (unsigned, signatures unreachable, none valid). A configured signer is never
/// advisory, whether or not `requireSignature` is set.
fn signature(
    r: &Reference,
    manifest_hex: &str,
    settings: &Settings,
    cache: &Cache,
    downloaded: &mut bool,
) -> Result<String, OciError> {
    let digest = format!("sha256:{manifest_hex}");
    let path = cache.signatures(&r.name(), manifest_hex);
    if let Some(bytes) = Cache::read(&path, 1 << 20)
        && let Ok(cands) = serde_json::from_slice::<Vec<sign::Candidate>>(&bytes)
        && let Some(k) = sign::verify(&cands, &settings.keys, &digest)
    {
        return Ok(k.name.clone());
    }
    let fetched = on_thread(pull_signatures(r, manifest_hex, settings));
    *downloaded = true;
    let candidates = match fetched {
        Ok(c) => c,
        Err(e) => {
            return Err(OciError::Signature(format!(
                "runtime.oci.publicKeys is set, so a registry plugin must be signed, and the signatures of {} could not be fetched: {e}",
                r.pinned(manifest_hex)
            )));
        }
    };
    if candidates.is_empty() {
        return Err(OciError::Signature(format!(
            "{} is not signed (no {} and no Sigstore bundle referring to it in {}), and runtime.oci.publicKeys is set, so a registry plugin must be; sign it with `capgate plugin push --sign-key KEY` or `cosign sign --key`",
            r.pinned(manifest_hex),
            sign::tag(manifest_hex),
            r.name()
        )));
    }
    match sign::verify(&candidates, &settings.keys, &digest) {
        Some(k) => {
            let json = serde_json::to_vec(&candidates).unwrap_or_default();
            Cache::write(&path, &json)?;
            Ok(k.name.clone())
        }
        None => Err(OciError::Signature(format!(
            "{} has {} signature(s), none valid for this digest under a key of runtime.oci.publicKeys ({}); refusing it",
            r.pinned(manifest_hex),
            candidates.len(),
            settings
                .keys
                .iter()
                .map(|k| k.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Run a future to completion on a thread with a runtime of its own.
fn on_thread<T: Send>(
    f: impl std::future::Future<Output = Result<T, OciError>> + Send,
) -> Result<T, OciError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| OciError::Registry {
                    host: String::new(),
                    message: format!("cannot start the async runtime: {e}"),
                })?;
            rt.block_on(f)
        })
        .join()
        .unwrap_or_else(|_| {
            Err(OciError::Registry {
                host: String::new(),
                message: "the registry client panicked".into(),
            })
        })
    })
}

fn client(r: &Reference, settings_insecure: &[String]) -> Result<Registry, OciError> {
    Registry::new(
        &r.registry,
        settings_insecure,
        auth::credentials_for(&r.registry)?,
    )
}

/// Manifest bytes, layer digest and Wasm bytes, all verified.
async fn pull_artifact(
    r: &Reference,
    manifest_hex: &str,
    settings: &Settings,
) -> Result<(Vec<u8>, String, Vec<u8>), OciError> {
    let reg = client(r, &settings.insecure)?;
    let digest = format!("sha256:{manifest_hex}");
    let manifest = reg
        .manifest(
            &r.repository,
            &digest,
            &format!("{MANIFEST_MEDIA_TYPE}, {INDEX_MEDIA_TYPE}"),
            MAX_MANIFEST_BYTES,
        )
        .await?
        .ok_or_else(|| OciError::NotFound {
            repository: r.name(),
            digest: digest.clone(),
        })?;
    verify_digest("the manifest", &manifest, manifest_hex)?;
    let (layer, size) = wasm_layer(&manifest)?;
    let wasm = reg
        .blob(&r.repository, &format!("sha256:{layer}"), size)
        .await?;
    verify_digest("the Wasm layer", &wasm, &layer)?;
    Ok((manifest, layer, wasm))
}

/// The signature candidates of an artifact: cosign's legacy layout under
/// `sha256-HEX.sig`, then the Sigstore bundles referring to it (cosign 3's default).
async fn pull_signatures(
    r: &Reference,
    manifest_hex: &str,
    settings: &Settings,
) -> Result<Vec<sign::Candidate>, OciError> {
    let reg = client(r, &settings.insecure)?;
    let mut out = pull_legacy(&reg, r, manifest_hex).await?;
    out.extend(bundle::pull(&reg, r, manifest_hex).await?);
    Ok(out)
}

/// The candidates under `sha256-HEX.sig` (none when the tag does not exist).
async fn pull_legacy(
    reg: &Registry,
    r: &Reference,
    manifest_hex: &str,
) -> Result<Vec<sign::Candidate>, OciError> {
    let Some(bytes) = reg
        .manifest(
            &r.repository,
            &sign::tag(manifest_hex),
            MANIFEST_MEDIA_TYPE,
            MAX_MANIFEST_BYTES,
        )
        .await?
    else {
        return Ok(Vec::new());
    };
    let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| {
        OciError::Signature(format!(
            "the signature manifest is not an OCI manifest: {e}"
        ))
    })?;
    let mut out = Vec::new();
    for l in m
        .layers
        .iter()
        .filter(|l| l.media_type == sign::PAYLOAD_MEDIA_TYPE)
        .take(sign::MAX_SIGNATURES)
    {
        if let Some(e) = sign::check_layer(&l.media_type, l.size) {
            return Err(e);
        }
        let Some(sig) = l.annotations.get(sign::SIGNATURE_ANNOTATION) else {
            continue;
        };
        let hex = digest_hex(&l.digest)?;
        let payload = reg.blob(&r.repository, &l.digest, l.size).await?;
        verify_digest("a signature payload", &payload, &hex)?;
        out.push(sign::Candidate {
            payload: base64::engine::general_purpose::STANDARD.encode(&payload),
            signature: sig.clone(),
            payload_type: None,
        });
    }
    Ok(out)
}

/// What `capgate plugin push` did.
#[derive(Debug)]
pub struct Pushed {
    /// `oci://registry/repository@sha256:MANIFEST`, for the configuration.
    pub reference: String,
    /// The Wasm bytes' SHA-256 (the layer digest; a plugin's optional `sha256`).
    pub wasm_sha256: String,
    /// Whether a signature was pushed.
    pub signed: bool,
}

/// The OCI image manifest of a Wasm plugin (config and one layer), deterministic for the
/// same bytes so pushing a file twice gives the same digest.
fn plugin_manifest(config: &[u8], wasm: &[u8]) -> Vec<u8> {
    serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": WASM_CONFIG_MEDIA_TYPE,
            "digest": format!("sha256:{}", sha256_hex(config)),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": WASM_LAYER_MEDIA_TYPE,
            "digest": format!("sha256:{}", sha256_hex(wasm)),
            "size": wasm.len(),
        }],
    })
    .to_string()
    .into_bytes()
}

/// Push a Wasm component to `target` (`oci://REGISTRY/REPO[:TAG]`), signing it with
/// `sign_key` when given, in the `format`s asked for.
pub async fn push(
    wasm: &[u8],
    target: &str,
    insecure: &[String],
    sign_key: Option<&sign::SigningKey>,
    format: sign::SignatureFormat,
) -> Result<Pushed, OciError> {
    let r = Reference::parse(target)?;
    if r.digest.is_some() {
        return Err(OciError::Reference {
            reference: target.to_string(),
            reason: "push to a tag (oci://REGISTRY/REPO:TAG) or to the repository alone; the digest is computed".into(),
        });
    }
    if wasm.len() as u64 > MAX_PLUGIN_BYTES {
        return Err(OciError::TooLarge {
            what: "the plugin file".into(),
            limit: MAX_PLUGIN_BYTES,
        });
    }
    if !wasm.starts_with(b"\0asm") {
        return Err(OciError::Artifact(
            "the file is not WebAssembly (no \\0asm header)".into(),
        ));
    }
    let wasm_hex = sha256_hex(wasm);
    let config = serde_json::json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [format!("sha256:{wasm_hex}")],
    })
    .to_string()
    .into_bytes();
    let manifest = plugin_manifest(&config, wasm);
    let manifest_hex = sha256_hex(&manifest);
    let reg = client(&r, insecure)?;
    reg.upload_missing(&r.repository, &[&config[..], wasm])
        .await?;
    let at = r
        .tag
        .clone()
        .unwrap_or_else(|| format!("sha256:{manifest_hex}"));
    reg.put_manifest(&r.repository, &at, MANIFEST_MEDIA_TYPE, &manifest)
        .await?;
    if let Some(key) = sign_key {
        if format.simple_signing() {
            push_signature(&reg, &r, &manifest_hex, key).await?;
        }
        if format.bundle() {
            bundle::push(&reg, &r, &manifest_hex, manifest.len(), key).await?;
        }
    }
    Ok(Pushed {
        reference: r.pinned(&manifest_hex),
        wasm_sha256: wasm_hex,
        signed: sign_key.is_some(),
    })
}

/// Add a signature under `sha256-HEX.sig`, keeping the signatures already there.
async fn push_signature(
    reg: &Registry,
    r: &Reference,
    manifest_hex: &str,
    key: &sign::SigningKey,
) -> Result<(), OciError> {
    let payload = sign::payload(&r.name(), &format!("sha256:{manifest_hex}"));
    let payload_digest = format!("sha256:{}", sha256_hex(&payload));
    let tag = sign::tag(manifest_hex);
    let mut layers: Vec<serde_json::Value> = match reg
        .manifest(&r.repository, &tag, MANIFEST_MEDIA_TYPE, MAX_MANIFEST_BYTES)
        .await?
    {
        Some(b) => serde_json::from_slice::<serde_json::Value>(&b)
            .ok()
            .and_then(|v| v.get("layers").and_then(|l| l.as_array()).cloned())
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let signature = sign::sign(key, &payload);
    layers.retain(|l| {
        l["digest"] != payload_digest.as_str()
            || l["annotations"][sign::SIGNATURE_ANNOTATION] != signature.as_str()
    });
    layers.push(serde_json::json!({
        "mediaType": sign::PAYLOAD_MEDIA_TYPE,
        "digest": payload_digest,
        "size": payload.len(),
        "annotations": {sign::SIGNATURE_ANNOTATION: signature},
    }));
    let diff_ids: Vec<&serde_json::Value> = layers.iter().map(|l| &l["digest"]).collect();
    let config = serde_json::json!({
        "architecture": "",
        "os": "",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    })
    .to_string()
    .into_bytes();
    reg.upload_missing(&r.repository, &[&config[..], &payload[..]])
        .await?;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": sign::SIGNATURE_CONFIG_MEDIA_TYPE,
            "digest": format!("sha256:{}", sha256_hex(&config)),
            "size": config.len(),
        },
        "layers": layers,
    })
    .to_string()
    .into_bytes();
    reg.put_manifest(&r.repository, &tag, MANIFEST_MEDIA_TYPE, &manifest)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_splits_into_registry_repository_tag_and_digest() {
        let hex = "ab".repeat(32);
        let r = Reference::parse(&format!(
            "oci://127.0.0.1:5000/team/refund-limit:v1@sha256:{hex}"
        ))
        .expect("parses");
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "team/refund-limit");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.digest.as_deref(), Some(hex.as_str()));
        let r = Reference::parse("oci://localhost:5000/a").expect("parses");
        assert_eq!((r.tag, r.digest), (None, None));
    }

    #[test]
    fn a_plugin_reference_without_a_digest_is_refused_with_the_pinned_form() {
        let e = plugin_reference("oci://r.example/plugins/refund-limit:latest")
            .expect_err("a tag alone");
        assert!(e.contains("names no digest"), "{e}");
        assert!(
            e.contains("oci://r.example/plugins/refund-limit@sha256:"),
            "{e}"
        );
        for bad in [
            "oci://r.example",
            "oci:///a@sha256:00",
            "oci://r.example/UPPER@sha256:00",
            "oci://r.example/a@sha256:abc",
            "oci://r.example/a@md5:0123",
            "oci://r.example/a//b",
            "oci://r.example/../a@sha256:00",
            "oci://r.example/a/-b",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_wasm_layer_is_the_one_wasm_layer_of_an_oci_manifest() {
        let wasm = b"\0asm\x0d\0\x01\0";
        let m = plugin_manifest(b"{}", wasm);
        let (layer, size) = wasm_layer(&m).expect("a plugin manifest");
        assert_eq!(layer, sha256_hex(wasm));
        assert_eq!(size, wasm.len() as u64);
        let index = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","layers":[]}"#;
        assert!(
            wasm_layer(index)
                .expect_err("an index")
                .to_string()
                .contains("image index")
        );
        let two = serde_json::json!({"schemaVersion": 2, "layers": [
            {"mediaType": "application/wasm", "digest": format!("sha256:{}", "a".repeat(64)), "size": 1},
            {"mediaType": "application/wasm", "digest": format!("sha256:{}", "b".repeat(64)), "size": 1},
        ]});
        assert!(wasm_layer(two.to_string().as_bytes()).is_err());
        let huge = serde_json::json!({"schemaVersion": 2, "layers": [
            {"mediaType": "application/wasm", "digest": format!("sha256:{}", "a".repeat(64)), "size": MAX_PLUGIN_BYTES + 1},
        ]});
        assert!(matches!(
            wasm_layer(huge.to_string().as_bytes()),
            Err(OciError::TooLarge { .. })
        ));
    }
}
