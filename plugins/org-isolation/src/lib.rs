//! org-isolation: an actor attribute must equal a value found in the input or the context.
//!
//! Config: `{"actorAttribute": "/orgId", "inputPath": "/orgId"}` or
//! `{"actorAttribute": "/orgId", "contextPath": "/orgId"}`; optional `"onMismatch": "deny"`
//! (default) or `"hide"`, `"message"` (public deny message) and `"allowMissing": false`
//! (when the compared value is absent: `false` denies, `true` allows). An actor without the
//! attribute is always refused. During discovery (no input) only a context path is checked.

use capgate_plugin::{Decision, Policy, PolicyRequest, export_policy};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    #[serde(default = "default_attr")]
    actor_attribute: String,
    #[serde(default)]
    input_path: Option<String>,
    #[serde(default)]
    context_path: Option<String>,
    #[serde(default)]
    on_mismatch: OnMismatch,
    #[serde(default = "default_message")]
    message: String,
    #[serde(default)]
    allow_missing: bool,
}

#[derive(Deserialize, Default, PartialEq)]
#[serde(rename_all = "lowercase")]
enum OnMismatch {
    #[default]
    Deny,
    Hide,
}

fn default_attr() -> String {
    "/orgId".into()
}

fn default_message() -> String {
    "This resource belongs to another organization.".into()
}

struct OrgIsolation;

impl Policy for OrgIsolation {
    fn evaluate(request: PolicyRequest) -> Result<Decision, String> {
        let config: Config = request.config()?;
        if config.input_path.is_none() && config.context_path.is_none() {
            return Err("config needs inputPath or contextPath".into());
        }
        let refuse = || match config.on_mismatch {
            OnMismatch::Deny => Decision::Deny {
                code: Some("ORG_MISMATCH".into()),
                message: Some(config.message.clone()),
            },
            OnMismatch::Hide => Decision::Hide,
        };
        let Some(mine) = request.actor.attribute(&config.actor_attribute) else {
            return Ok(refuse());
        };
        let theirs = match (&config.input_path, &config.context_path) {
            (Some(p), _) if request.input_json.is_some() => request.input_value(p),
            (_, Some(p)) => request.context_value(p),
            // Discovery with only an input path: nothing to compare yet.
            (Some(_), None) => return Ok(Decision::Allow),
            (None, None) => None,
        };
        Ok(match theirs {
            Some(v) if v == mine => Decision::Allow,
            Some(_) => refuse(),
            None if config.allow_missing => Decision::Allow,
            None => refuse(),
        })
    }
}

// The config this plugin takes, checked by `capgate check` at load (not here, per call).
capgate_plugin::config_schema!(
    r#"{
        "type": "object",
        "properties": {
            "actorAttribute": { "type": "string", "pattern": "^(/([^~/]|~[01])*)+$", "default": "/orgId" },
            "inputPath": { "type": "string", "pattern": "^(/([^~/]|~[01])*)+$" },
            "contextPath": { "type": "string", "pattern": "^(/([^~/]|~[01])*)+$" },
            "onMismatch": { "enum": ["deny", "hide"], "default": "deny" },
            "message": { "type": "string" },
            "allowMissing": { "type": "boolean", "default": false }
        },
        "additionalProperties": false
    }"#
);

export_policy!(OrgIsolation);
