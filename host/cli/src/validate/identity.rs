//! The gateway's identity checks: the authorizer it names and the authenticators (API
//! keys, JWT keys) it builds, each refusal located at its key.
use super::*;

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

    /// API keys and JWT, as configured: at least one way to authenticate.
    pub(super) fn authenticator(&mut self) -> Option<SharedAuthenticator> {
        let mut keys = ApiKeys::new();
        for k in &self.cfg.gateway.api_keys {
            let attributes = if k.actor.attributes.is_null() {
                serde_json::json!({})
            } else {
                k.actor.attributes.clone()
            };
            let mut entry = ApiKeyEntry::new(
                Actor {
                    id: k.actor.id.clone(),
                    kind: k.actor.kind,
                    attributes,
                },
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
        let jwt = match &self.cfg.gateway.jwt {
            None => None,
            Some(j) => Some(self.jwt(j)?),
        };
        if keys.is_empty() && jwt.is_none() {
            self.problem(
                "/gateway",
                "no way to authenticate: add [[gateway.apiKeys]] (`printf '%s' KEY | capgate keys hash` prints the hash) or [gateway.jwt]",
            );
            return None;
        }
        Some(Arc::new(BuiltinAuthenticator {
            api_keys: keys,
            jwt,
        }))
    }

    pub(super) fn jwt(&mut self, j: &JwtSection) -> Option<JwtAuthenticator> {
        let key = match (&j.hs256_secret_env, &j.rs256_public_key, &j.jwks) {
            (Some(var), None, None) => {
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
            (None, Some(pem), None) => {
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
            (None, None, Some(jwks)) => {
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
            _ => {
                self.problem(
                    "/gateway/jwt",
                    "set exactly one of hs256SecretEnv, rs256PublicKey or jwks",
                );
                return None;
            }
        };
        Some(JwtAuthenticator::new(JwtConfig {
            key,
            issuer: j.issuer.clone(),
            audience: j.audience.clone(),
            actor_id_claim: "sub".into(),
            actor_kind_claim: None,
            namespace_claim: j.namespace_claim.clone().unwrap_or_else(|| "org".into()),
            attributes_claim: "attributes".into(),
            roles_claim: "roles".into(),
            surfaces_claim: j
                .surfaces_claim
                .clone()
                .unwrap_or_else(|| "surfaces".into()),
            requester_door_claim: j
                .requester_door_claim
                .clone()
                .unwrap_or_else(|| "requesterDoor".into()),
        }))
    }
}
