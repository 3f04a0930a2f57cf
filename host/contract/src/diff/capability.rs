//! The changes of one capability present in both contracts, field by field, in a fixed
//! order: surfaces, version, description, input schema (through [`super::schema`]), side
//! effect, risk, approval, discovery, tags, tool names, and the digest when nothing a
//! caller sees changed.

use super::{Change, Entry, Impact, json, schema};
use capgate_core::meta::SideEffect;

/// How dangerous a side effect is; `external` and `destructive` share the top rank (a
/// change between them is breaking: neither is safer for a caller).
fn danger(s: SideEffect) -> u8 {
    match s {
        SideEffect::None => 0,
        SideEffect::Read => 1,
        SideEffect::Write => 2,
        SideEffect::External | SideEffect::Destructive => 3,
    }
}

/// The changes of a capability from `o` (OLD) to `n` (NEW).
pub(super) fn changes(o: &Entry<'_>, n: &Entry<'_>) -> Vec<Change> {
    let mut out = Vec::new();
    membership(
        &mut out,
        "surfaces",
        (&o.surfaces, &n.surfaces),
        |s| format!("no longer exposed on {s}: calls through it fail"),
        |s| format!("now exposed on {s}"),
    );
    let (a, b) = (o.descriptor, n.descriptor);
    if a.version != b.version {
        out.push(
            Change::new(
                "version",
                Impact::Breaking,
                format!("descriptor version {} → {}", a.version, b.version),
            )
            .values(Some(&json(&a.version)), Some(&json(&b.version))),
        );
    }
    if a.description != b.description {
        out.push(
            Change::new(
                "description",
                Impact::Additive,
                "description changed (what the model reads)",
            )
            .values(Some(&json(&a.description)), Some(&json(&b.description))),
        );
    }
    schema::changes(&a.input_schema, &b.input_schema, "", &mut out);
    if a.side_effect != b.side_effect {
        let (x, y) = (a.side_effect.as_str(), b.side_effect.as_str());
        let (impact, why) = match danger(b.side_effect).cmp(&danger(a.side_effect)) {
            std::cmp::Ordering::Less => (Impact::Additive, "less dangerous"),
            std::cmp::Ordering::Greater => (Impact::Breaking, "more dangerous"),
            std::cmp::Ordering::Equal => (
                Impact::Breaking,
                "as dangerous but different (treated as breaking)",
            ),
        };
        out.push(
            Change::new(
                "sideEffect",
                impact,
                format!("side effect {x} → {y}: {why}"),
            )
            .values(Some(&json(&x)), Some(&json(&y))),
        );
    }
    if a.risk != b.risk {
        let (impact, how) = if b.risk > a.risk {
            (Impact::Breaking, "raised")
        } else {
            (Impact::Additive, "lowered")
        };
        let (x, y) = (a.risk.as_str(), b.risk.as_str());
        out.push(
            Change::new("risk", impact, format!("risk {how}: {x} → {y}"))
                .values(Some(&json(&x)), Some(&json(&y))),
        );
    }
    if a.requires_approval != b.requires_approval {
        let (impact, detail) = if b.requires_approval {
            (
                Impact::Breaking,
                "needs approval now: calls suspend until a human decides",
            )
        } else {
            (Impact::Additive, "no longer needs approval")
        };
        out.push(Change::new("requiresApproval", impact, detail).values(
            Some(&json(&a.requires_approval)),
            Some(&json(&b.requires_approval)),
        ));
    }
    if a.discovery != b.discovery {
        let (x, y) = (a.discovery.as_str(), b.discovery.as_str());
        let (impact, detail) = if b.discovery.is_discoverable() {
            (Impact::Additive, "listed to models again")
        } else {
            (Impact::Breaking, "left out of model tool lists now")
        };
        out.push(
            Change::new(
                "discovery",
                impact,
                format!("discovery {x} → {y}: {detail}"),
            )
            .values(Some(&json(&x)), Some(&json(&y))),
        );
    }
    membership(
        &mut out,
        "tags",
        (&a.tags, &b.tags),
        |t| format!("tag `{t}` removed: a describe scoped by it no longer lists the capability"),
        |t| format!("tag `{t}` added"),
    );
    for (field, x, y) in [
        (
            "toolNames.aiSdk",
            &a.tool_names.ai_sdk,
            &b.tool_names.ai_sdk,
        ),
        ("toolNames.mcp", &a.tool_names.mcp, &b.tool_names.mcp),
    ] {
        if x != y {
            out.push(
                Change::new(
                    field,
                    Impact::Breaking,
                    format!("tool renamed `{x}` → `{y}`: calls by the old name fail"),
                )
                .values(Some(&json(x)), Some(&json(y))),
            );
        }
    }
    if out.is_empty() && a.contract_digest != b.contract_digest {
        // Nothing a caller sees changed, but something the digest covers did: policies,
        // redactors, output schema, timeout, retry, the revision…
        out.push(
            Change::new(
                "contractDigest",
                Impact::Additive,
                "only the digest changed (exposure elsewhere, governance, output schema, limits or revision): \
                 callers that pin the old digest get CONTRACT_MISMATCH until they refresh",
            )
            .values(
                Some(&json(&a.contract_digest)),
                Some(&json(&b.contract_digest)),
            ),
        );
    }
    out
}

/// A set-valued field (surfaces, tags): each member only in OLD is a breaking change
/// (`removed` says why), then each member only in NEW an additive one (`added`), in the
/// lists' own order.
fn membership(
    out: &mut Vec<Change>,
    field: &str,
    (old, new): (&[String], &[String]),
    removed: impl Fn(&str) -> String,
    added: impl Fn(&str) -> String,
) {
    for m in old.iter().filter(|m| !new.contains(m)) {
        out.push(Change::new(field, Impact::Breaking, removed(m)));
    }
    for m in new.iter().filter(|m| !old.contains(m)) {
        out.push(Change::new(field, Impact::Additive, added(m)));
    }
}

#[cfg(test)]
mod tests {
    use crate::diff::{Impact, diff};
    use crate::testing::{changed, contract, descriptor, only};
    use capgate_core::actor::Surface;
    use capgate_core::meta::{Discovery, Risk, SideEffect};

    #[test]
    fn higher_risk_is_breaking_and_lower_risk_additive() {
        let up = changed(|d| d.risk = Risk::Critical);
        assert_eq!(only(&up).impact, Impact::Breaking);
        assert_eq!(only(&up).detail, "risk raised: high → critical");
        let down = changed(|d| d.risk = Risk::Low);
        assert_eq!(only(&down).impact, Impact::Additive);
    }

    #[test]
    fn a_new_approval_requirement_is_breaking_and_dropping_one_additive() {
        let r = changed(|d| d.requires_approval = true);
        assert_eq!(only(&r).field, "requiresApproval");
        assert_eq!(only(&r).impact, Impact::Breaking);
        let old = {
            let mut d = descriptor("orders.refund");
            d.requires_approval = true;
            d
        };
        let r = diff(
            &contract(&[(Surface::AiSdk, vec![old])]),
            &contract(&[(Surface::AiSdk, vec![descriptor("orders.refund")])]),
            "o",
            "n",
        );
        assert_eq!(only(&r).impact, Impact::Additive);
    }

    #[test]
    fn a_more_dangerous_side_effect_is_breaking_and_a_safer_one_additive() {
        let r = changed(|d| d.side_effect = SideEffect::Destructive);
        assert_eq!(only(&r).impact, Impact::Breaking);
        let r = changed(|d| d.side_effect = SideEffect::Read);
        assert_eq!(only(&r).impact, Impact::Additive);
    }

    #[test]
    fn external_and_destructive_swapping_is_breaking() {
        let old = {
            let mut d = descriptor("x.y");
            d.side_effect = SideEffect::External;
            d
        };
        let mut new = old.clone();
        new.side_effect = SideEffect::Destructive;
        let r = diff(
            &contract(&[(Surface::AiSdk, vec![old])]),
            &contract(&[(Surface::AiSdk, vec![new])]),
            "o",
            "n",
        );
        assert_eq!(only(&r).impact, Impact::Breaking);
    }

    #[test]
    fn a_description_change_is_additive() {
        let r = changed(|d| d.description = "Refund an order, fully or in part.".into());
        assert_eq!(only(&r).field, "description");
        assert_eq!(only(&r).impact, Impact::Additive);
        assert!(!r.breaking);
    }

    #[test]
    fn a_renamed_tool_is_breaking() {
        let r = changed(|d| d.tool_names.mcp = "refund".into());
        assert_eq!(only(&r).field, "toolNames.mcp");
        assert_eq!(only(&r).impact, Impact::Breaking);
    }

    #[test]
    fn becoming_contextual_is_breaking() {
        let r = changed(|d| d.discovery = Discovery::Contextual);
        assert_eq!(only(&r).impact, Impact::Breaking);
    }

    #[test]
    fn a_removed_tag_is_breaking_and_an_added_tag_additive() {
        let r = changed(|d| d.tags = vec!["refunds".into()]);
        let c = &r.capabilities[0].changes;
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].impact, Impact::Breaking);
        assert_eq!(c[1].impact, Impact::Additive);
    }

    #[test]
    fn a_digest_only_change_is_reported_as_additive() {
        let r = changed(|_| {});
        assert_eq!(only(&r).field, "contractDigest");
        assert_eq!(only(&r).impact, Impact::Additive);
        assert!(only(&r).detail.contains("CONTRACT_MISMATCH"));
    }
}
