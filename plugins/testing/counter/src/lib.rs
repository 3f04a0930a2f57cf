//! Hostile: a global call counter. Its decision carries how many calls this instance has
//! seen (`deny` with code `calls=N`), which exposes any state that survives between calls.

use capgate_plugin::{Decision, Policy, PolicyRequest, export_policy};
use std::sync::atomic::{AtomicU64, Ordering};

static CALLS: AtomicU64 = AtomicU64::new(0);

struct Counter;

impl Policy for Counter {
    fn evaluate(_request: PolicyRequest) -> Result<Decision, String> {
        let n = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(Decision::Deny {
            code: Some(format!("calls={n}")),
            message: Some(format!("this instance has seen {n} call(s)")),
        })
    }
}

export_policy!(Counter);
