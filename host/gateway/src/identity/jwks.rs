//! Signing keys: a JWKS parsed into verification keys by `kid`, and the identity provider's
//! published set kept fresh — refreshed on a schedule and when a token names a `kid` not
//! seen yet (key rotation without a restart), at most once per `min_refresh` however many
//! unknown `kid`s arrive, and kept as it was while the provider is unreachable.

use super::fetch::{IdpError, get_json};
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// The algorithms capgate verifies tokens from an identity provider with.
pub const PROVIDER_ALGORITHMS: [Algorithm; 4] = [
    Algorithm::RS256,
    Algorithm::PS256,
    Algorithm::ES256,
    Algorithm::EdDSA,
];

/// The most keys one JWKS may hold (an IdP publishes a handful).
pub const MAX_KEYS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Rsa,
    P256,
    Ed25519,
}

impl Family {
    fn verifies(self, alg: Algorithm) -> bool {
        matches!(
            (self, alg),
            (Family::Rsa, Algorithm::RS256 | Algorithm::PS256)
                | (Family::P256, Algorithm::ES256)
                | (Family::Ed25519, Algorithm::EdDSA)
        )
    }
}

/// One verification key of a set.
#[derive(Clone)]
pub struct VerifyKey {
    key: DecodingKey,
    family: Family,
    /// The key's own `alg`, when the JWKS pins one.
    alg: Option<Algorithm>,
}

impl VerifyKey {
    /// Whether this key may verify a token signed with `alg`.
    pub fn verifies(&self, alg: Algorithm) -> bool {
        self.family.verifies(alg) && self.alg.is_none_or(|a| a == alg)
    }

    /// The key, for `jsonwebtoken::decode`.
    pub fn decoding_key(&self) -> &DecodingKey {
        &self.key
    }
}

/// A JWKS's signing keys by `kid`: keys for encryption, of other types or curves, and
/// without a `kid` (unless the set has one key only) are left out.
#[derive(Clone, Default)]
pub struct KeySet {
    by_kid: HashMap<String, VerifyKey>,
    /// The only key of a set whose one key has no `kid`.
    lone: Option<VerifyKey>,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kids: Vec<_> = self.by_kid.keys().collect();
        kids.sort();
        f.debug_struct("KeySet").field("kids", &kids).finish()
    }
}

/// Why a JWKS document was refused.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum KeySetError {
    /// Not a JSON object with a `keys` list.
    #[error("not a JWKS (a JSON object with a `keys` list): {0}")]
    Malformed(String),
    /// More than [`MAX_KEYS`] keys.
    #[error("more than {MAX_KEYS} keys")]
    TooMany,
    /// No key capgate can verify with.
    #[error("no usable signing key (RS256, PS256, ES256 on P-256, EdDSA on Ed25519)")]
    NoUsableKey,
}

#[derive(serde::Deserialize)]
struct RawSet {
    keys: Vec<serde_json::Value>,
}

fn algorithm_of(a: KeyAlgorithm) -> Option<Algorithm> {
    Some(match a {
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        _ => return None,
    })
}

fn usable(raw: serde_json::Value) -> Option<(Option<String>, VerifyKey)> {
    let jwk: Jwk = serde_json::from_value(raw).ok()?;
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    let family = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Family::Rsa,
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Family::P256,
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            Family::Ed25519
        }
        _ => return None,
    };
    let alg = match jwk.common.key_algorithm {
        None => None,
        Some(a) => Some(algorithm_of(a).filter(|a| family.verifies(*a))?),
    };
    let key = DecodingKey::from_jwk(&jwk).ok()?;
    Some((jwk.common.key_id.clone(), VerifyKey { key, family, alg }))
}

impl KeySet {
    /// Parse a JWKS document (JSON).
    pub fn parse(document: &[u8]) -> Result<KeySet, KeySetError> {
        let raw: RawSet =
            serde_json::from_slice(document).map_err(|e| KeySetError::Malformed(e.to_string()))?;
        KeySet::from_raw(raw)
    }

    fn from_raw(raw: RawSet) -> Result<KeySet, KeySetError> {
        if raw.keys.len() > MAX_KEYS {
            return Err(KeySetError::TooMany);
        }
        let total = raw.keys.len();
        let mut set = KeySet::default();
        for (kid, key) in raw.keys.into_iter().filter_map(usable) {
            match kid {
                Some(kid) => {
                    set.by_kid.insert(kid, key);
                }
                None if total == 1 => set.lone = Some(key),
                None => {}
            }
        }
        if set.by_kid.is_empty() && set.lone.is_none() {
            return Err(KeySetError::NoUsableKey);
        }
        Ok(set)
    }

    /// The key a token's header names (a token without `kid` only against a set of one
    /// key).
    pub fn get(&self, kid: Option<&str>) -> Option<&VerifyKey> {
        match kid {
            Some(kid) => self.by_kid.get(kid),
            None => self.lone.as_ref(),
        }
    }

    /// The `kid`s of the set, sorted (for logs and `capgate whoami`).
    pub fn kids(&self) -> Vec<String> {
        let mut kids: Vec<_> = self.by_kid.keys().cloned().collect();
        kids.sort();
        kids
    }
}

/// How often a provider's keys are fetched again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refresh {
    /// Keys older than this are fetched again before the next token is verified.
    pub every: Duration,
    /// The least time between two fetches, whatever asks for them (a token with an
    /// unknown `kid`, a stale set): what bounds the load a flood of forged `kid`s puts on
    /// the provider.
    pub min_gap: Duration,
}

impl Default for Refresh {
    fn default() -> Self {
        Refresh {
            every: Duration::from_secs(600),
            min_gap: Duration::from_secs(30),
        }
    }
}

struct Attempts {
    /// When the set in use was fetched.
    fetched: Instant,
    /// When a fetch was last started (successful or not).
    tried: Instant,
}

/// An identity provider's published keys, as last fetched.
pub struct RemoteKeys {
    url: String,
    http: reqwest::Client,
    refresh: Refresh,
    keys: RwLock<Arc<KeySet>>,
    attempts: Mutex<Attempts>,
    /// One fetch at a time: concurrent requests for an unknown `kid` wait for it.
    fetching: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for RemoteKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteKeys")
            .field("url", &self.url)
            .field("refresh", &self.refresh)
            .finish_non_exhaustive()
    }
}

/// Fetch and parse a JWKS.
pub async fn fetch_key_set(http: &reqwest::Client, url: &str) -> Result<KeySet, IdpError> {
    let raw: RawSet = get_json(http, url, "JWKS").await?;
    KeySet::from_raw(raw).map_err(|e| match e {
        KeySetError::NoUsableKey => IdpError::NoUsableKey {
            url: url.to_owned(),
        },
        other => IdpError::Malformed {
            url: url.to_owned(),
            what: "JWKS",
            message: other.to_string(),
        },
    })
}

impl RemoteKeys {
    /// Fetch the set at `url` (a start-up error when the provider cannot be reached) and
    /// keep it fresh from then on.
    pub async fn connect(
        http: reqwest::Client,
        url: impl Into<String>,
        refresh: Refresh,
    ) -> Result<RemoteKeys, IdpError> {
        let url = url.into();
        let first = fetch_key_set(&http, &url).await?;
        let now = Instant::now();
        Ok(RemoteKeys {
            url,
            http,
            refresh,
            keys: RwLock::new(Arc::new(first)),
            attempts: Mutex::new(Attempts {
                fetched: now,
                tried: now,
            }),
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    /// The JWKS URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The set in use now.
    pub fn current(&self) -> Arc<KeySet> {
        match self.keys.read() {
            Ok(k) => k.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn attempts<R>(&self, f: impl FnOnce(&mut Attempts) -> R) -> R {
        match self.attempts.lock() {
            Ok(mut a) => f(&mut a),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// Whether a fetch may start now (and if so, claims it).
    fn claim_fetch(&self, want: impl FnOnce(&Attempts, Instant) -> bool) -> bool {
        let now = Instant::now();
        self.attempts(|a| {
            let allowed = now.duration_since(a.tried) >= self.refresh.min_gap && want(a, now);
            if allowed {
                a.tried = now;
            }
            allowed
        })
    }

    async fn fetch(&self) {
        match fetch_key_set(&self.http, &self.url).await {
            Ok(set) => {
                tracing::info!(url = %self.url, kids = ?set.kids(), "fetched the identity provider's keys");
                match self.keys.write() {
                    Ok(mut k) => *k = Arc::new(set),
                    Err(poisoned) => *poisoned.into_inner() = Arc::new(set),
                }
                self.attempts(|a| a.fetched = Instant::now());
            }
            Err(e) => tracing::warn!(
                error = %e,
                "could not refresh the identity provider's keys; verifying with the keys fetched before"
            ),
        }
    }

    /// The key for a token's `kid`: from the set in use, fetching the set again first when
    /// it is older than [`Refresh::every`], or when the `kid` is unknown — each at most
    /// once per [`Refresh::min_gap`].
    pub async fn key(&self, kid: Option<&str>) -> Option<VerifyKey> {
        let every = self.refresh.every;
        if self.claim_fetch(|a, now| now.duration_since(a.fetched) >= every) {
            let _one = self.fetching.lock().await;
            self.fetch().await;
        }
        if let Some(k) = self.current().get(kid) {
            return Some(k.clone());
        }
        let _one = self.fetching.lock().await;
        // Another request may have fetched the set while this one waited.
        if let Some(k) = self.current().get(kid) {
            return Some(k.clone());
        }
        if self.claim_fetch(|_, _| true) {
            self.fetch().await;
        }
        self.current().get(kid).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_keys_are_left_out_and_an_empty_set_refused() {
        let doc = serde_json::json!({"keys": [
            {"kty": "EC", "crv": "P-384", "kid": "p384",
             "x": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
             "y": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
            {"kty": "weird", "kid": "w"},
        ]});
        assert!(matches!(
            KeySet::parse(doc.to_string().as_bytes()),
            Err(KeySetError::NoUsableKey)
        ));
        assert!(matches!(
            KeySet::parse(b"[]"),
            Err(KeySetError::Malformed(_))
        ));
        let ed = serde_json::json!({"keys": [
            {"kty": "OKP", "crv": "Ed25519", "kid": "ed", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            {"kty": "OKP", "crv": "Ed25519", "kid": "enc", "use": "enc", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
        ]});
        let set = KeySet::parse(ed.to_string().as_bytes()).unwrap();
        assert_eq!(set.kids(), ["ed"]);
        let key = set.get(Some("ed")).unwrap();
        assert!(key.verifies(Algorithm::EdDSA));
        assert!(!key.verifies(Algorithm::RS256));
        assert!(set.get(None).is_none());
    }
}
