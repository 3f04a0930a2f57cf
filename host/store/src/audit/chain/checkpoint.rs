//! The checkpoint signer and the signed records of a chain: a writer's start record, its
//! chained checkpoints and retention's purge records, their messages and signatures.

use chrono::{DateTime, SecondsFormat, Utc};
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use std::collections::BTreeMap;

/// Signs a writer's checkpoints: the deployment's Ed25519 key and how often.
#[derive(Clone)]
pub struct CheckpointSigner {
    key: SigningKey,
    /// A checkpoint after this many committed events (and at every flush and stop).
    pub every_events: u64,
}

impl std::fmt::Debug for CheckpointSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointSigner")
            .field("key_id", &self.key_id())
            .field("every_events", &self.every_events)
            .finish()
    }
}

/// A checkpoint key that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("the audit checkpoint key is not an Ed25519 PKCS#8 PEM private key: {0}")]
pub struct CheckpointKeyError(String);

impl CheckpointSigner {
    /// Sign with `key`, a checkpoint every `every_events` events (at least 1).
    pub fn new(key: SigningKey, every_events: u64) -> Self {
        CheckpointSigner {
            key,
            every_events: every_events.max(1),
        }
    }

    /// Read the key from a PKCS#8 PEM (`capgate keys generate` writes one).
    pub fn from_pkcs8_pem(pem: &str, every_events: u64) -> Result<Self, CheckpointKeyError> {
        use ed25519_dalek::pkcs8::DecodePrivateKey;
        let key = SigningKey::from_pkcs8_pem(pem).map_err(|e| CheckpointKeyError(e.to_string()))?;
        Ok(Self::new(key, every_events))
    }

    /// The public half, what `audit verify` checks signatures with.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// The key's id as checkpoints record it.
    pub fn key_id(&self) -> String {
        key_id(&self.key.verifying_key())
    }

    /// The start record of `chain`: its checkpoint interval and the highest id of a
    /// chain-less row when it started (`unchained_through`).
    pub(crate) fn sign_start(
        &self,
        chain: &str,
        at: DateTime<Utc>,
        unchained_through: i64,
    ) -> ExportedCheckpoint {
        self.signed(ExportedCheckpoint {
            chain: chain.to_string(),
            seq: 0,
            hash: String::new(),
            at,
            key_id: self.key_id(),
            signature: String::new(),
            kind: Some(KIND_START.to_string()),
            prev: None,
            every_events: Some(i64::try_from(self.every_events).unwrap_or(i64::MAX)),
            unchained_through: Some(unchained_through),
        })
    }

    /// A checkpoint of `chain` at `seq` (hash `hash`), after the record signed `prev`.
    pub(crate) fn sign_checkpoint(
        &self,
        chain: &str,
        seq: i64,
        hash: &str,
        at: DateTime<Utc>,
        prev_signature: &str,
    ) -> ExportedCheckpoint {
        self.signed(ExportedCheckpoint {
            chain: chain.to_string(),
            seq,
            hash: hash.to_string(),
            at,
            key_id: self.key_id(),
            signature: String::new(),
            kind: Some(KIND_CHECKPOINT.to_string()),
            prev: Some(signature_digest(prev_signature)),
            every_events: None,
            unchained_through: None,
        })
    }

    fn signed(&self, mut record: ExportedCheckpoint) -> ExportedCheckpoint {
        // Every kind built above has a message.
        if let Some(message) = record.message() {
            record.signature = hex(&self.key.sign(&message).to_bytes());
        }
        record
    }

    /// Sign a purge record: "the chain's events through `seq` (hash `hash`) were purged".
    pub(crate) fn sign_purge(&self, cp: &CheckpointFields<'_>) -> String {
        hex(&self.key.sign(&cp.purge_message()).to_bytes())
    }
}

/// A verifying key's id: the first 16 hex digits of the SHA-256 of its 32 bytes.
pub fn key_id(key: &VerifyingKey) -> String {
    let full = capgate_core::digest::sha256_hex(key.as_bytes());
    full[..16].to_string()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What a checkpoint's signature covers.
#[derive(Clone, Copy)]
pub(crate) struct CheckpointFields<'a> {
    pub chain: &'a str,
    pub seq: i64,
    pub hash: &'a str,
    pub at: DateTime<Utc>,
}

impl CheckpointFields<'_> {
    fn message(&self) -> Vec<u8> {
        self.signed("capgate-audit-checkpoint/v1")
    }

    /// A purge record's message: another domain, so a checkpoint's signature never
    /// passes for a purge's (or the other way round).
    fn purge_message(&self) -> Vec<u8> {
        self.signed("capgate-audit-purge/v1")
    }

    fn signed(&self, domain: &str) -> Vec<u8> {
        format!(
            "{domain}\n{}\n{}\n{}\n{}",
            self.chain,
            self.seq,
            self.hash,
            self.at.to_rfc3339_opts(SecondsFormat::Micros, true)
        )
        .into_bytes()
    }
}

/// `kind` of a writer's start record.
pub(crate) const KIND_START: &str = "start";
/// `kind` of a chained checkpoint.
pub(crate) const KIND_CHECKPOINT: &str = "checkpoint";

/// The SHA-256 (hex) of a record's signature (its hex text), what the next record signs as
/// `prev`.
pub(super) fn signature_digest(signature: &str) -> String {
    capgate_core::digest::sha256_hex(signature.as_bytes())
}

/// One signed record of a chain, as stored in `capgate_audit_checkpoints`, exported to a
/// sink and read back from that copy (`capgate audit verify --checkpoints`): a writer's
/// start record (`kind` `start`, `seq` 0), a chained checkpoint (`kind` `checkpoint`), or a
/// checkpoint written before checkpoints were chained (`kind` absent).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportedCheckpoint {
    /// The chain.
    pub chain: String,
    /// The event it vouches for (0 for a start record).
    pub seq: i64,
    /// That event's hash (empty for a start record).
    pub hash: String,
    /// When it was signed.
    pub at: DateTime<Utc>,
    /// The id of the key that signed it ([`key_id`]).
    pub key_id: String,
    /// The Ed25519 signature (hex) of its message.
    pub signature: String,
    /// `start`, `checkpoint`, or absent for an unchained checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The SHA-256 (hex) of the previous record's signature (checkpoints).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev: Option<String>,
    /// The writer's checkpoint interval in events (start records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_events: Option<i64>,
    /// The highest id of a chain-less event when the writer started (start records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchained_through: Option<i64>,
}

impl ExportedCheckpoint {
    /// The bytes its signature covers; `None` for a record no writer signs (an unknown
    /// kind, or a field its kind needs missing).
    fn message(&self) -> Option<Vec<u8>> {
        let at = self.at.to_rfc3339_opts(SecondsFormat::Micros, true);
        let (chain, seq, hash) = (&self.chain, self.seq, &self.hash);
        match self.kind.as_deref() {
            None => Some(
                CheckpointFields {
                    chain,
                    seq,
                    hash,
                    at: self.at,
                }
                .message(),
            ),
            Some(KIND_START) => {
                let (every, through) = (self.every_events?, self.unchained_through?);
                Some(
                    format!(
                        "capgate-audit-start/v2\n{chain}\n{seq}\n{hash}\n{at}\n{every}\n{through}"
                    )
                    .into_bytes(),
                )
            }
            Some(KIND_CHECKPOINT) => {
                let prev = self.prev.as_deref()?;
                Some(
                    format!("capgate-audit-checkpoint/v2\n{chain}\n{seq}\n{hash}\n{at}\n{prev}")
                        .into_bytes(),
                )
            }
            Some(_) => None,
        }
    }

    /// Whether its signature verifies with the key it names, one of `keys`.
    pub(super) fn verifies(&self, keys: &BTreeMap<String, VerifyingKey>) -> bool {
        let Some(message) = self.message() else {
            return false;
        };
        keys.get(&self.key_id).is_some_and(|k| {
            unhex(&self.signature)
                .and_then(|b| Signature::from_slice(&b).ok())
                .is_some_and(|sig| k.verify(&message, &sig).is_ok())
        })
    }

    pub(super) fn is_start(&self) -> bool {
        self.kind.as_deref() == Some(KIND_START)
    }
}

/// Whether a purge record's signature verifies with the key it names.
pub(super) fn purge_verifies(
    p: &ExportedCheckpoint,
    keys: &BTreeMap<String, VerifyingKey>,
) -> bool {
    let message = CheckpointFields {
        chain: &p.chain,
        seq: p.seq,
        hash: &p.hash,
        at: p.at,
    }
    .purge_message();
    keys.get(&p.key_id).is_some_and(|k| {
        unhex(&p.signature)
            .and_then(|b| Signature::from_slice(&b).ok())
            .is_some_and(|sig| k.verify(&message, &sig).is_ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_signature_covers_every_field_and_the_record_before_it() {
        let signer = CheckpointSigner::new(SigningKey::from_bytes(&[1u8; 32]), 10);
        let keys: BTreeMap<String, VerifyingKey> =
            [(signer.key_id(), signer.verifying_key())].into();
        let at = Utc::now();
        let start = signer.sign_start("c1", at, 0);
        assert!(start.verifies(&keys));
        let cp = signer.sign_checkpoint("c1", 5, "aa", at, &start.signature);
        assert!(cp.verifies(&keys));
        assert_eq!(
            cp.prev.as_deref(),
            Some(signature_digest(&start.signature).as_str())
        );
        for other in [
            ExportedCheckpoint {
                seq: 6,
                ..cp.clone()
            },
            ExportedCheckpoint {
                chain: "c2".into(),
                ..cp.clone()
            },
            ExportedCheckpoint {
                hash: "ab".into(),
                ..cp.clone()
            },
            ExportedCheckpoint {
                prev: Some(signature_digest("other")),
                ..cp.clone()
            },
            ExportedCheckpoint {
                kind: None,
                ..cp.clone()
            },
            ExportedCheckpoint {
                unchained_through: Some(7),
                ..start.clone()
            },
            ExportedCheckpoint {
                every_events: Some(1_000_000),
                ..start.clone()
            },
        ] {
            assert!(!other.verifies(&keys), "{other:?}");
        }
        assert_eq!(unhex("0g"), None);
        assert_eq!(unhex("abc"), None);
    }
}
