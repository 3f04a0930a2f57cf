//! cosign's current signature format (the default since cosign 3): a Sigstore bundle
//! (`application/vnd.dev.sigstore.bundle.v0.3+json`) holding a DSSE envelope, whose
//! payload is an in-toto statement naming the signed manifest as its subject with the
//! predicate type `https://sigstore.dev/cosign/sign/v1`, signed over DSSE's
//! pre-authentication encoding. The bundle is a blob of an OCI artifact whose `subject` is
//! the plugin's manifest, found through the registry's referrers API or, where the
//! registry has none, the referrers tag `sha256-HEX` (an image index), as cosign's
//! `specs/BUNDLE_SPEC.md` lays out.
//!
//! Only key-based bundles are read: the signature must verify under a configured key
//! (no certificate, no transparency log is consulted, as with the legacy layout).

use super::registry::Registry;
use super::sign::{self, Candidate};
use super::{
    INDEX_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, MAX_MANIFEST_BYTES, OciError, Reference, digest_hex,
    sha256_hex, verify_digest,
};
use base64::Engine;
use serde::Deserialize;

/// The media type (and artifact type) of a bundle cosign writes.
pub const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// What every bundle media type starts with (v0.1 to v0.3 are read).
const BUNDLE_MEDIA_TYPE_PREFIX: &str = "application/vnd.dev.sigstore.bundle";
/// The DSSE payload type of an in-toto statement.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// The predicate type of a cosign image signature.
pub const SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
/// The OCI empty descriptor's media type and content.
const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
const EMPTY: &[u8] = b"{}";
/// The largest bundle read.
pub const MAX_BUNDLE_BYTES: u64 = 64 << 10;

/// DSSE's pre-authentication encoding: what the signature is over.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The in-toto statement cosign signs for `manifest_hex` of `name`.
pub fn statement(name: &str, manifest_hex: &str) -> Vec<u8> {
    serde_json::json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": name, "digest": {"sha256": manifest_hex}}],
        "predicateType": SIGN_PREDICATE,
        "predicate": {},
    })
    .to_string()
    .into_bytes()
}

/// Whether a statement is a cosign signature of `manifest_digest` (`sha256:HEX`).
pub fn names(statement: &[u8], manifest_digest: &str) -> bool {
    let Some(hex) = manifest_digest.strip_prefix("sha256:") else {
        return false;
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(statement) else {
        return false;
    };
    let known_type = v["_type"]
        .as_str()
        .is_some_and(|t| t.starts_with("https://in-toto.io/Statement/"));
    known_type
        && v["predicateType"] == SIGN_PREDICATE
        && v["subject"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["digest"]["sha256"] == hex))
}

/// The signature candidates of one bundle: each DSSE signature over its envelope.
pub fn candidates(bundle: &[u8]) -> Vec<Candidate> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Bundle {
        dsse_envelope: Option<Envelope>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Envelope {
        payload: String,
        payload_type: String,
        #[serde(default)]
        signatures: Vec<Signature>,
    }
    #[derive(Deserialize)]
    struct Signature {
        sig: String,
    }
    let Ok(Bundle {
        dsse_envelope: Some(e),
    }) = serde_json::from_slice::<Bundle>(bundle)
    else {
        return Vec::new();
    };
    e.signatures
        .into_iter()
        .take(sign::MAX_SIGNATURES)
        .map(|s| Candidate {
            payload: e.payload.clone(),
            signature: s.sig,
            payload_type: Some(e.payload_type.clone()),
        })
        .collect()
}

/// A key-based bundle of `statement` signed by `key`, as cosign writes one.
pub fn bundle(statement: &[u8], key: &sign::SigningKey) -> Vec<u8> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let signature = sign::sign(key, &pae(IN_TOTO_PAYLOAD_TYPE, statement));
    serde_json::json!({
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": ""}},
        "dsseEnvelope": {
            "payload": b64.encode(statement),
            "payloadType": IN_TOTO_PAYLOAD_TYPE,
            "signatures": [{"sig": signature, "keyid": ""}],
        },
    })
    .to_string()
    .into_bytes()
}

/// The referrers tag of `manifest_hex` (for registries without the referrers API).
pub fn referrers_tag(manifest_hex: &str) -> String {
    format!("sha256-{manifest_hex}")
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Index {
    #[serde(default)]
    manifests: Vec<IndexEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IndexEntry {
    digest: String,
    #[serde(default)]
    artifact_type: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArtifactManifest {
    #[serde(default)]
    layers: Vec<Layer>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Layer {
    media_type: String,
    digest: String,
    size: u64,
}

/// The bundle signatures attached to `manifest_hex` in `r`'s repository (none when it has
/// no referrers).
pub async fn pull(
    reg: &Registry,
    r: &Reference,
    manifest_hex: &str,
) -> Result<Vec<Candidate>, OciError> {
    let digest = format!("sha256:{manifest_hex}");
    let index = match reg
        .referrers(&r.repository, &digest, MAX_MANIFEST_BYTES)
        .await?
    {
        Some(i) => Some(i),
        None => {
            reg.manifest(
                &r.repository,
                &referrers_tag(manifest_hex),
                INDEX_MEDIA_TYPE,
                MAX_MANIFEST_BYTES,
            )
            .await?
        }
    };
    let Some(index) = index else {
        return Ok(Vec::new());
    };
    let index: Index = serde_json::from_slice(&index).map_err(|e| {
        OciError::Signature(format!("the referrers index is not an OCI index: {e}"))
    })?;
    let mut out = Vec::new();
    for entry in index
        .manifests
        .iter()
        .filter(|m| {
            m.artifact_type
                .as_deref()
                .is_some_and(|t| t.starts_with(BUNDLE_MEDIA_TYPE_PREFIX))
        })
        .take(sign::MAX_SIGNATURES)
    {
        let hex = digest_hex(&entry.digest)?;
        let Some(bytes) = reg
            .manifest(
                &r.repository,
                &entry.digest,
                MANIFEST_MEDIA_TYPE,
                MAX_MANIFEST_BYTES,
            )
            .await?
        else {
            continue;
        };
        verify_digest("a bundle's manifest", &bytes, &hex)?;
        let m: ArtifactManifest = serde_json::from_slice(&bytes).map_err(|e| {
            OciError::Signature(format!("a bundle's manifest is not an OCI manifest: {e}"))
        })?;
        let Some(layer) = m
            .layers
            .iter()
            .find(|l| l.media_type.starts_with(BUNDLE_MEDIA_TYPE_PREFIX))
        else {
            continue;
        };
        if layer.size > MAX_BUNDLE_BYTES {
            return Err(OciError::TooLarge {
                what: "a signature bundle".into(),
                limit: MAX_BUNDLE_BYTES,
            });
        }
        let blob = reg
            .blob(&r.repository, &layer.digest, MAX_BUNDLE_BYTES)
            .await?;
        verify_digest("a signature bundle", &blob, &digest_hex(&layer.digest)?)?;
        out.extend(candidates(&blob));
    }
    Ok(out)
}

/// Attach a bundle signature of `manifest_hex` to it: the bundle blob, its artifact
/// manifest (subject: the plugin's manifest) and the referrers tag listing it beside what
/// it already lists.
pub async fn push(
    reg: &Registry,
    r: &Reference,
    manifest_hex: &str,
    manifest_size: usize,
    key: &sign::SigningKey,
) -> Result<(), OciError> {
    let statement = statement(&r.name(), manifest_hex);
    let bundle = bundle(&statement, key);
    reg.upload_missing(&r.repository, &[EMPTY, &bundle[..]])
        .await?;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "artifactType": BUNDLE_MEDIA_TYPE,
        "config": {
            "mediaType": EMPTY_MEDIA_TYPE,
            "digest": format!("sha256:{}", sha256_hex(EMPTY)),
            "size": EMPTY.len(),
        },
        "layers": [{
            "mediaType": BUNDLE_MEDIA_TYPE,
            "digest": format!("sha256:{}", sha256_hex(&bundle)),
            "size": bundle.len(),
        }],
        "subject": {
            "mediaType": MANIFEST_MEDIA_TYPE,
            "digest": format!("sha256:{manifest_hex}"),
            "size": manifest_size,
        },
        "annotations": {"dev.sigstore.bundle.content": "dsse-envelope",
            "dev.sigstore.bundle.predicateType": SIGN_PREDICATE},
    })
    .to_string()
    .into_bytes();
    let manifest_digest = format!("sha256:{}", sha256_hex(&manifest));
    reg.put_manifest(
        &r.repository,
        &manifest_digest,
        MANIFEST_MEDIA_TYPE,
        &manifest,
    )
    .await?;
    // The referrers tag, for registries without the referrers API (a registry with one
    // lists the artifact by its subject already; the tag is then merely unused).
    let tag = referrers_tag(manifest_hex);
    let mut entries: Vec<serde_json::Value> = match reg
        .manifest(&r.repository, &tag, INDEX_MEDIA_TYPE, MAX_MANIFEST_BYTES)
        .await?
    {
        Some(b) => serde_json::from_slice::<serde_json::Value>(&b)
            .ok()
            .and_then(|v| v.get("manifests").and_then(|m| m.as_array()).cloned())
            .unwrap_or_default(),
        None => Vec::new(),
    };
    entries.retain(|e| e["digest"] != manifest_digest.as_str());
    entries.push(serde_json::json!({
        "mediaType": MANIFEST_MEDIA_TYPE,
        "digest": manifest_digest,
        "size": manifest.len(),
        "artifactType": BUNDLE_MEDIA_TYPE,
        "annotations": {"dev.sigstore.bundle.content": "dsse-envelope",
            "dev.sigstore.bundle.predicateType": SIGN_PREDICATE},
    }));
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": entries,
    })
    .to_string()
    .into_bytes();
    reg.put_manifest(&r.repository, &tag, INDEX_MEDIA_TYPE, &index)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encoding DSSE specifies, byte for byte (its own example).
    #[test]
    fn the_pre_authentication_encoding_is_dsses() {
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    /// A bundle verifies for its own manifest under its own key only; its statement moved
    /// to another digest, or signed by another key, admits nothing.
    #[test]
    fn a_bundle_verifies_only_for_its_subject_and_its_key() {
        let sk = sign::parse_signing_key(
            &p256::pkcs8::EncodePrivateKey::to_pkcs8_pem(
                &p256::ecdsa::SigningKey::from_slice(&[5u8; 32]).expect("scalar"),
                p256::pkcs8::LineEnding::LF,
            )
            .expect("pem"),
        )
        .expect("a P-256 key");
        let pk = sign::PublicKey::new("cosign.pub", sk.verifying_key());
        let other = sign::PublicKey::new(
            "other.pub",
            sign::SigningKey::EcdsaP256(
                p256::ecdsa::SigningKey::from_slice(&[6u8; 32]).expect("scalar"),
            )
            .verifying_key(),
        );
        let hex = "e".repeat(64);
        let digest = format!("sha256:{hex}");
        let b = bundle(&statement("r.example/a", &hex), &sk);
        let cands = candidates(&b);
        assert_eq!(cands.len(), 1);
        assert!(sign::verify(&cands, std::slice::from_ref(&pk), &digest).is_some());
        assert!(sign::verify(&cands, &[other], &digest).is_none());
        let elsewhere = format!("sha256:{}", "f".repeat(64));
        assert!(sign::verify(&cands, std::slice::from_ref(&pk), &elsewhere).is_none());
        // The same signature presented as a legacy payload (no DSSE encoding) fails.
        let mut legacy = cands[0].clone();
        legacy.payload_type = None;
        assert!(sign::verify(&[legacy], &[pk], &digest).is_none());
        assert!(candidates(b"{\"messageSignature\": {}}").is_empty());
    }
}
