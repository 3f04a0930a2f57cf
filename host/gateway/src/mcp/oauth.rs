//! OAuth discovery for MCP clients (the MCP authorization spec): `/mcp` is an OAuth
//! protected resource. Its metadata (RFC 9728) names the identity provider that issues
//! tokens for it, and a request without a valid token is answered `401` with
//! `WWW-Authenticate: Bearer resource_metadata="…"`, so a client finds the provider, gets a
//! token for this resource (RFC 8707 `resource`) and comes back with it — nobody pastes a
//! token into the client.
//!
//! The metadata is public (it names an issuer and a URL, nothing more) and served at both
//! places a client looks: `/.well-known/oauth-protected-resource/mcp` (the path-suffixed
//! location RFC 9728 §3.1 derives from the resource URL) and
//! `/.well-known/oauth-protected-resource`.

use axum::Json;
use axum::http::HeaderValue;
use axum::routing::get;

/// The well-known path of protected-resource metadata (RFC 9728 §3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// What `/mcp` says of itself as a protected resource.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProtectedResource {
    /// The resource identifier: the public URL of `/mcp` (what tokens are issued for).
    pub resource: String,
    /// The issuers whose tokens it accepts.
    pub authorization_servers: Vec<String>,
    /// Scopes a client may ask for (omitted when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes_supported: Vec<String>,
    /// Always `["header"]`: a token travels only in `Authorization`.
    pub bearer_methods_supported: Vec<String>,
    /// A human-readable name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_name: Option<String>,
}

/// Why protected-resource metadata cannot be published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtectedResourceError {
    /// The resource is not an absolute `https://` URL without query or fragment (plain
    /// `http://` only on loopback).
    #[error(
        "the MCP resource `{0}` must be an absolute https:// URL (http:// only on loopback) without query or fragment"
    )]
    Resource(String),
}

impl ProtectedResource {
    /// The metadata of `resource` (the public URL of `/mcp`), tokens from `issuer`.
    pub fn new(
        resource: impl Into<String>,
        issuer: impl Into<String>,
        scopes: Vec<String>,
    ) -> Result<Self, ProtectedResourceError> {
        let resource = resource.into();
        let ok = crate::identity::fetch::check_url(&resource).is_ok()
            && reqwest::Url::parse(&resource)
                .is_ok_and(|u| u.query().is_none() && u.fragment().is_none());
        if !ok {
            return Err(ProtectedResourceError::Resource(resource));
        }
        Ok(ProtectedResource {
            resource,
            authorization_servers: vec![issuer.into()],
            scopes_supported: scopes,
            bearer_methods_supported: vec!["header".into()],
            resource_name: Some("capgate MCP server".into()),
        })
    }

    /// Where the metadata of this resource is (RFC 9728 §3.1: the well-known path inserted
    /// between the host and the resource's path).
    pub fn metadata_url(&self) -> String {
        match reqwest::Url::parse(&self.resource) {
            Ok(u) => {
                let path = u.path().trim_end_matches('/');
                format!("{}{WELL_KNOWN}{path}", u.origin().ascii_serialization())
            }
            Err(_) => self.resource.clone(),
        }
    }

    /// The `WWW-Authenticate` value of a `401` at `/mcp`.
    pub fn challenge(&self) -> Option<HeaderValue> {
        let mut v = format!("Bearer resource_metadata=\"{}\"", self.metadata_url());
        if !self.scopes_supported.is_empty() {
            v.push_str(&format!(", scope=\"{}\"", self.scopes_supported.join(" ")));
        }
        HeaderValue::from_str(&v).ok()
    }

    /// The metadata routes (full paths: merge into the application).
    pub fn router(&self) -> axum::Router {
        let doc = self.clone();
        let suffixed = match reqwest::Url::parse(&self.resource) {
            Ok(u) if !u.path().trim_end_matches('/').is_empty() => {
                Some(format!("{WELL_KNOWN}{}", u.path().trim_end_matches('/')))
            }
            _ => None,
        };
        let serve = move || {
            let doc = doc.clone();
            async move { Json(doc) }
        };
        let mut router = axum::Router::new().route(WELL_KNOWN, get(serve.clone()));
        if let Some(path) = suffixed {
            router = router.route(&path, get(serve));
        }
        router
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_url_inserts_the_well_known_path() {
        let pr = ProtectedResource::new(
            "https://capgate.example.com/mcp",
            "https://idp.example.com",
            vec!["capgate".into()],
        )
        .unwrap();
        assert_eq!(
            pr.metadata_url(),
            "https://capgate.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            pr.challenge().unwrap(),
            "Bearer resource_metadata=\"https://capgate.example.com/.well-known/oauth-protected-resource/mcp\", scope=\"capgate\""
        );
        assert!(ProtectedResource::new("http://capgate.example.com/mcp", "x", vec![]).is_err());
        assert!(
            ProtectedResource::new("https://capgate.example.com/mcp?x=1", "x", vec![]).is_err()
        );
    }
}
