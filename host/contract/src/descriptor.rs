//! The contract's data: one capability's portable descriptor, a deployment's contract on
//! its surfaces, and reading a contract file.
//!
//! These are wire types: the gateway serves `PortableCapabilityDescriptor[]` from
//! `describe` and `GET {mount}/contract`, `capgate contract export` prints the same array,
//! and `capgate-client` decodes it (it re-exports these types in its `wire` module).

use capgate_core::actor::Surface;
use capgate_core::meta::{Discovery, Risk, SideEffect};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The descriptor version this crate writes and reads. A contract file of any other
/// version is refused by [`parse_contract`] rather than compared field by field.
pub const CONTRACT_VERSION: u32 = 1;

/// One capability of the portable contract (version 1): what a remote host may know about
/// it. Handlers, credentials, executable policies, domain context and output schemas are
/// left out; the digest still covers the governance around them (see [`crate::export`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortableCapabilityDescriptor {
    /// The descriptor format's version, always [`CONTRACT_VERSION`] when written by
    /// capgate, so a reader can refuse a format it does not know.
    pub version: u32,
    /// The canonical capability id (`orders.refund`), what a call names.
    pub id: String,
    /// The id's dot-separated segments, for hosts that nest tools by namespace.
    pub path: Vec<String>,
    /// The description a model reads to decide whether to call the capability.
    pub description: String,
    /// The full JSON input schema, which the gateway validates every call against.
    pub input_schema: serde_json::Value,
    /// What a call does to the world, so a host can weigh it before calling.
    pub side_effect: SideEffect,
    /// How much harm a wrong call can do, as configured.
    pub risk: Risk,
    /// The capability's tags, which `describe` can be scoped by.
    pub tags: Vec<String>,
    /// Whether calls need approval (static hint, or a discovery policy for this actor).
    pub requires_approval: bool,
    /// `discoverable` (listed to models) or `contextual` (presented by a UI in context;
    /// callable where exposed, left out of model tool lists).
    pub discovery: Discovery,
    /// The resolved tool names, the names models call the capability by.
    pub tool_names: ToolNames,
    /// Digest of this capability's contract: its static meta (incl. exposure and input
    /// schema), the governance manifest (runtime-level policies, its own policies and
    /// redactors by name and phase) and the deployment revision. See [`crate::export`].
    pub contract_digest: String,
}

/// The tool names of one capability per model adapter: a renamed tool breaks every
/// caller that calls it by the old name, so the contract carries both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolNames {
    /// The tool name on the AI SDK (and OpenAI) tool lists.
    pub ai_sdk: String,
    /// The tool name on the MCP server's tool list.
    pub mcp: String,
}

impl ToolNames {
    /// The name a tool list served on `surface` uses: the MCP name on `mcp`, the AI SDK
    /// name everywhere else.
    pub fn on(&self, surface: Surface) -> &str {
        match surface {
            Surface::Mcp => &self.mcp,
            _ => &self.ai_sdk,
        }
    }
}

/// A deployment's contract on one or more surfaces: each surface's descriptors, by the
/// surface's wire name. A contract is per surface (exposure differs between them), so a
/// comparison over several surfaces also sees a capability leave or join one of them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Contract {
    surfaces: BTreeMap<String, Vec<PortableCapabilityDescriptor>>,
}

impl Contract {
    /// The contract on no surface yet; add surfaces with [`Contract::insert`].
    pub fn new() -> Contract {
        Contract::default()
    }

    /// The contract of one surface: what one gateway route serves from
    /// `GET {mount}/contract`, or what `capgate contract export --surface` printed.
    pub fn on(surface: Surface, descriptors: Vec<PortableCapabilityDescriptor>) -> Contract {
        let mut contract = Contract::new();
        contract.insert(surface, descriptors);
        contract
    }

    /// Set `surface`'s descriptors (replacing any it had).
    pub fn insert(&mut self, surface: Surface, descriptors: Vec<PortableCapabilityDescriptor>) {
        self.surfaces
            .insert(surface.as_str().to_string(), descriptors);
    }

    /// The descriptors served on `surface`, if the contract covers it.
    pub fn get(&self, surface: Surface) -> Option<&[PortableCapabilityDescriptor]> {
        self.surfaces.get(surface.as_str()).map(Vec::as_slice)
    }

    /// The surfaces covered, by wire name, in name order.
    pub fn surfaces(&self) -> impl Iterator<Item = &str> {
        self.surfaces.keys().map(String::as_str)
    }

    /// Each covered surface's wire name with its descriptors, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[PortableCapabilityDescriptor])> {
        self.surfaces
            .iter()
            .map(|(s, d)| (s.as_str(), d.as_slice()))
    }
}

impl FromIterator<(Surface, Vec<PortableCapabilityDescriptor>)> for Contract {
    fn from_iter<I: IntoIterator<Item = (Surface, Vec<PortableCapabilityDescriptor>)>>(
        iter: I,
    ) -> Contract {
        let mut contract = Contract::new();
        for (surface, descriptors) in iter {
            contract.insert(surface, descriptors);
        }
        contract
    }
}

/// Why a text is not a contract file (the JSON array `capgate contract export` prints).
/// Each message says where the text went wrong, so it can be shown as it is.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The text is not JSON at all.
    #[error("it is not JSON ({0})")]
    NotJson(#[source] serde_json::Error),
    /// The JSON is not an array.
    #[error("expected a JSON array of capability descriptors, found {found}")]
    NotArray {
        /// What it is instead (`an object`, `a string`, …).
        found: &'static str,
    },
    /// An element is not a descriptor.
    #[error("at `{at}`: {message}")]
    Invalid {
        /// The path of the bad value (`[0].risk`).
        at: String,
        /// What is wrong with it.
        message: String,
    },
    /// A descriptor of a version this crate does not read.
    #[error(
        "[{index}] (`{id}`) is descriptor version {version}, and this capgate reads version {CONTRACT_VERSION}"
    )]
    Version {
        /// The descriptor's place in the array.
        index: usize,
        /// Its capability id.
        id: String,
        /// Its version.
        version: u32,
    },
    /// The same capability twice in one surface's contract.
    #[error("[{index}]: capability `{id}` is listed twice")]
    Duplicate {
        /// The second descriptor's place in the array.
        index: usize,
        /// The capability id.
        id: String,
    },
}

/// A contract file's descriptors (one surface's contract), with a precise reason when the
/// text is not one: not JSON, not an array, a malformed descriptor (with its path), a
/// version other than [`CONTRACT_VERSION`], or a capability listed twice.
pub fn parse_contract(text: &str) -> Result<Vec<PortableCapabilityDescriptor>, ParseError> {
    let value: Value = serde_json::from_str(text).map_err(ParseError::NotJson)?;
    if !value.is_array() {
        return Err(ParseError::NotArray {
            found: kind(&value),
        });
    }
    let descriptors: Vec<PortableCapabilityDescriptor> = serde_path_to_error::deserialize(&value)
        .map_err(|e| ParseError::Invalid {
        at: e.path().to_string(),
        message: e.inner().to_string(),
    })?;
    let mut seen = BTreeSet::new();
    for (index, d) in descriptors.iter().enumerate() {
        if d.version != CONTRACT_VERSION {
            return Err(ParseError::Version {
                index,
                id: d.id.clone(),
                version: d.version,
            });
        }
        if !seen.insert(d.id.as_str()) {
            return Err(ParseError::Duplicate {
                index,
                id: d.id.clone(),
            });
        }
    }
    Ok(descriptors)
}

/// A JSON value's kind, as a message names it.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::descriptor;
    use serde_json::json;

    fn json<T: Serialize>(v: &T) -> Value {
        serde_json::to_value(v).unwrap_or(Value::Null)
    }

    #[test]
    fn a_contract_file_must_be_an_array_of_version_1_descriptors() {
        let err = |text: &str| match parse_contract(text) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted {text}"),
        };
        assert!(
            err("{\"a\":1}")
                .contains("expected a JSON array of capability descriptors, found an object")
        );
        assert!(err("revision = 1").contains("not JSON"));
        assert!(
            err("[{\"id\":\"x\"}]").contains("at `[0]`"),
            "{}",
            err("[{\"id\":\"x\"}]")
        );
        let mut d = json(&descriptor("a.b"));
        d["version"] = json!(2);
        assert!(err(&Value::Array(vec![d]).to_string()).contains("version 2"));
        let d = json(&descriptor("a.b"));
        assert!(err(&Value::Array(vec![d.clone(), d]).to_string()).contains("listed twice"));
        let ok = Value::Array(vec![json(&descriptor("a.b"))]).to_string();
        assert!(parse_contract(&ok).is_ok());
    }

    #[test]
    fn a_contract_keys_its_surfaces_by_wire_name_in_name_order() {
        let c: Contract = [
            (Surface::Workflow, vec![]),
            (Surface::AiSdk, vec![descriptor("a.b")]),
        ]
        .into_iter()
        .collect();
        assert_eq!(c.surfaces().collect::<Vec<_>>(), ["aiSdk", "workflow"]);
        assert_eq!(c.get(Surface::AiSdk).map(<[_]>::len), Some(1));
        assert_eq!(c.get(Surface::Mcp), None);
        let names = &descriptor("a.b").tool_names;
        assert_eq!(names.on(Surface::Mcp), names.mcp);
        assert_eq!(names.on(Surface::Workflow), names.ai_sdk);
    }
}
