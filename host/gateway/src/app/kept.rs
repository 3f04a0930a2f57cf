//! What a serving process keeps across reloads of its application.

use crate::admin::Reloader;
use crate::console::{ConsoleOptions, ConsoleSessions};
use crate::door::{Doorkeeper, Quotas, Rate};
use crate::health::ShutdownProbe;
use crate::mcp::McpSessions;
use crate::throttle::{PerMinute, Throttle};
use std::sync::{Arc, Mutex, OnceLock};

/// What outlives one application: a configuration reload builds a new application
/// ([`super::AppBuilder`]) over the same `Kept`, so a reload signs no approver out, ends no
/// MCP session and resets no rate limit; and `/readyz` stays unready once shutdown began,
/// whatever configuration serves by then.
pub struct Kept {
    pub(super) console_sessions: ConsoleSessions,
    pub(super) mcp_sessions: McpSessions,
    /// The rate limiter and the unauthenticated throttle, with the limits they were built
    /// for (a reload that changes the limits starts new buckets).
    limiters: Mutex<Option<Limiters>>,
    /// What `POST /admin/reload` calls (set once the reloader exists).
    pub(super) reloader: OnceLock<Arc<dyn Reloader>>,
    /// `/readyz`'s `shutdown` check: turned unready when shutdown begins, whatever
    /// configuration is serving by then.
    pub(super) shutdown: ShutdownProbe,
}

/// The limits a rate limiter and an unauthenticated throttle were built for: per
/// principal, per namespace, whether the buckets are shared through the store,
/// unauthenticated per client address.
type Limits = (Option<Rate>, Option<Rate>, bool, Option<PerMinute>);

/// The rate limiter and the unauthenticated throttle, with the limits they were built for.
struct Limiters {
    limits: Limits,
    quotas: Arc<Quotas>,
    unauthenticated: Option<Arc<Throttle>>,
}

impl Default for Kept {
    /// Console sessions in this process's memory (at the console's default bound).
    fn default() -> Self {
        Kept::new(ConsoleSessions::in_memory(
            ConsoleOptions::default().max_sessions,
        ))
    }
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept")
            .field("console_sessions", &self.console_sessions)
            .field("mcp_sessions", &self.mcp_sessions)
            .field("reloader", &self.reloader.get().is_some())
            .field("shutdown", &self.shutdown)
            .finish_non_exhaustive()
    }
}

impl Kept {
    /// Nothing kept yet but where console sessions live (MCP sessions in memory until
    /// [`Kept::with_mcp_sessions`]).
    pub fn new(console_sessions: ConsoleSessions) -> Self {
        Kept {
            console_sessions,
            mcp_sessions: McpSessions::in_memory(),
            limiters: Mutex::new(None),
            reloader: OnceLock::new(),
            shutdown: ShutdownProbe::default(),
        }
    }

    /// Builder: where MCP sessions live ([`McpSessions::shared`]: in a store every replica
    /// reaches, so any replica serves any session).
    pub fn with_mcp_sessions(mut self, sessions: McpSessions) -> Self {
        self.mcp_sessions = sessions;
        self
    }

    /// What `POST /admin/reload` calls, once the process has it (the reloader itself holds
    /// the `Kept` it rebuilds over, so it comes second). Set once: a second reloader is
    /// handed back.
    pub fn set_reloader(&self, reloader: Arc<dyn Reloader>) -> Result<(), Arc<dyn Reloader>> {
        self.reloader.set(reloader)
    }

    /// `/readyz`'s `shutdown` check: [`ShutdownProbe::begin`] turns every application
    /// built over this `Kept` unready, for good.
    pub fn shutdown(&self) -> &ShutdownProbe {
        &self.shutdown
    }

    /// The deployment's doorkeeper, over the kept rate limiter and unauthenticated throttle
    /// when their limits did not change (else over its own, which are kept from now on).
    pub(super) fn doorkeeper(&self, keeper: Doorkeeper) -> Doorkeeper {
        let (principal, namespace) = keeper.quotas.rates();
        let limits = (
            principal,
            namespace,
            keeper.quotas.is_shared(),
            keeper.unauthenticated.as_ref().map(|t| t.rate()),
        );
        let mut kept = self.limiters.lock().unwrap_or_else(|p| p.into_inner());
        match &*kept {
            Some(k) if k.limits == limits => keeper
                .quotas(k.quotas.clone())
                .unauthenticated(k.unauthenticated.clone()),
            _ => {
                *kept = Some(Limiters {
                    limits,
                    quotas: keeper.quotas.clone(),
                    unauthenticated: keeper.unauthenticated.clone(),
                });
                keeper
            }
        }
    }
}
