//! Property tests of the canonical input hash (docs/invariants.md, SI-5): for random JSON values, any
//! re-serialisation (keys in another order, arbitrary whitespace, characters written as
//! `\u` escapes) parses back to the same canonical bytes and the same SHA-256, and the
//! canonical form agrees with an independent RFC 8785 implementation
//! (`serde_json_canonicalizer`) on every value: both refuse or both give the same bytes.

use capgate_core::canonical::{canonical_json, input_hash, sha256_hex};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

/// Keys and strings: ASCII, controls, escapes, BMP characters on both sides of U+E000
/// (where UTF-8 and UTF-16 order differ) and supplementary characters.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-d]{0,3}",
        "[\\x00-\\x1f\"\\\\/a]{0,3}",
        "[\u{80}\u{7ff}\u{d7ff}\u{e000}\u{fb33}\u{ffff}\u{10000}\u{1f600}a]{0,3}",
        any::<String>(),
    ]
}

fn integer() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-(1i64 << 53)..=(1i64 << 53)).prop_map(Value::from),
    ]
}

fn f64_value() -> impl Strategy<Value = Value> {
    (proptest::num::f64::NORMAL
        | proptest::num::f64::SUBNORMAL
        | proptest::num::f64::ZERO
        | proptest::num::f64::NEGATIVE
        | proptest::num::f64::POSITIVE)
        .prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number))
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        integer(),
        f64_value(),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((text(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

/// A tiny deterministic generator, seeded by proptest, for the writer's choices.
struct Choices(u64);

impl Choices {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn whitespace(&mut self, out: &mut String) {
        for _ in 0..self.below(3) {
            out.push([' ', '\t', '\n', '\r'][self.below(4)]);
        }
    }
}

fn write_string(s: &str, c: &mut Choices, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        let must = ch == '"' || ch == '\\' || ch < ' ';
        if must || c.below(4) == 0 {
            let mut units = [0u16; 2];
            for u in ch.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        } else {
            out.push(ch);
        }
    }
    out.push('"');
}

/// `v` as JSON text with shuffled keys, random whitespace and random `\u` escapes.
fn scrambled(v: &Value, c: &mut Choices, out: &mut String) {
    c.whitespace(out);
    match v {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                scrambled(item, c, out);
            }
            c.whitespace(out);
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            for i in (1..entries.len()).rev() {
                entries.swap(i, c.below(i + 1));
            }
            out.push('{');
            for (i, (k, val)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                c.whitespace(out);
                write_string(k, c, out);
                c.whitespace(out);
                out.push(':');
                scrambled(val, c, out);
            }
            c.whitespace(out);
            out.push('}');
        }
        Value::String(s) => write_string(s, c, out),
        other => out.push_str(&other.to_string()),
    }
    c.whitespace(out);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn key_order_whitespace_and_escapes_never_change_the_canonical_bytes_or_hash(
        v in json(),
        seed in 1u64..,
    ) {
        let mut text = String::new();
        scrambled(&v, &mut Choices(seed), &mut text);
        let back: Value = serde_json::from_str(&text)
            .map_err(|e| TestCaseError::fail(format!("scrambled text does not parse: {e}: {text}")))?;
        let want = canonical_json(&v).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let got = canonical_json(&back).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&got, &want, "text: {}", text);
        let hash = input_hash(&back).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&hash, &input_hash(&v).map_err(|e| TestCaseError::fail(e.to_string()))?);
        prop_assert_eq!(hash, sha256_hex(want.as_bytes()));
        // The canonical form is a fixed point: canonicalising it again changes nothing.
        let reparsed: Value = serde_json::from_str(&want)
            .map_err(|e| TestCaseError::fail(format!("canonical text does not parse: {e}")))?;
        prop_assert_eq!(canonical_json(&reparsed).map_err(|e| TestCaseError::fail(e.to_string()))?, want);
    }

    #[test]
    fn the_canonical_form_agrees_with_an_independent_jcs_implementation(v in json()) {
        match (canonical_json(&v), serde_json_canonicalizer::to_string(&v)) {
            (Ok(ours), Ok(theirs)) => prop_assert_eq!(ours, theirs, "value: {}", v),
            (Err(_), Err(_)) => {}
            (ours, theirs) => prop_assert!(
                false,
                "one refused and the other did not: ours {:?}, theirs {:?}, value {}",
                ours.map_err(|e| e.to_string()),
                theirs.map_err(|e| e.to_string()),
                v
            ),
        }
    }
}
