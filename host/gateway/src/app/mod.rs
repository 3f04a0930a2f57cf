//! The application of a deployment: every door mounted at its place, the layers in one
//! fixed order, over the state that survives a reload ([`Kept`]). `capgate serve` builds
//! one at start and a new one at every configuration reload; an embedder builds one to serve
//! what `capgate serve` serves.
//!
//! | mount | door | when |
//! |---|---|---|
//! | each route's path (`/agent`, `/workflow`) | a capability gateway on its surface ([`crate::routes`]) | one per [`AppBuilder::route`] |
//! | `/mcp` ([`crate::mcp::PREFIX`]) | MCP over streamable HTTP ([`crate::mcp`]) | always |
//! | `/approvals` ([`crate::approvals_api::PREFIX`]) | the human approvals API ([`crate::approvals_api`]) | always |
//! | the console's prefix (`/console`) | the approval console, over its own approvals API under `P/api` ([`crate::console`]) | with [`AppBuilder::console`] |
//! | `/admin` ([`crate::admin::PREFIX`]) | the operator API, `POST /admin/reload` ([`crate::admin`]) | with [`AppBuilder::admin`], once [`Kept::set_reloader`] was called |
//! | `/healthz`, `/readyz` ([`crate::health`]) | liveness and readiness | always |
//! | `/.well-known/oauth-protected-resource[/mcp]` ([`crate::mcp::oauth`]) | MCP's OAuth protected-resource metadata | with [`McpOptions::protected_resource`] |
//!
//! Every door goes through one [`Doorkeeper`], whose rate limiter
//! and unauthenticated throttle are [`Kept`] while their limits do not change.
//!
//! **The layer order**, from the inside out:
//!
//! 1. each door's own layers, inside its router (body limits, timeouts, JSON refusals, the
//!    console's security headers);
//! 2. W3C trace context ([`crate::trace_context::continue_trace`]) around every door above;
//! 3. health, merged after it: health checks are not traced;
//! 4. HTTP request metrics ([`crate::metrics::track_http`], with [`AppBuilder::http_metrics`])
//!    around everything, health included: inside the application, where each route's
//!    matched template is known.
//!
//! The metrics exposition ([`crate::metrics::metrics_router`]) is no part of the
//! application: it is set up once per process (on the gateway's listener, outside the
//! application that reloads swap, or on a listener of its own).
//!
//! **Reserved paths** ([`RESERVED`]) are the fixed mounts above, named by each door's own
//! constant: a capability route or a console prefix on one of them is refused
//! ([`AppError::Reserved`]), and a configuration check asks [`reserved_by`] and
//! [`overlapping`] to refuse it first, located.

mod kept;
mod reserved;

pub use kept::Kept;
pub use reserved::{RESERVED, Reserved, overlapping, reserved_by};

use crate::admin::{OPERATOR_ROLE, admin_router};
use crate::approvals_api::{ApprovalsOptions, ApprovalsRouter};
use crate::console::{ConsoleError, ConsoleOptions, console_router_with};
use crate::door::Doorkeeper;
use crate::health::{ReadinessProbe, readiness_router};
use crate::mcp::{McpOptions, streamable_http_router_with};
use crate::routes::{GatewayOptions, GatewayOptionsError, capability_router};
use crate::trace_context::{TraceTrust, continue_trace};
use axum::Router;
use capgate_core::runtime::Runtime;
use std::sync::Arc;

/// Why an application could not be built. Returned before anything is served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppError {
    /// A capability route's configuration is refused.
    #[error("gateway route {path}")]
    Route {
        /// The route's path.
        path: String,
        /// Why its gateway could not be built.
        #[source]
        source: GatewayOptionsError,
    },
    /// The console's options are refused.
    #[error("the approval console")]
    Console(#[source] ConsoleError),
    /// A configured path takes a path the application mounts itself.
    #[error("`{path}` is served by capgate itself ({door}); pick another path")]
    Reserved {
        /// The configured path (a route's, or the console's prefix).
        path: String,
        /// The door that serves the reserved path.
        door: &'static str,
    },
}

/// Assembles the application of a deployment (see the module docs): each door's options
/// in, one axum [`Router`] out.
pub struct AppBuilder<'k> {
    kept: &'k Kept,
    runtime: Runtime,
    doorkeeper: Doorkeeper,
    routes: Vec<(String, GatewayOptions)>,
    mcp: McpOptions,
    approvals: ApprovalsOptions,
    console: Option<ConsoleOptions>,
    admin: bool,
    readiness: Vec<(String, Arc<dyn ReadinessProbe>)>,
    http_metrics: bool,
}

impl<'k> AppBuilder<'k> {
    /// An application over `runtime` whose doors all go through `doorkeeper` (over the
    /// rate limiter `kept` holds, when its limits did not change): MCP and the approvals
    /// API with their default options, health, no capability route, no console, no operator
    /// API, no request metrics.
    pub fn new(kept: &'k Kept, runtime: Runtime, doorkeeper: Doorkeeper) -> Self {
        AppBuilder {
            doorkeeper: kept.doorkeeper(doorkeeper),
            kept,
            runtime,
            routes: Vec::new(),
            mcp: McpOptions::default(),
            approvals: ApprovalsOptions::default(),
            console: None,
            admin: false,
            readiness: Vec::new(),
            http_metrics: false,
        }
    }

    /// The doorkeeper every door of this application goes through: the one to build each
    /// route's [`GatewayOptions`] with.
    pub fn doorkeeper(&self) -> &Doorkeeper {
        &self.doorkeeper
    }

    /// A capability gateway at `path`. It goes through the application's doorkeeper
    /// ([`Self::doorkeeper`]), whatever `config.doorkeeper` holds: one doorkeeper serves every
    /// door.
    pub fn route(mut self, path: impl Into<String>, config: GatewayOptions) -> Self {
        self.routes.push((path.into(), config));
        self
    }

    capgate_core::setters! {
        /// The MCP server's options.
        mcp => mcp: McpOptions;
        /// The approvals API's options (the console's API too: its approver role is this
        /// one's, whatever [`ConsoleOptions::approver_role`] says).
        approvals => approvals: ApprovalsOptions;
    }

    /// Serve the approval console, its sessions [`Kept`].
    pub fn console(mut self, options: ConsoleOptions) -> Self {
        self.console = Some(options);
        self
    }

    capgate_core::setters! {
        /// Serve the operator API (`POST /admin/reload`, for operator principals) when on
        /// and the [`Kept`] has a reloader.
        admin => admin: bool;
    }

    /// One more named check of `/readyz`, after the built-in `shutdown` ([`Kept::shutdown`]).
    pub fn readiness(mut self, name: impl Into<String>, probe: Arc<dyn ReadinessProbe>) -> Self {
        self.readiness.push((name.into(), probe));
        self
    }

    capgate_core::setters! {
        /// Count and time every request by its matched route ([`crate::metrics::track_http`]).
        http_metrics => http_metrics: bool;
    }

    /// The application: every door mounted, the layers in their order (module docs).
    pub fn build(self) -> Result<Router, AppError> {
        self.check_reserved()?;
        let AppBuilder {
            kept,
            runtime,
            doorkeeper: keeper,
            routes,
            mcp,
            approvals,
            console,
            admin,
            readiness,
            http_metrics,
        } = self;
        let mut app = Router::new();
        for (path, mut config) in routes {
            config.doorkeeper = keeper.clone();
            let router = capability_router(config).map_err(|source| AppError::Route {
                path: path.clone(),
                source,
            })?;
            app = app.nest(&path, router);
        }
        let approvals_api = || {
            ApprovalsRouter::with_options(runtime.clone(), keeper.clone(), approvals.clone())
                .build()
        };
        if let Some(resource) = &mcp.protected_resource {
            app = app.merge(resource.router());
        }
        app = app
            .nest_service(
                crate::mcp::PREFIX,
                streamable_http_router_with(
                    runtime.clone(),
                    keeper.clone(),
                    mcp,
                    kept.mcp_sessions.clone(),
                ),
            )
            .merge(approvals_api());
        if let Some(mut options) = console {
            options.approver_role = approvals.role.clone();
            let console = console_router_with(
                approvals_api(),
                keeper.clone(),
                options,
                kept.console_sessions.clone(),
            )
            .map_err(AppError::Console)?;
            app = app.merge(console);
        }
        if admin && let Some(reloader) = kept.reloader.get() {
            app = app.merge(admin_router(
                keeper.clone(),
                OPERATOR_ROLE,
                reloader.clone(),
            ));
        }
        let shutdown: Arc<dyn ReadinessProbe> = Arc::new(kept.shutdown.clone());
        let checks = std::iter::once(("shutdown".to_owned(), shutdown))
            .chain(readiness)
            .collect();
        app = app
            .layer(axum::middleware::from_fn_with_state(
                TraceTrust::new(keeper.authenticator.clone()),
                continue_trace,
            ))
            .merge(readiness_router(checks));
        if http_metrics {
            app = app.layer(axum::middleware::from_fn(crate::metrics::track_http));
        }
        Ok(app)
    }

    /// Refuse a capability route on a reserved path, or a console prefix overlapping one.
    fn check_reserved(&self) -> Result<(), AppError> {
        let routes = self
            .routes
            .iter()
            .map(|(path, _)| (path.as_str(), reserved_by(path)));
        let console = self
            .console
            .iter()
            .map(|c| (c.prefix.as_str(), overlapping(&c.prefix)));
        match routes.chain(console).find_map(|(p, r)| r.map(|r| (p, r))) {
            Some((path, r)) => Err(AppError::Reserved {
                path: path.to_owned(),
                door: r.door,
            }),
            None => Ok(()),
        }
    }
}
