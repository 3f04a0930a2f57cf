//! Plugin signatures in cosign's registry layout, with Ed25519 keys.
//!
//! A signature of the artifact whose manifest digest is `sha256:HEX` lives under the tag
//! `sha256-HEX.sig` of the same repository: an OCI manifest whose layers are cosign
//! "simple signing" payloads (`application/vnd.dev.cosign.simplesigning.v1+json`), each
//! carrying its base64 signature in the `dev.cosignproject.cosign/signature` annotation.
//! The payload names the signed manifest digest (`critical.image.docker-manifest-digest`);
//! the signature is Ed25519 over the payload bytes. A signature is looked up in the
//! artifact's own repository and binds its manifest digest (the payload's
//! `docker-reference` is not compared: a registry can be reached under several names).
//! capgate verifies against the
//! configured public keys only (no transparency log, no certificates); keys are PEM
//! (`openssl genpkey -algorithm ed25519` and `openssl pkey -pubout`).

use super::OciError;
use base64::Engine;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use std::path::Path;

/// The media type of a signature payload layer (cosign's).
pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature (cosign's).
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The config media type of a signature manifest (cosign's).
pub const SIGNATURE_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// The payload `type` (cosign's).
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// The largest payload read.
pub const MAX_PAYLOAD_BYTES: u64 = 16 << 10;
/// The most signatures looked at for one artifact.
pub const MAX_SIGNATURES: usize = 16;
/// The largest key file read.
const MAX_KEY_BYTES: u64 = 16 << 10;

/// The tag the signatures of `manifest_hex` live under.
pub fn tag(manifest_hex: &str) -> String {
    format!("sha256-{manifest_hex}.sig")
}

/// One signature found for an artifact: the payload and the signature over it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Candidate {
    /// The payload, base64.
    pub payload: String,
    /// The signature, base64.
    pub signature: String,
}

/// A configured public key and the name messages give it (its file).
#[derive(Debug, Clone)]
pub struct PublicKey {
    /// The file it was read from.
    pub name: String,
    key: VerifyingKey,
}

fn read_key_file(path: &Path) -> Result<String, String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if meta.len() > MAX_KEY_BYTES {
        return Err(format!(
            "{} is larger than {MAX_KEY_BYTES} bytes",
            path.display()
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

impl PublicKey {
    /// The key itself (also what `capgate audit verify --public-key` checks checkpoints with).
    pub fn key(&self) -> VerifyingKey {
        self.key
    }

    /// An Ed25519 public key from a PEM file (`-----BEGIN PUBLIC KEY-----`).
    pub fn load(path: &Path) -> Result<PublicKey, String> {
        let text = read_key_file(path)?;
        let key = VerifyingKey::from_public_key_pem(&text).map_err(|e| {
            format!(
                "{} is not an Ed25519 public key in PEM (`openssl pkey -in KEY -pubout`): {e}",
                path.display()
            )
        })?;
        Ok(PublicKey {
            name: path.display().to_string(),
            key,
        })
    }
}

/// An Ed25519 private key from a PEM PKCS#8 file (`-----BEGIN PRIVATE KEY-----`).
pub fn load_signing_key(path: &Path) -> Result<SigningKey, String> {
    let text = read_key_file(path)?;
    SigningKey::from_pkcs8_pem(&text).map_err(|e| {
        format!(
            "{} is not an Ed25519 private key in PEM (`openssl genpkey -algorithm ed25519`): {e}",
            path.display()
        )
    })
}

/// The simple-signing payload for `manifest_digest` (`sha256:HEX`) of `docker_reference`
/// (`registry/repository`), as cosign writes it.
pub fn payload(docker_reference: &str, manifest_digest: &str) -> Vec<u8> {
    serde_json::json!({
        "critical": {
            "identity": {"docker-reference": docker_reference},
            "image": {"docker-manifest-digest": manifest_digest},
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    })
    .to_string()
    .into_bytes()
}

/// Sign a payload: the base64 signature for the annotation.
pub fn sign(key: &SigningKey, payload: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(key.sign(payload).to_bytes())
}

/// The key that signed `manifest_digest` through one of `candidates`, if any: the payload
/// must name that digest and carry a valid Ed25519 signature by one of `keys`.
pub fn verify<'k>(
    candidates: &[Candidate],
    keys: &'k [PublicKey],
    manifest_digest: &str,
) -> Option<&'k PublicKey> {
    let b64 = base64::engine::general_purpose::STANDARD;
    for c in candidates.iter().take(MAX_SIGNATURES) {
        let (Ok(payload), Ok(sig)) = (b64.decode(&c.payload), b64.decode(c.signature.trim()))
        else {
            continue;
        };
        let Ok(sig) = ed25519_dalek::Signature::from_slice(&sig) else {
            continue;
        };
        let Some(key) = keys
            .iter()
            .find(|k| k.key.verify_strict(&payload, &sig).is_ok())
        else {
            continue;
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&payload) else {
            continue;
        };
        let critical = &v["critical"];
        if critical["type"] == PAYLOAD_TYPE
            && critical["image"]["docker-manifest-digest"] == manifest_digest
        {
            return Some(key);
        }
    }
    None
}

/// Why a signature payload layer cannot be used (`None`: it can).
pub fn check_layer(media_type: &str, size: u64) -> Option<OciError> {
    if media_type != PAYLOAD_MEDIA_TYPE {
        return None;
    }
    (size > MAX_PAYLOAD_BYTES).then(|| OciError::TooLarge {
        what: "a signature payload".into(),
        limit: MAX_PAYLOAD_BYTES,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> (SigningKey, PublicKey) {
        let sk = SigningKey::from_bytes(&[seed; 32]);
        let pk = PublicKey {
            name: format!("key{seed}"),
            key: sk.verifying_key(),
        };
        (sk, pk)
    }

    fn candidate(sk: &SigningKey, digest: &str) -> Candidate {
        let p = payload("r.example/a", digest);
        Candidate {
            payload: base64::engine::general_purpose::STANDARD.encode(&p),
            signature: sign(sk, &p),
        }
    }

    #[test]
    fn a_signature_verifies_only_for_its_digest_and_its_key() {
        let (sk, pk) = key(1);
        let (_, other) = key(2);
        let d = format!("sha256:{}", "a".repeat(64));
        let c = candidate(&sk, &d);
        assert_eq!(
            verify(std::slice::from_ref(&c), std::slice::from_ref(&pk), &d).map(|k| &k.name),
            Some(&"key1".to_string())
        );
        assert!(verify(std::slice::from_ref(&c), &[other], &d).is_none());
        let d2 = format!("sha256:{}", "b".repeat(64));
        assert!(verify(&[c], &[pk], &d2).is_none(), "another digest");
    }

    #[test]
    fn a_payload_edited_after_signing_does_not_verify() {
        let (sk, pk) = key(1);
        let d = format!("sha256:{}", "a".repeat(64));
        let mut c = candidate(&sk, &d);
        let mut p = base64::engine::general_purpose::STANDARD
            .decode(&c.payload)
            .expect("b64");
        p.push(b' ');
        c.payload = base64::engine::general_purpose::STANDARD.encode(&p);
        assert!(verify(&[c], &[pk], &d).is_none());
    }

    #[test]
    fn the_payload_is_cosigns_simple_signing_shape() {
        let p = payload("r.example/a", "sha256:00");
        assert_eq!(
            String::from_utf8(p).expect("utf8"),
            r#"{"critical":{"identity":{"docker-reference":"r.example/a"},"image":{"docker-manifest-digest":"sha256:00"},"type":"cosign container image signature"},"optional":null}"#
        );
    }
}
