//! The health endpoint of an upstream: [`HttpHealthProber`] asks it, exact-target, and
//! reads its answer as a probe outcome.

use super::exchange::read_body;
use super::with_causes;
use crate::health::{ProbeError, ProbeOutcome, ProbeStatus, ProbeTarget, ProviderProber};
use crate::provider::ProviderIdentity;
use async_trait::async_trait;
use reqwest::header::ACCEPT;
use reqwest::{Client, Url};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

/// The exact-target prober of an HTTP upstream's health endpoint.
pub struct HttpHealthProber {
    pub(super) client: Client,
    pub(super) url: Url,
    pub(super) identity: ProviderIdentity,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HealthBody {
    status: String,
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    instance_key: Option<String>,
}

impl HttpHealthProber {
    async fn ask(&self) -> Result<HealthBody, ProbeError> {
        let mut resp = self
            .client
            .get(self.url.clone())
            .header(ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| ProbeError::Network(with_causes(&e)))?;
        // A 3xx too: redirects are not followed.
        if !resp.status().is_success() {
            return Err(ProbeError::HttpStatus(resp.status().as_u16()));
        }
        let bytes = read_body(&mut resp)
            .await
            .map_err(|e| ProbeError::Network(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| ProbeError::Decode(e.to_string()))
    }
}

#[async_trait]
impl ProviderProber for HttpHealthProber {
    async fn probe(&self, target: &ProbeTarget, cancel: CancellationToken) -> ProbeOutcome {
        // This prober can only speak for its own target.
        let own = ProbeTarget {
            adapter: self.identity.adapter.clone(),
            target: self.identity.target.clone(),
            instance_key: None,
        };
        if target.adapter != own.adapter || target.target != own.target {
            return ProbeOutcome::status(&own, ProbeStatus::Unknown);
        }
        let answer = tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(ProbeError::Timeout),
            a = self.ask() => a,
        };
        match answer {
            Err(e) => ProbeOutcome::error(&own, e),
            Ok(body) => ProbeOutcome {
                adapter: own.adapter,
                target: body.target.unwrap_or(own.target),
                instance_key: body.instance_key,
                status: match body.status.as_str() {
                    "available" => ProbeStatus::Available,
                    "unavailable" => ProbeStatus::Unavailable,
                    _ => ProbeStatus::Unknown,
                },
                error: None,
            },
        }
    }
}
