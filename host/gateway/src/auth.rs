//! Authentication runs on every gateway request, never once per session (docs/gateway.md,
//! "Doors"): built-in API keys (stored hashed) and JWT bearer tokens, behind one trait that
//! embedders implement for their own sessions.

pub use crate::identity::claims::{AttributeMap, ClaimMap, ClaimPointer};
use crate::identity::jwks::{KeySet, KeySetError, PROVIDER_ALGORITHMS, RemoteKeys, VerifyKey};
use async_trait::async_trait;
use axum::http::HeaderMap;
use capgate_core::actor::{Actor, ActorKind, Surface};
use capgate_core::authz::Principal;
use chrono::{DateTime, Utc};
pub use jsonwebtoken::Algorithm;
use serde::Deserialize;
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
    /// The model and workflow surfaces (doors) this credential may use; any other door
    /// refuses it like a bad credential. Empty: no model surface (an approver-only key).
    pub surfaces: Vec<Surface>,
    /// When the credential stops being valid (checked again on every request).
    pub expires_at: Option<DateTime<Utc>>,
    /// Whether the credential is a human's for human decisions on her own calls: it opens
    /// the requester door of the approvals API (confirming her own self-confirmable
    /// approval). A credential that opens a model door does not, unless the operator said
    /// so for it (`requesterDoor = true`), so whatever holds an agent's key cannot confirm
    /// the agent's own held calls.
    pub requester_door: bool,
    /// An operator's credential, outside every tenant namespace: it opens the operator API
    /// ([`crate::admin`]) and no other door.
    pub operator: bool,
    /// What the credential was, so a console session can be re-established without
    /// keeping it ([`Credential`]).
    pub credential: Credential,
}

/// The kind of credential a principal was established from, as a console session keeps
/// it: never the credential itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Credential {
    /// A configured API key, by its SHA-256 hex: a session re-admits it through
    /// [`Authenticator::by_api_key_hash`] on every request, so removing the key ends the
    /// session.
    ApiKey {
        /// SHA-256 hex of the key.
        sha256: String,
    },
    /// A self-contained bearer token (a JWT, or an embedder's own): it cannot be revoked
    /// before it expires, so a session keeps the principal it mapped to until the token's
    /// own expiry (or the session's, whichever is first).
    Token,
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
#[non_exhaustive]
pub enum AuthError {
    /// No credential was presented.
    #[error("no credentials")]
    Missing,
    /// The credential is not valid (unknown key, bad signature, expired, wrong claims).
    #[error("invalid credentials: {0}")]
    Invalid(String),
    /// The JWT library refused the token (malformed, bad signature, expired...).
    #[error("invalid credentials: {0}")]
    Token(#[source] Arc<jsonwebtoken::errors::Error>),
}

/// Establishes the principal of a request. Must reject expired or invalid credentials, and
/// never return an anonymous actor or an empty namespace (the gateway re-checks both).
#[async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// Authenticate from the request headers.
    async fn authenticate(&self, headers: &HeaderMap) -> Result<Authenticated, AuthError>;

    /// The principal of the API key whose SHA-256 hex this is, if it is (still)
    /// configured: how a console session, which keeps only the hash, is re-admitted. The
    /// default knows no keys (a session of such an authenticator's principal then lasts
    /// until its own expiry, as for [`Credential::Token`]).
    fn by_api_key_hash(&self, sha256_hex: &str) -> Option<Authenticated> {
        let _ = sha256_hex;
        None
    }
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
    capgate_core::digest::sha256_hex(key)
}

/// One configured API key (stored as its SHA-256).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKeyEntry {
    /// The actor the key maps to.
    pub actor: Actor,
    /// The tenant partition the key's calls run in.
    pub namespace: String,
    /// Roles the key holds (approvals API, operator API, approval types).
    pub roles: Vec<String>,
    /// The surfaces (doors) the key may use.
    pub surfaces: Vec<Surface>,
    /// Context handed to the runtime.
    pub context: serde_json::Value,
    /// Whether it opens the requester door ([`Authenticated::requester_door`]).
    pub requester_door: bool,
    /// An operator's key ([`Authenticated::operator`]).
    pub operator: bool,
}

impl ApiKeyEntry {
    /// A tenant's key with the default human-decision rule: it opens the requester door
    /// exactly when it opens no model door.
    pub fn new(
        actor: Actor,
        namespace: impl Into<String>,
        roles: Vec<String>,
        surfaces: Vec<Surface>,
        context: serde_json::Value,
    ) -> Self {
        ApiKeyEntry {
            actor,
            namespace: namespace.into(),
            roles,
            requester_door: surfaces.is_empty(),
            surfaces,
            context,
            operator: false,
        }
    }

    fn authenticated(&self, sha256_hex: &str) -> Authenticated {
        Authenticated {
            principal: Principal {
                actor: self.actor.clone(),
                namespace: self.namespace.clone(),
            },
            context: self.context.clone(),
            roles: self.roles.clone(),
            surfaces: self.surfaces.clone(),
            expires_at: None,
            requester_door: self.requester_door && !self.operator,
            operator: self.operator,
            credential: Credential::ApiKey {
                sha256: sha256_hex.to_ascii_lowercase(),
            },
        }
    }
}

/// The namespace an operator principal carries ([`Authenticated::operator`]): no tenant's.
/// What an authorizer is told for the operator API.
pub use capgate_core::actor::OPERATOR_NAMESPACE;

/// API keys, looked up by hash (`Authorization: Bearer <key>`).
#[derive(Debug, Default, Clone)]
pub struct ApiKeys {
    by_hash: HashMap<String, ApiKeyEntry>,
}

impl ApiKeys {
    /// No keys: every API key is refused until one is inserted.
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
    fn lookup(&self, token: &str) -> Option<Authenticated> {
        self.by_hash_hex(&hash_api_key(token))
    }
    fn by_hash_hex(&self, sha256_hex: &str) -> Option<Authenticated> {
        let key = sha256_hex.to_ascii_lowercase();
        self.by_hash.get(&key).map(|e| e.authenticated(&key))
    }
}

/// Where a JWT's verification key comes from. Parsed once, when the authenticator is
/// built ([`JwtKey::hs256`], [`JwtKey::rs256_pem`], [`JwtKey::jwks`]), or fetched from the
/// identity provider and kept fresh ([`JwtKey::Remote`]), never per request.
#[derive(Clone)]
pub enum JwtKey {
    /// HS256 shared secret.
    Hs256(jsonwebtoken::DecodingKey),
    /// RS256 public key.
    Rs256(jsonwebtoken::DecodingKey),
    /// Keys from a JWKS file, by `kid`.
    Jwks(Arc<KeySet>),
    /// The identity provider's published keys, refreshed on rotation.
    Remote(Arc<RemoteKeys>),
}

/// Why a JWT verification key could not be loaded.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum JwtKeyError {
    /// The HS256 secret is empty.
    #[error("the HS256 secret is empty")]
    EmptySecret,
    /// The HS256 secret cannot be used (the JWT library's error).
    #[error("unusable HS256 secret: {0}")]
    Secret(#[source] Arc<jsonwebtoken::errors::Error>),
    /// The PEM is not an RSA public key (the JWT library's error).
    #[error("not an RSA public key in PEM form: {0}")]
    Pem(#[source] Arc<jsonwebtoken::errors::Error>),
    /// The JWKS document does not parse or holds no usable key.
    #[error("JWKS: {0}")]
    Jwks(#[from] KeySetError),
}

impl JwtKey {
    /// An HS256 secret.
    pub fn hs256(secret: &[u8]) -> Result<JwtKey, JwtKeyError> {
        if secret.is_empty() {
            return Err(JwtKeyError::EmptySecret);
        }
        jsonwebtoken::DecodingKey::from_secret(secret)
            .map(JwtKey::Hs256)
            .map_err(|e| JwtKeyError::Secret(Arc::new(e)))
    }

    /// An RS256 public key in PEM form.
    pub fn rs256_pem(pem: &[u8]) -> Result<JwtKey, JwtKeyError> {
        jsonwebtoken::DecodingKey::from_rsa_pem(pem)
            .map(JwtKey::Rs256)
            .map_err(|e| JwtKeyError::Pem(Arc::new(e)))
    }

    /// The signing keys of a JWKS document (JSON).
    pub fn jwks(document: &[u8]) -> Result<JwtKey, JwtKeyError> {
        Ok(JwtKey::Jwks(Arc::new(KeySet::parse(document)?)))
    }

    /// The key that verifies a token with this header, if any may.
    async fn for_header(
        &self,
        header: &jsonwebtoken::Header,
        algorithms: &[Algorithm],
    ) -> Result<jsonwebtoken::DecodingKey, AuthError> {
        let refused = || AuthError::Invalid(format!("algorithm {:?} is not accepted", header.alg));
        let unknown = || match header.kid.as_deref() {
            Some(kid) => AuthError::Invalid(format!("unknown kid `{kid}`")),
            None => AuthError::Invalid("token has no kid".into()),
        };
        let pick = |key: Option<&VerifyKey>| {
            let key = key.ok_or_else(unknown)?;
            if !algorithms.contains(&header.alg) || !key.verifies(header.alg) {
                return Err(refused());
            }
            Ok(key.decoding_key().clone())
        };
        match self {
            JwtKey::Hs256(k) if header.alg == Algorithm::HS256 => Ok(k.clone()),
            JwtKey::Rs256(k) if header.alg == Algorithm::RS256 => Ok(k.clone()),
            JwtKey::Hs256(_) | JwtKey::Rs256(_) => Err(refused()),
            JwtKey::Jwks(set) => pick(set.get(header.kid.as_deref())),
            JwtKey::Remote(remote) => {
                if !algorithms.contains(&header.alg) {
                    // Refused before any key is looked up: no fetch for a token that
                    // could never verify.
                    return Err(refused());
                }
                pick(remote.key(header.kid.as_deref()).await.as_ref())
            }
        }
    }
}

impl std::fmt::Debug for JwtKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JwtKey::Hs256(_) => f.write_str("JwtKey::Hs256(<secret>)"),
            JwtKey::Rs256(_) => f.write_str("JwtKey::Rs256"),
            JwtKey::Jwks(set) => write!(f, "JwtKey::Jwks({:?})", set.kids()),
            JwtKey::Remote(remote) => write!(f, "JwtKey::Remote({})", remote.url()),
        }
    }
}

/// How a token is verified: its key, the issuer and audiences it must name, the
/// algorithms accepted. `exp` is always required; `nbf` is checked when present; `iss`
/// and `aud` are required when configured. No leeway.
#[derive(Debug, Clone)]
pub struct TokenCheck {
    /// The verification key(s).
    pub key: JwtKey,
    /// When set, `iss` is a required claim and must equal it.
    pub issuer: Option<String>,
    /// When not empty, `aud` is a required claim and must contain one of them.
    pub audiences: Vec<String>,
    /// The algorithms a JWKS key may verify (default: [`PROVIDER_ALGORITHMS`]); an HS256
    /// secret or an RS256 PEM verifies only its own.
    pub algorithms: Vec<Algorithm>,
}

impl TokenCheck {
    /// A check of tokens signed with `key`, every provider algorithm accepted, no `iss`
    /// or `aud` required (set them).
    pub fn new(key: JwtKey) -> TokenCheck {
        TokenCheck {
            key,
            issuer: None,
            audiences: Vec::new(),
            algorithms: PROVIDER_ALGORITHMS.to_vec(),
        }
    }

    /// Verify a token's signature and registered claims; its claims.
    pub async fn verify(&self, token: &str) -> Result<serde_json::Value, AuthError> {
        let bad = |e| AuthError::Token(Arc::new(e));
        let header = jsonwebtoken::decode_header(token).map_err(bad)?;
        let key = self.key.for_header(&header, &self.algorithms).await?;
        let mut validation = jsonwebtoken::Validation::new(header.alg);
        let mut required = vec!["exp"];
        validation.leeway = 0;
        validation.validate_nbf = true;
        if let Some(iss) = &self.issuer {
            validation.set_issuer(&[iss]);
            required.push("iss");
        }
        if self.audiences.is_empty() {
            validation.validate_aud = false;
        } else {
            validation.set_audience(&self.audiences);
            required.push("aud");
        }
        validation.set_required_spec_claims(&required);
        let data =
            jsonwebtoken::decode::<serde_json::Value>(token, &key, &validation).map_err(bad)?;
        Ok(data.claims)
    }
}

/// How JWT bearer tokens are verified and their claims mapped to the principal.
#[derive(Debug, Clone)]
pub struct JwtConfig {
    /// The verification.
    pub check: TokenCheck,
    /// Where each part of the principal is read.
    pub claims: ClaimMap,
}

/// Verifies bearer JWTs and maps their claims ([`TokenCheck`], [`ClaimMap`]).
#[derive(Debug, Clone)]
pub struct JwtAuthenticator {
    config: JwtConfig,
}

impl JwtAuthenticator {
    /// From a configuration (the key is already parsed or fetched).
    pub fn new(config: JwtConfig) -> Self {
        JwtAuthenticator { config }
    }

    /// The verification (the console's sign-in verifies ID tokens with the same keys).
    pub fn check(&self) -> &TokenCheck {
        &self.config.check
    }

    /// The claim mapping.
    pub fn claims(&self) -> &ClaimMap {
        &self.config.claims
    }

    /// Verify a bearer token and map its claims to the principal.
    pub async fn verify(&self, token: &str) -> Result<Authenticated, AuthError> {
        let claims = self.config.check.verify(token).await?;
        principal_of(&self.config.claims, &claims)
    }
}

/// The principal verified claims map to (a self-contained token's: [`Credential::Token`],
/// ending with its `exp`).
pub fn principal_of(
    map: &ClaimMap,
    claims: &serde_json::Value,
) -> Result<Authenticated, AuthError> {
    let m = map
        .map(claims)
        .map_err(|e| AuthError::Invalid(e.to_string()))?;
    let expires_at = Some(expiry(claims)?);
    let org_id = m
        .attributes
        .get("orgId")
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    Ok(Authenticated {
        context: serde_json::json!({ "namespace": m.namespace, "orgId": org_id }),
        principal: Principal {
            actor: Actor {
                id: m.actor_id,
                kind: m.kind,
                attributes: m.attributes,
            },
            namespace: m.namespace,
        },
        roles: m.roles,
        surfaces: m.surfaces,
        expires_at,
        requester_door: m.requester_door,
        operator: false,
        credential: Credential::Token,
    })
}

/// When a verified token expires: its `exp`, a NumericDate (RFC 7519: seconds since the
/// epoch, which may have a fraction; a fraction is cut, so the token ends no later than it
/// says). A token without a readable `exp` maps to no principal: nothing it opens (a
/// console session included) may outlive a token whose end cannot be read.
fn expiry(claims: &serde_json::Value) -> Result<DateTime<Utc>, AuthError> {
    let exp = claims.get("exp");
    let seconds = exp.and_then(serde_json::Value::as_i64).or_else(|| {
        exp.and_then(serde_json::Value::as_f64)
            .filter(|f| f.is_finite() && f.abs() < 1e15)
            .map(|f| f.floor() as i64)
    });
    seconds
        .and_then(|s| DateTime::from_timestamp(s, 0))
        .ok_or_else(|| AuthError::Invalid("the token's `exp` is not a NumericDate".into()))
}

/// JWT claims a token may carry; used by tests and tools that mint tokens.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct StandardClaims {
    /// The actor id the token authenticates.
    pub sub: String,
    /// The tenant partition (namespace) the actor belongs to.
    pub org: String,
    /// Expiry (seconds since the epoch).
    pub exp: i64,
    /// Application attributes handed to policies.
    #[serde(default)]
    pub attributes: serde_json::Value,
    /// Roles the actor holds.
    #[serde(default)]
    pub roles: Vec<String>,
    /// Surfaces the token may use.
    #[serde(default)]
    pub surfaces: Vec<String>,
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
        if let Some(who) = self.api_keys.lookup(token) {
            return Ok(who);
        }
        match &self.jwt {
            Some(jwt) if token.matches('.').count() == 2 => jwt.verify(token).await,
            _ => Err(AuthError::Invalid("unknown API key".into())),
        }
    }

    fn by_api_key_hash(&self, sha256_hex: &str) -> Option<Authenticated> {
        self.api_keys.by_hash_hex(sha256_hex)
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

/// An authenticator shared by every door of a deployment.
pub type SharedAuthenticator = Arc<dyn Authenticator>;

#[cfg(test)]
mod expiry_tests {
    use super::*;

    /// Issue 55: a token whose `exp` has a fraction ends when it says (no console session
    /// of the 8-hour default), and one whose `exp` cannot be read maps to no principal.
    #[test]
    fn a_fractional_exp_is_the_tokens_end_and_an_unreadable_one_is_refused() {
        let claims = |exp: serde_json::Value| serde_json::json!({"sub": "u_priya", "org": "org_1", "exp": exp});
        let map = ClaimMap::default();
        let who =
            principal_of(&map, &claims(serde_json::json!(1_900_000_000.75))).expect("a principal");
        assert_eq!(
            who.expires_at,
            DateTime::from_timestamp(1_900_000_000, 0),
            "the fraction is cut"
        );
        let whole =
            principal_of(&map, &claims(serde_json::json!(1_900_000_000))).expect("a principal");
        assert_eq!(whole.expires_at, DateTime::from_timestamp(1_900_000_000, 0));
        for bad in [
            serde_json::json!("1900000000"),
            serde_json::json!(null),
            serde_json::json!(1e300),
        ] {
            assert!(
                matches!(
                    principal_of(&map, &claims(bad.clone())),
                    Err(AuthError::Invalid(_))
                ),
                "{bad}"
            );
        }
    }
}
