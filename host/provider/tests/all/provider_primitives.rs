//! Spec "Scope" and the first requirement lines: the narrow Provider interface, the
//! registry's typed failures, the closed command allowlist, token usage as observation
//! data, opaque session ids, cancellation by run id.

use crate::common;

use capgate_core::procedure::ProcedureError;
use capgate_provider::events::{RuntimeEvent, TunnelFrame};
use capgate_provider::provider::{
    ExecutionOutcome, Provider, ProviderCommand, ProviderFailure, ProviderIdentity,
    ProviderLifecycle, ProviderRegistry, ProviderTunnelRequest, TokenUsage, TunnelOutcome,
};
use capgate_provider::runtime::RunOptions;
use common::*;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::Ordering;

fn usage(i: u64, o: u64) -> TokenUsage {
    TokenUsage {
        input_tokens: i,
        output_tokens: o,
        total_tokens: i + o,
    }
}

fn ok_provider(target: &str) -> Scripted {
    Scripted::new(target, |_| async { Ok(ExecutionOutcome::new(json!("ok"))) })
}

#[tokio::test]
async fn providers_implement_the_narrow_provider_interface_and_may_expose_optional_capabilities() {
    // Narrow: identity + execute; every optional capability defaults to absent.
    let narrow = ok_provider("narrow");
    assert!(narrow.lifecycle().is_none());
    assert!(narrow.commands().is_none());
    assert!(narrow.tunnel().is_none());
    assert!(narrow.prober().is_none());

    // Full: lifecycle, commands and tunnel exposed.
    let mut full = ok_provider("full");
    full.lifecycle = Some(Arc::new(Lifecycle::default()));
    full.commands = Some(Arc::new(Commands::default()));
    full.tunnel = Some(Arc::new(Tunnel(Arc::new(|_| {
        Box::pin(async { Ok(TunnelOutcome::default()) })
    }))));
    let lifecycle = full.lifecycle().expect("lifecycle");
    assert!(!lifecycle.is_available());
    lifecycle.start().await.expect("starts");
    assert!(lifecycle.is_available());
    assert!(full.commands().is_some());
    assert!(full.tunnel().is_some());
}

#[tokio::test]
async fn registry_lookup_uses_provider_identity_and_returns_typed_failures_for_missing_or_unavailable_providers()
 {
    let lifecycle = Arc::new(Lifecycle::default());
    let mut gated = ok_provider("gated");
    gated.lifecycle = Some(lifecycle.clone());
    let mut reg = ProviderRegistry::new();
    reg.register(Arc::new(ok_provider("orders")), conf(0))
        .unwrap();
    reg.register(Arc::new(gated), conf(0)).unwrap();

    // Found by exact identity.
    let hit = reg
        .lookup(&ProviderIdentity::new("test", "orders"))
        .expect("found");
    assert_eq!(
        hit.provider.identity(),
        &ProviderIdentity::new("test", "orders")
    );
    // Same target, other adapter: a different provider.
    assert!(matches!(
        reg.lookup(&ProviderIdentity::new("http", "orders")),
        Err(ProviderFailure::NotFound(id)) if id == ProviderIdentity::new("http", "orders")
    ));
    // Missing.
    assert!(matches!(
        reg.lookup(&ProviderIdentity::new("test", "nope")),
        Err(ProviderFailure::NotFound(_))
    ));
    // Registered but unavailable until its lifecycle starts it.
    let gated_id = ProviderIdentity::new("test", "gated");
    assert!(
        matches!(reg.lookup(&gated_id), Err(ProviderFailure::Unavailable(id)) if id == gated_id)
    );
    lifecycle.start().await.unwrap();
    assert!(reg.lookup(&gated_id).is_ok());
    lifecycle.stop().await;
    assert!(matches!(
        reg.lookup(&gated_id),
        Err(ProviderFailure::Unavailable(_))
    ));
    // One identity, one provider.
    assert!(matches!(
        reg.register(Arc::new(ok_provider("orders")), conf(0)),
        Err(ProviderFailure::Duplicate(_))
    ));

    // The runtime surfaces the same typed failures without calling anything.
    let rt = capgate_provider::ProviderRuntime::new(reg);
    let missing = rt
        .execute(
            &ProviderIdentity::new("test", "nope"),
            request("r", 0),
            RunOptions::default(),
        )
        .await;
    assert!(matches!(missing, Err(ProviderFailure::NotFound(_))));
    let unavailable = rt
        .execute(&gated_id, request("r", 0), RunOptions::default())
        .await;
    assert!(matches!(unavailable, Err(ProviderFailure::Unavailable(_))));
}

#[tokio::test]
async fn callers_must_reject_commands_outside_the_closed_provider_command_allowlist_before_provider_lookup()
 {
    let commands = Arc::new(Commands::default());
    let mut p = ok_provider("cmd");
    p.commands = Some(commands.clone());
    let id = p.identity().clone();
    let rt = runtime_of(vec![
        (Arc::new(p), conf(0)),
        (Arc::new(ok_provider("plain")), conf(0)),
    ]);
    let missing = ProviderIdentity::new("test", "not-registered");

    // The allowlist is exactly these three.
    let names: Vec<&str> = ProviderCommand::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(names, ["capabilities", "transport_status", "ollama_api"]);

    for (name, allowed) in [
        ("capabilities", true),
        ("transport_status", true),
        ("ollama_api", true),
        ("shell", false),
        ("exec", false),
        ("Capabilities", false),
        ("capabilities ", false),
        ("", false),
        ("ollama_api;rm", false),
        ("terminal", false),
    ] {
        // Against a provider that does not exist: an outside command is refused by the
        // allowlist, never reported as a missing provider.
        let r = rt.command(&missing, name, json!({})).await;
        if allowed {
            assert!(
                matches!(r, Err(ProviderFailure::NotFound(_))),
                "{name:?}: {r:?}"
            );
        } else {
            assert!(
                matches!(&r, Err(ProviderFailure::CommandNotAllowed(n)) if n == name),
                "{name:?}: {r:?}"
            );
        }
        // Against a provider that answers commands: only allowed ones reach it.
        let r = rt.command(&id, name, json!({})).await;
        assert_eq!(r.is_ok(), allowed, "{name:?}: {r:?}");
    }
    assert_eq!(
        commands.seen.lock().unwrap().len(),
        3,
        "only allowlisted commands arrived"
    );

    // Allowed, but the provider has no command capability.
    let r = rt
        .command(
            &ProviderIdentity::new("test", "plain"),
            "capabilities",
            json!({}),
        )
        .await;
    assert!(matches!(r, Err(ProviderFailure::CommandUnsupported { .. })));
}

#[tokio::test(start_paused = true)]
async fn token_usage_remains_observation_data_attached_to_execution_or_tunnel_results() {
    // Execution: usage events accumulate onto the result; the output is untouched, and a
    // usage event is progress, never a terminal.
    let p = Scripted::new("llm", |run| async move {
        run.events.emit(RuntimeEvent::usage(usage(10, 0)));
        run.events.emit(RuntimeEvent::delta("hello"));
        run.events.emit(RuntimeEvent::usage(usage(0, 5)));
        Ok(ExecutionOutcome::new(json!({ "text": "hello" })))
    });
    let id = p.identity().clone();
    let mut tunnelled = ok_provider("tunnel");
    tunnelled.tunnel = Some(Arc::new(Tunnel(Arc::new(|run| {
        Box::pin(async move {
            run.frames.emit(TunnelFrame::response_start(200, vec![]));
            run.frames.emit(TunnelFrame::body("{}"));
            run.frames.emit(TunnelFrame::usage(usage(2, 3)));
            Ok(TunnelOutcome::default())
        })
    }))));
    let tid = tunnelled.identity().clone();
    let rt = runtime_of(vec![(Arc::new(p), conf(0)), (Arc::new(tunnelled), conf(0))]);

    let out = rt
        .execute(&id, request("run_1", 0), RunOptions::default())
        .await
        .unwrap();
    assert_eq!(out.output, json!({ "text": "hello" }));
    assert_eq!(out.usage, Some(usage(10, 5)));

    let t = rt
        .tunnel(
            &tid,
            ProviderTunnelRequest::default(),
            RunOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(t.usage, Some(usage(2, 3)));

    // A provider's own final usage wins over what was observed on the way.
    let p = Scripted::new("final", |run| async move {
        run.events.emit(RuntimeEvent::usage(usage(1, 1)));
        Ok(ExecutionOutcome {
            output: json!(null),
            usage: Some(usage(7, 7)),
        })
    });
    let fid = p.identity().clone();
    let rt = runtime_of(vec![(Arc::new(p), conf(0))]);
    let out = rt
        .execute(&fid, request("r", 0), RunOptions::default())
        .await
        .unwrap();
    assert_eq!(out.usage, Some(usage(7, 7)));
}

#[tokio::test(start_paused = true)]
async fn tunnels_need_the_tunnel_capability() {
    let p = ok_provider("no-tunnel");
    let id = p.identity().clone();
    let rt = runtime_of(vec![(Arc::new(p), conf(0))]);
    let r = rt
        .tunnel(&id, ProviderTunnelRequest::default(), RunOptions::default())
        .await;
    assert!(matches!(r, Err(ProviderFailure::TunnelUnsupported(_))));
}

#[tokio::test(start_paused = true)]
async fn session_id_is_opaque_and_repeated_requests_with_it_are_independent_executions() {
    let p = Scripted::new("sess", |run| async move {
        let cancel = run.cancel.clone();
        tokio::select! {
            _ = cancel.cancelled() => Err(ProcedureError::internal("cancelled")),
            _ = tokio::time::sleep(std::time::Duration::from_secs(10)) => {
                Ok(ExecutionOutcome::new(json!({ "run": run.request.run_id })))
            }
        }
    });
    let calls = p.calls();
    let id = p.identity().clone();
    let rt = runtime_of(vec![(Arc::new(p), conf(60_000))]);
    let mut a = request("run_a", 60_000);
    a.session_id = Some("sess_1".into());
    let mut b = request("run_b", 60_000);
    b.session_id = Some("sess_1".into());
    let (rt1, rt2, rt3) = (rt.clone(), rt.clone(), rt.clone());
    let (id1, id2) = (id.clone(), id.clone());
    let ta = tokio::spawn(async move { rt1.execute(&id1, a, RunOptions::default()).await });
    let tb = tokio::spawn(async move { rt2.execute(&id2, b, RunOptions::default()).await });
    tokio::task::yield_now().await;
    tokio::time::sleep(std::time::Duration::from_millis(1)).await;

    // A session id is not a cancellation target: it matches no run.
    assert!(!rt3.cancel("sess_1").unwrap());
    // Cancelling one run leaves the other (same session) alone.
    assert!(rt3.cancel("run_a").unwrap());
    let ra = ta.await.unwrap();
    let rb = tb.await.unwrap();
    assert!(matches!(ra, Err(ProviderFailure::Cancelled)), "{ra:?}");
    assert_eq!(rb.unwrap().output, json!({ "run": "run_b" }));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "two independent executions"
    );
    // Finished runs are no longer targets.
    assert!(!rt3.cancel("run_b").unwrap());
}

#[tokio::test]
async fn cancellation_targets_a_non_empty_run_id_only() {
    let rt = runtime_of(vec![]);
    assert!(matches!(rt.cancel(""), Err(ProviderFailure::EmptyRunId)));
    assert!(!rt.cancel("run_unknown").unwrap());
}

#[tokio::test(start_paused = true)]
async fn a_run_id_is_in_flight_at_most_once() {
    let p = Scripted::new("slow", |run| wait_for_cancel(run.cancel));
    let id = p.identity().clone();
    let rt = runtime_of(vec![(Arc::new(p), conf(60_000))]);
    let (rt1, id1) = (rt.clone(), id.clone());
    let first = tokio::spawn(async move {
        rt1.execute(&id1, request("run_x", 60_000), RunOptions::default())
            .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    let second = rt
        .execute(&id, request("run_x", 60_000), RunOptions::default())
        .await;
    assert!(matches!(second, Err(ProviderFailure::RunInFlight(_))));
    rt.cancel("run_x").unwrap();
    assert!(matches!(
        first.await.unwrap(),
        Err(ProviderFailure::Cancelled)
    ));
}
