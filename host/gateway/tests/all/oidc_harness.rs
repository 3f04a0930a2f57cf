//! The OpenID Provider harness (capgate-testkit's `oidc`, `tests/oidc/provider.mjs`) does
//! what the OIDC tests rely on: JWT access tokens from the client_credentials grant with
//! the resource as audience and the client's custom claims, minted tokens, key rotation
//! seen in the JWKS, and request counts.

use capgate_testkit::oidc::{self, OidcProvider, Stats};
use serde_json::json;

const RESOURCE: &str = "http://127.0.0.1/capgate";

#[tokio::test]
async fn oidc_harness_issues_mints_rotates_and_counts() {
    if !oidc::require_node() {
        return;
    }
    let op = OidcProvider::start(json!({
        "algs": ["RS256", "ES256"],
        "clients": [{
            "client_id": "agent-7",
            "client_secret": "agent-7-secret",
            "grant_types": ["client_credentials"],
            "response_types": [],
            "redirect_uris": [],
            "token_endpoint_auth_method": "client_secret_basic",
        }],
        "resources": { RESOURCE: { "scope": "capgate:invoke", "alg": "RS256" } },
        "clientClaims": {
            "agent-7": { "capgate": { "roles": ["refunder"], "tenant": { "id": "t-1" } } },
        },
    }))
    .await;
    assert!(
        op.issuer().starts_with("http://127.0.0.1:"),
        "{}",
        op.issuer()
    );

    let jwks = op.jwks().await;
    let kid_of = |alg: &str| {
        jwks["keys"]
            .as_array()
            .and_then(|keys| keys.iter().find(|k| k["alg"] == alg))
            .and_then(|k| k["kid"].as_str())
            .unwrap_or_else(|| panic!("no {alg} key in {jwks}"))
            .to_owned()
    };
    let (rs256, es256) = (kid_of("RS256"), kid_of("ES256"));
    assert_ne!(rs256, es256);

    // client_credentials for the resource: a JWT for it, with the client's claims.
    let token = op
        .client_credentials(
            "agent-7",
            "agent-7-secret",
            RESOURCE,
            Some("capgate:invoke"),
        )
        .await;
    let (header, claims) = oidc::decode_jwt(&token);
    assert_eq!(header["alg"], "RS256", "{header}");
    assert_eq!(header["typ"], "at+jwt", "{header}");
    assert_eq!(header["kid"], rs256.as_str(), "{header}");
    assert_eq!(claims["aud"], RESOURCE, "{claims}");
    assert_eq!(claims["iss"], op.issuer(), "{claims}");
    assert_eq!(claims["sub"], "agent-7", "{claims}");
    assert_eq!(claims["client_id"], "agent-7", "{claims}");
    assert_eq!(claims["scope"], "capgate:invoke", "{claims}");
    assert_eq!(claims["capgate"]["tenant"]["id"], "t-1", "{claims}");
    assert_eq!(claims["capgate"]["roles"], json!(["refunder"]), "{claims}");
    assert!(claims["exp"].as_u64() > claims["iat"].as_u64(), "{claims}");

    // A minted ES256 token: exactly the claims, the ES256 key's kid (or an override).
    let minted = op
        .mint(
            json!({ "iss": "http://wrong.example", "sub": "x", "exp": 1 }),
            "ES256",
            None,
        )
        .await;
    let (header, claims) = oidc::decode_jwt(&minted);
    assert_eq!(
        header,
        json!({ "alg": "ES256", "typ": "JWT", "kid": es256 })
    );
    assert_eq!(
        claims,
        json!({ "iss": "http://wrong.example", "sub": "x", "exp": 1 })
    );
    let unknown = op
        .mint(json!({ "sub": "x" }), "ES256", Some("no-such-kid"))
        .await;
    assert_eq!(oidc::decode_jwt(&unknown).0["kid"], "no-such-kid");

    // Rotation: the new RS256 key joins the JWKS and signs from now on; without keepOld
    // the previous RS256 key leaves it, the ES256 key stays.
    let kid = op.rotate("RS256", true).await;
    let kids = |jwks: serde_json::Value| -> Vec<String> {
        jwks["keys"]
            .as_array()
            .map(|keys| {
                keys.iter()
                    .filter_map(|k| k["kid"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let after = kids(op.jwks().await);
    assert!(
        after.contains(&kid) && after.contains(&rs256) && after.contains(&es256),
        "{after:?}"
    );
    let token = op
        .client_credentials("agent-7", "agent-7-secret", RESOURCE, None)
        .await;
    assert_eq!(oidc::decode_jwt(&token).0["kid"], kid.as_str());
    let newest = op.rotate("RS256", false).await;
    let after = kids(op.jwks().await);
    assert!(
        after.contains(&newest) && after.contains(&es256),
        "{after:?}"
    );
    assert!(
        !after.contains(&kid) && !after.contains(&rs256),
        "{after:?}"
    );

    // The driver's own look-ups are not counted; other GETs are.
    assert_eq!(
        op.stats().await,
        Stats {
            jwks_requests: 0,
            discovery_requests: 0
        }
    );
    let http = reqwest::Client::new();
    let discovery: serde_json::Value = http
        .get(format!("{}/.well-known/openid-configuration", op.issuer()))
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .unwrap_or_else(|e| panic!("discovery: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("discovery: {e}"));
    let jwks_uri = discovery["jwks_uri"]
        .as_str()
        .unwrap_or_else(|| panic!("{discovery}"));
    for _ in 0..2 {
        http.get(jwks_uri)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .unwrap_or_else(|e| panic!("jwks: {e}"));
    }
    assert_eq!(
        op.stats().await,
        Stats {
            jwks_requests: 2,
            discovery_requests: 1
        }
    );
}
