//! Spec: "Event emitters preserve order and publish exactly one terminal event", and the
//! two classification rules (ClassifyRuntimeEvent, ClassifyProviderTunnelFrame).

use crate::common;

use capgate_provider::events::{
    Emitted, EventEmitter, EventType, FrameType, ProgressDisposition, RuntimeEvent, TunnelFrame,
    classify_provider_tunnel_frame, classify_runtime_event,
};
use capgate_provider::provider::{ExecutionOutcome, Provider, TokenUsage};
use capgate_provider::runtime::RunOptions;
use common::*;
use serde_json::json;
use std::sync::Arc;

use ProgressDisposition::{None as Nothing, Progress, Start, Terminal};

fn usage() -> TokenUsage {
    TokenUsage {
        input_tokens: 3,
        output_tokens: 4,
        total_tokens: 7,
    }
}

#[test]
fn event_emitters_preserve_order_and_publish_exactly_one_terminal_event() {
    let (em, mut rx) = EventEmitter::<RuntimeEvent>::channel();
    let sent = [
        RuntimeEvent::start(),
        RuntimeEvent::delta("a"),
        RuntimeEvent::message("b"),
        RuntimeEvent::usage(usage()),
        RuntimeEvent::complete(None),
        RuntimeEvent::error("second terminal"),
        RuntimeEvent::cancelled(),
    ];
    let outcomes: Vec<Emitted> = sent.iter().cloned().map(|e| em.emit(e)).collect();
    let mut got = Vec::new();
    while let Ok(e) = rx.try_recv() {
        got.push(e);
    }
    assert_eq!(
        got,
        sent[..5].to_vec(),
        "in order, up to and including the one terminal"
    );
    assert_eq!(
        got.iter()
            .filter(|e| classify_runtime_event(e) == Terminal)
            .count(),
        1
    );
    assert_eq!(outcomes[4], Emitted::Delivered(Terminal));
    assert_eq!(outcomes[5], Emitted::AfterTerminal);
    assert_eq!(em.dropped(), 2);
}

#[test]
fn an_event_after_a_terminal_is_never_delivered() {
    let (em, mut rx) = EventEmitter::<RuntimeEvent>::channel();
    em.emit(RuntimeEvent::error("boom"));
    for e in [
        RuntimeEvent::delta("late"),
        RuntimeEvent::start(),
        RuntimeEvent::usage(usage()),
        RuntimeEvent::progress(json!({"pct": 99})),
    ] {
        assert_eq!(em.emit(e), Emitted::AfterTerminal);
    }
    assert!(
        !em.finish(RuntimeEvent::complete(None)),
        "the runtime's own terminal is refused too"
    );
    assert_eq!(
        rx.try_recv().map(|e| e.event_type).ok(),
        Some(EventType::Error)
    );
    assert!(rx.try_recv().is_err(), "nothing after the terminal");
    assert_eq!(em.dropped(), 4);
}

#[test]
fn a_second_terminal_is_dropped_and_counted_for_tunnel_frames_too() {
    let (em, mut rx) = EventEmitter::<TunnelFrame>::channel();
    assert!(
        em.emit(TunnelFrame::response_start(200, vec![]))
            .delivered()
    );
    assert!(em.emit(TunnelFrame::end(None)).delivered());
    assert_eq!(em.emit(TunnelFrame::error("again")), Emitted::AfterTerminal);
    assert_eq!(em.emit(TunnelFrame::body("late")), Emitted::AfterTerminal);
    assert_eq!(em.dropped(), 2);
    assert_eq!(
        rx.try_recv().map(|f| f.frame_type).ok(),
        Some(FrameType::ResponseStart)
    );
    assert_eq!(
        rx.try_recv().map(|f| f.frame_type).ok(),
        Some(FrameType::End)
    );
    assert!(rx.try_recv().is_err());
}

#[test]
fn concurrent_producers_each_keep_their_order_and_only_one_terminal_wins() {
    let (em, mut rx) = EventEmitter::<RuntimeEvent>::channel();
    let em = Arc::new(em);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let em = em.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    em.emit(RuntimeEvent::delta(format!("{t}:{i}")));
                }
                em.emit(RuntimeEvent::complete(None));
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut got = Vec::new();
    while let Ok(e) = rx.try_recv() {
        got.push(e);
    }
    let terminals = got
        .iter()
        .filter(|e| classify_runtime_event(e) == Terminal)
        .count();
    assert_eq!(terminals, 1);
    assert_eq!(
        classify_runtime_event(got.last().unwrap()),
        Terminal,
        "the terminal is last"
    );
    for t in 0..4 {
        let seq: Vec<u32> = got
            .iter()
            .filter_map(|e| {
                e.delta
                    .strip_prefix(&format!("{t}:"))
                    .map(|i| i.parse().unwrap())
            })
            .collect();
        assert!(
            seq.windows(2).all(|w| w[0] < w[1]),
            "producer {t} out of order"
        );
    }
    assert_eq!(em.dropped() as usize + got.len(), 4 * 201);
}

#[test]
fn classify_runtime_event_follows_the_spec_rules_in_order() {
    let with = |t: EventType, delta: &str, message: &str, u: Option<TokenUsage>| RuntimeEvent {
        event_type: t,
        delta: delta.into(),
        message: message.into(),
        data: None,
        usage: u,
    };
    let table: Vec<(&str, RuntimeEvent, ProgressDisposition)> = vec![
        ("start", RuntimeEvent::start(), Start),
        (
            "start with content is still start",
            with(EventType::Start, "x", "y", Some(usage())),
            Start,
        ),
        ("non-empty delta", RuntimeEvent::delta("tok"), Progress),
        (
            "non-empty message",
            RuntimeEvent::message("working"),
            Progress,
        ),
        (
            "structured progress",
            RuntimeEvent::progress(json!({"pct": 10})),
            Progress,
        ),
        ("non-terminal usage", RuntimeEvent::usage(usage()), Progress),
        (
            "usage on a delta event",
            with(EventType::Delta, "", "", Some(usage())),
            Progress,
        ),
        ("complete", RuntimeEvent::complete(None), Terminal),
        (
            "complete with usage: terminal before usage",
            RuntimeEvent::complete(Some(usage())),
            Terminal,
        ),
        ("error", RuntimeEvent::error(""), Terminal),
        (
            "error with message and usage",
            with(EventType::Error, "d", "m", Some(usage())),
            Terminal,
        ),
        ("cancelled", RuntimeEvent::cancelled(), Terminal),
        ("empty delta", RuntimeEvent::delta(""), Nothing),
        ("empty message", RuntimeEvent::message(""), Nothing),
        (
            "null progress",
            RuntimeEvent::progress(serde_json::Value::Null),
            Nothing,
        ),
        (
            "usage event without usage",
            RuntimeEvent::of(EventType::Usage),
            Nothing,
        ),
        (
            "unknown type",
            RuntimeEvent::of(EventType::Unknown),
            Nothing,
        ),
        (
            "unknown type with content",
            with(EventType::Unknown, "x", "y", Some(usage())),
            Nothing,
        ),
    ];
    for (name, event, want) in table {
        assert_eq!(classify_runtime_event(&event), want, "{name}");
    }
    // Unknown wire types decode to Unknown rather than failing.
    let ev: RuntimeEvent =
        serde_json::from_value(json!({"type": "heartbeat", "delta": "x"})).unwrap();
    assert_eq!(classify_runtime_event(&ev), Nothing);
}

#[test]
fn classify_provider_tunnel_frame_follows_the_spec_rules_in_order() {
    let with_body = |t: FrameType, body: &str| TunnelFrame {
        body: body.as_bytes().to_vec(),
        ..TunnelFrame::of(t)
    };
    let table: Vec<(&str, TunnelFrame, ProgressDisposition)> = vec![
        (
            "response_start without headers",
            TunnelFrame::response_start(200, vec![]),
            Progress,
        ),
        (
            "response_start with headers",
            TunnelFrame::response_start(
                200,
                vec![("content-type".into(), "application/json".into())],
            ),
            Progress,
        ),
        (
            "bare response_start",
            TunnelFrame::of(FrameType::ResponseStart),
            Progress,
        ),
        ("non-empty body", TunnelFrame::body("chunk"), Progress),
        ("end", TunnelFrame::end(None), Terminal),
        ("end with usage", TunnelFrame::end(Some(usage())), Terminal),
        ("error", TunnelFrame::error("broken"), Terminal),
        (
            "error with a body: error before payload",
            with_body(FrameType::Error, "payload"),
            Terminal,
        ),
        (
            "end with a body",
            with_body(FrameType::End, "payload"),
            Terminal,
        ),
        ("usage", TunnelFrame::usage(usage()), Progress),
        ("empty body", TunnelFrame::body(""), Nothing),
        (
            "usage frame without usage",
            TunnelFrame::of(FrameType::Usage),
            Nothing,
        ),
        ("unknown", TunnelFrame::of(FrameType::Unknown), Nothing),
        (
            "unknown with a body",
            with_body(FrameType::Unknown, "x"),
            Nothing,
        ),
    ];
    for (name, frame, want) in table {
        assert_eq!(classify_provider_tunnel_frame(&frame), want, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn provider_events_after_its_terminal_never_reach_the_observer() {
    let p = Scripted::new("chatty", |run| async move {
        run.events.emit(RuntimeEvent::start());
        run.events.emit(RuntimeEvent::delta("a"));
        run.events.emit(RuntimeEvent::complete(None));
        run.events.emit(RuntimeEvent::delta("after the terminal"));
        run.events.emit(RuntimeEvent::error("second terminal"));
        Ok(ExecutionOutcome::new(json!({"ok": true})))
    });
    let id = p.identity().clone();
    let rt = runtime_of(vec![(Arc::new(p), conf(0))]);
    let rec = recorder();
    let out = rt
        .execute(
            &id,
            request("run_1", 0),
            RunOptions {
                observer: Some(rec.observer()),
                ..Default::default()
            },
        )
        .await
        .expect("completes");
    assert_eq!(out.output, json!({"ok": true}));
    let types: Vec<EventType> = rec.events().iter().map(|e| e.event_type).collect();
    assert_eq!(
        types,
        vec![EventType::Start, EventType::Delta, EventType::Complete]
    );
}

#[tokio::test(start_paused = true)]
async fn the_runtime_publishes_the_terminal_when_the_provider_emits_none() {
    let p = Scripted::new("quiet", |run| async move {
        run.events.emit(RuntimeEvent::delta("a"));
        Ok(ExecutionOutcome::new(json!(1)))
    });
    let id = p.identity().clone();
    let rt = runtime_of(vec![(Arc::new(p), conf(0))]);
    let rec = recorder();
    rt.execute(
        &id,
        request("run_1", 0),
        RunOptions {
            observer: Some(rec.observer()),
            ..Default::default()
        },
    )
    .await
    .expect("completes");
    let types: Vec<EventType> = rec.events().iter().map(|e| e.event_type).collect();
    assert_eq!(types, vec![EventType::Delta, EventType::Complete]);
}
