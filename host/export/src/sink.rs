//! What a sink is: something that takes a batch of events and says when it holds them.

use capgate_store::{ExportedCheckpoint, ExportedEvent};

/// What a sink did with a delivered batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Delivered {
    /// Events the receiver took but refused to keep (an OTLP partial success). They are
    /// not sent again: the receiver has decided; they are counted and logged.
    pub rejected: u64,
}

/// Why a delivery failed; the exporter sends the same batch again later.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SinkError {
    /// The receiver answered with a status other than 2xx.
    #[error("the collector answered HTTP {status}")]
    Status {
        /// The HTTP status.
        status: u16,
    },
    /// The request did not complete (connection refused, reset, TLS). Built with
    /// [`SinkError::transport`], which strips the URL: a receiver's URL may carry its
    /// credentials (a Slack webhook URL is its own secret, `user:password@`, a token in
    /// the query), and this error is logged on every failed delivery.
    #[error("cannot reach the collector: {0}")]
    Transport(#[source] reqwest::Error),
    /// A file could not be created, written or synced.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file or directory.
        path: std::path::PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The delivery did not finish within the sink's timeout.
    #[error("the delivery took longer than {0:?}")]
    Timeout(std::time::Duration),
}

impl SinkError {
    /// [`SinkError::Transport`] for `e`, without the URL it carried.
    pub fn transport(e: reqwest::Error) -> SinkError {
        SinkError::Transport(e.without_url())
    }
}

/// A place audit events are exported to.
#[async_trait::async_trait]
pub trait ExportSink: Send {
    /// `otlp`, `jsonl`: the `kind` label of the metrics.
    fn kind(&self) -> &'static str;
    /// Deliver `events`, in order. `Ok` only once the receiver holds all of them: after it
    /// the exporter moves the cursors past them.
    async fn deliver(&mut self, events: &[ExportedEvent]) -> Result<Delivered, SinkError>;
    /// Deliver the chains' signed records (start records and checkpoints), in order: the
    /// copy off the box that `capgate audit verify --checkpoints` checks a store against.
    /// `Ok` only once the receiver holds them. The default keeps no copy (sinks that carry
    /// events to people, not evidence): the records count as delivered.
    async fn deliver_checkpoints(
        &mut self,
        records: &[ExportedCheckpoint],
    ) -> Result<Delivered, SinkError> {
        let _ = records;
        Ok(Delivered::default())
    }
}

/// The HTTP client of a sink: the delivery timeout, no redirects (a receiver's redirect is
/// never followed with the batch and its credentials), and the extra CA certificates.
pub(crate) fn http_client(
    timeout: std::time::Duration,
    ca_pem: Option<&[u8]>,
) -> Result<reqwest::Client, SinkError> {
    #[allow(unused_mut)]
    let mut builder = reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none());
    #[cfg(feature = "tls")]
    if let Some(pem) = ca_pem {
        for cert in reqwest::Certificate::from_pem_bundle(pem).map_err(SinkError::transport)? {
            builder = builder.add_root_certificate(cert);
        }
    }
    #[cfg(not(feature = "tls"))]
    let _ = ca_pem;
    builder.build().map_err(SinkError::transport)
}
