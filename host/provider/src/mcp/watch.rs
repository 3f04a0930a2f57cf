//! The pin watch: while a deployment serves, each MCP upstream is listed at start and every
//! `relistIntervalMs` (or at once when it says its tools changed), each pinned tool's
//! standing is compared with the last, and every change is audited
//! (`capgate.mcp.tool_concealed`, `capgate.mcp.tool_restored`), counted
//! ([`MCP_TOOLS_CONCEALED`]) and logged. Concealment itself needs none of this: the pin
//! policy reads each upstream's latest listing on every call.

use super::{McpUpstream, PinState};
use capgate_core::actor::{ActorKind, ActorRef};
use capgate_core::audit::{AuditEvent, AuditSink, EventPayload};
use capgate_core::runtime::Runtime;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

const LOG: &str = "capgate::mcp_upstream";

/// Pinned tools concealed because their definition changed or vanished, by upstream and
/// tool.
pub const MCP_TOOLS_CONCEALED: &str = "capgate_mcp_tools_concealed_total";

/// Tell the installed recorder what the MCP upstreams' series mean (`# HELP` on `/metrics`).
pub fn describe() {
    metrics::describe_counter!(
        MCP_TOOLS_CONCEALED,
        "Pinned MCP tools concealed because their definition changed or vanished, by upstream and tool."
    );
    metrics::describe_counter!(
        super::tool::MCP_UPSTREAM_FAILURES,
        "Calls that failed at an MCP upstream, by upstream and kind."
    );
}

/// One pinned tool to watch: the capability that calls it, the tool and its pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedPin {
    /// The capability whose procedure the tool is.
    pub capability: String,
    /// The tool's name on the upstream.
    pub tool: String,
    /// The reviewed definition's SHA-256 (lowercase hex).
    pub pin: String,
}

/// The watch of one served configuration's upstreams; dropping it (the configuration was
/// replaced) stops it.
pub struct PinWatch {
    stop: CancellationToken,
}

impl Drop for PinWatch {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One watched pin and the standing it had at the last listing.
struct Pinned {
    capability: String,
    tool: String,
    pin: String,
    last: PinState,
}

/// Start watching each upstream's pins, auditing changes on `sinks` at `runtime`'s clock
/// (nothing to watch: `None`).
pub fn watch(
    upstreams: Vec<(Arc<McpUpstream>, Vec<WatchedPin>)>,
    runtime: Runtime,
    sinks: Vec<Arc<dyn AuditSink>>,
) -> Option<PinWatch> {
    if upstreams.is_empty() {
        return None;
    }
    let stop = CancellationToken::new();
    for (upstream, pins) in upstreams {
        let pins = pins
            .into_iter()
            .map(|p| Pinned {
                capability: p.capability,
                tool: p.tool,
                pin: p.pin,
                last: PinState::Unverified,
            })
            .collect();
        tokio::spawn(run(
            upstream,
            pins,
            runtime.clone(),
            sinks.clone(),
            stop.clone(),
        ));
    }
    Some(PinWatch { stop })
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
    let actor = ActorRef {
        id: "capgate".into(),
        kind: ActorKind::Service,
    };
    let event =
        AuditEvent::operational(runtime.now(), actor, Some(capability.to_string()), payload);
    capgate_core::audit::record_operational(sinks, &event).await;
}
