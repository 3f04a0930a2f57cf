//! The JSON Schema of `capgate.toml` (docs/capgate.schema.json): current, accepting the
//! shipped configurations, refusing what `capgate check` refuses for a name, a type or a
//! range, and in step with the settings other crates deserialize.

use crate::keys::{check_generated, repo};
use capgate_config::keys::{self, KeyDefault};
use capgate_config::schema::{self, Schema};
use serde_json::{Value, json};

fn validator() -> jsonschema::Validator {
    jsonschema::validator_for(&schema::json_schema()).expect("the schema compiles")
}

/// The errors of `instance`, as `pointer: message` lines.
fn errors(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    validator
        .iter_errors(instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

#[test]
fn the_checked_in_schema_is_generated_from_the_declarations() {
    check_generated("docs/capgate.schema.json", &schema::json_schema_text());
    // And it is a draft 2020-12 schema the validator accepts.
    let text = std::fs::read_to_string(repo().join("docs/capgate.schema.json")).expect("read");
    let schema: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    jsonschema::validator_for(&schema).expect("compiles");
}

#[test]
fn the_shipped_configurations_validate() {
    let validator = validator();
    let mut checked = 0;
    for file in [
        "examples/customer-support/capgate.template.toml",
        // Generated from the template by `cargo xtask demo`; absent in a fresh checkout.
        "examples/customer-support/capgate.toml",
        // The ConfigMap of the Kubernetes manifests.
        "deploy/kubernetes/base/capgate.toml",
    ] {
        let path = repo().join(file);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let doc = capgate_config::Located::parse(&path, text).expect("TOML");
        let found = errors(&validator, &doc.json);
        assert!(found.is_empty(), "{file}: {found:#?}");
        checked += 1;
    }
    assert!(checked >= 1, "no shipped configuration found");
}

#[test]
fn the_schema_refuses_unknown_keys_wrong_types_and_values_out_of_range() {
    let validator = validator();
    let sound = json!({
        "revision": "r1",
        "runtime": { "timeoutMs": 5000 },
        "plugins": { "p": { "path": "p.wasm", "sha256": "00", "isolation": "pooled", "reserve": 64 } },
        "policies": { "limit": { "plugin": "p", "mode": "shadow", "config": { "max": 5 } } },
        "capabilities": [{
            "id": "orders.refund",
            "description": "Refund an order.",
            "expose": { "aiSdk": true },
            "sideEffect": "write",
            "risk": "high",
            "retry": { "maxAttempts": 2, "retryOn": ["TIMEOUT"] },
            "procedure": { "http": { "target": "orders", "url": "http://orders/refund" } },
        }],
        "gateway": {
            "authorize": { "plugin": "p" },
            "console": { "secureCookie": false },
            "routes": [{ "path": "/agent", "surface": "aiSdk" }],
        },
    });
    let found = errors(&validator, &sound);
    assert!(found.is_empty(), "{found:#?}");
    assert!(validator.is_valid(&json!({ "gateway": { "authorize": "authenticated" } })));

    let refused = |broken: Value, at: &str| {
        let found = errors(&validator, &broken);
        assert!(
            found.iter().any(|e| e.starts_with(&format!("{at}: "))),
            "{broken} should be refused at {at}: {found:#?}"
        );
    };
    // A misspelt key, at any depth, and a section capgate does not have.
    refused(
        json!({ "gateway": { "lisen": "127.0.0.1:80" } }),
        "/gateway",
    );
    refused(json!({ "gateways": {} }), "");
    refused(
        json!({ "plugins": { "p": { "path": "p.wasm", "config": {} } } }),
        "/plugins/p",
    );
    // Out of a declared range, and out of the type's own.
    refused(
        json!({ "runtime": { "timeoutMs": 0 } }),
        "/runtime/timeoutMs",
    );
    refused(
        json!({ "runtime": { "timeoutMs": 31_536_000_001_u64 } }),
        "/runtime/timeoutMs",
    );
    refused(
        json!({ "plugins": { "p": { "path": "p.wasm", "reserve": 65 } } }),
        "/plugins/p/reserve",
    );
    refused(
        json!({ "gateway": { "rateLimit": { "principalBurst": -1 } } }),
        "/gateway/rateLimit/principalBurst",
    );
    // A wrong type, a spelling no enum has, a required key left out.
    refused(json!({ "gateway": { "listen": 8080 } }), "/gateway/listen");
    refused(
        json!({ "plugins": { "p": { "path": "p.wasm", "isolation": "shared" } } }),
        "/plugins/p/isolation",
    );
    refused(
        json!({ "gateway": { "console": { "secureCookie": "yes" } } }),
        "/gateway/console/secureCookie",
    );
    refused(
        json!({ "gateway": { "authorize": "anyone" } }),
        "/gateway/authorize",
    );
    refused(
        json!({ "plugins": { "p": { "sha256": "00" } } }),
        "/plugins/p",
    );
    refused(
        json!({ "capabilities": [{ "id": "x", "description": "d", "expose": {}, "sideEffect": "read", "risk": "low" }] }),
        "/capabilities/0",
    );
}

#[test]
fn every_default_is_a_value_its_key_accepts() {
    for key in keys::all() {
        let KeyDefault::Value(default) = &key.default else {
            continue;
        };
        // The key's own schema, with its range: what `schema::table` makes of it.
        let mut one = key.clone();
        one.pointer = "/k".into();
        let table = schema::table(&[one]);
        let validator = jsonschema::validator_for(&table["properties"]["k"]).expect("compiles");
        assert!(
            validator.is_valid(default),
            "{}: the default {default} is refused by its own schema {}",
            key.pointer,
            table["properties"]["k"]
        );
    }
}

#[test]
fn the_schema_keeps_to_keywords_every_draft_since_4_reads_alike() {
    fn walk(v: &Value, at: &str) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    assert!(
                        !matches!(
                            k.as_str(),
                            "const"
                                | "exclusiveMinimum"
                                | "exclusiveMaximum"
                                | "$defs"
                                | "prefixItems"
                        ) || at.ends_with("/properties"),
                        "{at}/{k}: not read the same by a draft 4 validator (Taplo)"
                    );
                    walk(v, &format!("{at}/{k}"));
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, at)),
            _ => {}
        }
    }
    walk(&schema::json_schema(), "");
}

/// The settings other crates deserialize inside a section have their keys declared field
/// for field in `capgate_config::model::declared` (or are the file's own types); each is
/// checked here against a value with every field written (a struct literal, so a new field
/// stops this from compiling until it is written here and declared there too).
#[test]
fn the_schemas_of_other_crates_settings_accept_every_field() {
    use capgate_core::meta::{AdapterNames, ApprovalConfig, Expose, RetryConfig};
    fn accepts<T: Schema + serde::Serialize>(value: T) {
        let instance = serde_json::to_value(&value).expect("serialize");
        let schema = T::schema();
        let validator = jsonschema::validator_for(&schema).expect("compiles");
        let found = errors(&validator, &instance);
        assert!(found.is_empty(), "{instance} against {schema}: {found:#?}");
        // Every field serialized is a property of the schema.
        for field in instance.as_object().expect("an object").keys() {
            assert!(
                schema["properties"].get(field).is_some(),
                "{field} has no schema"
            );
        }
    }
    accepts(Expose {
        direct: Some(true),
        ai_sdk: Some(true),
        mcp: Some(false),
        workflow: Some(true),
        test: Some(true),
    });
    accepts(RetryConfig {
        max_attempts: 3,
        backoff_ms: Some(100),
        retry_on: Some(capgate_core::error::ErrorCode::ALL.to_vec()),
    });
    accepts(ApprovalConfig {
        required: true,
        approval_type: Some("manager".into()),
        expires_in_ms: Some(60_000),
    });
    accepts(AdapterNames {
        ai_sdk: Some("refund".into()),
        mcp: Some("refund".into()),
    });
    accepts(capgate_config::HttpProcedureSection {
        target: "orders".into(),
        url: "http://orders/refund".into(),
        health_url: Some("http://orders/health".into()),
        headers: [(
            "x-key".to_string(),
            capgate_config::SecretString("v".into()),
        )]
        .into(),
        connect_timeout_ms: Some(1000),
        ca_file: Some("ca.pem".into()),
        request: Some(capgate_config::HttpRequestSection {
            method: capgate_config::HttpMethod("GET".into()),
            path: "/orders/{orderId}".into(),
            query: vec!["verbose".into()],
            headers: [("X-Tenant".to_string(), "tenant".to_string())].into(),
            body: Some("body".into()),
        }),
        errors: capgate_config::ErrorStatuses(
            [("404".to_string(), "ORDER_NOT_FOUND".to_string())].into(),
        ),
    });
    // The enums by every spelling serde writes.
    for mode in capgate_config::IsolationMode::ALL {
        let spelled = serde_json::to_value(mode).expect("serialize");
        assert!(
            capgate_config::IsolationMode::schema()["enum"]
                .as_array()
                .is_some_and(|e| e.contains(&spelled))
        );
    }
    for mode in capgate_config::PolicyMode::ALL {
        let spelled = serde_json::to_value(mode).expect("serialize");
        assert!(
            capgate_config::PolicyMode::schema()["enum"]
                .as_array()
                .is_some_and(|e| e.contains(&spelled))
        );
    }
}
