//! The defaults of the doors and upstreams, written once: the gateway's and the provider's
//! options fall back to them, and `capgate.toml`'s keys show and apply them (the
//! configuration crate reads them here, without depending on the crates that run).

use std::time::Duration;

/// The capability routes (`capgate_gateway`'s options, `[gateway]`).
pub mod routes {
    use super::Duration;

    /// Default ceiling of one gateway request (45 000 ms): minus the audit drain it leaves
    /// a 40 000 ms work budget, above core's default per-attempt timeout (30 000 ms), so a
    /// hung procedure times out (`TIMEOUT`) before the gateway gives up on it
    /// (`outcome-unknown`). (The reference's 25 000 ms would leave 20 000 ms, less than its
    /// own 30 000 ms timeout.)
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_millis(45_000);
    /// Default time reserved for draining audit at the end of a request (5 000 ms).
    pub const DEFAULT_AUDIT_DRAIN_TIMEOUT: Duration = Duration::from_millis(5_000);
    /// Default request body limit (1 MiB).
    pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
}

/// The doors' rate limits (`[gateway.rateLimit]`).
pub mod door {
    /// Default sustained rate per principal (requests per second, every door together).
    pub const DEFAULT_PRINCIPAL_RATE: u32 = 1_000;
    /// Default burst per principal.
    pub const DEFAULT_PRINCIPAL_BURST: u32 = 2_000;
    /// Default sustained rate per namespace.
    pub const DEFAULT_NAMESPACE_RATE: u32 = 5_000;
    /// Default burst per namespace.
    pub const DEFAULT_NAMESPACE_BURST: u32 = 10_000;
    /// Default unauthenticated requests per client address: sustained per minute.
    pub const DEFAULT_UNAUTHENTICATED_PER_MINUTE: u32 = 60;
    /// Default unauthenticated burst per client address.
    pub const DEFAULT_UNAUTHENTICATED_BURST: u32 = 100;
}

/// The approval console (`[gateway.console]`).
pub mod console {
    /// Default bound on one principal's live sessions (a new sign-in evicts its oldest).
    pub const DEFAULT_MAX_SESSIONS_PER_PRINCIPAL: u32 = 10;
    /// Default sign-ins per principal: per minute, and burst.
    pub const DEFAULT_SIGN_IN_PER_PRINCIPAL: (u32, u32) = (10, 10);
    /// Default sign-ins per client address: per minute, and burst.
    pub const DEFAULT_SIGN_IN_PER_ADDRESS: (u32, u32) = (30, 30);
}

/// An MCP upstream (`[upstreams.mcp.NAME]`).
pub mod mcp_upstream {
    use super::Duration;

    /// Default connect (and initialize) timeout.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default bound on calls in flight on one upstream.
    pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 16;
    /// Default interval between two listings of an upstream's tools.
    pub const DEFAULT_RELIST_INTERVAL: Duration = Duration::from_secs(60);
}

/// An HTTP upstream (`procedure.http`) and every procedure's stall timeout.
pub mod http_upstream {
    /// The methods a request mapping may use (upper case).
    pub const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
    /// Default connect timeout of an HTTP upstream.
    pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
    /// Default response stall timeout of a procedure (`responseStallTimeoutMs = 0`).
    pub const DEFAULT_RESPONSE_STALL_TIMEOUT_MS: u64 = 300_000;
    /// The largest accepted stall timeout: the largest millisecond count whose nanosecond
    /// value still fits a signed 64-bit integer, so no conversion of an accepted value can
    /// overflow.
    pub const MAX_SAFE_STALL_TIMEOUT_MS: i64 = i64::MAX / 1_000_000;
}
