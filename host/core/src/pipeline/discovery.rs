//! The discovery pipeline (`describe`): exposure filter, scope, discovery-phase policies
//! (16 capabilities at a time, fail closed), descriptors in registry order.

use super::policies::evaluate_batch;
use crate::actor::Surface;
use crate::audit::{AuditEvent, EventPayload};
use crate::canonical::sha256_hex;
use crate::error::{CapabilityError, ErrorCode, Stage};
use crate::policy::{Phase, PolicyRequest, SharedJson, Verdict, combine};
use crate::runtime::{CapabilityDescriptor, DescribeOptions, Inner};
use futures::StreamExt;
use std::time::Duration;

pub(crate) async fn describe(
    rt: &Inner,
    surface: Surface,
    opts: DescribeOptions,
    announce: bool,
) -> Result<Vec<CapabilityDescriptor>, CapabilityError> {
    let budget =
        tokio::time::Instant::now() + Duration::from_millis(rt.defaults.discovery_budget_ms);

    // 2. Exposure filter, then the scope (a convenience, never authorization).
    // Collected up front so the stream below owns plain `Arc`s (keeps the future `Send`).
    let candidates: Vec<std::sync::Arc<crate::registry::Capability>> = rt
        .registry
        .iter()
        .filter(|c| {
            c.meta.expose.allows(surface)
                && opts
                    .scope
                    .as_ref()
                    .is_none_or(|s| s.matches(&c.id, &c.meta.tags))
        })
        .cloned()
        .collect();

    // 3. Discovery-phase policies per candidate, bounded concurrency, order preserved.
    let actor = &opts.actor;
    let context = &opts.context;
    let namespace = opts.namespace.as_str();
    let evaluate = |cap: std::sync::Arc<crate::registry::Capability>| {
        async move {
            let shared = SharedJson::default();
            let request = PolicyRequest {
                phase: Phase::Discovery,
                capability: &cap.info,
                surface,
                namespace,
                actor,
                context,
                input: None,
                execution_id: "",
                approval: None,
                shared: &shared,
            };
            // Not clamped to the budget: running out of budget is a TIMEOUT of the whole
            // describe, never a silently shorter list.
            let deadline =
                tokio::time::Instant::now() + Duration::from_millis(rt.defaults.policy_timeout_ms);
            let evaluated = evaluate_batch(rt, &cap, &request, deadline, None).await;
            let needs_approval = cap.meta.approval.as_ref().is_some_and(|a| a.required);
            match combine(&evaluated) {
                Verdict::Allowed => Some(descriptor(&cap, needs_approval)),
                Verdict::ApprovalRequired(_) => Some(descriptor(&cap, true)),
                // deny, hide and policy failure all exclude (fail closed).
                _ => None,
            }
        }
    };
    let all = futures::stream::iter(candidates)
        .map(evaluate)
        .buffered(rt.defaults.policy_concurrency.max(1))
        .collect::<Vec<_>>();
    let descriptors: Vec<CapabilityDescriptor> = match tokio::time::timeout_at(budget, all).await {
        Ok(d) => d.into_iter().flatten().collect(),
        Err(_) => {
            return Err(CapabilityError::new(ErrorCode::Timeout)
                .with_stage(Stage::Discovery)
                .with_message("Discovery ran out of time."));
        }
    };

    // 5. capabilities.discovered (ids only when verbose), unless this is an adapter's own
    // check and no discovery the caller made.
    if !announce {
        return Ok(descriptors);
    }
    let ids: Vec<String> = descriptors.iter().map(|d| d.id.clone()).collect();
    let digest = sha256_hex(serde_json::to_vec(&ids).unwrap_or_default());
    let _ = rt
        .audit
        .emit(AuditEvent {
            timestamp: rt.clock.now(),
            surface,
            actor: opts.actor.reference(),
            execution_id: None,
            capability_id: None,
            correlation_id: None,
            input_hash: None,
            payload: EventPayload::CapabilitiesDiscovered {
                count: descriptors.len(),
                surface,
                digest,
                capability_ids: rt.audit.config.verbose.then_some(ids),
            },
        })
        .await;
    Ok(descriptors)
}

fn descriptor(cap: &crate::registry::Capability, requires_approval: bool) -> CapabilityDescriptor {
    CapabilityDescriptor {
        id: cap.id.clone(),
        description: cap.meta.description.clone(),
        input_schema: cap.input.source().clone(),
        side_effect: cap.meta.side_effect,
        risk: cap.meta.risk,
        tags: cap.meta.tags.clone(),
        requires_approval: requires_approval.then_some(true),
        discovery: cap.meta.discovery,
    }
}
