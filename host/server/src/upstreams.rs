//! `[upstreams.mcp.NAME]` while `capgate serve` runs: the pins of a checked deployment
//! handed to the provider's pin watch (`capgate_provider::mcp::watch`), and each upstream's
//! `/readyz` check.

use crate::validate::Checked;
use capgate_core::audit::AuditSink;
use capgate_core::runtime::Runtime;
use capgate_provider::mcp::McpUpstream;
use capgate_provider::mcp::watch::{PinWatch, WatchedPin};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Start watching `checked`'s upstreams (nothing when it has none).
pub fn watch(
    checked: &Checked,
    runtime: Runtime,
    sinks: Vec<Arc<dyn AuditSink>>,
) -> Option<PinWatch> {
    let upstreams = checked
        .mcp_upstreams
        .iter()
        .map(|(name, upstream)| {
            let pins = checked
                .mcp_pins()
                .iter()
                .filter(|p| &p.upstream == name)
                .map(|p| WatchedPin {
                    capability: p.capability.clone(),
                    tool: p.tool.clone(),
                    pin: p.sha256.clone(),
                })
                .collect();
            (upstream.clone(), pins)
        })
        .collect();
    capgate_provider::mcp::watch::watch(upstreams, runtime, sinks)
}

/// `/readyz` checks: one per upstream, `mcp:NAME`, failing while it is down. Each only
/// degrades readiness: an upstream that is down fails its own tools' calls, never the
/// gateway's other calls, so `/readyz` stays `200` (`degraded`).
pub fn readiness(
    upstreams: &BTreeMap<String, Arc<McpUpstream>>,
) -> Vec<(String, Arc<dyn capgate_gateway::health::ReadinessProbe>)> {
    upstreams
        .iter()
        .map(|(name, u)| {
            let u = u.clone();
            let probe: Arc<dyn capgate_gateway::health::ReadinessProbe> = Arc::new(
                capgate_gateway::health::Degrades(capgate_gateway::health::FnProbe(move || {
                    if u.is_up() {
                        Ok(())
                    } else {
                        Err("the MCP upstream is not reachable".to_owned())
                    }
                })),
            );
            (format!("mcp:{name}"), probe)
        })
        .collect()
}
