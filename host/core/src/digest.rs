//! SHA-256 digests as text: the one rule for "64 lowercase hex digits" and the one way to
//! write a digest so. Plugin pins, API key and bearer token hashes, input hashes and
//! contract digests are all this text; checking and writing it in one place keeps every
//! door, file key and store agreeing on what a digest looks like.
//!
//! ```
//! use capgate_core::digest::{Sha256Hex, sha256_hex};
//!
//! let d = Sha256Hex::digest("abc");
//! assert_eq!(d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
//! assert_eq!(sha256_hex("abc"), d.as_str());
//! assert!(Sha256Hex::new(d.to_ascii_uppercase()).is_err());
//! // On the wire it is a plain string, refused while it is parsed.
//! assert!(serde_json::from_str::<Sha256Hex>("\"abc\"").is_err());
//! ```

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A SHA-256 digest written as 64 lowercase hex digits. It can only be built by hashing
/// ([`Sha256Hex::digest`]) or through [`Sha256Hex::new`] (or parsing, or deserializing,
/// which call it), so holding one is proof the text has that form.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Sha256Hex(String);

/// Why a string is not a [`Sha256Hex`]. Its message reads after the field's name:
/// "`sha256` is not a SHA-256 digest (64 lowercase hex digits)".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("is not a SHA-256 digest (64 lowercase hex digits)")]
pub struct Sha256HexError;

impl Sha256Hex {
    /// The length of the text: two hex digits per byte of the 32-byte digest.
    pub const LEN: usize = 64;

    /// Whether `value` is 64 lowercase hex digits.
    pub fn is_valid(value: &str) -> bool {
        value.len() == Self::LEN
            && value
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    }

    /// Check `value` against the rule without taking it.
    pub fn check(value: &str) -> Result<(), Sha256HexError> {
        if Self::is_valid(value) {
            Ok(())
        } else {
            Err(Sha256HexError)
        }
    }

    /// The digest, if `value` is 64 lowercase hex digits.
    pub fn new(value: impl Into<String>) -> Result<Self, Sha256HexError> {
        let value = value.into();
        Self::check(&value)?;
        Ok(Sha256Hex(value))
    }

    /// The SHA-256 of `bytes`.
    pub fn digest(bytes: impl AsRef<[u8]>) -> Self {
        Sha256Hex(hex::encode(Sha256::digest(bytes.as_ref())))
    }

    /// The digest of everything written into `hasher` (for inputs hashed as a stream).
    pub fn finish(hasher: Sha256) -> Self {
        Sha256Hex(hex::encode(hasher.finalize()))
    }
}

crate::wire::checked_string!(Sha256Hex, Sha256HexError);

/// Lower-case hex SHA-256 of raw bytes: [`Sha256Hex::digest`] as a plain `String`.
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    Sha256Hex::digest(bytes).into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_64_lowercase_hex_digits_are_a_digest() {
        let d = sha256_hex(b"capgate");
        assert!(Sha256Hex::is_valid(&d));
        assert_eq!(Sha256Hex::new(d.clone()).map(String::from), Ok(d.clone()));
        for bad in [
            d.to_ascii_uppercase(),
            d[1..].to_string(),
            format!("{d}0"),
            format!("g{}", &d[1..]),
            format!("sha256:{d}"),
            String::new(),
        ] {
            assert_eq!(Sha256Hex::check(&bad), Err(Sha256HexError), "{bad}");
        }
    }

    #[test]
    fn a_streamed_digest_is_the_digest_of_the_bytes() {
        let mut h = Sha256::new();
        h.update(b"cap");
        h.update(b"gate");
        assert_eq!(Sha256Hex::finish(h), Sha256Hex::digest("capgate"));
    }

    #[test]
    fn the_message_reads_after_a_field_name() {
        assert_eq!(
            format!("`sha256` {}", Sha256HexError),
            "`sha256` is not a SHA-256 digest (64 lowercase hex digits)"
        );
    }
}
