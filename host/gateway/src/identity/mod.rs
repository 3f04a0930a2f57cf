//! Corporate identity: what capgate needs of an OpenID Provider to take its tokens.
//!
//! - [`fetch`]: discovery (`/.well-known/openid-configuration`) and bounded, HTTPS-only
//!   requests to the provider.
//! - [`jwks`]: its signing keys by `kid` (RS256, PS256, ES256, EdDSA), refreshed on
//!   rotation and on an unknown `kid`, a flood of forged `kid`s costing the provider at
//!   most one request per [`jwks::Refresh::min_gap`].
//! - [`claims`]: which claims, by JSON pointer, give the actor, namespace, roles, surfaces
//!   and attributes.
//! - [`oidc`]: the console's sign-in, the authorization-code flow with PKCE.
//!
//! While the provider is down, tokens keep verifying with the keys fetched last; a token
//! whose `kid` is not among them is refused until the provider answers again.

pub mod claims;
pub mod fetch;
pub mod jwks;
pub mod oidc;

use fetch::{IdpError, ProviderMetadata};
use jwks::{Refresh, RemoteKeys};

/// How to reach an identity provider's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeysAt {
    /// Discover them from the issuer's OpenID configuration.
    Discovery,
    /// A JWKS URL given outright.
    Url(String),
}

/// An identity provider, connected: its keys fetched, its metadata when discovered.
#[derive(Debug)]
pub struct Provider {
    /// The provider's OpenID configuration (discovery only).
    pub metadata: Option<ProviderMetadata>,
    /// Its keys, kept fresh.
    pub keys: std::sync::Arc<RemoteKeys>,
}

impl Provider {
    /// Discover (when asked) and fetch the keys: the error a deployment refuses to start
    /// with when the provider cannot be reached.
    pub async fn connect(
        issuer: &str,
        at: &KeysAt,
        refresh: Refresh,
    ) -> Result<Provider, IdpError> {
        let http = fetch::client();
        let (metadata, url) = match at {
            KeysAt::Discovery => {
                let meta = fetch::discover(&http, issuer).await?;
                let url = meta.jwks_uri.clone();
                (Some(meta), url)
            }
            KeysAt::Url(url) => (None, url.clone()),
        };
        let keys = RemoteKeys::connect(http, url, refresh).await?;
        Ok(Provider {
            metadata,
            keys: std::sync::Arc::new(keys),
        })
    }
}
