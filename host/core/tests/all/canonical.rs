//! RFC 8785 (JCS) test vectors: our input hash must equal the reference implementation's.

use capgate_core::canonical::{canonical_json, input_hash};
use serde_json::{Value, json};

// canonical_json walks serde_json's map in its own order, sorted unless a crate in the
// build turns on serde_json's `preserve_order` (cedar-policy-core does, which is why the
// host does not link Cedar). Features unify across a workspace build, and this sample's keys
// are out of order, so it fails under `cargo test --workspace` the day a dependency does.
#[test]
fn rfc8785_section_3_2_2_sample_canonicalizes_exactly() {
    let input: Value = serde_json::from_str(
        r#"{
          "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }"#,
    )
    .unwrap();
    assert_eq!(
        canonical_json(&input).unwrap(),
        r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
    );
}

#[test]
fn rfc8785_section_3_2_3_keys_sort_by_utf16_code_units() {
    let input: Value = serde_json::from_str(
        r#"{
          "\u20ac": "Euro Sign",
          "\r": "Carriage Return",
          "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "1": "One",
          "\ud83d\ude00": "Emoji: Grinning Face",
          "\u0080": "Control",
          "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#,
    )
    .unwrap();
    let keys: Vec<String> = {
        let s = canonical_json(&input).unwrap();
        let back: serde_json::Map<String, Value> = serde_json::from_str(&s).unwrap();
        // serde_json's map is sorted by Rust string order, so read the order from the text.
        let mut idx: Vec<(usize, String)> = back
            .keys()
            .map(|k| {
                (
                    s.find(&serde_json::to_string(k).unwrap()).unwrap(),
                    k.clone(),
                )
            })
            .collect();
        idx.sort();
        idx.into_iter().map(|(_, k)| k).collect()
    };
    assert_eq!(
        keys,
        vec![
            "\r",
            "1",
            "\u{80}",
            "\u{f6}",
            "\u{20ac}",
            "\u{1f600}",
            "\u{fb33}"
        ]
    );
}

#[test]
fn rfc8785_appendix_b_number_serialization() {
    let vectors: &[(u64, &str)] = &[
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0xffefffffffffffff, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xc340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44b52d02c7e14af5, "9.999999999999997e+22"),
        (0x44b52d02c7e14af6, "1e+23"),
        (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
        (0x444b1ae4d6e2ef4e, "999999999999999700000"),
        (0x444b1ae4d6e2ef4f, "999999999999999900000"),
        (0x444b1ae4d6e2ef50, "1e+21"),
        (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
        (0x3eb0c6f7a0b5ed8d, "0.000001"),
        (0x41b3de4355555553, "333333333.3333332"),
        (0x41b3de4355555554, "333333333.33333325"),
        (0x41b3de4355555555, "333333333.3333333"),
        (0x41b3de4355555556, "333333333.3333334"),
        (0x41b3de4355555557, "333333333.33333343"),
        (0xbecbf647612f3696, "-0.0000033333333333333333"),
        (0x43143ff3c1cb0959, "1424953923781206.2"),
    ];
    for (bits, want) in vectors {
        let v = Value::from(f64::from_bits(*bits));
        assert_eq!(canonical_json(&v).unwrap(), *want, "bits {bits:#018x}");
    }
}

#[test]
fn the_input_hash_is_sha256_of_the_canonical_form_and_ignores_key_order_and_whitespace() {
    let a = json!({"orderId": "ord_42", "amount": 649, "reason": "damaged item"});
    let b: Value = serde_json::from_str(
        r#"{ "reason":"damaged item",  "amount": 649.0, "orderId":"ord_42" }"#,
    )
    .unwrap();
    assert_eq!(input_hash(&a).unwrap(), input_hash(&b).unwrap());
    // sha256('{"amount":649,"orderId":"ord_42","reason":"damaged item"}')
    assert_eq!(
        input_hash(&a).unwrap(),
        capgate_core::canonical::sha256_hex(
            r#"{"amount":649,"orderId":"ord_42","reason":"damaged item"}"#
        )
    );
    assert_ne!(
        input_hash(&a).unwrap(),
        input_hash(&json!({"orderId": "ord_42", "amount": 650, "reason": "damaged item"})).unwrap()
    );
}

#[test]
fn our_streaming_writer_agrees_with_an_independent_jcs_implementation() {
    let samples = [
        json!({"b": 1, "a": [true, false, null, "x\u{1}\u{1f}\"\\/\u{7f}é€😀"], "c": {"z": -0.5, "y": 1e-7}}),
        json!({"\u{e000}": 1, "\u{1f600}": 2, "a": 3, "ä": {"nested": [1.5, -2, 3e21, 123456789012u64]}}),
        json!([
            [],
            {},
            "",
            0,
            -1,
            1.0,
            0.1,
            100,
            -9007199254740992i64,
            9007199254740992u64
        ]),
        json!({"orderId": "ord_42", "amount": 649, "reason": "damaged item", "tags": ["a", "b"]}),
    ];
    for v in samples {
        assert_eq!(
            canonical_json(&v).unwrap(),
            serde_json_canonicalizer::to_string(&v).unwrap(),
            "{v}"
        );
    }
}

#[test]
fn integers_beyond_2_pow_53_hash_as_the_double_a_javascript_peer_parses() {
    let big: Value = serde_json::from_str("9007199254740993").unwrap();
    assert_eq!(canonical_json(&big).unwrap(), "9007199254740992");
    let too_deep = (0..200).fold(json!(1), |acc, _| json!([acc]));
    assert!(input_hash(&too_deep).is_err());
}
