//! Plugin signatures in cosign's registry layout, with cosign's default ECDSA P-256 keys or
//! Ed25519 keys.
//!
//! A signature of the artifact whose manifest digest is `sha256:HEX` lives under the tag
//! `sha256-HEX.sig` of the same repository: an OCI manifest whose layers are cosign
//! "simple signing" payloads (`application/vnd.dev.cosign.simplesigning.v1+json`), each
//! carrying its base64 signature in the `dev.cosignproject.cosign/signature` annotation.
//! The payload names the signed manifest digest (`critical.image.docker-manifest-digest`);
//! the signature is over the payload bytes: ECDSA P-256 with SHA-256, ASN.1 DER (what
//! `cosign generate-key-pair` and `cosign sign --key` make), or Ed25519. A signature is looked up in the
//! artifact's own repository and binds its manifest digest (the payload's
//! `docker-reference` is not compared: a registry can be reached under several names).
//! capgate verifies against the
//! configured public keys only (no transparency log, no certificates); public keys are PEM
//! SubjectPublicKeyInfo (`cosign.pub` as cosign writes it, or `openssl pkey -pubout`).
//! `capgate plugin push --sign-key` signs with an unencrypted PKCS#8 or SEC1 PEM key
//! (`openssl genpkey -algorithm ed25519`, or `openssl ecparam -name prime256v1 -genkey`);
//! cosign's own password-encrypted `cosign.key` stays with cosign (`cosign sign --key`).

use super::OciError;
use base64::Engine;
use ed25519_dalek::{Signer, Verifier};
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
    /// A DSSE envelope's payload type (a Sigstore bundle: the signature is over DSSE's
    /// encoding of the payload, an in-toto statement); `None`: cosign's legacy layout (the
    /// signature is over the simple-signing payload itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_type: Option<String>,
}

/// Which of cosign's layouts `capgate plugin push --sign-key` writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SignatureFormat {
    /// Both, so that cosign 2 and cosign 3 verifiers each find theirs (the default).
    #[default]
    Both,
    /// The legacy `sha256-HEX.sig` simple-signing layout only.
    SimpleSigning,
    /// A Sigstore bundle attached as a referrer only (cosign 3's default).
    Bundle,
}

impl SignatureFormat {
    /// Whether the legacy layout is written.
    pub fn simple_signing(self) -> bool {
        matches!(self, SignatureFormat::Both | SignatureFormat::SimpleSigning)
    }
    /// Whether a bundle is written.
    pub fn bundle(self) -> bool {
        matches!(self, SignatureFormat::Both | SignatureFormat::Bundle)
    }
}

/// A configured public key and the name messages give it (its file).
#[derive(Debug, Clone)]
pub struct PublicKey {
    /// The file it was read from.
    pub name: String,
    key: VerifyingKey,
}

/// A public key of one of the algorithms a signature may use.
#[derive(Debug, Clone)]
pub enum VerifyingKey {
    /// cosign's default: ECDSA over P-256 with SHA-256.
    EcdsaP256(p256::ecdsa::VerifyingKey),
    /// Ed25519.
    Ed25519(ed25519_dalek::VerifyingKey),
}

impl VerifyingKey {
    /// Whether `signature` (DER or fixed-size for ECDSA, 64 bytes for Ed25519) signs
    /// `message` under this key.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        match self {
            VerifyingKey::EcdsaP256(k) => {
                let sig = p256::ecdsa::DerSignature::from_bytes(signature)
                    .ok()
                    .and_then(|d| p256::ecdsa::Signature::try_from(d).ok())
                    .or_else(|| p256::ecdsa::Signature::from_slice(signature).ok());
                sig.is_some_and(|sig| k.verify(message, &sig).is_ok())
            }
            VerifyingKey::Ed25519(k) => ed25519_dalek::Signature::from_slice(signature)
                .is_ok_and(|sig| k.verify_strict(message, &sig).is_ok()),
        }
    }
}

/// A private key `capgate plugin push --sign-key` signs with.
#[derive(Debug, Clone)]
pub enum SigningKey {
    /// ECDSA over P-256 with SHA-256 (signatures DER, as cosign writes them).
    EcdsaP256(p256::ecdsa::SigningKey),
    /// Ed25519.
    Ed25519(ed25519_dalek::SigningKey),
}

impl SigningKey {
    /// Its public half.
    pub fn verifying_key(&self) -> VerifyingKey {
        match self {
            SigningKey::EcdsaP256(k) => VerifyingKey::EcdsaP256(*k.verifying_key()),
            SigningKey::Ed25519(k) => VerifyingKey::Ed25519(k.verifying_key()),
        }
    }
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
    /// The key itself.
    pub fn key(&self) -> &VerifyingKey {
        &self.key
    }

    /// The Ed25519 key, if it is one (what `capgate audit verify --public-key` checks
    /// checkpoints with: the audit chain signs with Ed25519 only).
    pub fn ed25519(&self) -> Option<ed25519_dalek::VerifyingKey> {
        match self.key {
            VerifyingKey::Ed25519(k) => Some(k),
            VerifyingKey::EcdsaP256(_) => None,
        }
    }

    /// A key in memory, named `name` in messages.
    pub fn new(name: impl Into<String>, key: VerifyingKey) -> PublicKey {
        PublicKey {
            name: name.into(),
            key,
        }
    }

    /// A public key from a PEM file (`-----BEGIN PUBLIC KEY-----`): cosign's ECDSA P-256
    /// `cosign.pub`, or an Ed25519 key.
    pub fn load(path: &Path) -> Result<PublicKey, String> {
        let text = read_key_file(path)?;
        let key = parse_public_key(&text).ok_or_else(|| {
            format!(
                "{} is not an ECDSA P-256 or Ed25519 public key in PEM (cosign.pub, or `openssl pkey -in KEY -pubout`)",
                path.display()
            )
        })?;
        Ok(PublicKey::new(path.display().to_string(), key))
    }
}

/// A PEM SubjectPublicKeyInfo of either algorithm.
pub fn parse_public_key(pem: &str) -> Option<VerifyingKey> {
    use p256::pkcs8::DecodePublicKey as _;
    if let Ok(k) = p256::ecdsa::VerifyingKey::from_public_key_pem(pem) {
        return Some(VerifyingKey::EcdsaP256(k));
    }
    ed25519_dalek::VerifyingKey::from_public_key_pem(pem)
        .ok()
        .map(VerifyingKey::Ed25519)
}

/// A private key from a PEM file: PKCS#8 (`-----BEGIN PRIVATE KEY-----`, Ed25519 or ECDSA
/// P-256) or SEC1 (`-----BEGIN EC PRIVATE KEY-----`, P-256, as `openssl ecparam -genkey`
/// writes it).
pub fn load_signing_key(path: &Path) -> Result<SigningKey, String> {
    let text = read_key_file(path)?;
    parse_signing_key(&text).ok_or_else(|| {
        format!(
            "{} is not an unencrypted ECDSA P-256 or Ed25519 private key in PEM (`openssl ecparam -name prime256v1 -genkey -noout`, or `openssl genpkey -algorithm ed25519`); a password-encrypted cosign.key signs with `cosign sign --key`",
            path.display()
        )
    })
}

/// A PEM private key of either algorithm.
pub fn parse_signing_key(pem: &str) -> Option<SigningKey> {
    use p256::elliptic_curve::SecretKey;
    use p256::pkcs8::DecodePrivateKey as _;
    if let Ok(k) = p256::ecdsa::SigningKey::from_pkcs8_pem(pem) {
        return Some(SigningKey::EcdsaP256(k));
    }
    if let Ok(k) = SecretKey::<p256::NistP256>::from_sec1_pem(pem) {
        return Some(SigningKey::EcdsaP256(k.into()));
    }
    ed25519_dalek::SigningKey::from_pkcs8_pem(pem)
        .ok()
        .map(SigningKey::Ed25519)
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

/// Sign a payload: the base64 signature for the annotation (DER for ECDSA, as cosign).
pub fn sign(key: &SigningKey, payload: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    match key {
        SigningKey::EcdsaP256(k) => {
            let sig: p256::ecdsa::Signature = k.sign(payload);
            b64.encode(sig.to_der().as_bytes())
        }
        SigningKey::Ed25519(k) => b64.encode(k.sign(payload).to_bytes()),
    }
}

/// The key that signed `manifest_digest` through one of `candidates`, if any: the payload
/// must name that digest and carry a valid signature by one of `keys`.
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
        let message = match &c.payload_type {
            Some(t) => crate::bundle::pae(t, &payload),
            None => payload.clone(),
        };
        let Some(key) = keys.iter().find(|k| k.key.verifies(&message, &sig)) else {
            continue;
        };
        let names_it = match c.payload_type.as_deref() {
            // A bundle's in-toto statement, with cosign's signing predicate.
            Some(t) => {
                t == crate::bundle::IN_TOTO_PAYLOAD_TYPE
                    && crate::bundle::names(&payload, manifest_digest)
            }
            None => serde_json::from_slice::<serde_json::Value>(&payload).is_ok_and(|v| {
                let critical = &v["critical"];
                critical["type"] == PAYLOAD_TYPE
                    && critical["image"]["docker-manifest-digest"] == manifest_digest
            }),
        };
        if names_it {
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
        let sk = SigningKey::Ed25519(ed25519_dalek::SigningKey::from_bytes(&[seed; 32]));
        let pk = PublicKey::new(format!("key{seed}"), sk.verifying_key());
        (sk, pk)
    }

    fn ecdsa_key(seed: u8) -> (SigningKey, PublicKey) {
        let sk = p256::ecdsa::SigningKey::from_slice(&[seed; 32]).expect("a P-256 scalar");
        let sk = SigningKey::EcdsaP256(sk);
        let pk = PublicKey::new(format!("ecdsa{seed}"), sk.verifying_key());
        (sk, pk)
    }

    /// cosign's default keys: ECDSA P-256, the signature DER over the payload's SHA-256.
    /// One verifies only its own digest under its own key, never under an Ed25519 key or
    /// another P-256 key, and a signature moved to another payload fails.
    #[test]
    fn an_ecdsa_p256_signature_verifies_only_for_its_digest_and_its_key() {
        let (sk, pk) = ecdsa_key(7);
        let (_, other) = ecdsa_key(8);
        let (_, ed) = key(7);
        let d = format!("sha256:{}", "c".repeat(64));
        let c = candidate(&sk, &d);
        let der = base64::engine::general_purpose::STANDARD
            .decode(&c.signature)
            .expect("b64");
        assert_eq!(der[0], 0x30, "an ASN.1 DER SEQUENCE, as cosign writes it");
        assert_eq!(
            verify(std::slice::from_ref(&c), std::slice::from_ref(&pk), &d).map(|k| &k.name),
            Some(&"ecdsa7".to_string())
        );
        assert!(verify(std::slice::from_ref(&c), &[other, ed], &d).is_none());
        let d2 = format!("sha256:{}", "d".repeat(64));
        let moved = Candidate {
            payload: candidate(&sk, &d2).payload,
            signature: c.signature.clone(),
            payload_type: None,
        };
        assert!(verify(&[moved], std::slice::from_ref(&pk), &d2).is_none());
    }

    /// Keys as cosign and openssl write them: cosign.pub (SPKI, P-256), SEC1 and PKCS#8
    /// private keys; garbage is refused by name.
    #[test]
    fn keys_parse_from_the_pem_cosign_and_openssl_write() {
        use p256::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
        let sk = p256::ecdsa::SigningKey::from_slice(&[9u8; 32]).expect("scalar");
        let spki = sk
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .expect("pem");
        assert!(matches!(
            parse_public_key(&spki),
            Some(VerifyingKey::EcdsaP256(_))
        ));
        let pkcs8 = sk.to_pkcs8_pem(LineEnding::LF).expect("pkcs8");
        assert!(matches!(
            parse_signing_key(&pkcs8),
            Some(SigningKey::EcdsaP256(_))
        ));
        let sec1 = p256::SecretKey::from_slice(&[9u8; 32])
            .expect("scalar")
            .to_sec1_pem(LineEnding::LF)
            .expect("sec1");
        assert!(matches!(
            parse_signing_key(&sec1),
            Some(SigningKey::EcdsaP256(_))
        ));
        assert!(
            parse_public_key("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
                .is_none()
        );
        assert!(parse_signing_key("not a key").is_none());
    }

    fn candidate(sk: &SigningKey, digest: &str) -> Candidate {
        let p = payload("r.example/a", digest);
        Candidate {
            payload: base64::engine::general_purpose::STANDARD.encode(&p),
            signature: sign(sk, &p),
            payload_type: None,
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
