//! Canonical JSON (RFC 8785, JCS) and the SHA-256 input hash that binds an approval to the
//! exact operation (SI-5): keys sorted by UTF-16 code units, no insignificant whitespace,
//! strings escaped as ECMAScript's `JSON.stringify` does, numbers in ECMAScript
//! `Number.prototype.toString` form (via `ryu-js`). These are the bytes the reference
//! implementation hashes for the same input.
//!
//! Integers beyond ±2^53 are written as the double a JavaScript peer would have parsed them
//! into, so both sides agree on the hash. The writer streams straight into the hasher: the
//! hash is on the hot path of every governed call (audit's `inputHash`).

use crate::digest::Sha256Hex;
/// Where the raw-bytes hash lived first; [`crate::digest`] holds it now.
pub use crate::digest::sha256_hex;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Why a value could not be canonicalized.
#[derive(Debug, thiserror::Error)]
#[error("value cannot be canonicalized: {0}")]
pub struct CanonicalError(String);

/// Where canonical bytes go.
trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Sink for Sha256 {
    fn put(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

/// Nesting deeper than this is refused (a hostile input cannot exhaust the stack).
pub const MAX_DEPTH: usize = 128;

/// 2^53: the largest magnitude up to which every integer is exact as a double.
const EXACT_INT: u64 = 1 << 53;

fn write<S: Sink>(v: &Value, out: &mut S, depth: usize) -> Result<(), CanonicalError> {
    if depth > MAX_DEPTH {
        return Err(CanonicalError(format!(
            "nested deeper than {MAX_DEPTH} levels"
        )));
    }
    match v {
        Value::Null => out.put(b"null"),
        Value::Bool(true) => out.put(b"true"),
        Value::Bool(false) => out.put(b"false"),
        Value::Number(n) => write_number(n, out)?,
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.put(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.put(b",");
                }
                write(item, out, depth + 1)?;
            }
            out.put(b"]");
        }
        Value::Object(map) => {
            out.put(b"{");
            // serde_json's map iterates in UTF-8 byte order, which equals UTF-16 code unit
            // order unless a key holds a character at or above U+E000 (where supplementary
            // characters, as surrogates, sort before U+E000..U+FFFF).
            let needs_resort = map.keys().any(|k| k.chars().any(|c| c >= '\u{E000}'));
            let mut first = true;
            let mut emit = |k: &str, val: &Value, out: &mut S| -> Result<(), CanonicalError> {
                if !first {
                    out.put(b",");
                }
                first = false;
                write_string(k, out);
                out.put(b":");
                write(val, out, depth + 1)
            };
            if needs_resort {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
                for (k, val) in entries {
                    emit(k, val, out)?;
                }
            } else {
                for (k, val) in map {
                    emit(k, val, out)?;
                }
            }
            out.put(b"}");
        }
    }
    Ok(())
}

fn write_number<S: Sink>(n: &serde_json::Number, out: &mut S) -> Result<(), CanonicalError> {
    if let Some(u) = n.as_u64()
        && u <= EXACT_INT
    {
        out.put(itoa_u64(u, &mut [0u8; 20]));
        return Ok(());
    }
    if let Some(i) = n.as_i64()
        && i.unsigned_abs() <= EXACT_INT
    {
        if i < 0 {
            out.put(b"-");
        }
        out.put(itoa_u64(i.unsigned_abs(), &mut [0u8; 20]));
        return Ok(());
    }
    let f = n
        .as_f64()
        .ok_or_else(|| CanonicalError(format!("number {n} is not representable")))?;
    if !f.is_finite() {
        return Err(CanonicalError("non-finite number".into()));
    }
    if f == 0.0 {
        out.put(b"0"); // -0 is written as 0
        return Ok(());
    }
    let mut buf = ryu_js::Buffer::new();
    out.put(buf.format_finite(f).as_bytes());
    Ok(())
}

fn itoa_u64(mut u: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    &buf[i..]
}

fn write_string<S: Sink>(s: &str, out: &mut S) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.put(b"\"");
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0x08 => Some(b"\\b"),
            0x0c => Some(b"\\f"),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.put(&bytes[start..i]);
        match esc {
            Some(e) => out.put(e),
            None => out.put(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 0xf) as usize],
            ]),
        }
        start = i + 1;
    }
    out.put(&bytes[start..]);
    out.put(b"\"");
}

/// The RFC 8785 canonical form of a value.
pub fn canonical_json(value: &Value) -> Result<String, CanonicalError> {
    let mut out = Vec::with_capacity(128);
    write(value, &mut out, 0)?;
    String::from_utf8(out).map_err(|e| CanonicalError(e.to_string()))
}

/// Lower-case hex SHA-256 of the canonical JSON of `value`, streamed into the hasher.
pub fn input_hash(value: &Value) -> Result<String, CanonicalError> {
    let mut hasher = Sha256::new();
    write(value, &mut hasher, 0)?;
    Ok(Sha256Hex::finish(hasher).into_string())
}
