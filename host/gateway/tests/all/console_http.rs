//! The approval console's server side over real HTTP: sign-in, the session cookie, CSRF,
//! cross-origin refusals, the security headers, and that `/console/api` is the approvals
//! API under the session's principal. (The page itself is driven in a real browser by
//! `host/cli/tests/all/console_browser.rs`.)

use crate::gateway_support;

use capgate_client::InvocationOptions;
use capgate_gateway::wire::CapabilityOutcome;
use gateway_support::TestServer;
use serde_json::{Value, json};

fn ok<T, E: std::fmt::Debug>(r: Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("unexpected error: {e:?}"),
    }
}

/// A signed-in browser, as far as HTTP goes: the cookie and the CSRF token.
struct Browser {
    origin: String,
    cookie: String,
    csrf: String,
    set_cookie: String,
    http: reqwest::Client,
}

async fn sign_in(s: &TestServer, credential: &str) -> Result<Browser, (u16, Value)> {
    let http = reqwest::Client::new();
    let res = ok(http
        .post(format!("{}/console/session", s.origin))
        .json(&json!({ "credential": credential }))
        .send()
        .await);
    let status = res.status().as_u16();
    let set_cookie = res
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body: Value = ok(res.json().await);
    if status != 200 {
        return Err((status, body));
    }
    let cookie = set_cookie.split(';').next().unwrap_or_default().to_owned();
    Ok(Browser {
        origin: s.origin.clone(),
        cookie,
        csrf: body["csrfToken"].as_str().unwrap_or_default().to_owned(),
        set_cookie,
        http,
    })
}

impl Browser {
    async fn get(&self, path: &str) -> (u16, Value) {
        let res = ok(self
            .http
            .get(format!("{}{path}", self.origin))
            .header("cookie", &self.cookie)
            .send()
            .await);
        let status = res.status().as_u16();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        csrf: Option<&str>,
        extra: &[(&str, &str)],
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.origin))
            .header("cookie", &self.cookie);
        if let Some(t) = csrf {
            req = req.header("x-csrf-token", t);
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = ok(req.send().await);
        let status = res.status().as_u16();
        (status, res.json().await.unwrap_or(Value::Null))
    }

    async fn decide(&self, id: &str, csrf: Option<&str>, decision: &str) -> (u16, Value) {
        self.send(
            reqwest::Method::POST,
            &format!("/console/api/approvals/{id}/decision"),
            csrf,
            &[],
            Some(json!({"decision": decision, "comment": "checked the order"})),
        )
        .await
    }
}

async fn held_refund(s: &TestServer, id: &str) -> String {
    let held = ok(s
        .client("tok-dana")
        .invoke(
            "orders.refund",
            json!({"orderId": "ord_42", "amount": 649}),
            InvocationOptions::new(id),
        )
        .await);
    match held {
        CapabilityOutcome::ApprovalRequired { approval, .. } => approval.id,
        other => panic!("expected approval-required, got {other:?}"),
    }
}

#[tokio::test]
async fn the_page_is_served_with_a_strict_content_security_policy_and_its_prefix() {
    let s = TestServer::sqlite().await;
    for path in [
        "/console",
        "/console/",
        "/console/history",
        "/console/approvals/apr_x",
    ] {
        let res = ok(reqwest::get(format!("{}{path}", s.origin)).await);
        assert_eq!(res.status().as_u16(), 200, "{path}");
        let h = res.headers().clone();
        let csp = h
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(csp.contains("script-src 'self'"), "{csp}");
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!(
            h.get("x-content-type-options").map(|v| v.as_bytes()),
            Some(&b"nosniff"[..])
        );
        let html = ok(res.text().await);
        assert!(html.contains("/console/assets/console.js"), "{html}");
        assert!(!html.contains("__CONSOLE_PREFIX__"));
    }
    // An unknown path under the prefix is a 404 with the same headers.
    let missing = ok(reqwest::get(format!("{}/console/nope/deeper", s.origin)).await);
    assert_eq!(missing.status().as_u16(), 404);
    assert!(missing.headers().contains_key("content-security-policy"));
    let js = ok(reqwest::get(format!("{}/console/assets/console.js", s.origin)).await);
    assert!(
        js.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/javascript"))
    );
}

#[tokio::test]
async fn sign_in_takes_the_approvals_api_credentials_and_sets_a_strict_cookie() {
    let s = TestServer::sqlite().await;
    let (status, body) = match sign_in(&s, "tok-nobody").await {
        Err(e) => e,
        Ok(_) => panic!("an unknown key signed in"),
    };
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "UNAUTHENTICATED");
    let anon = sign_in(&s, "tok-anon").await.err().map(|e| e.0);
    assert_eq!(anon, Some(401));

    let priya = ok(sign_in(&s, "tok-priya").await.map_err(|e| format!("{e:?}")));
    let attrs = priya.set_cookie.to_ascii_lowercase();
    assert!(priya.cookie.starts_with("capgate_console="), "{attrs}");
    for want in ["httponly", "samesite=strict", "path=/console", "max-age="] {
        assert!(attrs.contains(want), "{want} missing from {attrs}");
    }
    // A loopback host: no Secure (the browser would drop it over plain HTTP).
    assert!(!attrs.contains("secure"), "{attrs}");
    assert_eq!(priya.csrf.len(), 64);

    let (status, me) = priya.get("/console/session").await;
    assert_eq!(status, 200);
    assert_eq!(me["actor"]["id"], "u_priya");
    assert_eq!(me["namespace"], "org_1");
    assert_eq!(me["approver"], true);

    // A form post (not JSON) cannot sign in.
    let form = ok(reqwest::Client::new()
        .post(format!("{}/console/session", s.origin))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("credential=tok-priya")
        .send()
        .await);
    assert_eq!(form.status().as_u16(), 415);
    // Nor can a page of another origin.
    let cross = ok(reqwest::Client::new()
        .post(format!("{}/console/session", s.origin))
        .header("origin", "https://evil.example")
        .json(&json!({"credential": "tok-priya"}))
        .send()
        .await);
    assert_eq!(cross.status().as_u16(), 403);
    // Unknown fields are refused.
    let extra = ok(reqwest::Client::new()
        .post(format!("{}/console/session", s.origin))
        .json(&json!({"credential": "tok-priya", "namespace": "org_2"}))
        .send()
        .await);
    assert_eq!(extra.status().as_u16(), 400);
}

#[tokio::test]
async fn the_console_api_is_the_approvals_api_under_the_session_with_csrf_on_decisions() {
    let s = TestServer::sqlite().await;
    let id = held_refund(&s, "inv-console-1").await;
    let priya = ok(sign_in(&s, "tok-priya").await.map_err(|e| format!("{e:?}")));

    let (status, listed) = priya.get("/console/api/approvals?status=pending").await;
    assert_eq!(status, 200);
    let card = &listed[0];
    assert_eq!(card["id"], id.as_str());
    assert_eq!(card["policies"], json!(["refund-limit"]));
    assert_eq!(card["mayApprove"], true);
    assert_eq!(card["mayReject"], true);
    assert_eq!(card["inputWithheld"], false);
    let (_, by_requester) = priya
        .get("/console/api/approvals?status=pending&requester=u_eve")
        .await;
    assert_eq!(by_requester, json!([]));

    // No session: 401, whatever bearer token comes along.
    let bearer_only = ok(reqwest::Client::new()
        .get(format!("{}/console/api/approvals", s.origin))
        .bearer_auth("tok-priya")
        .send()
        .await);
    assert_eq!(bearer_only.status().as_u16(), 401);

    // A decision without the CSRF token, with a wrong one, or from another origin: 403,
    // and nothing is decided.
    assert_eq!(priya.decide(&id, None, "approved").await.0, 403);
    assert_eq!(
        priya.decide(&id, Some(&"0".repeat(64)), "approved").await.0,
        403
    );
    let (cross, _) = priya
        .send(
            reqwest::Method::POST,
            &format!("/console/api/approvals/{id}/decision"),
            Some(&priya.csrf),
            &[("origin", "http://evil.example")],
            Some(json!({"decision": "approved"})),
        )
        .await;
    assert_eq!(cross, 403);
    let (_, still) = priya.get(&format!("/console/api/approvals/{id}")).await;
    assert_eq!(still["status"], "pending");

    let (status, decided) = priya
        .decide(&id, Some(&priya.csrf.clone()), "approved")
        .await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["status"], "approved");
    assert_eq!(decided["decision"]["approver"]["id"], "u_priya");
    assert_eq!(decided["mayApprove"], false);
    // A second decision (another tab) is a conflict the page explains.
    let (again, body) = priya
        .decide(&id, Some(&priya.csrf.clone()), "rejected")
        .await;
    assert_eq!(again, 409, "{body}");

    // Dana resumes; the history shows how the resumed call ended.
    let done = ok(s
        .client("tok-dana")
        .resume_approval(&id, InvocationOptions::new("inv-console-1"))
        .await);
    assert!(
        matches!(done, CapabilityOutcome::Completed { .. }),
        "{done:?}"
    );
    let (_, consumed) = priya.get(&format!("/console/api/approvals/{id}")).await;
    assert_eq!(consumed["status"], "consumed");
    assert_eq!(consumed["outcome"]["status"], "completed", "{consumed}");
}

#[tokio::test]
async fn the_requester_is_not_offered_her_own_decision_and_other_namespaces_see_nothing() {
    let s = TestServer::sqlite().await;
    let id = held_refund(&s, "inv-console-2").await;
    // Dana's agent key opens model doors and holds no approver role: it cannot sign in.
    let refused = sign_in(&s, "tok-dana").await.err();
    assert_eq!(refused.as_ref().map(|r| r.0), Some(403), "{refused:?}");
    // Dana's console credential holds no approver role: she may sign in, but listing is
    // refused and her own refund (not self-confirmable) is not hers to decide.
    let dana = ok(sign_in(&s, "tok-dana-console")
        .await
        .map_err(|e| format!("{e:?}")));
    let (_, me) = dana.get("/console/session").await;
    assert_eq!(me["approver"], false);
    assert_eq!(dana.get("/console/api/approvals").await.0, 403);
    assert_eq!(
        dana.decide(&id, Some(&dana.csrf.clone()), "approved")
            .await
            .0,
        403
    );
    // The same actor id in another namespace does not see org_1's approval.
    let other = ok(sign_in(&s, "tok-dana-org2-console")
        .await
        .map_err(|e| format!("{e:?}")));
    assert_eq!(
        other.get(&format!("/console/api/approvals/{id}")).await.0,
        404
    );
}

#[tokio::test]
async fn signing_out_ends_the_session_for_every_copy_of_the_cookie() {
    let s = TestServer::sqlite().await;
    let priya = ok(sign_in(&s, "tok-priya").await.map_err(|e| format!("{e:?}")));
    // Sign-out needs the CSRF token too.
    assert_eq!(
        priya
            .send(reqwest::Method::DELETE, "/console/session", None, &[], None)
            .await
            .0,
        403
    );
    assert_eq!(priya.get("/console/session").await.0, 200);
    let (status, _) = priya
        .send(
            reqwest::Method::DELETE,
            "/console/session",
            Some(&priya.csrf.clone()),
            &[],
            None,
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(priya.get("/console/session").await.0, 401);
    assert_eq!(priya.get("/console/api/approvals").await.0, 401);
}

/// Single sign-on's server side (the full flow against a real provider is
/// `console_browser::the_console_signs_an_approver_in_with_the_identity_provider`): the
/// button names the provider HTML-escaped; the login redirect carries PKCE, `state` and
/// `nonce` and keeps them in an `HttpOnly`, `SameSite=Lax` cookie scoped to `P/oidc`; a
/// callback without that cookie, with another `state`, or with the provider's `error` opens
/// no session; a provider that does not answer says so; a console without it answers 404.
#[tokio::test]
async fn single_sign_on_binds_the_callback_to_the_browser_that_started_it() {
    use axum::body::Body;
    use axum::http::Request;
    use capgate_gateway::auth::{ClaimMap, JwtKey, TokenCheck};
    use capgate_gateway::console::{ConsoleOptions, SignOn, console_router};
    use capgate_gateway::identity::fetch::ProviderMetadata;
    use capgate_gateway::identity::oidc::{OidcClient, OidcSettings};
    use std::sync::Arc;
    use tower::ServiceExt;

    // Endpoints on a loopback port nobody listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let idp = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let metadata = ProviderMetadata {
        issuer: idp.clone(),
        jwks_uri: format!("{idp}/jwks"),
        authorization_endpoint: Some(format!("{idp}/auth")),
        token_endpoint: Some(format!("{idp}/token")),
        end_session_endpoint: None,
        code_challenge_methods_supported: vec!["S256".into()],
    };
    let check = TokenCheck::new(ok(JwtKey::hs256(&[7u8; 32])));
    let client = ok(OidcClient::new(
        OidcSettings {
            display_name: "<Acme & Co>".into(),
            client_id: "capgate-console".into(),
            client_secret: None,
            redirect_url: "http://127.0.0.1/console/oidc/callback".into(),
            scopes: vec!["email".into()],
        },
        &metadata,
        &check,
    ));
    let s = TestServer::sqlite().await;
    let keeper = capgate_gateway::door::Doorkeeper::new(
        gateway_support::authenticator(),
        s.authorizer.clone(),
    );
    let app = ok(console_router(
        capgate_gateway::approvals_api::ApprovalsRouter::new(s.runtime.clone(), keeper.clone())
            .build(),
        keeper,
        ConsoleOptions {
            sign_on: Some(SignOn {
                client: Arc::new(client),
                claims: ClaimMap::default(),
            }),
            ..ConsoleOptions::default()
        },
    ));
    let get = |path: String, cookie: Option<String>| {
        let app = app.clone();
        async move {
            let mut r = Request::get(path).header("host", "127.0.0.1");
            if let Some(c) = cookie {
                r = r.header("cookie", c);
            }
            ok(app.oneshot(ok(r.body(Body::empty()))).await)
        }
    };
    let header = |r: &axum::response::Response, name: &str| -> Vec<String> {
        r.headers()
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect()
    };

    let page = get("/console".into(), None).await;
    let html = String::from_utf8_lossy(&ok(axum::body::to_bytes(page.into_body(), 1 << 20).await))
        .into_owned();
    assert!(
        html.contains("data-testid=\"signin-oidc\" href=\"/console/oidc/login\""),
        "{html}"
    );
    assert!(
        html.contains("Sign in with &lt;Acme &amp; Co&gt;"),
        "escaped: {html}"
    );

    let login = get("/console/oidc/login".into(), None).await;
    assert_eq!(login.status(), 303);
    let location = header(&login, "location").remove(0);
    let url = ok(url::Url::parse(&location));
    assert!(location.starts_with(&format!("{idp}/auth?")), "{location}");
    let q: std::collections::HashMap<String, String> = url.query_pairs().into_owned().collect();
    assert_eq!(q["response_type"], "code");
    assert_eq!(q["client_id"], "capgate-console");
    assert_eq!(q["scope"], "openid email");
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(q["code_challenge"].len(), 43);
    assert!(q["state"].len() >= 43 && q["nonce"].len() >= 43 && q["state"] != q["nonce"]);
    let set = header(&login, "set-cookie").remove(0);
    for attribute in [
        "HttpOnly",
        "SameSite=Lax",
        "Path=/console/oidc",
        "Max-Age=600",
    ] {
        assert!(set.contains(attribute), "{attribute} missing: {set}");
    }
    let cookie = set.split(';').next().expect("a cookie").to_owned();
    let state = q["state"].clone();

    let callback = |query: String, cookie: Option<String>| {
        get(format!("/console/oidc/callback?{query}"), cookie)
    };
    let refused = |r: &axum::response::Response, code: &str| {
        assert_eq!(r.status(), 303);
        assert_eq!(
            header(r, "location"),
            [format!("/console/?signInError={code}")]
        );
        let cookies = header(r, "set-cookie");
        assert!(
            !cookies
                .iter()
                .any(|c| c.starts_with("capgate_console=") && !c.contains("Max-Age=0")),
            "a session cookie was set: {cookies:?}"
        );
    };
    // Another browser (no cookie), another state, the provider's refusal.
    refused(
        &callback(format!("code=c&state={state}"), None).await,
        "expired",
    );
    refused(
        &callback("code=c&state=forged".into(), Some(cookie.clone())).await,
        "expired",
    );
    refused(
        &callback(
            format!("error=access_denied&state={state}"),
            Some(cookie.clone()),
        )
        .await,
        "denied",
    );
    // The right browser and state, but the token endpoint does not answer.
    refused(
        &callback(format!("code=c&state={state}"), Some(cookie.clone())).await,
        "unavailable",
    );

    // A console without single sign-on has no such routes.
    let plain = reqwest::Client::new()
        .get(format!("{}/console/oidc/login", s.origin))
        .send()
        .await;
    assert_eq!(ok(plain).status(), 404);
}

/// Issue 55: on a console served over HTTPS (a host that is not loopback) the session
/// cookie is `__Host-capgate_console` (`Secure`, `Path=/`, no `Domain`), which browsers
/// accept only from this origin over HTTPS; the plain name is not read there, so a cookie
/// planted by a neighbouring subdomain or a plain-HTTP page opens nothing.
#[tokio::test]
async fn a_secure_console_sets_and_reads_only_a_host_prefixed_cookie() {
    let s = TestServer::sqlite().await;
    let http = reqwest::Client::new();
    let host = "capgate.example";
    let res = ok(http
        .post(format!("{}/console/session", s.origin))
        .header("host", host)
        .json(&json!({ "credential": "tok-priya" }))
        .send()
        .await);
    assert_eq!(res.status().as_u16(), 200);
    let set_cookie = res
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let attrs = set_cookie.to_ascii_lowercase();
    assert!(
        set_cookie.starts_with("__Host-capgate_console="),
        "{set_cookie}"
    );
    for want in ["secure", "path=/;", "httponly", "samesite=strict"] {
        assert!(
            attrs.contains(want) || (want == "path=/;" && attrs.ends_with("path=/")),
            "{want} missing from {attrs}"
        );
    }
    assert!(!attrs.contains("domain="), "{attrs}");
    let id = set_cookie
        .split(';')
        .next()
        .and_then(|c| c.split_once('='))
        .map(|(_, v)| v.to_owned())
        .unwrap_or_default();
    let me = |cookie: String| {
        let http = http.clone();
        let url = format!("{}/console/session", s.origin);
        async move {
            ok(http
                .get(url)
                .header("host", host)
                .header("cookie", cookie)
                .send()
                .await)
            .status()
            .as_u16()
        }
    };
    assert_eq!(me(format!("__Host-capgate_console={id}")).await, 200);
    assert_eq!(me(format!("capgate_console={id}")).await, 401);
}
