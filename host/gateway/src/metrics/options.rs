//! What the exposition route serves: the [`MetricsSource`] seam.

use async_trait::async_trait;

/// What `/metrics` serves: gauges read at scrape time are refreshed, then the text is
/// rendered.
#[async_trait]
pub trait MetricsSource: Send + Sync + 'static {
    /// The Prometheus text exposition.
    async fn render(&self) -> String;
}
