//! The console's sign-in with the identity provider: the OpenID Connect authorization-code
//! flow with PKCE (RFC 7636, `S256`), a `state` binding the callback to the browser that
//! started it and a `nonce` binding the ID token to it. The ID token is verified with the
//! provider's keys ([`super::jwks`]) for this client (`aud` = the client id) and its claims
//! mapped like a bearer token's ([`super::claims`]).

use super::fetch::{IdpError, ProviderMetadata, check_url, read_json};
use crate::auth::{AuthError, TokenCheck};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// How the console signs people in with the provider.
#[derive(Clone)]
pub struct OidcClient {
    /// The name the sign-in button shows ("Sign in with Acme SSO").
    pub display_name: String,
    /// The client id registered at the provider.
    pub client_id: String,
    /// The client secret (a confidential client authenticates with HTTP Basic); `None` for
    /// a public client, PKCE alone.
    client_secret: Option<String>,
    /// Where the provider sends the browser back (`…/console/oidc/callback`), exactly as
    /// registered.
    pub redirect_url: String,
    /// Scopes asked for (`openid` always first).
    pub scopes: Vec<String>,
    authorization_endpoint: String,
    token_endpoint: String,
    /// How ID tokens are verified: the provider's keys, its issuer, `aud` = the client id.
    id_tokens: TokenCheck,
    http: reqwest::Client,
}

impl std::fmt::Debug for OidcClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcClient")
            .field("display_name", &self.display_name)
            .field("client_id", &self.client_id)
            .field("redirect_url", &self.redirect_url)
            .field("authorization_endpoint", &self.authorization_endpoint)
            .finish_non_exhaustive()
    }
}

/// What the console's sign-in is configured with.
#[derive(Debug, Clone)]
pub struct OidcSettings {
    /// The button's name.
    pub display_name: String,
    /// The client id.
    pub client_id: String,
    /// The client secret, if a confidential client.
    pub client_secret: Option<String>,
    /// The registered redirect URL.
    pub redirect_url: String,
    /// Extra scopes (`openid` is always asked).
    pub scopes: Vec<String>,
}

/// Why the console's sign-in cannot be set up, or did not complete.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum OidcError {
    /// The provider's configuration lacks an endpoint the flow needs.
    #[error("the provider's OpenID configuration has no {0}")]
    MissingEndpoint(&'static str),
    /// The provider does not offer PKCE with S256.
    #[error("the provider does not list S256 in code_challenge_methods_supported")]
    NoPkce,
    /// The redirect URL is not absolute http(s).
    #[error("the redirect URL `{0}` must be an absolute https:// URL (http:// only on loopback)")]
    RedirectUrl(String),
    /// Talking to the provider failed.
    #[error(transparent)]
    Provider(#[from] IdpError),
    /// The token endpoint refused the code (its `error`, never the code).
    #[error("the token endpoint refused the code: {0}")]
    Exchange(String),
    /// The answer carries no ID token.
    #[error("the token endpoint's answer carries no id_token")]
    NoIdToken,
    /// The ID token did not verify.
    #[error("the ID token is not valid: {0}")]
    IdToken(#[source] AuthError),
    /// The ID token's nonce is not this sign-in's.
    #[error("the ID token's nonce is not this sign-in's")]
    Nonce,
    /// No randomness from the operating system.
    #[error("no randomness for the sign-in")]
    Random,
}

/// One sign-in under way, kept by the browser (an HttpOnly cookie) between the redirect
/// to the provider and the callback.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PendingSignIn {
    /// The `state` sent to the provider; the callback must bring it back.
    pub state: String,
    /// The `nonce` the ID token must carry.
    pub nonce: String,
    /// The PKCE code verifier.
    pub verifier: String,
}

fn random_token() -> Result<String, OidcError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|_| OidcError::Random)?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// The PKCE `S256` challenge of a verifier.
pub fn pkce_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

#[derive(serde::Deserialize)]
struct TokenAnswer {
    #[serde(default)]
    id_token: Option<String>,
}

#[derive(serde::Deserialize)]
struct TokenRefusal {
    #[serde(default)]
    error: Option<String>,
}

impl OidcClient {
    /// The client for a provider discovered at start-up; `id_tokens` is the bearer tokens'
    /// check (its keys and issuer), re-aimed at this client's id.
    pub fn new(
        settings: OidcSettings,
        metadata: &ProviderMetadata,
        bearer: &TokenCheck,
    ) -> Result<OidcClient, OidcError> {
        let authorization_endpoint = metadata
            .authorization_endpoint
            .clone()
            .ok_or(OidcError::MissingEndpoint("authorization_endpoint"))?;
        let token_endpoint = metadata
            .token_endpoint
            .clone()
            .ok_or(OidcError::MissingEndpoint("token_endpoint"))?;
        if !metadata.code_challenge_methods_supported.is_empty()
            && !metadata
                .code_challenge_methods_supported
                .iter()
                .any(|m| m == "S256")
        {
            return Err(OidcError::NoPkce);
        }
        check_url(&settings.redirect_url)
            .map_err(|_| OidcError::RedirectUrl(settings.redirect_url.clone()))?;
        let mut scopes = vec!["openid".to_owned()];
        scopes.extend(settings.scopes.into_iter().filter(|s| s != "openid"));
        let mut id_tokens = bearer.clone();
        id_tokens.issuer = Some(metadata.issuer.clone());
        id_tokens.audiences = vec![settings.client_id.clone()];
        Ok(OidcClient {
            display_name: settings.display_name,
            client_id: settings.client_id,
            client_secret: settings.client_secret,
            redirect_url: settings.redirect_url,
            scopes,
            authorization_endpoint,
            token_endpoint,
            id_tokens,
            http: super::fetch::client(),
        })
    }

    /// Start a sign-in: what the browser keeps, and where it is sent.
    pub fn start(&self) -> Result<(PendingSignIn, String), OidcError> {
        let pending = PendingSignIn {
            state: random_token()?,
            nonce: random_token()?,
            verifier: random_token()?,
        };
        let mut url = reqwest::Url::parse(&self.authorization_endpoint)
            .map_err(|_| OidcError::MissingEndpoint("valid authorization_endpoint"))?;
        url.query_pairs_mut()
            .append_pair("response_type", "code")
            .append_pair("client_id", &self.client_id)
            .append_pair("redirect_uri", &self.redirect_url)
            .append_pair("scope", &self.scopes.join(" "))
            .append_pair("state", &pending.state)
            .append_pair("nonce", &pending.nonce)
            .append_pair("code_challenge", &pkce_challenge(&pending.verifier))
            .append_pair("code_challenge_method", "S256");
        Ok((pending, url.into()))
    }

    /// Finish a sign-in: exchange the code (with the verifier), verify the ID token and its
    /// nonce; its claims.
    pub async fn finish(
        &self,
        pending: &PendingSignIn,
        code: &str,
    ) -> Result<serde_json::Value, OidcError> {
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.redirect_url.as_str()),
            ("code_verifier", pending.verifier.as_str()),
        ];
        if self.client_secret.is_none() {
            form.push(("client_id", self.client_id.as_str()));
        }
        let mut request = self
            .http
            .post(&self.token_endpoint)
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&form);
        if let Some(secret) = &self.client_secret {
            // RFC 6749 §2.3.1: both form-urlencoded before Basic.
            let enc =
                |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            request = request.basic_auth(enc(&self.client_id), Some(enc(secret)));
        }
        let mut response = request.send().await.map_err(|e| {
            OidcError::Provider(IdpError::Unreachable {
                url: self.token_endpoint.clone(),
                source: Arc::new(e),
            })
        })?;
        if !response.status().is_success() {
            let refusal: Option<TokenRefusal> =
                read_json(&mut response, &self.token_endpoint, "token error")
                    .await
                    .ok();
            let error = refusal
                .and_then(|r| r.error)
                .filter(|e| e.len() <= 64 && e.bytes().all(|b| b.is_ascii_graphic()))
                .unwrap_or_else(|| "unknown_error".into());
            return Err(OidcError::Exchange(error));
        }
        let answer: TokenAnswer =
            read_json(&mut response, &self.token_endpoint, "token answer").await?;
        let id_token = answer.id_token.ok_or(OidcError::NoIdToken)?;
        let claims = self
            .id_tokens
            .verify(&id_token)
            .await
            .map_err(OidcError::IdToken)?;
        let nonce_ok = claims
            .get("nonce")
            .and_then(|n| n.as_str())
            .is_some_and(|n| constant_time_eq(n.as_bytes(), pending.nonce.as_bytes()));
        if !nonce_ok {
            return Err(OidcError::Nonce);
        }
        Ok(claims)
    }
}

/// Equality that takes as long whatever the first difference.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pkce_challenge_is_rfc_7636s() {
        // RFC 7636, Appendix B.
        assert_eq!(
            pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }
}
