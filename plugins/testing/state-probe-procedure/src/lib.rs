//! state-probe (procedure): answers every call this instance has seen (the input's `marker`
//! recorded), so a test can tell a fresh instance from a reused one.

use capgate_plugin::{Procedure, ProcedureCall, ProcedureError, Value, export_procedure};

#[path = "../../state-probe-common/record.rs"]
mod record;
use record::record;

struct Probe;

impl Procedure for Probe {
    fn invoke(call: ProcedureCall) -> Result<Value, ProcedureError> {
        Ok(record(call.input.get("marker").cloned()))
    }
}

export_procedure!(Probe);
