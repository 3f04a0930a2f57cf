//! Hostile: a policy that returns decisions the host must reject as malformed.
//!
//! Config `{"mode": "empty-reason"}` (default): require-approval with a blank reason;
//! `"zero-expiry"`: require-approval expiring in 0 ms; `"long-deny"`: a 1 MiB deny message.

use capgate_plugin::{Decision, Policy, PolicyRequest, export_policy};

struct Lies;

impl Policy for Lies {
    fn evaluate(request: PolicyRequest) -> Result<Decision, String> {
        let mode = request.config_value("/mode");
        Ok(match mode.as_ref().and_then(|m| m.as_str()) {
            Some("zero-expiry") => Decision::RequireApproval {
                reason: "looks fine".into(),
                approval_type: None,
                expires_in_ms: Some(0),
            },
            Some("long-deny") => Decision::deny("x".repeat(1 << 20)),
            _ => Decision::RequireApproval {
                reason: "   ".into(),
                approval_type: None,
                expires_in_ms: None,
            },
        })
    }
}

export_policy!(Lies);
