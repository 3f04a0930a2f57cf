//! legacy-policy: a refund limit built against the frozen `capgate:plugin@0.2.0` policy world,
//! as every policy built before contract 0.3.0 is: it imports no `request` interface and
//! parses the whole input and config it is handed. The host's tests prove such components
//! still load and decide. It holds a call whose `/amount` exceeds the config's `maxAmount`.

wit_bindgen::generate!({
    world: "capgate:plugin/policy-plugin@0.2.0",
    path: "../../../wit",
    generate_all,
});

use exports::capgate::plugin0_1_0::policy::{ApprovalRequirement, Decision, Guest, PolicyRequest};

struct Legacy;

impl Guest for Legacy {
    fn evaluate(request: PolicyRequest) -> Result<Decision, String> {
        let config: serde_json::Value = serde_json::from_str(&request.config)
            .map_err(|e| format!("invalid plugin config: {e}"))?;
        let limit = config["maxAmount"]
            .as_f64()
            .ok_or("config.maxAmount must be a number")?;
        let Some(input) = request.input else {
            return Ok(Decision::Allow);
        };
        let input: serde_json::Value =
            serde_json::from_str(&input).map_err(|e| format!("invalid input: {e}"))?;
        match input["amount"].as_f64() {
            Some(amount) if amount > limit => Ok(Decision::RequireApproval(ApprovalRequirement {
                reason: format!("legacy: refund of {amount} exceeds {limit}"),
                approval_type: None,
                expires_in_ms: None,
            })),
            _ => Ok(Decision::Allow),
        }
    }
}

export!(Legacy);
