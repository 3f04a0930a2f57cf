//! Fixtures the unit tests share: a refund capability's descriptor, contracts of it, and
//! the diff of one edit to it.

use crate::descriptor::{Contract, PortableCapabilityDescriptor, ToolNames};
use crate::diff::{Change, Report, diff};
use capgate_core::actor::Surface;
use capgate_core::meta::{Discovery, Risk, SideEffect};
use serde_json::{Value, json};

/// A version-1 descriptor of a write capability with a three-property input schema.
pub(crate) fn descriptor(id: &str) -> PortableCapabilityDescriptor {
    PortableCapabilityDescriptor {
        version: 1,
        id: id.into(),
        path: id.split('.').map(str::to_string).collect(),
        description: "Refund an order.".into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "orderId": {"type": "string", "minLength": 1},
                "amount": {"type": "number", "minimum": 0, "maximum": 500},
                "reason": {"type": "string", "enum": ["damaged", "late", "other"]}
            },
            "required": ["orderId", "amount"],
            "additionalProperties": false
        }),
        side_effect: SideEffect::Write,
        risk: Risk::High,
        tags: vec!["payments".into()],
        requires_approval: false,
        discovery: Discovery::Discoverable,
        tool_names: ToolNames {
            ai_sdk: id.replace('.', "_"),
            mcp: id.replace('.', "_"),
        },
        contract_digest: "d1".into(),
    }
}

/// A contract of these surfaces' descriptors.
pub(crate) fn contract(surfaces: &[(Surface, Vec<PortableCapabilityDescriptor>)]) -> Contract {
    surfaces.iter().cloned().collect()
}

/// The diff of one capability on aiSdk, before and after `edit`.
pub(crate) fn changed(edit: impl Fn(&mut PortableCapabilityDescriptor)) -> Report {
    let old = descriptor("orders.refund");
    let mut new = old.clone();
    edit(&mut new);
    new.contract_digest = "d2".into();
    diff(
        &contract(&[(Surface::AiSdk, vec![old])]),
        &contract(&[(Surface::AiSdk, vec![new])]),
        "old",
        "new",
    )
}

/// The diff of one edit to the capability's input schema.
pub(crate) fn schema(edit: impl Fn(&mut Value)) -> Report {
    changed(|d| edit(&mut d.input_schema))
}

/// The one change of a report (the test fails unless there is exactly one).
pub(crate) fn only(report: &Report) -> &Change {
    let changes: Vec<&Change> = report
        .capabilities
        .iter()
        .flat_map(|c| &c.changes)
        .collect();
    assert_eq!(changes.len(), 1, "exactly one change: {changes:#?}");
    changes[0]
}
