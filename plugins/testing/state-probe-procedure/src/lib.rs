//! state-probe (procedure): answers every call this instance has seen (the input's `marker`
//! recorded), so a test can tell a fresh instance from a reused one.

use capgate_plugin::{Procedure, ProcedureCall, ProcedureError, Value, export_procedure};

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

impl Procedure for Probe {
    fn invoke(call: ProcedureCall) -> Result<Value, ProcedureError> {
        Ok(record(call.input.get("marker").cloned()))
    }
}

export_procedure!(Probe);
