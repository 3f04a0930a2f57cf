//! The properties of capgate's fuzz targets, one function per target, each taking the
//! fuzzer's bytes and panicking when its property does not hold (a panic is a bug: either in
//! capgate or in the property).
//!
//! Two drivers call them: libFuzzer through the thin wrappers in `fuzz/fuzz_targets/`
//! (`cargo +nightly fuzz run <target>`, or `cargo xtask fuzz`), and the stable test
//! `tests/all/corpora.rs`, which replays every checked-in file of `fuzz/corpus/<target>/` in
//! the workspace suite. See docs/contributing/reliability.md.
//!
//! | target | what it holds |
//! |---|---|
//! | [`canonical`] | canonical JSON equals `serde_json_canonicalizer`'s (or both refuse); the hash is SHA-256 of it; it is a fixed point |
//! | [`config`] | the loader `capgate check` runs never panics and refuses only with located problems |
//! | [`gateway_bodies`] | every gateway request body: parse → check never panics, accepted values round-trip; response bodies round-trip |
//! | [`approvals_bodies`] | the approvals API's decision body and approval view, likewise |
//! | [`mcp_messages`] | MCP JSON-RPC messages (rmcp's client and server message types) round-trip |
//! | [`plugin_outputs`] | the host's decoding of decisions, redacted values, procedure results and errors never panics and keeps its bounds |

use arbitrary::{Arbitrary, Unstructured};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::path::Path;

/// A target: the fuzzer's bytes in, a panic when its property fails.
pub type Target = fn(&[u8]);

/// The targets by name, for the corpus replay.
pub const TARGETS: &[(&str, Target)] = &[
    ("canonical", canonical),
    ("config", config),
    ("gateway_bodies", gateway_bodies),
    ("approvals_bodies", approvals_bodies),
    ("mcp_messages", mcp_messages),
    ("plugin_outputs", plugin_outputs),
];

/// Canonical JSON and the input hash (SI-5) against an independent RFC 8785
/// implementation: for any JSON document both produce the same bytes or both refuse; the
/// input hash is the SHA-256 of those bytes; and canonical JSON, parsed again, canonicalizes
/// to itself.
pub fn canonical(data: &[u8]) {
    use capgate_core::canonical::{canonical_json, input_hash, sha256_hex};
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let ours = canonical_json(&value);
    let oracle = serde_json_canonicalizer::to_string(&as_doubles(&value));
    match (&ours, &oracle) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "canonical JSON differs from the oracle's"),
        (Err(_), Err(_)) => {}
        (a, b) => panic!("one side refused: ours {a:?}, oracle {b:?}"),
    }
    let hash = input_hash(&value);
    match (&ours, &hash) {
        (Ok(c), Ok(h)) => assert_eq!(&sha256_hex(c), h, "input hash is not SHA-256 of it"),
        (Err(_), Err(_)) => {}
        (c, h) => panic!("canonical_json and input_hash disagree: {c:?} / {h:?}"),
    }
    if let Ok(c) = ours {
        let again: serde_json::Value = match serde_json::from_str(&c) {
            Ok(v) => v,
            Err(e) => panic!("canonical JSON does not parse: {e}: {c}"),
        };
        match canonical_json(&again) {
            Ok(c2) => assert_eq!(c, c2, "canonical JSON is not a fixed point"),
            Err(e) => panic!("canonical JSON refused the second time: {e}"),
        }
    }
}

/// `value` with every integer beyond ±2^53 replaced by the double it rounds to. RFC 8785
/// serializes numbers as IEEE-754 doubles (what a JavaScript peer parsed them into, and
/// what capgate hashes); the oracle prints 64-bit integers exactly instead, so it is given
/// the doubles.
fn as_doubles(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    const EXACT: u64 = 1 << 53;
    match value {
        Value::Number(n) => {
            let beyond = n.as_u64().is_some_and(|u| u > EXACT)
                || n.as_i64().is_some_and(|i| i.unsigned_abs() > EXACT);
            match (beyond, n.as_f64().and_then(serde_json::Number::from_f64)) {
                (true, Some(d)) => Value::Number(d),
                _ => value.clone(),
            }
        }
        Value::Array(items) => Value::Array(items.iter().map(as_doubles).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), as_doubles(v)))
                .collect(),
        ),
        _ => value.clone(),
    }
}

/// The configuration loader `capgate check` and `serve` start with (syntax, types,
/// references, value ranges): never panics, and a refusal is at least one problem, each
/// located in the file (`file:line:column`, line and column inside the text).
pub fn config(data: &[u8]) {
    use capgate_config::Config;
    // `capgate check` reads the file as UTF-8 (anything else is one located problem
    // before parsing); relative paths in it resolve under a directory that does not exist,
    // so no schema or key file is ever read.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("/nonexistent-capgate-fuzz/capgate.toml");
    let lines: Vec<&str> = text.split('\n').collect();
    match Config::parse(path, text.to_owned()) {
        Ok(_) => {}
        Err(problems) => {
            assert!(!problems.is_empty(), "refused without a problem");
            for p in &problems {
                assert_eq!(p.file, path, "problem in another file: {p}");
                assert!(p.line >= 1 && p.column >= 1, "unlocated problem: {p}");
                assert!(p.line <= lines.len(), "line past the end: {p}");
                let width = lines[p.line - 1].chars().count();
                assert!(p.column <= width + 1, "column past the line's end: {p}");
                assert!(!p.message.is_empty(), "problem without a message: {p}");
            }
        }
    }
}

/// Serialize `value` and parse it back with `parse`: it must be accepted and equal.
fn round_trip<T: Serialize + PartialEq + Debug>(
    what: &str,
    value: &T,
    parse: impl Fn(&[u8]) -> Result<T, String>,
) {
    let bytes = match serde_json::to_vec(value) {
        Ok(b) => b,
        Err(e) => panic!("{what}: an accepted value does not serialize: {e}: {value:?}"),
    };
    match parse(&bytes) {
        Ok(back) => assert_eq!(&back, value, "{what}: round trip changed the value"),
        Err(e) => panic!(
            "{what}: its own serialization is refused: {e}: {}",
            String::from_utf8_lossy(&bytes)
        ),
    }
}

/// A request body through its door's admission, and back if accepted.
fn door_body<T>(data: &[u8])
where
    T: capgate_gateway::door::WireBody + Serialize + PartialEq + Debug,
{
    use capgate_gateway::door::admit_body;
    if let Ok(v) = admit_body::<T>(data) {
        round_trip(T::OPERATION, &v, admit_body::<T>);
    }
}

/// A body a client reads (parsed by serde alone), and back if accepted.
fn plain_body<T: DeserializeOwned + Serialize + PartialEq + Debug>(what: &str, data: &[u8]) {
    let parse = |b: &[u8]| serde_json::from_slice::<T>(b).map_err(|e| e.to_string());
    if let Ok(v) = parse(data) {
        round_trip(what, &v, parse);
    }
}

/// Every body of the capability gateway: the five request bodies through the doors'
/// admission (parse → check never panics; what is accepted serializes and is accepted
/// again, equal), and the answers its Rust client parses (outcome, receipt, descriptors,
/// error body), which must round-trip too.
pub fn gateway_bodies(data: &[u8]) {
    use capgate_gateway::wire::*;
    door_body::<DescribeBody>(data);
    door_body::<InvokeBody>(data);
    door_body::<GetInvocationBody>(data);
    door_body::<GetApprovalBody>(data);
    door_body::<ResumeApprovalBody>(data);
    plain_body::<CapabilityOutcome>("CapabilityOutcome", data);
    plain_body::<Option<InvocationReceipt>>("InvocationReceipt", data);
    plain_body::<Vec<PortableCapabilityDescriptor>>("PortableCapabilityDescriptor[]", data);
    plain_body::<GatewayErrorBody>("GatewayErrorBody", data);
}

/// The human approvals API: the decision body through its door's admission, and the
/// approval view (what the console and `capgate approvals` read), both round-tripping.
pub fn approvals_bodies(data: &[u8]) {
    use capgate_gateway::approvals_api::{ApprovalView, DecisionBody};
    door_body::<DecisionBody>(data);
    plain_body::<ApprovalView>("ApprovalView", data);
    plain_body::<Vec<ApprovalView>>("ApprovalView[]", data);
}

/// MCP JSON-RPC messages as the gateway's MCP server receives them (rmcp's
/// `ClientJsonRpcMessage`, what its transports decode) and as it sends them
/// (`ServerJsonRpcMessage`): parsing never panics, and an accepted message serializes to
/// JSON that parses into a message with the same JSON.
pub fn mcp_messages(data: &[u8]) {
    use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
    json_round_trip::<ClientJsonRpcMessage>("ClientJsonRpcMessage", data);
    json_round_trip::<ServerJsonRpcMessage>("ServerJsonRpcMessage", data);
}

/// For types without `PartialEq`: parsing the bytes never panics, and the JSON of a parsed
/// value is stable under re-parsing.
///
/// The round trip starts from the document with duplicate keys resolved as serde_json's
/// `Value` does (the last wins): on the raw text a repeated key is a "duplicate field"
/// error inside rmcp's untagged result types, which then fall through to another variant
/// (fuzz/corpus/mcp_messages/duplicate-key-result.json), so the raw text and its de-duplicated
/// JSON may legitimately parse as different variants.
fn json_round_trip<T: DeserializeOwned + Serialize>(what: &str, data: &[u8]) {
    if serde_json::from_slice::<T>(data).is_err() {
        return;
    }
    let doc: serde_json::Value = match serde_json::from_slice(data) {
        Ok(d) => d,
        Err(e) => panic!("{what}: accepted bytes that are not a JSON document: {e}"),
    };
    let Ok(v) = serde_json::from_value::<T>(doc) else {
        return;
    };
    let first = match serde_json::to_value(&v) {
        Ok(j) => j,
        Err(e) => panic!("{what}: an accepted message does not serialize: {e}"),
    };
    let back: T = match serde_json::from_value(first.clone()) {
        Ok(b) => b,
        Err(e) => panic!("{what}: its own serialization is refused: {e}: {first}"),
    };
    match serde_json::to_value(&back) {
        Ok(second) => assert_eq!(first, second, "{what}: round trip changed the message"),
        Err(e) => panic!("{what}: re-parsed message does not serialize: {e}"),
    }
}

/// A string from the fuzzer, sometimes repeated past the host's 4 KiB field bound.
fn text(u: &mut Unstructured<'_>) -> arbitrary::Result<String> {
    let s = String::arbitrary(u)?;
    let times = if bool::arbitrary(u)? {
        1
    } else {
        usize::from(u8::arbitrary(u)?).max(1) * 64
    };
    Ok(s.repeat(times))
}

fn opt_text(u: &mut Unstructured<'_>) -> arbitrary::Result<Option<String>> {
    Ok(if bool::arbitrary(u)? {
        Some(text(u)?)
    } else {
        None
    })
}

/// The host's decoding of what plugins return ([`capgate_wasm::decode`], the code every
/// Wasm call runs): a policy decision is accepted only within its bounds and valid; a
/// redacted value or procedure output only within the binding's output cap, and then it is
/// JSON that round-trips; a procedure's error keeps the stage-11 mapping and its `data` only
/// when it is JSON.
pub fn plugin_outputs(data: &[u8]) {
    let mut u = Unstructured::new(data);
    // Out of bytes is the end of this input, not a failure.
    let _ = plugin_output(&mut u);
}

fn plugin_output(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    use capgate_core::policy::PolicyDecision;
    use capgate_core::procedure::ProcedureError;
    use capgate_wasm::decode::{self, *};
    match u8::arbitrary(u)? % 3 {
        0 => {
            let d = match u8::arbitrary(u)? % 4 {
                0 => Decision::Allow,
                1 => Decision::Hide,
                2 => Decision::Deny(Denial {
                    code: opt_text(u)?,
                    message: opt_text(u)?,
                }),
                _ => Decision::RequireApproval(ApprovalRequirement {
                    reason: text(u)?,
                    approval_type: opt_text(u)?,
                    expires_in_ms: Option::<u64>::arbitrary(u)?,
                }),
            };
            if let Ok(d) = decode::policy_decision(d) {
                assert_eq!(d.validate(), Ok(()), "accepted an invalid decision: {d:?}");
                let fields: Vec<&String> = match &d {
                    PolicyDecision::Deny { code, message } => {
                        code.iter().chain(message.iter()).collect()
                    }
                    PolicyDecision::RequireApproval {
                        reason,
                        approval_type,
                        ..
                    } => std::iter::once(reason)
                        .chain(approval_type.iter())
                        .collect(),
                    _ => Vec::new(),
                };
                assert!(
                    fields.iter().all(|f| f.len() <= MAX_DECISION_FIELD),
                    "accepted a field over {MAX_DECISION_FIELD} bytes"
                );
                round_trip("PolicyDecision", &d, |b| {
                    serde_json::from_slice(b).map_err(|e| e.to_string())
                });
            }
        }
        1 => {
            let cap = usize::from(u16::arbitrary(u)?);
            // The plugin's string as it crossed the boundary (always UTF-8 there).
            let Ok(s) = std::str::from_utf8(u.bytes(u.len())?) else {
                return Ok(());
            };
            if let Ok(v) = decode::plugin_json(s, cap) {
                assert!(
                    s.len() <= cap,
                    "accepted {} bytes over a cap of {cap}",
                    s.len()
                );
                round_trip("plugin JSON", &v, |b| {
                    serde_json::from_slice(b).map_err(|e| e.to_string())
                });
            }
        }
        _ => {
            let e = match u8::arbitrary(u)? % 4 {
                0 => GuestProcedureError::Defined(DefinedError {
                    code: text(u)?,
                    message: text(u)?,
                    data: opt_text(u)?,
                    retryable: bool::arbitrary(u)?,
                }),
                1 => GuestProcedureError::Unauthorized(text(u)?),
                2 => GuestProcedureError::Forbidden(text(u)?),
                _ => GuestProcedureError::Internal(text(u)?),
            };
            let sent = format!("{e:?}");
            let (kind, data) = match &e {
                GuestProcedureError::Defined(d) => ("defined", d.data.clone()),
                GuestProcedureError::Unauthorized(_) => ("unauthorized", None),
                GuestProcedureError::Forbidden(_) => ("forbidden", None),
                GuestProcedureError::Internal(_) => ("internal", None),
            };
            let mapped = decode::procedure_error(e);
            let (got, kept) = match &mapped {
                ProcedureError::Defined { data, .. } => ("defined", data.is_some()),
                ProcedureError::Unauthorized(_) => ("unauthorized", false),
                ProcedureError::Forbidden(_) => ("forbidden", false),
                ProcedureError::Internal(_) => ("internal", false),
                other => panic!("mapped {sent} to {other:?}"),
            };
            assert_eq!(kind, got, "mapped {sent} to {mapped:?}");
            let json = data.is_some_and(|s| serde_json::from_str::<serde_json::Value>(&s).is_ok());
            assert_eq!(kept, json, "data kept iff it is JSON: {sent}");
        }
    }
    Ok(())
}
