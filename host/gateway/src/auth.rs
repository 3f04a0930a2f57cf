//! Authentication runs on every gateway request (spec: "authenticate executes for every
//! call"): built-in API keys (stored hashed) and JWT bearer tokens, behind one trait that
//! embedders implement for their own sessions.

use async_trait::async_trait;
use axum::http::HeaderMap;
use capgate_core::actor::{Actor, ActorKind};
use capgate_core::authz::Principal;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;

/// Who a request is, as established from its credentials.
#[derive(Debug, Clone, PartialEq)]
pub struct Authenticated {
    /// Actor + namespace.
    pub principal: Principal,
    /// Application context handed to the runtime (from trusted session state).
    pub context: serde_json::Value,
    /// Roles (e.g. `approver` for the human approvals API).
    pub roles: Vec<String>,
    /// When the credential stops being valid (checked again on every request).
    pub expires_at: Option<DateTime<Utc>>,
}

impl Authenticated {
    /// Whether the principal holds a role.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }
}

/// Why a request was not authenticated. The message is for logs; callers get a constant
/// `401`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AuthError {
    /// No credential was presented.
    #[error("no credentials")]
    Missing,
    /// The credential is not valid (unknown key, bad signature, expired, wrong claims).
    #[error("invalid credentials: {0}")]
    Invalid(String),
}

/// Establishes the principal of a request. Must reject expired or invalid credentials, and
/// never return an anonymous actor or an empty namespace (the gateway re-checks both).
#[async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// Authenticate from the request headers.
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Authenticated, AuthError>;
}

/// The bearer token of a request, if any.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// SHA-256 hex of an API key: what the configuration stores instead of the key.
pub fn hash_api_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// One configured API key (stored as its SHA-256).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKeyEntry {
    /// The actor the key maps to.
    pub actor: Actor,
    /// Its namespace.
    pub namespace: String,
    /// Roles.
    pub roles: Vec<String>,
    /// Context handed to the runtime.
    pub context: serde_json::Value,
}

/// API keys, looked up by hash (`Authorization: Bearer <key>`).
#[derive(Debug, Default, Clone)]
pub struct ApiKeys {
    by_hash: HashMap<String, ApiKeyEntry>,
}

impl ApiKeys {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }
    /// Add a key by its SHA-256 hex.
    pub fn insert_hashed(&mut self, sha256_hex: impl Into<String>, entry: ApiKeyEntry) {
        self.by_hash
            .insert(sha256_hex.into().to_ascii_lowercase(), entry);
    }
    /// Whether none are configured.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
    fn lookup(&self, token: &str) -> Option<&ApiKeyEntry> {
        self.by_hash.get(&hash_api_key(token))
    }
}

/// Where a JWT's verification key comes from.
#[derive(Clone)]
pub enum JwtKey {
    /// HS256 shared secret.
    Hs256(Vec<u8>),
    /// RS256 public key (PEM).
    Rs256Pem(Vec<u8>),
    /// RS256 keys from a JWKS document, selected by `kid`.
    Jwks(jsonwebtoken::jwk::JwkSet),
}

impl std::fmt::Debug for JwtKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JwtKey::Hs256(_) => "JwtKey::Hs256(<secret>)",
            JwtKey::Rs256Pem(_) => "JwtKey::Rs256Pem",
            JwtKey::Jwks(_) => "JwtKey::Jwks",
        })
    }
}

/// How JWT claims map to the principal.
#[derive(Debug, Clone)]
pub struct JwtConfig {
    /// The verification key.
    pub key: JwtKey,
    /// Required `iss`, if any.
    pub issuer: Option<String>,
    /// Required `aud`, if any.
    pub audience: Option<String>,
    /// Claim holding the actor id (default `sub`).
    pub actor_id_claim: String,
    /// Claim holding the actor kind (default: `user`).
    pub actor_kind_claim: Option<String>,
    /// Claim holding the namespace (default `org`).
    pub namespace_claim: String,
    /// Claim holding actor attributes (default `attributes`).
    pub attributes_claim: String,
    /// Claim holding roles (default `roles`).
    pub roles_claim: String,
}

/// Verifies bearer JWTs (HS256 or RS256) and maps their claims.
pub struct JwtAuthenticator {
    config: JwtConfig,
}

impl JwtAuthenticator {
    /// From a configuration.
    pub fn new(config: JwtConfig) -> Self {
        JwtAuthenticator { config }
    }

    fn verify(&self, token: &str) -> Result<Authenticated, AuthError> {
        use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
        let bad = |e: &dyn std::fmt::Display| AuthError::Invalid(e.to_string());
        let header = decode_header(token).map_err(|e| bad(&e))?;
        let (key, alg) = match &self.config.key {
            JwtKey::Hs256(secret) => (
                DecodingKey::from_secret(secret).map_err(|e| bad(&e))?,
                Algorithm::HS256,
            ),
            JwtKey::Rs256Pem(pem) => (
                DecodingKey::from_rsa_pem(pem).map_err(|e| bad(&e))?,
                Algorithm::RS256,
            ),
            JwtKey::Jwks(set) => {
                let kid = header
                    .kid
                    .as_deref()
                    .ok_or_else(|| AuthError::Invalid("token has no kid".into()))?;
                let jwk = set
                    .find(kid)
                    .ok_or_else(|| AuthError::Invalid(format!("unknown kid `{kid}`")))?;
                (
                    DecodingKey::from_jwk(jwk).map_err(|e| bad(&e))?,
                    Algorithm::RS256,
                )
            }
        };
        if header.alg != alg {
            return Err(AuthError::Invalid(format!(
                "algorithm {:?} is not accepted",
                header.alg
            )));
        }
        let mut validation = Validation::new(alg);
        validation.set_required_spec_claims(&["exp"]);
        validation.leeway = 0;
        if let Some(iss) = &self.config.issuer {
            validation.set_issuer(&[iss]);
        }
        match &self.config.audience {
            Some(aud) => validation.set_audience(&[aud]),
            None => validation.validate_aud = false,
        }
        let data = decode::<serde_json::Map<String, serde_json::Value>>(token, &key, &validation)
            .map_err(|e| bad(&e))?;
        let claims = data.claims;
        let str_claim = |name: &str| {
            claims
                .get(name)
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let id = str_claim(&self.config.actor_id_claim).ok_or_else(|| {
            AuthError::Invalid(format!("claim `{}` missing", self.config.actor_id_claim))
        })?;
        let kind = match &self.config.actor_kind_claim {
            Some(c) => str_claim(c)
                .as_deref()
                .unwrap_or("user")
                .parse::<ActorKind>()
                .map_err(AuthError::Invalid)?,
            None => ActorKind::User,
        };
        let namespace = str_claim(&self.config.namespace_claim).ok_or_else(|| {
            AuthError::Invalid(format!("claim `{}` missing", self.config.namespace_claim))
        })?;
        let attributes = claims
            .get(&self.config.attributes_claim)
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        let roles = claims
            .get(&self.config.roles_claim)
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|r| r.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let expires_at = claims
            .get("exp")
            .and_then(|v| v.as_i64())
            .and_then(|s| DateTime::from_timestamp(s, 0));
        Ok(Authenticated {
            principal: Principal {
                actor: Actor {
                    id,
                    kind,
                    attributes: attributes.clone(),
                },
                namespace: namespace.clone(),
            },
            context: serde_json::json!({ "namespace": namespace, "orgId": attributes.get("orgId").cloned().unwrap_or(serde_json::Value::Null) }),
            roles,
            expires_at,
        })
    }
}

/// JWT claims a token may carry; used by tests and tools that mint tokens.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct StandardClaims {
    /// Actor id.
    pub sub: String,
    /// Namespace.
    pub org: String,
    /// Expiry (seconds since the epoch).
    pub exp: i64,
    /// Attributes.
    #[serde(default)]
    pub attributes: serde_json::Value,
    /// Roles.
    #[serde(default)]
    pub roles: Vec<String>,
}

/// The built-in authenticator: API keys first, then JWTs.
pub struct BuiltinAuthenticator {
    /// Hashed API keys.
    pub api_keys: ApiKeys,
    /// JWT verification, if configured.
    pub jwt: Option<JwtAuthenticator>,
}

#[async_trait]
impl Authenticator for BuiltinAuthenticator {
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Authenticated, AuthError> {
        let token = bearer(headers).ok_or(AuthError::Missing)?;
        if let Some(entry) = self.api_keys.lookup(token) {
            return Ok(Authenticated {
                principal: Principal {
                    actor: entry.actor.clone(),
                    namespace: entry.namespace.clone(),
                },
                context: entry.context.clone(),
                roles: entry.roles.clone(),
                expires_at: None,
            });
        }
        match &self.jwt {
            Some(jwt) if token.matches('.').count() == 2 => jwt.verify(token),
            _ => Err(AuthError::Invalid("unknown API key".into())),
        }
    }
}

/// Check what every authenticator must guarantee, whatever its implementation: not
/// anonymous, a non-empty namespace, not expired.
pub fn check_principal(a: &Authenticated, now: DateTime<Utc>) -> Result<(), AuthError> {
    if a.principal.actor.kind == ActorKind::Anonymous {
        return Err(AuthError::Invalid("anonymous actors are rejected".into()));
    }
    if !a.principal.actor.is_well_formed() {
        return Err(AuthError::Invalid("malformed actor id".into()));
    }
    if a.principal.namespace.trim().is_empty() {
        return Err(AuthError::Invalid("empty namespace".into()));
    }
    if a.expires_at.is_some_and(|e| e <= now) {
        return Err(AuthError::Invalid("credential expired".into()));
    }
    Ok(())
}

/// Shared handle.
pub type SharedAuthenticator = Arc<dyn Authenticator>;
