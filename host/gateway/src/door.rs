//! One principal model for every door. Each door — a capability route (`/agent`,
//! `/workflow`), `/mcp`, the human approvals API, the operator API ([`crate::admin`]) —
//! runs the same chain through its [`Doorkeeper`]:
//!
//! 1. **authenticate** the credential ([`Authenticator`]) and check what every principal
//!    must satisfy ([`check_principal`]): `401` otherwise. A client address whose
//!    unauthenticated requests spent their budget ([`Doorkeeper::unauthenticated`], per
//!    address as [`ClientAddresses`] reads it) is answered `429` before its credential is
//!    even tried;
//! 2. **bind to the door**: a model surface is open only to credentials that name it
//!    (`surfaces = ["aiSdk", "mcp"]`); an operator's credential opens only the operator
//!    API; anything else is refused exactly like a bad credential (`401`), so a key cannot
//!    find out which doors exist for others;
//! 3. **rate-limit** the principal and its namespace (token buckets, [`Quotas`]): `429`
//!    with `Retry-After`. The buckets are this process's, or a store every replica shares
//!    ([`Quotas::shared`]); a shared store that does not answer refuses the request
//!    (`503`, retryable) rather than letting it through unlimited;
//! 4. **authorize** each operation ([`Authorizer`], told the door's surface): `403`.
//!
//! In axum terms the first three are the crate's `Caller` extractor and the fourth is
//! `Doorkeeper::authorize`, called by the handler once it knows the capability.

use crate::auth::{Authenticated, Authenticator, check_principal};
use crate::reject::Reject;
use crate::throttle::{ClientAddresses, Throttle};
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use capgate_core::actor::Surface;
use capgate_core::authz::{AuthorizeRequest, Authorizer, Operation};
use capgate_core::clock::Clock;
use capgate_core::id::BoundedId;
use capgate_core::quota::{Admission, BucketRate, QuotaStore};
use governor::clock::{Clock as _, DefaultClock};
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use serde::de::DeserializeOwned;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const LOG: &str = "capgate::door";

/// Which door a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// A model or workflow surface (`/agent` is `aiSdk`, `/workflow` is `workflow`, `/mcp`
    /// is `mcp`): open only to credentials that name the surface.
    Surface(Surface),
    /// The human approvals API: open to any credential; its role check decides.
    Approvals,
    /// The operator API (`POST /admin/reload`): open to operator credentials only
    /// ([`Authenticated::operator`]); the authorizer decides each operation.
    Admin,
}

impl Door {
    /// The surface the authorizer is told (`None` for the approvals API).
    pub fn surface(self) -> Option<Surface> {
        match self {
            Door::Surface(s) => Some(s),
            Door::Approvals | Door::Admin => None,
        }
    }
}

/// A token-bucket rate: `per_second` sustained, bursts of up to `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Sustained requests per second.
    pub per_second: NonZeroU32,
    /// Requests allowed at once above the sustained rate.
    pub burst: NonZeroU32,
}

impl Rate {
    /// A rate; `None` when either number is zero.
    pub fn new(per_second: u32, burst: u32) -> Option<Rate> {
        Some(Rate {
            per_second: NonZeroU32::new(per_second)?,
            burst: NonZeroU32::new(burst)?,
        })
    }
    fn quota(self) -> Quota {
        Quota::per_second(self.per_second).allow_burst(self.burst)
    }
    fn bucket(self) -> BucketRate {
        BucketRate {
            per_second: self.per_second,
            burst: self.burst,
        }
    }
}

/// Why [`Quotas::take`] refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Over quota: retry after this many seconds (`429`).
    Limited(u64),
    /// The shared store of buckets did not answer: refused, fail closed (`503`).
    Unavailable,
}

pub use capgate_core::defaults::door::{
    DEFAULT_NAMESPACE_BURST, DEFAULT_NAMESPACE_RATE, DEFAULT_PRINCIPAL_BURST,
    DEFAULT_PRINCIPAL_RATE,
};

type Keyed = RateLimiter<String, DefaultKeyedStateStore<String>, DefaultClock>;

/// Per-principal and per-namespace token buckets, shared by every door of a process: in
/// this process's memory ([`Quotas::new`]: each replica limits on its own) or in a store
/// every replica reaches ([`Quotas::shared`]: the deployment as a whole limits). `None`
/// rates switch that limit off.
pub struct Quotas {
    /// The rates the buckets were built for (per principal, per namespace).
    rates: (Option<Rate>, Option<Rate>),
    /// Where the buckets live when replicas share them (then the governors are unused).
    shared: Option<Arc<dyn QuotaStore>>,
    principal: Option<Keyed>,
    namespace: Option<Keyed>,
    clock: DefaultClock,
    checks: AtomicU64,
    refused: AtomicU64,
}

impl std::fmt::Debug for Quotas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quotas")
            .field("principal", &self.principal.is_some())
            .field("namespace", &self.namespace.is_some())
            .field("shared", &self.shared.is_some())
            .field("refused", &self.refused())
            .finish()
    }
}

impl Default for Quotas {
    /// [`DEFAULT_PRINCIPAL_RATE`]/[`DEFAULT_PRINCIPAL_BURST`] per principal and
    /// [`DEFAULT_NAMESPACE_RATE`]/[`DEFAULT_NAMESPACE_BURST`] per namespace.
    fn default() -> Self {
        Quotas::new(
            Rate::new(DEFAULT_PRINCIPAL_RATE, DEFAULT_PRINCIPAL_BURST),
            Rate::new(DEFAULT_NAMESPACE_RATE, DEFAULT_NAMESPACE_BURST),
        )
    }
}

impl Quotas {
    /// Limits per principal and per namespace (`None`: unlimited).
    pub fn new(principal: Option<Rate>, namespace: Option<Rate>) -> Self {
        Quotas {
            rates: (principal, namespace),
            shared: None,
            principal: principal.map(|r| RateLimiter::keyed(r.quota())),
            namespace: namespace.map(|r| RateLimiter::keyed(r.quota())),
            clock: DefaultClock::default(),
            checks: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Limits per principal and per namespace whose buckets live in `store`, which every
    /// replica of the deployment shares: N replicas together admit the configured quota,
    /// not N times it. Each request then costs one round trip to the store per limit.
    pub fn shared(
        principal: Option<Rate>,
        namespace: Option<Rate>,
        store: Arc<dyn QuotaStore>,
    ) -> Self {
        Quotas {
            shared: Some(store),
            principal: None,
            namespace: None,
            ..Quotas::new(principal, namespace)
        }
    }

    /// Whether the buckets live in a shared store ([`Quotas::shared`]).
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// No limits at all.
    pub fn unlimited() -> Self {
        Quotas::new(None, None)
    }

    /// The rates these buckets limit to, per principal and per namespace (`None`: that
    /// limit is off): what a serving process compares to keep its buckets across a reload
    /// that does not change them.
    pub fn rates(&self) -> (Option<Rate>, Option<Rate>) {
        self.rates
    }

    /// Requests refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Take one token for this principal and its namespace, wherever the buckets live.
    pub async fn take(&self, who: &Authenticated) -> Result<(), Refusal> {
        let Some(store) = &self.shared else {
            return self.check(who).map_err(Refusal::Limited);
        };
        let (principal, namespace) = self.rates;
        let buckets = [
            (principal, "p", principal_key(who)),
            (namespace, "n", who.principal.namespace.clone()),
        ];
        for (rate, kind, name) in buckets {
            let Some(rate) = rate else { continue };
            // A digest: bounded whatever the name, and no tenant's name in the table.
            let key = format!("{kind}:{}", capgate_core::digest::sha256_hex(&name));
            match store.take(&key, rate.bucket()).await {
                Ok(Admission::Admitted) => {}
                Ok(Admission::Limited { retry_after }) => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
                    return Err(Refusal::Limited(secs));
                }
                Err(e) => {
                    tracing::warn!(target: LOG, error = %e, "the shared rate-limit store did not answer; request refused");
                    return Err(Refusal::Unavailable);
                }
            }
        }
        Ok(())
    }

    /// Take one token for this principal and its namespace from this process's buckets;
    /// `Err` carries the seconds to wait. (With [`Quotas::shared`] buckets, use
    /// [`Quotas::take`]: these are not consulted and always admit.)
    pub fn check(&self, who: &Authenticated) -> Result<(), u64> {
        let n = self.checks.fetch_add(1, Ordering::Relaxed);
        if n % 4096 == 4095 {
            // Forget buckets that are full again, so idle principals cost no memory.
            for l in [&self.principal, &self.namespace].into_iter().flatten() {
                l.retain_recent();
                l.shrink_to_fit();
            }
        }
        let checks = [
            (&self.principal, principal_key(who)),
            (&self.namespace, who.principal.namespace.clone()),
        ];
        for (limiter, key) in checks {
            if let Some(l) = limiter
                && let Err(not_until) = l.check_key(&key)
            {
                self.refused.fetch_add(1, Ordering::Relaxed);
                let wait = not_until.wait_time_from(self.clock.now());
                return Err(wait.as_secs() + u64::from(wait.subsec_nanos() > 0));
            }
        }
        Ok(())
    }
}

/// The key naming a principal's bucket: namespace, actor kind and id.
fn principal_key(who: &Authenticated) -> String {
    format!(
        "{}\u{0}{}\u{0}{}",
        who.principal.namespace,
        who.principal.actor.kind.as_str(),
        who.principal.actor.id
    )
}

/// The authenticate → bind → rate-limit → authorize chain every door runs. Cheap to clone.
#[derive(Clone)]
pub struct Doorkeeper {
    /// Establishes the principal.
    pub authenticator: Arc<dyn Authenticator>,
    /// Decides each operation.
    pub authorizer: Arc<dyn Authorizer>,
    /// Per-principal and per-namespace rate limits.
    pub quotas: Arc<Quotas>,
    /// The clock credentials' expiry is checked against.
    pub clock: Arc<dyn Clock>,
    /// Which address a request comes from (trusted proxies).
    pub clients: ClientAddresses,
    /// Unauthenticated requests per client address (`None`: not throttled).
    pub unauthenticated: Option<Arc<Throttle>>,
}

crate::debug::debug_fields! { Doorkeeper { quotas } }

impl Doorkeeper {
    /// A doorkeeper with the default [`Quotas`] and the system clock.
    pub fn new(authenticator: Arc<dyn Authenticator>, authorizer: Arc<dyn Authorizer>) -> Self {
        Doorkeeper {
            authenticator,
            authorizer,
            quotas: Arc::new(Quotas::default()),
            clock: Arc::new(capgate_core::clock::SystemClock),
            clients: ClientAddresses::default(),
            unauthenticated: crate::throttle::PerMinute::new(
                crate::throttle::DEFAULT_UNAUTHENTICATED_PER_MINUTE,
                crate::throttle::DEFAULT_UNAUTHENTICATED_BURST,
            )
            .map(|r| Arc::new(Throttle::new(r))),
        }
    }

    /// Builder: which proxies' `X-Forwarded-For` is believed.
    pub fn clients(mut self, clients: ClientAddresses) -> Self {
        self.clients = clients;
        self
    }

    /// Builder: the throttle of unauthenticated requests per client address (`None`: off).
    pub fn unauthenticated(mut self, throttle: Option<Arc<Throttle>>) -> Self {
        self.unauthenticated = throttle;
        self
    }

    /// Builder: the rate limits.
    pub fn quotas(mut self, quotas: Arc<Quotas>) -> Self {
        self.quotas = quotas;
        self
    }

    /// Builder: the clock (tests).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Steps 1–3: who is this, may they use this door, are they within their quota.
    /// `client` is the request's address ([`ClientAddresses::client`]), for the
    /// unauthenticated throttle.
    pub(crate) async fn admit(
        &self,
        headers: &axum::http::HeaderMap,
        client: Option<std::net::IpAddr>,
        door: Door,
    ) -> Result<Authenticated, Reject> {
        // The credential is verified first: a valid one is never refused by the
        // unauthenticated throttle, whatever else came from its address (a NAT, a proxy
        // without `trustedProxies`, a neighbour guessing keys). Only failures spend the
        // address's budget, and a failure past it answers 429 instead of 401.
        let throttled = self.unauthenticated.as_ref().zip(client);
        let refused = |reason: &dyn std::fmt::Display| {
            tracing::info!(target: LOG, reason = %reason, "request not authenticated");
            if let Some((t, ip)) = &throttled
                && let Err(secs) = t.charge(&ip.to_string())
            {
                tracing::info!(target: LOG, client = %ip, "unauthenticated requests throttled");
                return Reject::too_many_requests(secs);
            }
            Reject::unauthenticated()
        };
        let who = self
            .authenticator
            .authenticate(headers)
            .await
            .map_err(|e| refused(&e))?;
        check_principal(&who, self.clock.now()).map_err(|e| refused(&e))?;
        self.admit_principal(who, door).await
    }

    /// The client address of a request (see [`ClientAddresses`]).
    pub(crate) fn client(
        &self,
        extensions: &axum::http::Extensions,
        headers: &axum::http::HeaderMap,
    ) -> Option<std::net::IpAddr> {
        self.clients.client(extensions, headers)
    }

    /// Steps 2–3 (and the principal checks of step 1) for a principal established
    /// otherwise: a console session re-admitted from the store.
    pub(crate) async fn admit_principal(
        &self,
        who: Authenticated,
        door: Door,
    ) -> Result<Authenticated, Reject> {
        check_principal(&who, self.clock.now()).map_err(|e| {
            tracing::info!(target: LOG, reason = %e, "principal refused");
            Reject::unauthenticated()
        })?;
        let bound = match door {
            Door::Surface(s) => !who.operator && who.surfaces.contains(&s),
            Door::Approvals => !who.operator,
            Door::Admin => true,
        };
        if !bound {
            tracing::info!(target: LOG, actor = %who.principal.actor.id, door = ?door, "credential not bound to this door");
            return Err(Reject::unauthenticated());
        }
        match self.quotas.take(&who).await {
            Ok(()) => {}
            Err(Refusal::Limited(secs)) => {
                tracing::info!(target: LOG, actor = %who.principal.actor.id, namespace = %who.principal.namespace, "rate limited");
                return Err(Reject::too_many_requests(secs));
            }
            Err(Refusal::Unavailable) => return Err(Reject::unavailable("rate-limit store")),
        }
        Ok(who)
    }

    /// Step 4: may this principal perform `operation` through `door`?
    pub(crate) async fn authorize(
        &self,
        who: &Authenticated,
        door: Door,
        operation: Operation,
        capability_id: Option<&str>,
        input: Option<&serde_json::Value>,
    ) -> Result<(), Reject> {
        let request = AuthorizeRequest {
            principal: &who.principal,
            operation,
            surface: door.surface(),
            capability_id,
            input,
        };
        self.authorizer.authorize(&request).await.map_err(|e| {
            tracing::info!(
                target: LOG,
                operation = operation.as_str(),
                actor = %who.principal.actor.id,
                reason = %e,
                "operation denied"
            );
            Reject::forbidden()
        })
    }
}

/// What a router's state tells the extractors: its doorkeeper and its door.
pub(crate) trait DoorState: Send + Sync {
    fn keeper(&self) -> &Doorkeeper;
    fn door(&self) -> Door;
    /// The body limit, for the 413 message.
    fn body_limit(&self) -> usize;
}

impl<T: DoorState> DoorState for Arc<T> {
    fn keeper(&self) -> &Doorkeeper {
        (**self).keeper()
    }
    fn door(&self) -> Door {
        (**self).door()
    }
    fn body_limit(&self) -> usize {
        (**self).body_limit()
    }
}

/// The authenticated principal of a request that passed steps 1–3 of its door. Handlers
/// take it as an argument; a request that fails never reaches them.
pub(crate) struct Caller(pub(crate) Authenticated);

/// A principal the console already re-admitted from its session (steps 1–3 done by
/// [`Doorkeeper::admit_principal`]); only the console's own layer puts it in a request's
/// extensions, never anything a client sends.
#[derive(Clone)]
pub(crate) struct SessionPrincipal(pub(crate) Authenticated);

impl<S: DoorState> FromRequestParts<S> for Caller {
    type Rejection = Reject;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if let Some(SessionPrincipal(who)) = parts.extensions.remove::<SessionPrincipal>() {
            return Ok(Caller(who));
        }
        let keeper = state.keeper();
        let client = keeper.client(&parts.extensions, &parts.headers);
        keeper
            .admit(&parts.headers, client, state.door())
            .await
            .map(Caller)
    }
}

/// A request body the doors accept: JSON of this shape, checked beyond what serde checks.
/// Public so that [`admit_body`] (the fuzz targets' entry) can name the body types.
pub trait WireBody: DeserializeOwned + Send {
    /// The operation, for error messages (`Invalid invoke request: …`).
    const OPERATION: &'static str;
    /// Bounds serde cannot express (id lengths, list sizes).
    fn check(&self) -> Result<(), Reject> {
        Ok(())
    }
}

/// Parse and check a request body exactly as a door does (an empty body is `{}`, unknown
/// fields are refused, then [`WireBody::check`]).
fn admit<T: WireBody>(bytes: &[u8]) -> Result<T, Reject> {
    let value: T = parse(bytes, T::OPERATION)?;
    value.check()?;
    Ok(value)
}

/// A door's admission of a request body without HTTP: the value a handler would be given,
/// or the message of the `400` the caller would read. It exists for the fuzz targets
/// (host/fuzz), which hold every body type to "parse → check never panics".
pub fn admit_body<T: WireBody>(bytes: &[u8]) -> Result<T, String> {
    admit(bytes).map_err(|r| r.message)
}

/// A validated JSON body: at most the door's body limit (the tower layer refuses more with
/// `413`), parsed strictly (unknown fields refused; an empty body is `{}`), then checked.
pub(crate) struct Valid<T>(pub(crate) T);

impl<S: DoorState, T: WireBody> FromRequest<S> for Valid<T> {
    type Rejection = Reject;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                Reject::too_large(Some(state.body_limit()))
            } else {
                Reject::bad_request(format!("The request body could not be read: {e}"))
            }
        })?;
        admit(&bytes).map(Valid)
    }
}

/// Parse a JSON request body; an empty body is `{}`. Errors name the field (its path, as
/// `scope.tags[3]`) and the position.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8], operation: &str) -> Result<T, Reject> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    let invalid = |e: &dyn std::fmt::Display| {
        Reject::bad_request(format!("Invalid {operation} request: {e}."))
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            invalid(&inner)
        } else {
            invalid(&format_args!("`{path}`: {inner}"))
        }
    })?;
    de.end().map_err(|e| invalid(&e))?;
    Ok(value)
}

/// A bounded id ([`BoundedId`]) that arrives outside a wire body: a path segment, a query
/// parameter, a scope entry.
pub(crate) fn check_id(field: &str, value: &str) -> Result<(), Reject> {
    BoundedId::check(value).map_err(|e| Reject::bad_request(format!("`{field}` {e}.")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capgate_core::actor::{Actor, ActorKind};
    use capgate_core::authz::Principal;

    fn who(id: &str, ns: &str) -> Authenticated {
        Authenticated {
            principal: Principal {
                actor: Actor {
                    id: id.into(),
                    kind: ActorKind::User,
                    attributes: serde_json::json!({}),
                },
                namespace: ns.into(),
            },
            context: serde_json::Value::Null,
            roles: vec![],
            surfaces: vec![],
            expires_at: None,
            requester_door: true,
            operator: false,
            credential: crate::auth::Credential::Token,
        }
    }

    #[test]
    fn a_principal_over_its_burst_is_told_when_to_retry_and_others_are_not() {
        let q = Quotas::new(Rate::new(1, 3), None);
        for _ in 0..3 {
            assert!(q.check(&who("u_a", "org_1")).is_ok());
        }
        let refused = q.check(&who("u_a", "org_1"));
        assert!(matches!(refused, Err(secs) if secs >= 1));
        assert!(q.check(&who("u_b", "org_1")).is_ok());
        assert_eq!(q.refused(), 1);
    }

    #[tokio::test]
    async fn shared_buckets_span_every_quotas_over_one_store() {
        // Two processes' Quotas over one store: the burst is the deployment's, not each one's.
        let store: Arc<dyn QuotaStore> = Arc::new(capgate_core::quota::InMemoryQuotaStore::new());
        let a = Quotas::shared(Rate::new(1, 4), None, store.clone());
        let b = Quotas::shared(Rate::new(1, 4), None, store);
        let mut admitted = 0;
        for i in 0..10 {
            let q = if i % 2 == 0 { &a } else { &b };
            if q.take(&who("u_a", "org_1")).await.is_ok() {
                admitted += 1;
            }
        }
        assert!((4..=5).contains(&admitted), "{admitted} admitted");
        assert!(matches!(
            a.take(&who("u_a", "org_1")).await,
            Err(Refusal::Limited(s)) if s >= 1
        ));
    }

    #[test]
    fn a_namespace_quota_spans_its_principals() {
        let q = Quotas::new(None, Rate::new(1, 2));
        assert!(q.check(&who("u_a", "org_1")).is_ok());
        assert!(q.check(&who("u_b", "org_1")).is_ok());
        assert!(q.check(&who("u_c", "org_1")).is_err());
        assert!(q.check(&who("u_c", "org_2")).is_ok());
    }

    #[test]
    fn ids_are_bounded_and_clean() {
        assert!(check_id("invocationId", "inv_1").is_ok());
        assert!(check_id("invocationId", &"x".repeat(256)).is_ok());
        let long = check_id("invocationId", &"x".repeat(257)).err();
        assert_eq!(
            long.map(|r| r.status),
            Some(axum::http::StatusCode::BAD_REQUEST)
        );
        assert!(check_id("invocationId", "").is_err());
        assert!(check_id("invocationId", "a\nb").is_err());
    }
}
