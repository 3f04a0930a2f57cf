//! state-probe (policy): denies with a code holding every call this instance has seen, so a
//! test can tell a fresh instance (one call, its own marker) from a reused one.

use capgate_plugin::{Decision, Policy, PolicyRequest, Value, export_policy};

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

impl Policy for Probe {
    fn evaluate(request: PolicyRequest) -> Result<Decision, String> {
        let report = record(request.input_value("/marker"));
        Ok(Decision::Deny {
            code: Some(report.to_string()),
            message: None,
        })
    }
}

export_policy!(Probe);
