//! `capgate inspect --config F`: the inventory of a deployment that a reviewer reads in a
//! pull request, rendered as a table (the inventory itself is
//! `capgate_server::resolve::inventory`, read from the file `capgate check` accepted).

use capgate_core::meta::{ApprovalConfig, RetryConfig};
use capgate_server::resolve::inventory::Inventory;

fn or_dash(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(", ")
    }
}

fn approval_cell(a: Option<&ApprovalConfig>) -> String {
    match a {
        Some(a) if a.required => match &a.approval_type {
            Some(t) => format!("required ({t})"),
            None => "required".into(),
        },
        _ => "-".into(),
    }
}

fn retry_cell(r: Option<&RetryConfig>) -> String {
    match r {
        Some(r) if r.max_attempts > 0 => {
            let mut s = format!("{} retries", r.max_attempts);
            if let Some(b) = r.backoff_ms {
                s.push_str(&format!(", backoff {b} ms"));
            }
            if let Some(codes) = &r.retry_on {
                let codes: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
                s.push_str(&format!(", on {}", codes.join("|")));
            }
            s
        }
        _ => "-".into(),
    }
}

/// The table for people: one row per capability, then the runtime-level policies.
pub fn render_table(inv: &Inventory) -> String {
    let rows: Vec<Vec<String>> = inv
        .capabilities
        .iter()
        .map(|r| {
            vec![
                r.id.clone(),
                or_dash(&r.surfaces),
                r.side_effect.as_str().into(),
                r.risk.as_str().into(),
                or_dash(&marked(inv, &r.policies)),
                or_dash(&r.redactors),
                approval_cell(r.approval.as_ref()),
                if r.timeout_default {
                    format!("{} ms (default)", r.timeout_ms)
                } else {
                    format!("{} ms", r.timeout_ms)
                },
                retry_cell(r.retry.as_ref()),
            ]
        })
        .collect();
    let mut out = format!(
        "{} (revision {}): {} capabilities\n\n",
        inv.config,
        inv.revision,
        inv.capabilities.len()
    );
    out.push_str(&crate::table::render(
        &[
            "CAPABILITY",
            "SURFACES",
            "SIDE EFFECT",
            "RISK",
            "POLICIES",
            "REDACTORS",
            "APPROVAL",
            "TIMEOUT",
            "RETRY",
        ],
        &rows,
    ));
    out.push_str(&format!(
        "\nruntime policies (every capability, before its own): {}\n",
        if inv.runtime_policies.is_empty() {
            "none".to_string()
        } else {
            marked(inv, &inv.runtime_policies).join(", ")
        }
    ));
    for p in inv
        .rules
        .iter()
        .filter(|p| p.plugin == capgate_builtin::CEDAR.name)
    {
        out.push_str(&format!(
                "\npolicy {} (cedar): a satisfied forbid decides (@stance), else a satisfied permit allows, else deny\n",
                p.policy
            ));
        if let Some(file) = &p.policies_file {
            out.push_str(&format!("  policies from {file}\n"));
        }
        for line in p.policies.iter().flat_map(|t| t.lines()) {
            out.push_str(&format!("  | {line}\n"));
        }
    }
    for p in inv
        .rules
        .iter()
        .filter(|p| p.plugin == capgate_builtin::CEL.name)
    {
        out.push_str(&format!(
            "\npolicy {} ({}): {} rules, the first that holds decides, none allows\n",
            p.policy,
            p.plugin,
            p.rules.len()
        ));
        for (i, r) in p.rules.iter().enumerate() {
            let text = |k: &str| r.get(k).and_then(serde_json::Value::as_str).unwrap_or("?");
            let mut line = format!("  {}. when {}  =>  {}", i + 1, text("when"), text("stance"));
            if let Some(t) = r.get("type").and_then(serde_json::Value::as_str) {
                line.push_str(&format!(" ({t})"));
            }
            if let Some(reason) = r.get("reason").and_then(serde_json::Value::as_str) {
                line.push_str(&format!(": {reason}"));
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}

/// Policy names, a shadow one marked `(shadow)`: a reviewer sees what does not enforce.
fn marked(inv: &Inventory, policies: &[String]) -> Vec<String> {
    policies
        .iter()
        .map(|p| {
            if inv.shadow_policies.contains(p) {
                format!("{p} (shadow)")
            } else {
                p.clone()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use capgate_config::{CapabilitySection, Config};
    use capgate_core::meta::Expose;
    use capgate_server::resolve::inventory::of as inventory;
    use serde_json::json;

    fn capability(id: &str) -> CapabilitySection {
        match serde_json::from_value(json!({
            "id": id,
            "description": "d",
            "expose": {"aiSdk": true, "mcp": false, "workflow": true},
            "sideEffect": "write",
            "risk": "high",
            "procedure": {"plugin": "p"},
        })) {
            Ok(c) => c,
            Err(e) => panic!("fixture: {e}"),
        }
    }

    fn config(capabilities: Vec<CapabilitySection>) -> Config {
        let mut c = Config {
            revision: "r1".into(),
            capabilities,
            ..Config::default()
        };
        c.runtime.timeout_ms = 30_000;
        c
    }

    #[test]
    fn rows_are_sorted_by_capability_id() {
        let inv = inventory(&config(vec![
            capability("orders.refund"),
            capability("customers.search"),
            capability("messages.send"),
        ]));
        let ids: Vec<&str> = inv.capabilities.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["customers.search", "messages.send", "orders.refund"]);
    }

    #[test]
    fn only_surfaces_set_to_true_are_listed() {
        let inv = inventory(&config(vec![capability("a.b")]));
        assert_eq!(inv.capabilities[0].surfaces, ["aiSdk", "workflow"]);
        let mut c = capability("a.b");
        c.expose = Expose::default();
        let inv = inventory(&config(vec![c]));
        assert!(inv.capabilities[0].surfaces.is_empty());
        assert!(render_table(&inv).contains("a.b         -  "));
    }

    #[test]
    fn a_capability_without_a_timeout_shows_the_runtime_default() {
        let mut set = capability("b.set");
        set.timeout_ms = Some(10_000);
        let inv = inventory(&config(vec![capability("a.default"), set]));
        assert_eq!(inv.capabilities[0].timeout_ms, 30_000);
        assert!(inv.capabilities[0].timeout_default);
        assert!(!inv.capabilities[1].timeout_default);
        let t = render_table(&inv);
        assert!(t.contains("30000 ms (default)"), "{t}");
        assert!(t.contains("10000 ms"), "{t}");
    }

    #[test]
    fn approval_and_retry_cells_say_what_is_configured() {
        let mut c = capability("messages.send");
        c.approval = Some(ApprovalConfig {
            required: true,
            approval_type: Some("human-confirmation".into()),
            expires_in_ms: None,
        });
        c.retry = Some(RetryConfig {
            max_attempts: 2,
            backoff_ms: Some(100),
            retry_on: None,
        });
        let t = render_table(&inventory(&config(vec![c])));
        assert!(t.contains("required (human-confirmation)"), "{t}");
        assert!(t.contains("2 retries, backoff 100 ms"), "{t}");
    }

    #[test]
    fn the_json_inventory_has_the_documented_shape() {
        let mut c = capability("orders.refund");
        c.policies = vec!["orgIsolation".into(), "refundLimit".into()];
        let mut cfg = config(vec![c]);
        cfg.runtime.policies = vec!["businessHours".into()];
        let v = serde_json::to_value(inventory(&cfg)).unwrap_or_default();
        assert_eq!(v["format"], "capgate.inventory.v1");
        assert_eq!(v["revision"], "r1");
        assert_eq!(v["runtimePolicies"], json!(["businessHours"]));
        assert_eq!(
            v["capabilities"][0],
            json!({
                "id": "orders.refund",
                "surfaces": ["aiSdk", "workflow"],
                "sideEffect": "write",
                "risk": "high",
                "policies": ["orgIsolation", "refundLimit"],
                "redactors": [],
                "approval": null,
                "timeoutMs": 30000,
                "timeoutDefault": true,
                "retry": null
            })
        );
    }
}
