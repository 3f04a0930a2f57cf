//! Which trace the running task's work belongs to, across the tasks it spawns.
//!
//! Traces are sampled at the head (the HTTP doors decide per request, before any span
//! exists). A request left out opens no span, so "the current span" cannot say that its
//! work is unsampled; [`unsampled`] marks the task instead, and the process's trace filter
//! asks [`in_unsampled_trace`] before starting a trace of its own. Work moved onto another
//! task takes its trace along with [`in_current_trace`]: the current span when there is
//! one, the unsampled mark when there is that.

use std::future::Future;
use tracing::Instrument;

tokio::task_local! {
    /// Set while an unsampled request's work runs.
    static UNSAMPLED: ();
}

/// Run `work` as part of a trace the head decision left out: no span opened under it is
/// wanted by the traces.
pub async fn unsampled<F: Future>(work: F) -> F::Output {
    UNSAMPLED.scope((), work).await
}

/// Whether the running task does the work of an unsampled request.
pub fn in_unsampled_trace() -> bool {
    UNSAMPLED.try_with(|_| ()).is_ok()
}

/// `work`, to be run on another task, in the trace of the task that calls this: inside the
/// current span, or marked unsampled when this task's work is (what `in_current_span` does
/// for spans).
pub fn in_current_trace<F: Future>(work: F) -> impl Future<Output = F::Output> {
    let left_out = in_unsampled_trace();
    let span = tracing::Span::current();
    async move {
        if left_out {
            UNSAMPLED.scope((), work).await
        } else {
            work.instrument(span).await
        }
    }
}
