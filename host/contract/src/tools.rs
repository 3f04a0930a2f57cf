//! Tool definition exports: the tool list an actor may see, in the shapes agent frameworks
//! take as they are (`GET {mount}/tools`, see docs/gateway.md).
//!
//! - [`ToolFormat::AiSdk`]: a Vercel AI SDK tool set, `{ "<tool name>": { description,
//!   inputSchema, capabilityId } }`; wrap each `inputSchema` in the SDK's `jsonSchema()` and
//!   give it an `execute` that calls the gateway (the `clients/ts` package does both).
//! - [`ToolFormat::OpenAi`]: OpenAI function calling, `[{ "type": "function", "function":
//!   { name, description, parameters } }]`.
//!
//! Names are the registry's AI SDK tool names (`orders.refund` → `orders_refund`, or the
//! configured name); " Requires approval." is appended to a description when the descriptor
//! says so. The export is pure: it lists what `describe` returned and nothing else.
//!
//! The same shapes come from a portable contract ([`export_contract_tools`], what
//! `capgate contract tools` prints), named by the contract's own `toolNames`.

use crate::descriptor::PortableCapabilityDescriptor;
use capgate_core::actor::Surface;
use capgate_core::meta::Discovery;
use capgate_core::registry::Registry;
use capgate_core::runtime::CapabilityDescriptor;
use serde_json::{Map, Value, json};
use std::str::FromStr;

/// Appended to the description of a capability whose calls need approval.
pub const REQUIRES_APPROVAL_SUFFIX: &str = " Requires approval.";

/// The shape of an export: which agent framework's tool list to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolFormat {
    /// Vercel AI SDK tool set (`?format=ai-sdk`).
    AiSdk,
    /// OpenAI function calling (`?format=openai`).
    OpenAi,
}

capgate_core::wire_enum! {
    ToolFormat {
        AiSdk => "ai-sdk",
        OpenAi => "openai",
    }
}

/// An unknown format name (a `?format=` or `--format` value), naming the ones there are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tool format `{0}` (expected ai-sdk or openai)")]
pub struct UnknownToolFormat(pub String);

impl FromStr for ToolFormat {
    type Err = UnknownToolFormat;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            // Aliases beside the wire spelling `ai-sdk`.
            "aiSdk" | "ai_sdk" => Ok(ToolFormat::AiSdk),
            other => ToolFormat::parse(other).ok_or_else(|| UnknownToolFormat(other.to_string())),
        }
    }
}

/// Export descriptors with the registry's AI SDK tool names. A descriptor whose capability
/// is not in the registry is named by the default rule (`.` → `_`).
pub fn export_tools(
    descriptors: &[CapabilityDescriptor],
    registry: &Registry,
    format: ToolFormat,
) -> Value {
    export_tools_named(descriptors, format, |d| {
        registry
            .get(&d.id)
            .map(|c| c.tool_name(Surface::AiSdk).to_string())
            .unwrap_or_else(|| capgate_core::meta::default_tool_name(&d.id))
    })
}

/// Export descriptors, naming each tool with `name` (for callers that hold tool names some
/// other way, e.g. a portable contract's `toolNames.aiSdk`). Contextual capabilities are
/// left out: a UI presents them, a model's tool list does not.
pub fn export_tools_named(
    descriptors: &[CapabilityDescriptor],
    format: ToolFormat,
    name: impl Fn(&CapabilityDescriptor) -> String,
) -> Value {
    let descriptors: Vec<&CapabilityDescriptor> = descriptors
        .iter()
        .filter(|d| d.discovery != Discovery::Contextual)
        .collect();
    match format {
        ToolFormat::AiSdk => {
            let mut set = Map::new();
            for d in descriptors {
                set.insert(
                    name(d),
                    json!({
                        "description": description(d),
                        "inputSchema": object_schema(&d.input_schema),
                        "capabilityId": d.id,
                    }),
                );
            }
            Value::Object(set)
        }
        ToolFormat::OpenAi => Value::Array(
            descriptors
                .iter()
                .map(|&d| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": name(d),
                            "description": description(d),
                            "parameters": object_schema(&d.input_schema),
                        }
                    })
                })
                .collect(),
        ),
    }
}

/// The tool list of a portable contract served on `surface`, in `format`: each
/// descriptor named by its `toolNames` for that surface ([`crate::ToolNames::on`]), with
/// its static approval hint. Like every export, contextual capabilities are left out.
pub fn export_contract_tools(
    contract: &[PortableCapabilityDescriptor],
    surface: Surface,
    format: ToolFormat,
) -> Value {
    let descriptors: Vec<CapabilityDescriptor> = contract
        .iter()
        .map(|p| CapabilityDescriptor {
            id: p.id.clone(),
            description: p.description.clone(),
            input_schema: p.input_schema.clone(),
            side_effect: p.side_effect,
            risk: p.risk,
            tags: p.tags.clone(),
            requires_approval: Some(p.requires_approval),
            discovery: p.discovery,
        })
        .collect();
    export_tools_named(&descriptors, format, |d| {
        contract
            .iter()
            .find(|p| p.id == d.id)
            .map(|p| p.tool_names.on(surface).to_string())
            .unwrap_or_else(|| capgate_core::meta::default_tool_name(&d.id))
    })
}

/// The description a model sees: the capability's own, with
/// [`REQUIRES_APPROVAL_SUFFIX`] when its calls need approval.
pub fn description(d: &CapabilityDescriptor) -> String {
    if d.requires_approval == Some(true) {
        format!("{}{REQUIRES_APPROVAL_SUFFIX}", d.description)
    } else {
        d.description.clone()
    }
}

/// Tool inputs are objects: an object schema passes through (with `type: object` added when
/// absent); anything else becomes the open object schema (the runtime validates the real
/// contract either way).
pub fn object_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut map = map.clone();
            map.entry("type").or_insert_with(|| json!("object"));
            Value::Object(map)
        }
        _ => json!({ "type": "object" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capgate_core::meta::{Risk, SideEffect};

    fn descriptor(id: &str, approval: Option<bool>) -> CapabilityDescriptor {
        CapabilityDescriptor {
            id: id.into(),
            description: "Refund an order.".into(),
            input_schema: json!({"type": "object", "properties": {"amount": {"type": "number"}}}),
            side_effect: SideEffect::Write,
            risk: Risk::High,
            tags: vec![],
            requires_approval: approval,
            discovery: Default::default(),
        }
    }

    fn default_name(d: &CapabilityDescriptor) -> String {
        capgate_core::meta::default_tool_name(&d.id)
    }

    #[test]
    fn ai_sdk_export_is_a_tool_set_keyed_by_tool_name() {
        let v = export_tools_named(
            &[descriptor("orders.refund", Some(true))],
            ToolFormat::AiSdk,
            default_name,
        );
        assert_eq!(
            v["orders_refund"]["description"],
            "Refund an order. Requires approval."
        );
        assert_eq!(v["orders_refund"]["inputSchema"]["type"], "object");
        assert_eq!(v["orders_refund"]["capabilityId"], "orders.refund");
    }

    #[test]
    fn openai_export_lists_functions_without_the_suffix_unless_flagged() {
        let v = export_tools_named(
            &[descriptor("orders.lookup", None)],
            ToolFormat::OpenAi,
            default_name,
        );
        assert_eq!(v[0]["type"], "function");
        assert_eq!(v[0]["function"]["name"], "orders_lookup");
        assert_eq!(v[0]["function"]["description"], "Refund an order.");
        assert_eq!(
            v[0]["function"]["parameters"]["properties"]["amount"]["type"],
            "number"
        );
    }

    #[test]
    fn formats_parse_from_their_query_spelling() {
        assert_eq!("ai-sdk".parse(), Ok(ToolFormat::AiSdk));
        assert_eq!("openai".parse(), Ok(ToolFormat::OpenAi));
        assert_eq!("aiSdk".parse(), Ok(ToolFormat::AiSdk));
        assert_eq!("ai_sdk".parse(), Ok(ToolFormat::AiSdk));
        for f in ToolFormat::ALL {
            assert_eq!(f.as_str().parse(), Ok(f));
        }
        assert!("xml".parse::<ToolFormat>().is_err());
        assert_eq!(object_schema(&json!(true)), json!({"type": "object"}));
    }

    #[test]
    fn a_contract_exports_under_its_own_tool_names_per_surface() {
        let mut d = crate::testing::descriptor("orders.refund");
        d.tool_names.mcp = "refund".into();
        d.requires_approval = true;
        let contract = [d];
        let ai = export_contract_tools(&contract, Surface::AiSdk, ToolFormat::AiSdk);
        assert_eq!(
            ai["orders_refund"]["description"],
            "Refund an order. Requires approval."
        );
        let mcp = export_contract_tools(&contract, Surface::Mcp, ToolFormat::OpenAi);
        assert_eq!(mcp[0]["function"]["name"], "refund");
    }
}
