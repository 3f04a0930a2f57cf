//! side-effect-gate: refuse capabilities with given side effects on model-facing surfaces.
//!
//! Config: `{"sideEffects": ["destructive"], "surfaces": ["aiSdk", "mcp"],
//! "action": "deny" | "hide", "message": "..."}`. `surfaces` defaults to the
//! model-facing ones; `action` defaults to `deny`. Capabilities tagged with one of
//! `allowTags` pass.

use capgate_plugin::{Decision, Policy, PolicyRequest, SideEffect, Surface, export_policy};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    #[serde(default = "default_effects")]
    side_effects: Vec<SideEffect>,
    #[serde(default)]
    surfaces: Option<Vec<Surface>>,
    #[serde(default)]
    action: Action,
    #[serde(default = "default_message")]
    message: String,
    #[serde(default)]
    allow_tags: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "lowercase")]
enum Action {
    #[default]
    Deny,
    Hide,
}

fn default_effects() -> Vec<SideEffect> {
    vec![SideEffect::Destructive]
}

fn default_message() -> String {
    "This operation is not available to assistants.".into()
}

struct SideEffectGate;

impl Policy for SideEffectGate {
    fn evaluate(request: PolicyRequest) -> Result<Decision, String> {
        let config: Config = request.config()?;
        let surface_gated = match &config.surfaces {
            Some(list) => list.contains(&request.surface),
            None => request.surface.is_model_facing(),
        };
        let exempt = request
            .capability
            .tags
            .iter()
            .any(|t| config.allow_tags.contains(t));
        if surface_gated
            && !exempt
            && config
                .side_effects
                .contains(&request.capability.side_effect)
        {
            return Ok(match config.action {
                Action::Deny => Decision::Deny {
                    code: Some("SIDE_EFFECT_GATED".into()),
                    message: Some(config.message),
                },
                Action::Hide => Decision::Hide,
            });
        }
        Ok(Decision::Allow)
    }
}

// The config this plugin takes, checked by `capgate check` at load (not here, per call).
capgate_plugin::config_schema!(
    r#"{
        "type": "object",
        "properties": {
            "sideEffects": { "type": "array", "items": { "enum": ["none", "read", "write", "destructive", "external"] } },
            "surfaces": { "type": "array", "items": { "enum": ["direct", "aiSdk", "mcp", "workflow", "test"] } },
            "action": { "enum": ["deny", "hide"], "default": "deny" },
            "message": { "type": "string" },
            "allowTags": { "type": "array", "items": { "type": "string" } }
        },
        "additionalProperties": false
    }"#
);

export_policy!(SideEffectGate);
