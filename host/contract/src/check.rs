//! The start-up check of an agent host: is the contract a gateway serves still the one the
//! host was built against?
//!
//! [`check`] runs the compatibility [`diff`](crate::diff::diff) of the two contracts and
//! sums it up as a [`Compatibility`]: identical, compatible (only additive changes: every
//! call the host makes still works), or breaking (some call may fail or reach something
//! else), with each change and the reason for it.

use crate::descriptor::Contract;
use crate::diff::{CapabilityDiff, Change, Impact, diff};
use std::fmt;

/// What a served contract means for a host built against an expected one.
#[derive(Debug, Clone, PartialEq)]
pub enum Compatibility {
    /// Nothing changed: same capabilities, fields, schemas and digests on the same surfaces.
    Identical,
    /// Only additive changes: every call the expected contract allowed still works. A host
    /// that pins `contractDigest`s may still see `CONTRACT_MISMATCH` until it refreshes them
    /// (a digest-only change is listed here).
    Compatible {
        /// The added and changed capabilities, by id, each with its changes.
        capabilities: Vec<CapabilityDiff>,
    },
    /// At least one change can make a call the host was built to make fail, or reach a
    /// different tool.
    Breaking {
        /// The added, removed and changed capabilities, by id, each with its changes
        /// (additive ones included, so the list is the whole diff).
        capabilities: Vec<CapabilityDiff>,
    },
}

impl Compatibility {
    /// Whether the host can keep running: nothing it relies on breaks.
    pub fn is_compatible(&self) -> bool {
        !matches!(self, Compatibility::Breaking { .. })
    }

    /// Every capability that differs, with its changes (empty when identical).
    pub fn capabilities(&self) -> &[CapabilityDiff] {
        match self {
            Compatibility::Identical => &[],
            Compatibility::Compatible { capabilities }
            | Compatibility::Breaking { capabilities } => capabilities,
        }
    }

    /// The breaking changes only, each with its capability id: what a host logs before it
    /// refuses to start.
    pub fn breaking_changes(&self) -> impl Iterator<Item = (&str, &Change)> {
        self.capabilities().iter().flat_map(|c| {
            c.changes
                .iter()
                .filter(|ch| ch.impact == Impact::Breaking)
                .map(move |ch| (c.id.as_str(), ch))
        })
    }
}

/// One line: `identical`, `compatible (N change(s))`, or `breaking:` followed by each
/// breaking change as `capability: detail`, separated by `; `.
impl fmt::Display for Compatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compatibility::Identical => f.write_str("identical"),
            Compatibility::Compatible { capabilities } => {
                let n: usize = capabilities.iter().map(|c| c.changes.len()).sum();
                write!(f, "compatible ({n} additive change(s))")
            }
            Compatibility::Breaking { .. } => {
                f.write_str("breaking: ")?;
                for (i, (id, change)) in self.breaking_changes().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{id}: {} ({})", change.detail, change.field)?;
                }
                Ok(())
            }
        }
    }
}

/// Compare the contract a host was built against (`expected`) with the one a gateway
/// serves (`served`), over the surfaces either covers, by the rules of [`crate::diff`].
///
/// An agent host calls it at start-up with the contract it shipped with (a file written by
/// `capgate contract export`, read with [`crate::parse_contract`]) and the one the gateway
/// answers `GET {mount}/contract` with (`capgate_client::CapabilityClient::contract`):
///
/// ```
/// use capgate_contract::{Compatibility, Contract, check, parse_contract};
/// use capgate_core::actor::Surface;
/// use serde_json::json;
///
/// let refund = |max: u32| {
///     json!([{
///         "version": 1,
///         "id": "orders.refund",
///         "path": ["orders", "refund"],
///         "description": "Refund an order.",
///         "inputSchema": {
///             "type": "object",
///             "properties": { "amount": { "type": "number", "maximum": max } },
///             "required": ["amount"]
///         },
///         "sideEffect": "write",
///         "risk": "high",
///         "tags": [],
///         "requiresApproval": false,
///         "discovery": "discoverable",
///         "toolNames": { "aiSdk": "orders_refund", "mcp": "orders_refund" },
///         "contractDigest": format!("{max:064}")
///     }])
///     .to_string()
/// };
/// let expected = Contract::on(Surface::AiSdk, parse_contract(&refund(500))?);
///
/// // The same deployment: nothing to do.
/// assert_eq!(check(&expected, &expected), Compatibility::Identical);
///
/// // A higher maximum refuses nothing the host sends.
/// let raised = Contract::on(Surface::AiSdk, parse_contract(&refund(1000))?);
/// assert!(check(&expected, &raised).is_compatible());
///
/// // A lower one may refuse a refund the host was built to ask for.
/// let lowered = Contract::on(Surface::AiSdk, parse_contract(&refund(100))?);
/// let verdict = check(&expected, &lowered);
/// assert!(!verdict.is_compatible());
/// assert_eq!(
///     verdict.to_string(),
///     "breaking: orders.refund: maximum lowered: 500 → 100 \
///      (inputSchema/properties/amount/maximum)"
/// );
/// # Ok::<(), capgate_contract::ParseError>(())
/// ```
pub fn check(expected: &Contract, served: &Contract) -> Compatibility {
    let report = diff(expected, served, "expected", "served");
    if report.breaking {
        Compatibility::Breaking {
            capabilities: report.capabilities,
        }
    } else if report.capabilities.is_empty() {
        Compatibility::Identical
    } else {
        Compatibility::Compatible {
            capabilities: report.capabilities,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{contract, descriptor};
    use capgate_core::actor::Surface;
    use capgate_core::meta::Risk;

    fn on_ai_sdk(d: crate::PortableCapabilityDescriptor) -> Contract {
        contract(&[(Surface::AiSdk, vec![d])])
    }

    #[test]
    fn the_same_contract_is_identical() {
        let c = on_ai_sdk(descriptor("orders.refund"));
        let verdict = check(&c, &c);
        assert_eq!(verdict, Compatibility::Identical);
        assert!(verdict.is_compatible());
        assert!(verdict.capabilities().is_empty());
        assert_eq!(verdict.to_string(), "identical");
    }

    #[test]
    fn additive_changes_are_compatible_and_listed() {
        let expected = on_ai_sdk(descriptor("orders.refund"));
        let mut d = descriptor("orders.refund");
        d.risk = Risk::Low;
        d.contract_digest = "d2".into();
        let verdict = check(&expected, &on_ai_sdk(d));
        assert!(verdict.is_compatible());
        assert!(matches!(verdict, Compatibility::Compatible { .. }));
        assert_eq!(verdict.capabilities().len(), 1);
        assert_eq!(verdict.breaking_changes().count(), 0);
        assert_eq!(verdict.to_string(), "compatible (1 additive change(s))");
    }

    #[test]
    fn a_digest_only_change_is_compatible() {
        let expected = on_ai_sdk(descriptor("orders.refund"));
        let mut d = descriptor("orders.refund");
        d.contract_digest = "d2".into();
        let verdict = check(&expected, &on_ai_sdk(d));
        assert!(verdict.is_compatible());
        assert_eq!(verdict.capabilities()[0].changes[0].field, "contractDigest");
    }

    #[test]
    fn a_removed_or_renamed_capability_is_breaking_and_named() {
        let expected = contract(&[(
            Surface::AiSdk,
            vec![descriptor("orders.refund"), descriptor("orders.lookup")],
        )]);
        let mut renamed = descriptor("orders.refund");
        renamed.tool_names.ai_sdk = "refund".into();
        let served = on_ai_sdk(renamed);
        let verdict = check(&expected, &served);
        assert!(!verdict.is_compatible());
        let breaking: Vec<(&str, &str)> = verdict
            .breaking_changes()
            .map(|(id, c)| (id, c.field.as_str()))
            .collect();
        assert_eq!(
            breaking,
            [
                ("orders.lookup", "capability"),
                ("orders.refund", "toolNames.aiSdk")
            ]
        );
        assert!(
            verdict
                .to_string()
                .starts_with("breaking: orders.lookup: removed from aiSdk: calls to it fail"),
            "{verdict}"
        );
    }

    #[test]
    fn a_surface_the_host_relies_on_going_away_is_breaking() {
        let d = descriptor("orders.refund");
        let expected = contract(&[
            (Surface::AiSdk, vec![d.clone()]),
            (Surface::Mcp, vec![d.clone()]),
        ]);
        let served = contract(&[(Surface::AiSdk, vec![d]), (Surface::Mcp, vec![])]);
        assert!(!check(&expected, &served).is_compatible());
        assert!(check(&served, &expected).is_compatible());
    }
}
