//! Testing procedure for the stall watchdog. It burns CPU in steps (Wasm has no clock or
//! sleep here) and reports progress after each step; with `silentAfter` set it stops
//! reporting after that many steps and keeps working, silent. Input:
//! `{"steps": 40, "spinPerStep": 3000000, "silentAfter": null}`.

use capgate_plugin::{
    Procedure, ProcedureCall, ProcedureError, Value, export_procedure, report_progress,
};

struct Progress;

fn spin(n: u64) {
    let mut acc: u64 = 0;
    for i in 0..n {
        acc = std::hint::black_box(acc.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    std::hint::black_box(acc);
}

impl Procedure for Progress {
    fn invoke(call: ProcedureCall) -> Result<Value, ProcedureError> {
        let num = |k: &str, d: u64| call.input.get(k).and_then(Value::as_u64).unwrap_or(d);
        let steps = num("steps", 40);
        let per_step = num("spinPerStep", 3_000_000);
        let silent_after = call.input.get("silentAfter").and_then(Value::as_u64);
        for step in 1..=steps {
            spin(per_step);
            if silent_after.is_none_or(|s| step <= s) {
                report_progress(&serde_json::json!({ "step": step, "of": steps }));
            }
        }
        Ok(serde_json::json!({ "steps": steps }))
    }
}

export_procedure!(Progress);
