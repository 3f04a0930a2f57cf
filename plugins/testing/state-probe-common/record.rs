//! What every Rust `state-probe` plugin records: each marker its instance has been handed, on
//! the heap, and the number of calls, in a global. A fresh instance answers
//! `{"calls": 1, "seen": [its own marker]}`. Included by each probe with `#[path]`.

use capgate_plugin::{Value, json};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

static SEEN: Mutex<Vec<Value>> = Mutex::new(Vec::new());
static CALLS: AtomicU64 = AtomicU64::new(0);

/// Record one call handed `marker`; the instance's report so far.
pub fn record(marker: Option<Value>) -> Value {
    let calls = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    seen.push(marker.unwrap_or(Value::Null));
    json!({ "calls": calls, "seen": *seen })
}
