//! A live session: what the page learns of it, its cookie, and how a request's cookie is
//! re-admitted through the doorkeeper on every request.

use super::csrf::{csrf_of, is_loopback_host, session_id};
use super::router::Console;
use super::{COOKIE, LOG, SecureCookie, SessionCredential, SessionStoreError, principal_key};
use crate::auth::{Authenticated, Credential};
use crate::door::Door;
use crate::reject::Reject;
use axum::http::StatusCode;
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use capgate_core::actor::ActorRef;
use capgate_core::authz::Principal;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Who is signed in, as the page learns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    /// The signed-in actor.
    pub actor: ActorRef,
    /// Their namespace (what they see).
    pub namespace: String,
    /// Their roles.
    pub roles: Vec<String>,
    /// Whether they hold the approver role (else only the requester door is open to them).
    pub approver: bool,
    /// The token state-changing requests carry in `X-CSRF-Token`.
    pub csrf_token: String,
    /// When the session ends.
    pub expires_at: DateTime<Utc>,
}

/// SHA-256 hex of a session id: its key in the store.
pub(super) fn digest(id: &str) -> String {
    capgate_core::digest::sha256_hex(id)
}

/// A live session, re-admitted: its id, its principal, when it ends.
pub(super) struct Live {
    pub(super) id: String,
    pub(super) who: Authenticated,
    pub(super) expires_at: DateTime<Utc>,
}

impl Console {
    /// Whether the session cookie of this request's host is `Secure`.
    pub(super) fn secure_cookie(&self, headers: &HeaderMap) -> bool {
        match self.options.secure_cookie {
            SecureCookie::Always => true,
            SecureCookie::Never => false,
            SecureCookie::Auto => !is_loopback_host(headers),
        }
    }

    /// The session cookie's name for this request's host: [`super::SECURE_COOKIE`] when it
    /// is `Secure`, [`COOKIE`] over plain HTTP.
    pub(super) fn cookie_name(&self, headers: &HeaderMap) -> &'static str {
        if self.secure_cookie(headers) {
            super::SECURE_COOKIE
        } else {
            COOKIE
        }
    }

    pub(super) fn cookie(
        &self,
        headers: &HeaderMap,
        value: &str,
        max_age: Duration,
    ) -> HeaderValue {
        let secure = self.secure_cookie(headers);
        // A `__Host-` cookie must have `Path=/` (the browser refuses it otherwise); the
        // plain one keeps to the console's prefix.
        let path = if secure {
            "/".to_owned()
        } else {
            self.options.prefix.clone()
        };
        let c = cookie::Cookie::build((self.cookie_name(headers), value.to_owned()))
            .path(path)
            .http_only(true)
            .same_site(cookie::SameSite::Strict)
            .secure(secure)
            .max_age(cookie::time::Duration::seconds(
                i64::try_from(max_age.as_secs()).unwrap_or(i64::MAX),
            ))
            .build();
        // The id is hex and the path was checked: always a valid header value.
        HeaderValue::from_str(&c.to_string()).unwrap_or(HeaderValue::from_static(""))
    }

    pub(super) fn cleared_cookie(&self, headers: &HeaderMap) -> HeaderValue {
        self.cookie(headers, "", Duration::ZERO)
    }

    /// `401` with the cookie cleared.
    pub(super) fn unauthenticated(&self, headers: &HeaderMap) -> Response {
        let mut r = Reject::unauthenticated().into_response();
        r.headers_mut()
            .insert(header::SET_COOKIE, self.cleared_cookie(headers));
        r
    }

    /// The live session a request's cookie names, its principal re-admitted through the
    /// doorkeeper (a removed key ends it). `Err` is the response to send instead.
    pub(super) async fn session(&self, headers: &HeaderMap) -> Result<Live, Box<Response>> {
        let unauthenticated = || Box::new(self.unauthenticated(headers));
        let id = session_id(headers, self.cookie_name(headers)).ok_or_else(unauthenticated)?;
        let key = digest(&id);
        let now = self.doorkeeper.clock.now();
        let stored = self
            .sessions
            .get(&key, now)
            .await
            .map_err(|e| Box::new(store_failed(&e).into_response()))?
            .ok_or_else(unauthenticated)?;
        let who = match &stored.credential {
            SessionCredential::ApiKey { sha256 } => {
                match self.doorkeeper.authenticator.by_api_key_hash(sha256) {
                    Some(who) if principal_key(&who.principal) == stored.principal => who,
                    _ => {
                        tracing::info!(target: LOG, "console session ended: its key is no longer configured");
                        self.end(&key).await;
                        return Err(unauthenticated());
                    }
                }
            }
            SessionCredential::Principal {
                actor,
                namespace,
                roles,
                requester_door,
                context,
            } => Authenticated {
                principal: Principal {
                    actor: actor.clone(),
                    namespace: namespace.clone(),
                },
                context: context.clone(),
                roles: roles.clone(),
                surfaces: Vec::new(),
                expires_at: Some(stored.expires_at),
                requester_door: *requester_door,
                operator: false,
                credential: Credential::Token,
            },
        };
        if !self.may_decide_something(&who) {
            self.end(&key).await;
            return Err(unauthenticated());
        }
        match self.doorkeeper.admit_principal(who, Door::Approvals).await {
            Ok(who) => Ok(Live {
                id,
                who,
                expires_at: stored.expires_at,
            }),
            Err(e) if e.status == StatusCode::UNAUTHORIZED => {
                self.end(&key).await;
                Err(unauthenticated())
            }
            Err(e) => Err(Box::new(e.into_response())),
        }
    }

    /// Whether a principal may decide anything here: an approver, or a human at the
    /// requester door.
    pub(super) fn may_decide_something(&self, who: &Authenticated) -> bool {
        who.has_role(&self.options.approver_role) || who.requester_door
    }

    /// End a session (best effort: a store failure leaves it to expire).
    pub(super) async fn end(&self, key: &str) {
        if let Err(e) = self.sessions.close(key).await {
            tracing::warn!(target: LOG, error = %e, "a console session could not be ended");
        }
    }

    pub(super) fn view(&self, live: &Live) -> SessionView {
        SessionView {
            actor: live.who.principal.actor.reference(),
            namespace: live.who.principal.namespace.clone(),
            roles: live.who.roles.clone(),
            approver: live.who.has_role(&self.options.approver_role),
            csrf_token: csrf_of(&live.id),
            expires_at: live.expires_at,
        }
    }
}

pub(super) fn store_failed(e: &SessionStoreError) -> Reject {
    if let SessionStoreError::QuotaExceeded { namespace, limit } = e {
        tracing::warn!(target: LOG, namespace = %namespace, limit, "console sign-in refused: namespace over its storage budget");
        return Reject::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "STORAGE_QUOTA_EXCEEDED",
            format!(
                "This namespace's storage is at its {limit} budget; no console session was opened. Sessions leave it as they expire or sign out."
            ),
        );
    }
    tracing::error!(target: LOG, error = %e, "console session store failed");
    Reject::unavailable("console sessions")
}
