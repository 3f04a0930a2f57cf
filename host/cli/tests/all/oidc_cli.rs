//! The command line's side of corporate identity, against a real OpenID Provider
//! (`capgate_testkit::oidc`): `capgate whoami` shows the principal a provider's token maps
//! to (and why a token is refused), and `capgate check` refuses a claim pointer that is not
//! one and a provider it cannot reach, each at its key.

use crate::common::*;
use capgate_testkit::oidc::{OidcProvider, require_node};
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};

const RESOURCE: &str = "https://capgate.test/api";

fn jwt_section(issuer: &str, extra: &str) -> String {
    format!(
        "[gateway.jwt]\ndiscovery = true\nissuer = \"{issuer}\"\naudience = \"{RESOURCE}\"\n\n\
         [gateway.jwt.claims]\nactorKind = \"/corp/kind\"\nnamespace = \"/corp/tenant\"\n\
         roles = \"/corp/groups\"\nsurfaces = \"/corp/surfaces\"\n{extra}\n"
    )
}

/// `capgate check --output json` of a file it must refuse: its report.
fn refused_by_check(config: &std::path::Path) -> Value {
    let out = capgate_output(&[
        "check",
        "--output",
        "json",
        "--config",
        config.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// `capgate whoami --config CONFIG --token - --output json`, the token on stdin.
fn whoami(config: &std::path::Path, token: &str) -> (i32, Value, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["whoami", "--token", "-", "--output", "json", "--config"])
        .arg(config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run capgate whoami");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(token.as_bytes())
        .expect("write the token");
    let out = child.wait_with_output().expect("capgate whoami");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whoami_shows_the_principal_a_providers_token_maps_to() {
    if !require_node() {
        return;
    }
    let idp = OidcProvider::start(json!({
        "algs": ["ES256"],
        "clients": [{
            "client_id": "reporting-service", "client_secret": "a-secret-0123456789abcdef",
            "grant_types": ["client_credentials"], "redirect_uris": [], "response_types": [],
        }],
        "clientClaims": { "reporting-service": {
            "corp": { "tenant": "org_2", "groups": ["reader"], "surfaces": ["workflow"], "kind": "service" },
        }},
        "resources": { RESOURCE: { "scope": "capgate", "alg": "ES256" } },
    }))
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = deployment(dir.path(), |t| t, &jwt_section(idp.issuer(), ""));
    let token = idp
        .client_credentials(
            "reporting-service",
            "a-secret-0123456789abcdef",
            RESOURCE,
            None,
        )
        .await;
    let (code, shown, stderr) = whoami(&config, &token);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(shown["ok"], true);
    let p = &shown["principal"];
    assert_eq!(
        p["actor"],
        json!({"id": "reporting-service", "kind": "service"}),
        "{shown}"
    );
    assert_eq!(p["namespace"], "org_2");
    assert_eq!(p["roles"], json!(["reader"]));
    assert_eq!(p["surfaces"], json!(["workflow"]));
    assert_eq!(
        p["doors"],
        json!(["workflow"]),
        "no approvals door for a service with a model surface"
    );
    assert_eq!(p["credential"], "token");
    assert!(p["expiresAt"].is_string());
    // An expired token, signed with the provider's own key: refused, with the reason.
    let expired = idp
        .mint(
            json!({"iss": idp.issuer(), "aud": RESOURCE, "sub": "x", "exp": chrono::Utc::now().timestamp() - 10,
                   "corp": {"tenant": "org_2"}}),
            "ES256",
            None,
        )
        .await;
    let (code, shown, _) = whoami(&config, &expired);
    assert_eq!(code, 1, "{shown}");
    assert_eq!(shown["ok"], false);
    assert!(
        shown["reason"]
            .as_str()
            .is_some_and(|r| r.contains("xpired")),
        "{shown}"
    );
    // The example's API keys map too (the same authenticator).
    let (code, shown, stderr) = whoami(&config, "dana-dev-key");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(shown["principal"]["credential"], "apiKey");
    assert_eq!(shown["principal"]["actor"]["id"], "u_dana");
}

#[test]
fn check_refuses_a_claim_pointer_that_is_not_one_and_an_unreachable_provider() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let issuer = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let config = deployment(
        dir.path(),
        |t| t,
        &jwt_section(
            &issuer,
            "actorId = \"sub\"\nattributes = { email = \"/email~2\" }\n",
        ),
    );
    let report = refused_by_check(&config);
    let problems = report["problems"].as_array().expect("problems");
    let at = |key: &str| {
        problems
            .iter()
            .find(|p| p["key"] == key)
            .unwrap_or_else(|| panic!("no problem at {key}: {report}"))["message"]
            .as_str()
            .expect("a message")
            .to_owned()
    };
    assert!(at("gateway.jwt.claims.actorId").contains("must start with `/`"));
    assert!(at("gateway.jwt.claims.attributes.email").contains("~"));
    // A sound file whose provider does not answer: a start-up error naming it.
    let config = deployment(dir.path(), |t| t, &jwt_section(&issuer, ""));
    let report = refused_by_check(&config);
    let message = report["problems"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["key"] == "gateway.jwt.discovery"))
        .unwrap_or_else(|| panic!("no problem at gateway.jwt.discovery: {report}"))["message"]
        .to_string();
    assert!(
        message.contains("unreachable") && message.contains(&issuer),
        "{message}"
    );
}

/// `capgate serve` with `[mcp] resource`: the metadata at both well-known places names the
/// provider, `/mcp` without a token answers `401` naming it, and a token the provider
/// issued for the resource opens `/mcp`; `check` refuses a resource the audience does not
/// list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_publishes_mcp_oauth_metadata_and_takes_the_providers_tokens() {
    if !require_node() {
        return;
    }
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let resource = format!("{base}/mcp");
    let idp = OidcProvider::start(json!({
        "clients": [{
            "client_id": "desk-agent", "client_secret": "a-secret-0123456789abcdef",
            "grant_types": ["client_credentials"], "redirect_uris": [], "response_types": [],
        }],
        "clientClaims": { "desk-agent": {
            "corp": { "tenant": "org_1", "surfaces": ["mcp"], "kind": "service" },
        }},
        "resources": { resource.clone(): { "scope": "capgate" } },
    }))
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let jwt = jwt_section(idp.issuer(), "").replace(
        &format!("audience = \"{RESOURCE}\""),
        &format!("audience = [\"{RESOURCE}\", \"{resource}\"]"),
    );
    // The example already has an [mcp] table: its keys go there.
    let config = deployment(
        dir.path(),
        |t| {
            t.replacen(
                "[mcp]\n",
                &format!("[mcp]\nresource = \"{resource}\"\nscopes = [\"capgate\"]\n"),
                1,
            )
        },
        &jwt,
    );
    let store = format!("sqlite://{}", dir.path().join("capgate.db").display());
    let server = Server::start_at(&config, &store, &format!("127.0.0.1:{port}"), &[]);
    assert_eq!(server.base, base);
    let http = reqwest::Client::new();
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let metadata: Value = http
            .get(format!("{base}{path}"))
            .send()
            .await
            .expect("metadata")
            .json()
            .await
            .expect("JSON");
        assert_eq!(
            metadata["resource"],
            resource.as_str(),
            "{path}: {metadata}"
        );
        assert_eq!(
            metadata["authorization_servers"],
            json!([idp.issuer()]),
            "{path}"
        );
        assert_eq!(metadata["scopes_supported"], json!(["capgate"]), "{path}");
    }
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "oidc-cli-test", "version": "1"}}});
    let post = |token: Option<String>| {
        let mut r = http
            .post(&resource)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(initialize.to_string());
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    let refused = post(None).await.expect("an answer");
    assert_eq!(refused.status(), 401);
    assert_eq!(
        refused.headers()["www-authenticate"],
        format!("Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\", scope=\"capgate\"").as_str()
    );
    let token = idp
        .client_credentials(
            "desk-agent",
            "a-secret-0123456789abcdef",
            &resource,
            Some("capgate"),
        )
        .await;
    let admitted = post(Some(token)).await.expect("an answer");
    assert_eq!(admitted.status(), 200, "{:?}", admitted.text().await);
    // A resource the audience leaves out would refuse every token MCP clients get.
    drop(server);
    let config = deployment(
        dir.path(),
        |t| t.replacen("[mcp]\n", &format!("[mcp]\nresource = \"{resource}\"\n"), 1),
        &jwt_section(idp.issuer(), ""),
    );
    let report = refused_by_check(&config);
    assert!(
        report["problems"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["key"] == "mcp.resource"
                && p["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("audience")))),
        "{report}"
    );
}
