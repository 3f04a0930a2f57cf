//! refund-limit: require approval when an amount in the input exceeds a configured maximum.
//!
//! Config: `{"maxAmount": 500, "amountPath": "/amount", "approvalType": "manager",
//! "expiresInMs": 900000}`; only `maxAmount` is required. The reason reads
//! "Refund of $649 exceeds $500". A missing or non-numeric amount is a policy error
//! (fail closed), never a silent allow.

use capgate_plugin::{Decision, Phase, Policy, PolicyRequest, Value, export_policy};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    max_amount: serde_json::Number,
    #[serde(default = "default_path")]
    amount_path: String,
    #[serde(default)]
    approval_type: Option<String>,
    #[serde(default)]
    expires_in_ms: Option<u64>,
    #[serde(default = "default_label")]
    label: String,
}

fn default_path() -> String {
    "/amount".into()
}

fn default_label() -> String {
    "Refund".into()
}

struct RefundLimit;

impl Policy for RefundLimit {
    fn evaluate(request: PolicyRequest) -> Result<Decision, String> {
        let config: Config = request.config()?;
        if request.phase == Phase::Discovery {
            return Ok(Decision::Allow);
        }
        let max = config
            .max_amount
            .as_f64()
            .ok_or("maxAmount is not a number")?;
        let amount = match request.input_value(&config.amount_path) {
            Some(Value::Number(n)) => n,
            Some(_) => return Err(format!("{} is not a number", config.amount_path)),
            None => return Err(format!("input has no {}", config.amount_path)),
        };
        let value = amount.as_f64().ok_or("amount is not a finite number")?;
        Ok(if value > max {
            Decision::RequireApproval {
                reason: format!(
                    "{} of ${amount} exceeds ${}",
                    config.label, config.max_amount
                ),
                approval_type: config.approval_type,
                expires_in_ms: config.expires_in_ms,
            }
        } else {
            Decision::Allow
        })
    }
}

// The config this plugin takes, checked by `capgate check` at load (not here, per call).
capgate_plugin::config_schema!(
    r#"{
        "type": "object",
        "properties": {
            "maxAmount": { "type": "number", "description": "Above this amount, the call needs approval." },
            "amountPath": { "type": "string", "pattern": "^(/([^~/]|~[01])*)+$", "default": "/amount" },
            "approvalType": { "type": "string", "minLength": 1 },
            "expiresInMs": { "type": "integer", "minimum": 0 },
            "label": { "type": "string", "default": "Refund" }
        },
        "required": ["maxAmount"],
        "additionalProperties": false
    }"#
);

export_policy!(RefundLimit);
