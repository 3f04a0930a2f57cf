//! The console's routes under its prefix, the state they share, and the layer that turns a
//! session into the approvals API's caller.

use super::csrf::{csrf_ok, forbidden, same_origin, session_id};
use super::handlers;
use super::page::{INDEX_HTML, PREFIX_PLACEHOLDER, SIGN_ON_PLACEHOLDER};
use super::sign_on;
use super::{
    CONTENT_SECURITY_POLICY, CSRF_HEADER, ConsoleError, ConsoleOptions, ConsoleSessions, LOG,
    MAX_SIGN_IN_BODY_BYTES, SessionStore, check_prefix,
};
use crate::door::{Doorkeeper, SessionPrincipal};
use crate::reject::json_refusals;
use crate::throttle::Throttle;
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::Method;
use axum::http::header::{self, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;
use tower_http::set_header::SetResponseHeaderLayer;

pub(super) struct Console {
    pub(super) doorkeeper: Doorkeeper,
    pub(super) options: ConsoleOptions,
    pub(super) sessions: Arc<dyn SessionStore>,
    pub(super) per_principal: Option<Throttle>,
    pub(super) per_address: Option<Throttle>,
    pub(super) index: String,
}

pub(super) type St = State<Arc<Console>>;

/// The console as an axum router with full paths (merge it into the application):
/// the page, its session routes, and `approvals` — the human approvals API router, built
/// by [`crate::approvals_api::ApprovalsRouter`] over the same doorkeeper — under `P/api`.
pub fn console_router(
    approvals: Router,
    doorkeeper: Doorkeeper,
    options: ConsoleOptions,
) -> Result<Router, ConsoleError> {
    let sessions = ConsoleSessions::in_memory(options.max_sessions);
    console_router_with(approvals, doorkeeper, options, sessions)
}

/// [`console_router`] over sessions that outlive it (`max_sessions` is then the store's
/// own business).
pub fn console_router_with(
    approvals: Router,
    doorkeeper: Doorkeeper,
    options: ConsoleOptions,
    sessions: ConsoleSessions,
) -> Result<Router, ConsoleError> {
    check_prefix(&options.prefix)?;
    if options.session_ttl.is_zero()
        || options.max_sessions == 0
        || options.max_sessions_per_principal == 0
    {
        return Err(ConsoleError::Bounds);
    }
    let prefix = options.prefix.clone();
    let console = Arc::new(Console {
        index: INDEX_HTML
            .replace(
                SIGN_ON_PLACEHOLDER,
                &sign_on::button_html(&prefix, options.sign_on.as_ref()),
            )
            .replace(PREFIX_PLACEHOLDER, &prefix),
        sessions: sessions.0,
        per_principal: options.sign_in_per_principal.map(Throttle::new),
        per_address: options.sign_in_per_address.map(Throttle::new),
        doorkeeper,
        options,
    });
    let api = approvals.layer(axum::middleware::from_fn_with_state(
        console.clone(),
        session_to_principal,
    ));
    let page = Router::new()
        .route(&prefix, get(handlers::index))
        .route(&format!("{prefix}/"), get(handlers::index))
        .route(&format!("{prefix}/history"), get(handlers::index))
        .route(&format!("{prefix}/approvals/{{id}}"), get(handlers::index))
        .route(
            &format!("{prefix}/assets/console.js"),
            get(handlers::script),
        )
        .route(
            &format!("{prefix}/assets/console.css"),
            get(handlers::stylesheet),
        )
        .route(
            &format!("{prefix}/session"),
            get(handlers::current)
                .post(handlers::sign_in)
                .delete(handlers::sign_out),
        )
        .route(&format!("{prefix}/oidc/login"), get(sign_on::login))
        .route(&format!("{prefix}/oidc/callback"), get(sign_on::callback))
        // Anything else under the prefix: a JSON 404 that carries the console's headers.
        .route(
            &format!("{prefix}/{{*rest}}"),
            axum::routing::any(handlers::unknown),
        )
        .layer(DefaultBodyLimit::max(MAX_SIGN_IN_BODY_BYTES))
        .layer(axum::middleware::map_response(json_refusals))
        .with_state(console.clone());
    let headers = [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ),
        (
            HeaderName::from_static("cross-origin-resource-policy"),
            "same-origin",
        ),
    ];
    let mut router = page.merge(Router::new().nest(&format!("{prefix}/api"), api));
    for (name, value) in headers {
        router = router.layer(SetResponseHeaderLayer::overriding(
            name,
            HeaderValue::from_static(value),
        ));
    }
    Ok(router)
}

/// The tower layer in front of the approvals API under `P/api`: the session's principal,
/// re-admitted, is the caller; state-changing requests must carry its CSRF token; any
/// bearer header of the request itself is dropped.
async fn session_to_principal(State(c): St, mut request: Request<Body>, next: Next) -> Response {
    let headers = request.headers();
    if let Err(e) = same_origin(headers) {
        return e.into_response();
    }
    let safe = matches!(*request.method(), Method::GET | Method::HEAD);
    if !safe {
        // The CSRF token before anything is looked up: a forged request costs nothing.
        match session_id(headers, c.cookie_name(headers)) {
            Some(id) if csrf_ok(headers, &id) => {}
            Some(_) => {
                tracing::info!(target: LOG, "console request refused: CSRF token missing or wrong");
                return forbidden(
                    "Missing or wrong CSRF token (send the session's csrfToken in X-CSRF-Token).",
                )
                .into_response();
            }
            None => return c.unauthenticated(headers),
        }
    }
    let live = match c.session(headers).await {
        Ok(live) => live,
        Err(r) => return *r,
    };
    let headers = request.headers_mut();
    headers.remove(header::AUTHORIZATION);
    headers.remove(HeaderName::from_static(CSRF_HEADER));
    request.extensions_mut().insert(SessionPrincipal(live.who));
    next.run(request).await
}
