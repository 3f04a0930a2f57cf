//! state-probe (policy): denies with a code holding every call this instance has seen, so a
//! test can tell a fresh instance (one call, its own marker) from a reused one.

use capgate_plugin::{Decision, Policy, PolicyRequest, export_policy};

#[path = "../../state-probe-common/record.rs"]
mod record;
use record::record;

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
