//! legacy-authorizer: a gateway authorizer exporting `capgate:plugin/authorizer@0.1.0`, as
//! every authorizer built before contract 0.2.0 does (generated straight from the frozen
//! `wit/deps/plugin-0.1.0`), so the host's tests prove such components still load and are
//! asked. It denies when the principal's namespace is in the config's `denyNamespaces` and
//! allows otherwise; the reason names the namespace and operation.

wit_bindgen::generate!({
    world: "capgate:plugin/authorizer-plugin@0.1.0",
    path: "../../../wit",
});

use exports::capgate::plugin0_1_0::authorizer::{Guest, Operation, Principal};

struct Legacy;

impl Guest for Legacy {
    fn authorize(
        principal: Principal,
        operation: Operation,
        _capability_id: Option<String>,
        _input: Option<String>,
        config: String,
    ) -> Result<(), String> {
        let config: serde_json::Value =
            serde_json::from_str(&config).map_err(|e| format!("invalid plugin config: {e}"))?;
        let denied = config["denyNamespaces"]
            .as_array()
            .is_some_and(|list| list.iter().any(|n| n.as_str() == Some(&principal.namespace)));
        if denied {
            return Err(format!(
                "denyNamespaces: namespace {}, operation {operation:?}",
                principal.namespace
            ));
        }
        Ok(())
    }
}

export!(Legacy);
