//! `[upstreams.mcp.NAME]` while `capgate serve` runs: each upstream listed at start and every
//! `relistIntervalMs`, each pinned tool's standing compared with the last, and every change
//! audited (`capgate.mcp.tool_concealed`, `capgate.mcp.tool_restored`), counted
//! (`capgate_mcp_tools_concealed_total`) and logged. Concealment itself needs none of this:
//! the pin policy reads each upstream's latest listing on every call.

use crate::validate::Checked;
use capgate_core::actor::{ActorKind, ActorRef, Surface};
use capgate_core::audit::{AuditEvent, AuditSink, EventPayload};
use capgate_core::runtime::Runtime;
use capgate_provider::mcp::{McpUpstream, PinState};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

const LOG: &str = "capgate::mcp_upstream";

/// Pinned tools concealed because their definition changed or vanished, by upstream and
/// tool.
pub const MCP_TOOLS_CONCEALED: &str = "capgate_mcp_tools_concealed_total";

/// The watch of one served configuration's upstreams; dropping it (the configuration was
/// replaced) stops it.
pub struct UpstreamWatch {
    stop: CancellationToken,
}

impl Drop for UpstreamWatch {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One pinned tool: the capability that calls it and its pin.
struct Pinned {
    capability: String,
    tool: String,
    pin: String,
    last: PinState,
}

/// Start watching `checked`'s upstreams (nothing when it has none).
pub fn watch(
    checked: &Checked,
    runtime: Runtime,
    sinks: Vec<Arc<dyn AuditSink>>,
) -> Option<UpstreamWatch> {
    if checked.mcp_upstreams.is_empty() {
        return None;
    }
    let stop = CancellationToken::new();
    for (name, upstream) in &checked.mcp_upstreams {
        let pins: Vec<Pinned> = checked
            .config
            .capabilities
            .iter()
            .filter_map(|c| {
                let m = c.procedure.mcp().filter(|m| &m.upstream == name)?;
                Some(Pinned {
                    capability: c.id.clone(),
                    tool: m.tool.clone(),
                    pin: m.tool_sha256.to_ascii_lowercase(),
                    last: PinState::Unverified,
                })
            })
            .collect();
        tokio::spawn(run(
            upstream.clone(),
            pins,
            runtime.clone(),
            sinks.clone(),
            stop.clone(),
        ));
    }
    Some(UpstreamWatch { stop })
}

async fn run(
    upstream: Arc<McpUpstream>,
    mut pins: Vec<Pinned>,
    runtime: Runtime,
    sinks: Vec<Arc<dyn AuditSink>>,
    stop: CancellationToken,
) {
    let every = upstream.config().relist_interval;
    loop {
        let listed = tokio::select! {
            _ = stop.cancelled() => return,
            r = upstream.list() => r,
        };
        if let Err(e) = &listed {
            tracing::warn!(target: LOG, upstream = %upstream.name(), error = %e, "listing the MCP upstream's tools failed");
        }
        // Pins are judged against the latest successful listing (a failed one changes
        // nothing: calls fail on their own while the upstream is down).
        for p in &mut pins {
            let now = upstream.pin_state(&p.tool, &p.pin);
            if let Some(payload) = transition(upstream.name(), p, &now) {
                audit(&runtime, &sinks, &p.capability, payload).await;
            }
            p.last = now;
        }
        // The next listing at the interval, or at once when the upstream says its tools
        // changed (it has forgotten the stale listing already: nothing drifted runs).
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
            _ = upstream.list_changed() => {}
        }
    }
}

/// The event a change of standing calls for, if any.
fn transition(upstream: &str, p: &Pinned, now: &PinState) -> Option<EventPayload> {
    let concealed_before = p.last.conceals();
    if now.conceals() && (!concealed_before || p.last != *now) {
        metrics::counter!(MCP_TOOLS_CONCEALED, "upstream" => upstream.to_string(), "tool" => p.tool.clone())
            .increment(1);
        tracing::error!(
            target: LOG,
            upstream,
            tool = %p.tool,
            capability = %p.capability,
            pinned = %p.pin,
            observed = now.observed().unwrap_or("(not listed)"),
            "an MCP tool no longer matches its pin: its capability is concealed until it is re-pinned (`capgate import mcp --upstream {upstream} --diff`)"
        );
        return Some(EventPayload::McpToolConcealed {
            upstream: upstream.to_string(),
            tool: p.tool.clone(),
            pinned_sha256: p.pin.clone(),
            observed_sha256: now.observed().map(str::to_string),
        });
    }
    if concealed_before && *now == PinState::Matches {
        tracing::info!(target: LOG, upstream, tool = %p.tool, capability = %p.capability, "an MCP tool matches its pin again: its capability is served");
        return Some(EventPayload::McpToolRestored {
            upstream: upstream.to_string(),
            tool: p.tool.clone(),
            pinned_sha256: p.pin.clone(),
        });
    }
    None
}

async fn audit(
    runtime: &Runtime,
    sinks: &[Arc<dyn AuditSink>],
    capability: &str,
    payload: EventPayload,
) {
    let event = AuditEvent {
        timestamp: runtime.now(),
        surface: Surface::Direct,
        actor: ActorRef {
            id: "capgate".into(),
            kind: ActorKind::Service,
        },
        execution_id: None,
        capability_id: Some(capability.to_string()),
        correlation_id: None,
        input_hash: None,
        payload,
    };
    for sink in sinks {
        if let Err(e) = sink.emit(&event).await {
            tracing::warn!(target: LOG, sink = %e.sink, error = %e.message, "a pin change could not be audited");
            continue;
        }
        if let Err(e) = sink.flush().await {
            tracing::warn!(target: LOG, sink = %e.sink, error = %e.message, "a pin change's audit event could not be written out");
        }
    }
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
