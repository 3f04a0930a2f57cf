//! Canonical JSON (RFC 8785, JCS) and the SHA-256 input hash that binds an approval to the
//! exact operation (SI-5). Sorted keys (by UTF-16 code units), no insignificant whitespace,
//! ECMAScript number formatting: the same bytes the reference implementation hashes.

use sha2::{Digest, Sha256};

/// Why a value could not be canonicalized.
#[derive(Debug, thiserror::Error)]
#[error("value cannot be canonicalized: {0}")]
pub struct CanonicalError(#[from] serde_json::Error);

/// The RFC 8785 canonical form of a value.
pub fn canonical_json(value: &serde_json::Value) -> Result<String, CanonicalError> {
    Ok(serde_json_canonicalizer::to_string(value)?)
}

struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Lower-case hex SHA-256 of the canonical JSON of `value`, streamed (no intermediate string).
pub fn input_hash(value: &serde_json::Value) -> Result<String, CanonicalError> {
    let mut hasher = Sha256::new();
    serde_json_canonicalizer::to_writer(value, &mut HashWriter(&mut hasher))?;
    Ok(hex::encode(hasher.finalize()))
}

/// Lower-case hex SHA-256 of raw bytes.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    hex::encode(Sha256::digest(bytes.as_ref()))
}
