//! Corporate identity against a real OpenID Provider (npm `oidc-provider`, a certified
//! implementation, started on loopback by `capgate_testkit::oidc`): tokens verified
//! through its published JWKS (discovered from the issuer), key rotation without a restart,
//! a flood of unknown `kid`s bounded, wrong `aud` / `iss` / expired / `nbf` refused, nested
//! claims mapped to namespace, roles and surfaces, and an MCP client (the official
//! TypeScript SDK) finding the issuer from `/mcp`'s protected-resource metadata and getting
//! its own token.

use crate::mcp_support::{self, ensure_toolchain, fixture, repo_root};
use capgate_core::actor::{ActorKind, Surface};
use capgate_core::approval::InMemoryApprovalCoordinator;
use capgate_core::audit::MemorySink;
use capgate_gateway::auth::{
    AttributeMap, AuthError, BuiltinAuthenticator, ClaimMap, ClaimPointer, JwtAuthenticator,
    JwtConfig, JwtKey, TokenCheck,
};
use capgate_gateway::identity::jwks::Refresh;
use capgate_gateway::identity::{KeysAt, Provider};
use capgate_gateway::mcp::oauth::ProtectedResource;
use capgate_testkit::oidc::{OidcProvider, require_node};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const AUDIENCE: &str = "https://capgate.test/api";
const CLIENT: &str = "capgate-agent";
const SECRET: &str = "a-client-secret-long-enough-for-oidc-provider";

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// A provider with one key of each algorithm and an agent client whose tokens carry its
/// tenant, roles and surfaces under one namespaced claim.
async fn provider(algs: &[&str]) -> OidcProvider {
    OidcProvider::start(json!({
        "algs": algs,
        "clients": [{
            "client_id": CLIENT,
            "client_secret": SECRET,
            "grant_types": ["client_credentials"],
            "redirect_uris": [],
            "response_types": [],
        }],
        "clientClaims": { CLIENT: {
            "https://corp.example/capgate": {
                "tenant": "org_1",
                "roles": ["approver", "manager"],
                "surfaces": ["aiSdk", "mcp"],
                "kind": "service",
            },
            "dept": "support",
        }},
        "resources": { AUDIENCE: { "scope": "capgate" } },
    }))
    .await
}

/// The mapping the provider's tokens need: nested, namespaced claims.
fn corporate_claims() -> ClaimMap {
    let p = |s: &str| ClaimPointer::parse(s).expect("a pointer");
    ClaimMap {
        actor_kind: Some(p("/https:~1~1corp.example~1capgate/kind")),
        namespace: p("/https:~1~1corp.example~1capgate/tenant"),
        roles: p("/https:~1~1corp.example~1capgate/roles"),
        surfaces: p("/https:~1~1corp.example~1capgate/surfaces"),
        attributes: AttributeMap::Each(BTreeMap::from([("department".into(), p("/dept"))])),
        ..ClaimMap::default()
    }
}

async fn authenticator(idp: &OidcProvider, refresh: Refresh) -> JwtAuthenticator {
    let provider = Provider::connect(idp.issuer(), &KeysAt::Discovery, refresh)
        .await
        .expect("the provider answers discovery and its JWKS");
    assert!(provider.metadata.is_some());
    let mut check = TokenCheck::new(JwtKey::Remote(provider.keys));
    check.issuer = Some(idp.issuer().to_owned());
    check.audiences = vec![AUDIENCE.to_owned()];
    JwtAuthenticator::new(JwtConfig {
        check,
        claims: corporate_claims(),
    })
}

fn claims(idp: &OidcProvider) -> Value {
    json!({
        "iss": idp.issuer(), "aud": AUDIENCE, "sub": "u_ops", "exp": now() + 300,
        "https://corp.example/capgate": { "tenant": "org_1", "surfaces": ["mcp"] },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_token_verifies_through_its_jwks_and_nested_claims_map() {
    if !require_node() {
        return;
    }
    let idp = provider(&["RS256", "PS256", "ES256", "EdDSA"]).await;
    let jwt = authenticator(&idp, Refresh::default()).await;
    // A real access token from the provider's token endpoint (client_credentials, RFC 8707
    // resource = our audience).
    let token = idp
        .client_credentials(CLIENT, SECRET, AUDIENCE, Some("capgate"))
        .await;
    let who = jwt
        .verify(&token)
        .await
        .expect("the provider's token verifies");
    assert_eq!(who.principal.actor.id, CLIENT);
    assert_eq!(who.principal.actor.kind, ActorKind::Service);
    assert_eq!(who.principal.namespace, "org_1");
    assert_eq!(who.roles, ["approver", "manager"]);
    assert_eq!(who.surfaces, [Surface::AiSdk, Surface::Mcp]);
    assert_eq!(
        who.principal.actor.attributes,
        json!({"department": "support"})
    );
    assert!(
        !who.requester_door,
        "a token with model surfaces opens no requester door"
    );
    assert!(who.expires_at.is_some());
    // Each of the four algorithms, signed with the provider's key of that type.
    for alg in ["RS256", "PS256", "ES256", "EdDSA"] {
        let token = idp.mint(claims(&idp), alg, None).await;
        let who = jwt
            .verify(&token)
            .await
            .unwrap_or_else(|e| panic!("{alg}: {e}"));
        assert_eq!(who.principal.actor.id, "u_ops", "{alg}");
        assert_eq!(
            who.principal.actor.kind,
            ActorKind::User,
            "{alg}: the default kind"
        );
    }
    // A mapping that names a claim the token lacks refuses it, naming the pointer.
    let mut missing = claims(&idp);
    missing["https://corp.example/capgate"]
        .as_object_mut()
        .expect("an object")
        .remove("tenant");
    let token = idp.mint(missing, "ES256", None).await;
    let e = jwt.verify(&token).await.expect_err("no namespace");
    assert!(e.to_string().contains("namespace"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_audience_issuer_expired_not_yet_valid_and_unaccepted_algorithms_are_refused() {
    if !require_node() {
        return;
    }
    let idp = provider(&["RS256", "ES256"]).await;
    let jwt = authenticator(&idp, Refresh::default()).await;
    let good = claims(&idp);
    let ok = idp.mint(good.clone(), "RS256", None).await;
    jwt.verify(&ok).await.expect("the control token verifies");
    let with = |key: &str, value: Value| {
        let mut c = good.clone();
        c[key] = value;
        c
    };
    let cases = [
        (
            "another audience",
            with("aud", json!("https://other.test/api")),
            "RS256",
        ),
        (
            "another issuer",
            with("iss", json!("https://evil.test")),
            "RS256",
        ),
        ("expired", with("exp", json!(now() - 5)), "RS256"),
        ("not yet valid", with("nbf", json!(now() + 120)), "RS256"),
        (
            "no exp",
            {
                let mut c = good.clone();
                c.as_object_mut().expect("object").remove("exp");
                c
            },
            "RS256",
        ),
        (
            "no aud",
            {
                let mut c = good.clone();
                c.as_object_mut().expect("object").remove("aud");
                c
            },
            "ES256",
        ),
    ];
    for (what, claims, alg) in cases {
        let token = idp.mint(claims, alg, None).await;
        let refused = jwt.verify(&token).await;
        assert!(refused.is_err(), "{what}: accepted");
    }
    // Only the configured algorithms: an ES256 token against an RS256-only deployment.
    let mut rs_only = jwt.check().clone();
    rs_only.algorithms = vec![capgate_gateway::auth::Algorithm::RS256];
    let es = idp.mint(good.clone(), "ES256", None).await;
    assert!(
        matches!(rs_only.verify(&es).await, Err(AuthError::Invalid(m)) if m.contains("not accepted"))
    );
    assert!(rs_only.verify(&ok).await.is_ok());
    // An HS256 token, signed with something public (the alg-confusion attack), is refused.
    let forged = {
        use jsonwebtoken::{EncodingKey, Header, encode};
        encode(
            &Header::new(jsonwebtoken::Algorithm::HS256),
            &good,
            &EncodingKey::from_secret(b"public").expect("a key"),
        )
        .expect("a token")
    };
    assert!(jwt.verify(&forged).await.is_err(), "HS256 accepted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_rotate_at_the_provider_without_a_restart() {
    if !require_node() {
        return;
    }
    let idp = provider(&["RS256"]).await;
    let min_gap = Duration::from_millis(500);
    let jwt = authenticator(
        &idp,
        Refresh {
            every: Duration::from_secs(3600),
            min_gap,
        },
    )
    .await;
    let before = idp.mint(claims(&idp), "RS256", None).await;
    jwt.verify(&before).await.expect("the first key verifies");
    tokio::time::sleep(min_gap).await;
    // The provider rotates: a new key signs, the old one is withdrawn.
    let kid = idp.rotate("RS256", false).await;
    let after = idp.mint(claims(&idp), "RS256", None).await;
    let (header, _) = capgate_testkit::oidc::decode_jwt(&after);
    assert_eq!(header["kid"], kid.as_str());
    let who = jwt
        .verify(&after)
        .await
        .expect("the rotated key verifies, no restart");
    assert_eq!(who.principal.actor.id, "u_ops");
    // The set was fetched again: the withdrawn key is gone with it.
    assert!(
        jwt.verify(&before).await.is_err(),
        "a withdrawn key still verifies"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unknown_kids_costs_the_provider_at_most_one_fetch() {
    if !require_node() {
        return;
    }
    let idp = provider(&["RS256"]).await;
    let jwt = Arc::new(authenticator(&idp, Refresh::default()).await);
    let good = idp.mint(claims(&idp), "RS256", None).await;
    let start = idp.stats().await;
    let mut forged = Vec::new();
    for i in 0..200 {
        forged.push(
            idp.mint(claims(&idp), "RS256", Some(&format!("forged-{i}")))
                .await,
        );
    }
    let tasks: Vec<_> = forged
        .into_iter()
        .map(|t| {
            let jwt = jwt.clone();
            tokio::spawn(async move { jwt.verify(&t).await.is_err() })
        })
        .collect();
    for t in tasks {
        assert!(
            t.await.expect("a task"),
            "a token with a forged kid verified"
        );
    }
    // Valid tokens keep verifying during and after the flood.
    jwt.verify(&good)
        .await
        .expect("a good token still verifies");
    let end = idp.stats().await;
    let fetched = end.jwks_requests - start.jwks_requests;
    assert!(
        fetched <= 1,
        "200 unknown kids made {fetched} JWKS requests"
    );
    assert_eq!(end.discovery_requests, start.discovery_requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_provider_is_a_start_up_error_naming_it() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let issuer = format!("http://{addr}");
    let e = Provider::connect(&issuer, &KeysAt::Discovery, Refresh::default())
        .await
        .expect_err("nobody listens");
    let message = e.to_string();
    assert!(
        message.contains(&issuer) && message.contains("unreachable"),
        "{message}"
    );
    let e = Provider::connect(
        "http://idp.example.com",
        &KeysAt::Discovery,
        Refresh::default(),
    )
    .await
    .expect_err("plain http off loopback");
    assert!(e.to_string().contains("https://"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_discovers_the_issuer_from_the_protected_resource_metadata() {
    if !require_node() || !ensure_toolchain("node") {
        return;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let resource = format!("http://{addr}/mcp");
    let idp = OidcProvider::start(json!({
        "clients": [{
            "client_id": CLIENT, "client_secret": SECRET,
            "grant_types": ["client_credentials"], "redirect_uris": [], "response_types": [],
        }],
        "clientClaims": { CLIENT: { "org": "org_1", "surfaces": ["mcp"], "roles": ["support"] } },
        "resources": { resource.clone(): { "scope": "capgate" } },
    }))
    .await;
    let provider = Provider::connect(idp.issuer(), &KeysAt::Discovery, Refresh::default())
        .await
        .expect("discovery");
    let mut check = TokenCheck::new(JwtKey::Remote(provider.keys));
    check.issuer = Some(idp.issuer().to_owned());
    check.audiences = vec![resource.clone()];
    let authenticator = BuiltinAuthenticator {
        api_keys: Default::default(),
        jwt: Some(JwtAuthenticator::new(JwtConfig {
            check,
            claims: ClaimMap::default(),
        })),
    };
    let runtime = fixture::runtime(
        Arc::new(InMemoryApprovalCoordinator::new()),
        Arc::new(MemorySink::new()),
    );
    let protected = ProtectedResource::new(&resource, idp.issuer(), vec!["capgate".into()])
        .expect("a resource");
    let mut options = mcp_support::options();
    options.protected_resource = Some(protected.clone());
    let doorkeeper = capgate_gateway::door::Doorkeeper::new(
        Arc::new(authenticator),
        Arc::new(fixture::AllowAll),
    );
    let app = axum::Router::new().merge(protected.router()).nest(
        "/mcp",
        capgate_gateway::mcp::streamable_http_router(runtime, doorkeeper, options),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    // What a client without a token is told.
    let http = reqwest::Client::new();
    let refused = http
        .post(&resource)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#)
        .send()
        .await
        .expect("an answer");
    assert_eq!(refused.status(), 401);
    let challenge = refused.headers()["www-authenticate"]
        .to_str()
        .expect("ascii");
    let metadata_url = format!("http://{addr}/.well-known/oauth-protected-resource/mcp");
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata_url}\", scope=\"capgate\"")
    );
    let metadata: Value = http
        .get(&metadata_url)
        .send()
        .await
        .expect("metadata")
        .json()
        .await
        .expect("JSON");
    assert_eq!(metadata["resource"], resource.as_str());
    assert_eq!(metadata["authorization_servers"], json!([idp.issuer()]));
    // The official SDK, given only the MCP URL and its client credentials, finds the
    // issuer, gets a token for the resource and lists the tools.
    let out = tokio::process::Command::new("node")
        .arg(repo_root().join("tests/mcp/oauth_client_check.mjs"))
        .args([&resource, CLIENT, SECRET])
        .current_dir(repo_root().join("tests/mcp"))
        .output()
        .await
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the SDK client failed: {stdout}\n{}\nprovider log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        idp.log()
    );
    let done: Value = serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("JSON line");
    assert_eq!(done["authorizationServers"], json!([idp.issuer()]));
    assert_eq!(done["tokenAudience"], resource.as_str());
    let tools = done["tools"].as_array().expect("tools");
    assert!(tools.iter().any(|t| t == "orders_lookup"), "{done}");
}
