//! Procedure progress leaves through the capability's output redactors and a bounded
//! buffer (issue 33): what a procedure reports is redacted like its output, a report a
//! redactor refuses is dropped (never sent as it was), and a procedure that reports faster
//! than anyone reads is coalesced into a bounded number of reports, the latest kept.

use crate::common;

use capgate_core::prelude::*;
use capgate_core::procedure::{ProgressFn, handler};
use capgate_core::progress::PROGRESS_BUFFER;
use common::*;
use serde_json::{Value, json};
use std::sync::Arc;

/// A progress sink and the reports it was given, all of them once the runtime's relay let
/// go of the sink (the channel closes then).
fn sink() -> (ProgressFn, tokio::sync::mpsc::UnboundedReceiver<Value>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let progress: ProgressFn = Arc::new(move |v| {
        let _ = tx.send(v);
    });
    (progress, rx)
}

async fn all(mut rx: tokio::sync::mpsc::UnboundedReceiver<Value>) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(v) = rx.recv().await {
        out.push(v);
    }
    out
}

#[tokio::test]
async fn progress_goes_through_the_output_redactors_and_a_refused_report_is_dropped() {
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .redactor(redactor_fn("stripGatewayRef", |mut v| {
            if v.get("refuse").is_some() {
                return Err(RedactError::refused("not a shape this redactor knows"));
            }
            if let Some(o) = v.as_object_mut() {
                o.remove("gatewayRef");
            }
            Ok(v)
        }))
        .procedure(handler(|call| async move {
            call.report_progress(json!({"progress": 1, "gatewayRef": "gw_secret_1"}));
            call.report_progress(json!({"refuse": true, "gatewayRef": "gw_secret_2"}));
            call.report_progress(json!({"progress": 2, "gatewayRef": "gw_secret_3"}));
            Ok(json!({"refundId": "r1", "gatewayRef": "gw_secret_4"}))
        }));
    let rt = runtime_with(vec![def], Arc::new(MemorySink::new()));
    let (progress, rx) = sink();
    let r = rt
        .invoke(call("orders.refund", json!({"orderId": "o", "amount": 5})).progress(progress))
        .await;
    assert_eq!(r.status(), "completed");
    let reports = all(rx).await;
    assert_eq!(
        reports,
        [json!({"progress": 1}), json!({"progress": 2})],
        "every report redacted, the refused one dropped"
    );
}

/// On one thread the relay cannot run while the procedure reports in a tight loop, so
/// whatever it delivers afterwards is what the buffer kept: at most its size, the latest
/// report among it.
#[tokio::test(flavor = "current_thread")]
async fn a_procedure_reporting_faster_than_it_is_read_is_held_to_the_buffer() {
    let def =
        CapabilityDef::new("orders.refund", refund_meta()).procedure(handler(|call| async move {
            for i in 0..10_000 {
                call.report_progress(json!({"progress": i}));
            }
            Ok(json!({"refundId": "r1"}))
        }));
    let rt = runtime_with(vec![def], Arc::new(MemorySink::new()));
    let (progress, rx) = sink();
    let r = rt
        .invoke(call("orders.refund", json!({"orderId": "o", "amount": 5})).progress(progress))
        .await;
    assert_eq!(r.status(), "completed");
    let reports = all(rx).await;
    assert!(
        !reports.is_empty() && reports.len() <= PROGRESS_BUFFER,
        "{} reports delivered, the buffer holds {PROGRESS_BUFFER}",
        reports.len()
    );
    assert_eq!(
        reports.last(),
        Some(&json!({"progress": 9_999})),
        "the latest report is kept"
    );
}
