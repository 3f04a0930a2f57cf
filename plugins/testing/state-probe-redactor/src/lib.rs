//! state-probe (redactor): replaces the output by every call this instance has seen (the
//! output's `marker` recorded), so a test can tell a fresh instance from a reused one.

use capgate_plugin::{CapabilityInfo, Redactor, Value, export_redactor};

#[path = "../../state-probe-common/record.rs"]
mod record;
use record::record;

struct Probe;

impl Redactor for Probe {
    fn redact_output(
        _capability: CapabilityInfo,
        output: Value,
        _config: Value,
    ) -> Result<Value, String> {
        Ok(record(output.get("marker").cloned()))
    }
}

export_redactor!(Probe);
