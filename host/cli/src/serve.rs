//! `capgate serve`: the configured deployment behind one HTTP listener — a capability
//! gateway per route (each with its fixed surface), MCP at `/mcp`, the human approvals API
//! at `/approvals`, and `/healthz` + `/readyz`.

use crate::build::{Deployment, build};
use crate::config::{Config, JwtSection};
use anyhow::{Context, anyhow, bail};
use async_trait::async_trait;
use capgate_core::actor::{Actor, Surface};
use capgate_core::authz::{AuthorizeError, AuthorizeRequest, Authorizer};
use capgate_gateway::auth::{
    ApiKeyEntry, ApiKeys, BuiltinAuthenticator, JwtAuthenticator, JwtConfig, JwtKey,
    SharedAuthenticator,
};
use capgate_gateway::door::{Doorkeeper, Quotas, Rate};
use std::sync::Arc;
use std::time::Duration;

/// `authorize = "authenticated"`: the explicit opt-in that any authenticated principal may
/// use every gateway operation (the runtime's policies remain the authority over what runs).
struct AuthenticatedOnly;

#[async_trait]
impl Authorizer for AuthenticatedOnly {
    async fn authorize(&self, _request: &AuthorizeRequest<'_>) -> Result<(), AuthorizeError> {
        Ok(())
    }
}

/// The gateway never runs without an authorizer: say what to write when there is none.
pub fn require_authorizer(cfg: &Config) -> anyhow::Result<()> {
    if cfg.gateway.authorize.is_some() {
        return Ok(());
    }
    bail!(
        "{}: gateway.authorize is not set, and the gateway never runs without an authorizer.\n\
             Add to [gateway] either\n    authorize = \"authenticated\"   # any authenticated caller may use every operation\n\
             or\n    authorize = {{ plugin = \"NAME\" }}   # a Wasm authorizer plugin decides per operation",
        cfg.path.display()
    )
}

/// The configured authorizer.
pub fn authorizer(cfg: &Config, d: &Deployment) -> anyhow::Result<Arc<dyn Authorizer>> {
    require_authorizer(cfg)?;
    match &cfg.gateway.authorize {
        Some(serde_json::Value::String(s)) if s == "authenticated" => {
            Ok(Arc::new(AuthenticatedOnly))
        }
        _ => d
            .authorizer_plugin
            .clone()
            .ok_or_else(|| anyhow!("gateway.authorize: the authorizer plugin was not loaded")),
    }
}

fn jwt(cfg: &Config, j: &JwtSection) -> anyhow::Result<JwtAuthenticator> {
    let key = match (&j.hs256_secret_env, &j.rs256_public_key, &j.jwks) {
        (Some(var), None, None) => {
            let secret = std::env::var(var).with_context(|| {
                format!("gateway.jwt.hs256SecretEnv: the environment variable {var} is not set")
            })?;
            if secret.len() < 32 {
                bail!("gateway.jwt.hs256SecretEnv: {var} must hold at least 32 bytes");
            }
            JwtKey::hs256(secret.as_bytes())
                .with_context(|| format!("gateway.jwt.hs256SecretEnv: {var}"))?
        }
        (None, Some(pem), None) => {
            let path = cfg.relative(pem);
            let bytes = std::fs::read(&path)
                .with_context(|| format!("gateway.jwt.rs256PublicKey: {}", path.display()))?;
            JwtKey::rs256_pem(&bytes).with_context(|| {
                format!(
                    "gateway.jwt.rs256PublicKey: {} (expected an RSA public key, `-----BEGIN PUBLIC KEY-----`)",
                    path.display()
                )
            })?
        }
        (None, None, Some(jwks)) => {
            let path = cfg.relative(jwks);
            let bytes = std::fs::read(&path)
                .with_context(|| format!("gateway.jwt.jwks: {}", path.display()))?;
            JwtKey::jwks(&bytes).with_context(|| format!("gateway.jwt.jwks: {}", path.display()))?
        }
        _ => bail!("gateway.jwt: set exactly one of hs256SecretEnv, rs256PublicKey or jwks"),
    };
    Ok(JwtAuthenticator::new(JwtConfig {
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
    }))
}

/// API keys and JWT, as configured.
pub fn authenticator(cfg: &Config) -> anyhow::Result<SharedAuthenticator> {
    let mut keys = ApiKeys::new();
    for k in &cfg.gateway.api_keys {
        let attributes = if k.actor.attributes.is_null() {
            serde_json::json!({})
        } else {
            k.actor.attributes.clone()
        };
        keys.insert_hashed(
            k.sha256.clone(),
            ApiKeyEntry {
                actor: Actor {
                    id: k.actor.id.clone(),
                    kind: k.actor.kind,
                    attributes,
                },
                namespace: k.namespace.clone(),
                roles: k.roles.clone(),
                surfaces: k.surfaces.clone(),
                context: k.context.clone(),
            },
        );
    }
    let jwt = cfg.gateway.jwt.as_ref().map(|j| jwt(cfg, j)).transpose()?;
    if keys.is_empty() && jwt.is_none() {
        bail!(
            "{}: no way to authenticate: add [[gateway.apiKeys]] (`capgate keys hash KEY` prints the hash) or [gateway.jwt]",
            cfg.path.display()
        );
    }
    Ok(Arc::new(BuiltinAuthenticator {
        api_keys: keys,
        jwt,
    }))
}

/// The doorkeeper every door of the deployment shares: its authenticator, authorizer and
/// rate limits.
pub fn doorkeeper(cfg: &Config, d: &Deployment) -> anyhow::Result<Doorkeeper> {
    let r = &cfg.gateway.rate_limit;
    let quotas = Quotas::new(
        Rate::new(r.principal_per_second, r.principal_burst),
        Rate::new(r.namespace_per_second, r.namespace_burst),
    );
    Ok(Doorkeeper::new(authenticator(cfg)?, authorizer(cfg, d)?)
        .quotas(Arc::new(quotas))
        .clock(Arc::new(RuntimeClock(d.runtime.clone()))))
}

/// The runtime's clock, for credential expiry at the doors.
struct RuntimeClock(capgate_core::runtime::Runtime);

impl capgate_core::clock::Clock for RuntimeClock {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        self.0.now()
    }
}

/// Build the whole HTTP application of a deployment.
pub fn app(cfg: &Config, d: &Deployment) -> anyhow::Result<axum::Router> {
    let keeper = doorkeeper(cfg, d)?;
    let mut app = axum::Router::new();
    let gateway_for = |surface: Surface| capgate_gateway::gateway::GatewayConfig {
        surface,
        revision: cfg.revision.clone(),
        runtime: d.runtime.clone(),
        journal: d.journal.clone(),
        doorkeeper: keeper.clone(),
        request_timeout: Duration::from_millis(cfg.gateway.request_timeout_ms),
        audit_drain_timeout: Duration::from_millis(cfg.gateway.audit_drain_timeout_ms),
        max_body_bytes: cfg.gateway.max_body_bytes,
    };
    for r in &cfg.gateway.routes {
        let router = capgate_gateway::gateway::capability_router(gateway_for(r.surface))
            .with_context(|| format!("gateway route {}", r.path))?;
        app = app.nest(&r.path, router);
    }
    let mcp_options = capgate_gateway::mcp::McpOptions {
        approval_url: cfg.gateway.approval_console_url.clone(),
        ..Default::default()
    };
    app = app
        .nest_service(
            "/mcp",
            capgate_gateway::mcp::streamable_http_router(
                d.runtime.clone(),
                keeper.clone(),
                mcp_options,
            ),
        )
        .merge(capgate_gateway::approvals_api::approvals_router(
            d.runtime.clone(),
            keeper.clone(),
            "approver",
        ))
        .merge(capgate_gateway::gateway::health_router(
            capgate_gateway::gateway::JournalProbe(d.journal.clone()),
        ));
    Ok(app)
}

/// `capgate serve`.
pub async fn serve(cfg: Config, listen: Option<String>) -> anyhow::Result<()> {
    // Refuse a missing authorizer before anything is opened or created.
    require_authorizer(&cfg)?;
    let deployment = build(&cfg).await?;
    let app = app(&cfg, &deployment)?;
    let addr = listen.unwrap_or_else(|| cfg.gateway.listen.clone());
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {addr} (is another process using it? try --listen 127.0.0.1:0)"
            )
        })?;
    let local = listener.local_addr().context("listener address")?;
    println!("capgate: listening on http://{local}");
    for r in &cfg.gateway.routes {
        println!(
            "capgate:   {} -> surface {} (describe, invoke, getInvocation, getApproval, resumeApproval, contract, tools)",
            r.path,
            r.surface.as_str()
        );
    }
    println!(
        "capgate:   /mcp -> MCP (streamable HTTP), /approvals -> human approvals (role approver)"
    );
    let purger = tokio::spawn(purge_receipts(
        deployment
            .store
            .journal()
            .with_replay_horizon(Duration::from_secs(
                cfg.gateway.replay_horizon_hours.saturating_mul(3600),
            )),
    ));
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    purger.abort();
    served.context("the server failed")?;
    let _ = deployment.runtime.drain_audit().await;
    let stats = deployment.audit.stats();
    if stats.lost() > 0 {
        eprintln!(
            "capgate: {} audit event(s) were lost (queue full or store unavailable); see the log",
            stats.lost()
        );
    }
    deployment.store.close().await;
    Ok(())
}

/// How often `serve` deletes settled receipts past the replay horizon.
const PURGE_EVERY: Duration = Duration::from_secs(3600);

/// Keep the journal within its replay horizon: at start, then every [`PURGE_EVERY`]. Every
/// replica may run it; the DELETE is idempotent and never touches pending receipts.
async fn purge_receipts(journal: capgate_store::SqlInvocationJournal) {
    let mut every = tokio::time::interval(PURGE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        match journal.purge_expired(chrono::Utc::now()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                purged = n,
                "settled receipts past the replay horizon purged"
            ),
            Err(e) => tracing::warn!("purging settled receipts failed: {e}"),
        }
    }
}
