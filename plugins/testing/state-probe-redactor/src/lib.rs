//! state-probe (redactor): replaces the output by every call this instance has seen (the
//! output's `marker` recorded), so a test can tell a fresh instance from a reused one.

use capgate_plugin::{CapabilityInfo, Redactor, Value, export_redactor};

/// Every marker this instance has been handed, on the heap; its length counts the calls in a
/// global. A fresh instance answers `{"calls": 1, "seen": [its own marker]}`.
static SEEN: std::sync::Mutex<Vec<Value>> = std::sync::Mutex::new(Vec::new());
static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn record(marker: Option<Value>) -> Value {
    let calls = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    seen.push(marker.unwrap_or(Value::Null));
    serde_json::json!({ "calls": calls, "seen": *seen })
}

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
