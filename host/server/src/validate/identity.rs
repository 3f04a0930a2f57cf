//! The gateway's identity checks: the authorizer it names and the authenticators (API
//! keys, JWT keys) it builds, each refusal located at its key.
use super::*;
use capgate_config::{JwtAlgorithm, JwtKeySource};
use capgate_gateway::auth::{Algorithm, AttributeMap, ClaimMap, ClaimPointer, TokenCheck};
use capgate_gateway::console::SignOn;
use capgate_gateway::identity::KeysAt;
use capgate_gateway::identity::fetch::ProviderMetadata;
use capgate_gateway::identity::jwks::Refresh;
use capgate_gateway::identity::oidc::{OidcClient, OidcSettings};
use capgate_gateway::mcp::oauth::ProtectedResource;

impl Validation<'_> {
    /// The configured authorizer: `"authenticated"`, or the plugin bound as an authorizer.
    pub(super) fn authorizer(
        &mut self,
        plugins: &BTreeMap<String, Arc<Plugin>>,
    ) -> Option<Arc<dyn Authorizer>> {
        match &self.cfg.gateway.authorize {
            None => {
                self.problem(
                    "/gateway/authorize",
                    "is not set, and the gateway never runs without an authorizer: add to [gateway] \
                     `authorize = \"authenticated\"` (any authenticated caller may use every operation) \
                     or `authorize = { plugin = \"NAME\" }` (a Wasm authorizer plugin decides per operation)",
                );
                None
            }
            Some(AuthorizeSetting::Authenticated) => Some(Arc::new(AuthenticatedOnly)),
            Some(AuthorizeSetting::Plugin(a)) => {
                let plugin = plugins.get(&a.plugin)?;
                let section = self.cfg.plugins.get(&a.plugin);
                let binding = Binding::new("gateway.authorize")
                    .config(a.config.clone())
                    .limits(limits_of(section, Limits::default()))
                    .isolation(isolation_of(section));
                match plugin.authorizer(binding) {
                    Ok(a) => Some(Arc::new(a)),
                    Err(e) => {
                        self.problem("/gateway/authorize/plugin", e.to_string());
                        None
                    }
                }
            }
        }
    }

    /// API keys and JWT, as configured (at least one way to authenticate), the console's
    /// single sign-on and `/mcp`'s OAuth metadata.
    pub(super) fn identity(&mut self) -> Option<Identity> {
        let mut keys = ApiKeys::new();
        for k in &self.cfg.gateway.api_keys {
            let mut entry = ApiKeyEntry::new(
                k.actor.to_actor(),
                k.namespace.clone(),
                k.roles.clone(),
                k.surfaces.clone(),
                k.context.clone(),
            );
            entry.requester_door = k.opens_requester_door();
            keys.insert_hashed(k.sha256.clone(), entry);
        }
        for k in &self.cfg.gateway.operator_keys {
            let mut entry = ApiKeyEntry::new(
                Actor {
                    id: k.actor.id.clone(),
                    kind: k.actor.kind,
                    attributes: serde_json::json!({}),
                },
                capgate_gateway::auth::OPERATOR_NAMESPACE,
                vec![capgate_gateway::admin::OPERATOR_ROLE.to_owned()],
                Vec::new(),
                serde_json::Value::Null,
            );
            entry.operator = true;
            entry.requester_door = false;
            keys.insert_hashed(k.sha256.clone(), entry);
        }
        let (jwt, provider) = match &self.cfg.gateway.jwt {
            None => (None, None),
            Some(j) => {
                let (jwt, provider) = self.jwt(j)?;
                (Some(jwt), provider)
            }
        };
        if keys.is_empty() && jwt.is_none() {
            self.problem(
                "/gateway",
                "no way to authenticate: add [[gateway.apiKeys]] (`printf '%s' KEY | capgate keys hash` prints the hash) or [gateway.jwt]",
            );
            return None;
        }
        let sign_on = match (&self.cfg.gateway.console.oidc, &jwt, &provider) {
            (Some(o), Some(jwt), Some(meta)) => {
                let settings = OidcSettings {
                    display_name: o
                        .display_name
                        .clone()
                        .unwrap_or_else(|| "your identity provider".into()),
                    client_id: o.client_id.clone(),
                    client_secret: o.client_secret.clone(),
                    redirect_url: o.redirect_url.clone(),
                    scopes: o.scopes.clone(),
                };
                match OidcClient::new(settings, meta, jwt.check()) {
                    Ok(client) => Some(SignOn {
                        client: Arc::new(client),
                        claims: jwt.claims().clone(),
                    }),
                    Err(e) => {
                        self.problem("/gateway/console/oidc", e.to_string());
                        return None;
                    }
                }
            }
            _ => None,
        };
        let protected_resource = match (&self.cfg.mcp.resource, &self.cfg.gateway.jwt) {
            (Some(resource), Some(j)) => {
                let issuer = j.issuer.clone().unwrap_or_default();
                match ProtectedResource::new(resource.clone(), issuer, self.cfg.mcp.scopes.clone())
                {
                    Ok(p) => Some(p),
                    Err(e) => {
                        self.problem("/mcp/resource", e.to_string());
                        return None;
                    }
                }
            }
            _ => None,
        };
        Some(Identity {
            authenticator: Arc::new(BuiltinAuthenticator {
                api_keys: keys,
                jwt,
            }),
            sign_on,
            protected_resource,
        })
    }

    /// The identity provider's keys, fetched at start (and its OpenID configuration when
    /// discovered), or a problem at `at`: capgate does not start without them.
    fn remote_keys(
        &mut self,
        j: &JwtSection,
        at: &str,
        keys_at: KeysAt,
    ) -> Option<(JwtKey, Option<ProviderMetadata>)> {
        let issuer = j.issuer.clone().unwrap_or_default();
        let refresh = Refresh {
            every: Duration::from_secs(j.refresh_seconds),
            min_gap: Duration::from_secs(j.min_refresh_seconds),
        };
        match connect_provider(issuer, keys_at, refresh) {
            Ok(provider) => Some((JwtKey::Remote(provider.keys), provider.metadata)),
            Err(e) => {
                self.problem(
                    at,
                    format!(
                        "{e}; capgate does not start without its identity provider's keys (check the URL, the network, and that the provider is up)"
                    ),
                );
                None
            }
        }
    }

    /// `[gateway.jwt]`: its key (fetched from the identity provider at start, a located
    /// problem when it cannot be reached) and claim mapping; the provider's OpenID
    /// configuration when discovered.
    pub(super) fn jwt(
        &mut self,
        j: &JwtSection,
    ) -> Option<(JwtAuthenticator, Option<ProviderMetadata>)> {
        let mut metadata = None;
        let key = match &j.key_source {
            JwtKeySource::Hs256SecretEnv(var) => {
                let at = "/gateway/jwt/hs256SecretEnv";
                let Ok(secret) = std::env::var(var) else {
                    self.problem(at, format!("the environment variable {var} is not set"));
                    return None;
                };
                if secret.len() < 32 {
                    self.problem(at, format!("{var} must hold at least 32 bytes"));
                    return None;
                }
                match JwtKey::hs256(secret.as_bytes()) {
                    Ok(k) => k,
                    Err(e) => {
                        self.problem(at, format!("{var}: {e}"));
                        return None;
                    }
                }
            }
            JwtKeySource::Rs256PublicKey(pem) => {
                let at = "/gateway/jwt/rs256PublicKey";
                let path = self.cfg.relative(pem);
                let key = std::fs::read(&path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))
                    .and_then(|bytes| {
                        JwtKey::rs256_pem(&bytes).map_err(|e| {
                            format!(
                                "{}: {e} (expected an RSA public key, `-----BEGIN PUBLIC KEY-----`)",
                                path.display()
                            )
                        })
                    });
                match key {
                    Ok(k) => k,
                    Err(e) => {
                        self.problem(at, e);
                        return None;
                    }
                }
            }
            JwtKeySource::Jwks(jwks) => {
                let at = "/gateway/jwt/jwks";
                let path = self.cfg.relative(jwks);
                let key = std::fs::read(&path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))
                    .and_then(|bytes| {
                        JwtKey::jwks(&bytes).map_err(|e| format!("{}: {e}", path.display()))
                    });
                match key {
                    Ok(k) => k,
                    Err(e) => {
                        self.problem(at, e);
                        return None;
                    }
                }
            }
            JwtKeySource::JwksUrl(url) => {
                let (keys, _) =
                    self.remote_keys(j, "/gateway/jwt/jwksUrl", KeysAt::Url(url.clone()))?;
                keys
            }
            JwtKeySource::Discovery => {
                let (keys, discovered) =
                    self.remote_keys(j, "/gateway/jwt/discovery", KeysAt::Discovery)?;
                metadata = discovered;
                keys
            }
        };
        let claims = match claim_map(&j.claims) {
            Ok(c) => c,
            Err((at, e)) => {
                self.problem(&format!("/gateway/jwt/claims/{at}"), e);
                return None;
            }
        };
        let mut check = TokenCheck::new(key);
        check.issuer = j.issuer.clone();
        check.audiences = j.audience.as_ref().map(|a| a.to_vec()).unwrap_or_default();
        if let Some(algorithms) = &j.algorithms {
            check.algorithms = algorithms
                .iter()
                .map(|a| match a {
                    JwtAlgorithm::RS256 => Algorithm::RS256,
                    JwtAlgorithm::PS256 => Algorithm::PS256,
                    JwtAlgorithm::ES256 => Algorithm::ES256,
                    JwtAlgorithm::EdDSA => Algorithm::EdDSA,
                })
                .collect();
        }
        Some((JwtAuthenticator::new(JwtConfig { check, claims }), metadata))
    }
}

/// What the file's identity settings build.
pub(super) struct Identity {
    pub(super) authenticator: SharedAuthenticator,
    pub(super) sign_on: Option<SignOn>,
    pub(super) protected_resource: Option<ProtectedResource>,
}

/// `[gateway.jwt.claims]` as the authenticator reads it (the pointers were checked with
/// the file; a bad one here is named by its key).
pub(crate) fn claim_map(c: &capgate_config::ClaimsSection) -> Result<ClaimMap, (String, String)> {
    let parse =
        |key: &str, p: &str| ClaimPointer::parse(p).map_err(|e| (key.to_owned(), e.to_string()));
    Ok(ClaimMap {
        actor_id: parse("actorId", &c.actor_id)?,
        actor_kind: c
            .actor_kind
            .as_deref()
            .map(|p| parse("actorKind", p))
            .transpose()?,
        default_kind: c.default_kind,
        namespace: parse("namespace", &c.namespace)?,
        roles: parse("roles", &c.roles)?,
        surfaces: parse("surfaces", &c.surfaces)?,
        attributes: match &c.attributes {
            capgate_config::AttributesSetting::Object(p) => {
                AttributeMap::Object(parse("attributes", p)?)
            }
            capgate_config::AttributesSetting::Each(each) => AttributeMap::Each(
                each.iter()
                    .map(|(name, p)| Ok((name.clone(), parse(&format!("attributes/{name}"), p)?)))
                    .collect::<Result<_, (String, String)>>()?,
            ),
        },
        requester_door: parse("requesterDoor", &c.requester_door)?,
    })
}

/// Connect to the identity provider from validation, which is synchronous and may run on a
/// runtime's blocking thread or on none: on a thread of its own with a runtime of its own,
/// so it never blocks a runtime's worker. The provider's keys are then refreshed on the
/// serving runtime (the HTTP client keeps no connection across).
fn connect_provider(
    issuer: String,
    at: KeysAt,
    refresh: Refresh,
) -> Result<capgate_gateway::identity::Provider, String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("no runtime to reach the identity provider: {e}"))?;
            runtime
                .block_on(capgate_gateway::identity::Provider::connect(
                    &issuer, &at, refresh,
                ))
                .map_err(|e| e.to_string())
        })
        .join()
        .unwrap_or_else(|_| Err("the identity provider check panicked".into()))
    })
}
