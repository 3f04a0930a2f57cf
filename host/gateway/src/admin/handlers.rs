//! `POST /admin/reload`.

use super::router::AdminApi;
use super::{LOG, ReloadRequester};
use crate::door::{Caller, Door};
use crate::reject::Reject;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use capgate_core::authz::Operation;
use std::sync::Arc;

pub(super) async fn reload(State(api): State<Arc<AdminApi>>, Caller(who): Caller) -> Response {
    if !who.operator || !who.has_role(&api.role) {
        tracing::info!(target: LOG, actor = %who.principal.actor.id, namespace = %who.principal.namespace, role = %api.role, "reload refused: not an operator principal");
        return Reject::forbidden_because(
            "The operator API needs an operator's credential ([[gateway.operatorKeys]]); tenant credentials cannot reload.",
        )
        .into_response();
    }
    if let Err(refused) = api
        .doorkeeper
        .authorize(
            &who,
            Door::Admin,
            Operation::ReloadConfiguration,
            None,
            None,
        )
        .await
    {
        return refused.into_response();
    }
    tracing::info!(target: LOG, actor = %who.principal.actor.id, namespace = %who.principal.namespace, "configuration reload asked");
    api.reloader
        .reload(ReloadRequester { who })
        .await
        .into_response()
}
