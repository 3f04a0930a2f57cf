//! Procedure progress on its way out (MCP `notifications/progress`). A procedure's report
//! is as much its output as its result is, so the runtime sends every report through the
//! capability's output redactors (stage 13's, in order) before it leaves; a report that a
//! redactor refuses, or whose redactor panics, is dropped, never sent unredacted (SI-10).
//!
//! Reports wait in a [`bounded`] buffer of [`PROGRESS_BUFFER`] entries: when it is full, a
//! new report replaces the newest waiting one (coalesced: progress is a level, the latest
//! says the most), so a procedure that reports faster than the client reads holds a bounded
//! amount of memory, and the last report always gets through. A report larger than
//! [`MAX_PROGRESS_BYTES`] serialized is dropped. Reports keep their order. The runtime's
//! relay ends when the execution ends, once what waited was sent; a door's own buffer
//! (the MCP server's) ends when every handle of its [`ProgressFn`] is dropped.

use crate::procedure::ProgressFn;
use crate::registry::Capability;
use futures::FutureExt;
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

/// Reports waiting to be sent, at most, per buffer.
pub const PROGRESS_BUFFER: usize = 16;

/// The largest report relayed, serialized (larger ones are dropped).
pub const MAX_PROGRESS_BYTES: usize = 64 * 1024;

#[derive(Default)]
struct Queue {
    items: VecDeque<serde_json::Value>,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    wake: tokio::sync::Notify,
}

impl Shared {
    fn push(&self, value: serde_json::Value) {
        let size = serde_json::to_vec(&value).map_or(usize::MAX, |b| b.len());
        if size > MAX_PROGRESS_BYTES {
            tracing::debug!(target: "capgate::progress", size, "a progress report over the size cap was dropped");
            return;
        }
        {
            let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            if q.closed {
                return;
            }
            if q.items.len() >= PROGRESS_BUFFER {
                if let Some(newest) = q.items.back_mut() {
                    *newest = value;
                }
            } else {
                q.items.push_back(value);
            }
        }
        self.wake.notify_one();
    }

    fn close(&self) {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).closed = true;
        self.wake.notify_one();
    }
}

/// Closes its buffer when dropped: what waits is still delivered, later reports are not
/// taken.
pub struct ProgressCloser(Arc<Shared>);

impl Drop for ProgressCloser {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The receiving end of a [`bounded`] buffer.
pub struct ProgressReceiver(Arc<Shared>);

impl ProgressReceiver {
    /// The next report, in order; `None` once the buffer is closed and empty.
    pub async fn next(&mut self) -> Option<serde_json::Value> {
        loop {
            {
                let mut q = self.0.queue.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(v) = q.items.pop_front() {
                    return Some(v);
                }
                if q.closed {
                    return None;
                }
            }
            self.0.wake.notified().await;
        }
    }

    /// A guard that closes the buffer when dropped (besides the last [`ProgressFn`]).
    pub fn closer(&self) -> ProgressCloser {
        ProgressCloser(self.0.clone())
    }
}

/// A bounded, coalescing progress buffer: the [`ProgressFn`] a producer reports on (never
/// blocks; closes the buffer when its last handle is dropped) and the receiver a consumer
/// reads from.
pub fn bounded() -> (ProgressFn, ProgressReceiver) {
    let shared = Arc::new(Shared::default());
    let closer = ProgressCloser(shared.clone());
    let progress: ProgressFn = Arc::new(move |value| closer.0.push(value));
    (progress, ProgressReceiver(shared))
}

/// The progress channel a procedure of `cap` reports on, relaying to `sink` through the
/// capability's output redactors and a bounded buffer, and the guard that ends it with
/// the execution. Without an async runtime to relay on, nothing is relayed (the call runs
/// as it would without a listener).
pub(crate) fn relay(
    cap: Arc<Capability>,
    namespace: String,
    sink: ProgressFn,
) -> (Option<ProgressFn>, Option<ProgressCloser>) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return (None, None);
    };
    let (progress, mut reports) = bounded();
    let closer = reports.closer();
    handle.spawn(async move {
        while let Some(value) = reports.next().await {
            if let Some(redacted) = redacted(&cap, &namespace, value).await {
                sink(redacted);
            }
        }
    });
    (Some(progress), Some(closer))
}

/// The report through every output redactor of the capability; `None` when one refuses or
/// panics (the report is dropped, never sent unredacted).
async fn redacted(
    cap: &Capability,
    namespace: &str,
    mut value: serde_json::Value,
) -> Option<serde_json::Value> {
    for r in &cap.redactors {
        match AssertUnwindSafe(r.redact_output(&cap.info, namespace, value))
            .catch_unwind()
            .await
        {
            Ok(Ok(v)) => value = v,
            Ok(Err(e)) => {
                tracing::debug!(target: "capgate::progress", capability = %cap.id, redactor = r.name(), error = %e, "a progress report was dropped: its redaction failed");
                return None;
            }
            Err(_) => {
                tracing::debug!(target: "capgate::progress", capability = %cap.id, redactor = r.name(), "a progress report was dropped: its redactor panicked");
                return None;
            }
        }
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_full_buffer_coalesces_into_its_newest_report_and_keeps_the_last() {
        let (progress, mut rx) = bounded();
        for i in 0..1_000 {
            progress(json!(i));
        }
        drop(progress);
        let mut got = Vec::new();
        while let Some(v) = rx.next().await {
            got.push(v);
        }
        assert_eq!(got.len(), PROGRESS_BUFFER);
        let first: Vec<serde_json::Value> = (0..PROGRESS_BUFFER - 1).map(|i| json!(i)).collect();
        assert_eq!(got[..PROGRESS_BUFFER - 1], first[..]);
        assert_eq!(
            got[PROGRESS_BUFFER - 1],
            json!(999),
            "the latest report survives"
        );
    }

    #[tokio::test]
    async fn an_oversized_report_is_dropped_and_a_closed_buffer_takes_nothing() {
        let (progress, mut rx) = bounded();
        progress(json!("x".repeat(MAX_PROGRESS_BYTES + 1)));
        progress(json!("small"));
        let closer = rx.closer();
        drop(closer);
        progress(json!("after close"));
        assert_eq!(rx.next().await, Some(json!("small")));
        assert_eq!(rx.next().await, None);
    }
}
