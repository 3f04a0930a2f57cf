//! Hostile: a redactor whose output is over the host's size cap, or not JSON at all. It
//! implements the raw WIT bindings (not the SDK trait) so it can return arbitrary text.
//!
//! Config `{"mode": "huge", "bytes": 8388608}` (default) or `{"mode": "not-json"}`.

use capgate_plugin::bindings::redactor::capgate::plugin::types::CapabilityInfo;
use capgate_plugin::bindings::redactor::exports::capgate::plugin::redactor::Guest;

struct Raw;

fn answer(config: &str) -> Result<String, String> {
    let config: serde_json::Value = serde_json::from_str(config).unwrap_or_default();
    match config["mode"].as_str() {
        Some("not-json") => Ok("{ this is not json".into()),
        _ => {
            let bytes = config["bytes"].as_u64().unwrap_or(8 << 20) as usize;
            let mut s = String::with_capacity(bytes + 2);
            s.push('"');
            s.extend(std::iter::repeat_n('x', bytes));
            s.push('"');
            Ok(s)
        }
    }
}

impl Guest for Raw {
    fn redact_output(_: CapabilityInfo, _output: String, config: String) -> Result<String, String> {
        answer(&config)
    }
    fn redact_approval_input(
        _: CapabilityInfo,
        _input: String,
        config: String,
    ) -> Result<String, String> {
        answer(&config)
    }
}

capgate_plugin::bindings::redactor::__export_redactor_plugin!(Raw with_types_in capgate_plugin::bindings::redactor);
