//! The paths the application mounts whatever the configuration says, derived from the
//! doors' own mount constants: a configured path (a capability route, the console, the
//! metrics on the gateway's listener) may not take one of them, or anything beneath.

use crate::{admin, approvals_api, health, mcp};

/// A path the application mounts itself, and the door that serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserved {
    /// The mounted path: the door answers it and everything beneath it.
    pub path: &'static str,
    /// What serves it, as a refusal names it (`MCP`, `the human approvals API`).
    pub door: &'static str,
}

/// Every path the application mounts whatever the configuration says (each door's own
/// constant, the one the application mounts it at). `/admin` is reserved even when the
/// operator API is off, so that turning it on never takes a route's place.
pub const RESERVED: &[Reserved] = &[
    Reserved {
        path: mcp::PREFIX,
        door: "MCP",
    },
    Reserved {
        path: approvals_api::PREFIX,
        door: "the human approvals API",
    },
    Reserved {
        path: admin::PREFIX,
        door: "the operator API",
    },
    Reserved {
        path: health::LIVENESS,
        door: "health checks",
    },
    Reserved {
        path: health::READINESS,
        door: "health checks",
    },
    Reserved {
        path: mcp::oauth::WELL_KNOWN,
        door: "MCP's OAuth metadata",
    },
];

impl Reserved {
    /// Whether `path` is this mount or beneath it (a capability route or the metrics path
    /// there would collide with the door).
    pub fn covers(&self, path: &str) -> bool {
        beneath(path, self.path)
    }

    /// Whether a prefix and this mount share any path: either is the other or beneath it
    /// (a console prefix above the mount would collide as much as one beneath it).
    pub fn overlaps(&self, prefix: &str) -> bool {
        beneath(prefix, self.path) || beneath(self.path, prefix)
    }
}

/// Whether `path` is `mount` or beneath it, segment-wise (`/mcpx` is not beneath `/mcp`).
fn beneath(path: &str, mount: &str) -> bool {
    path.strip_prefix(mount)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The reserved mount a path falls on (is, or is beneath), if any: what a capability
/// route's or the metrics path's check asks.
pub fn reserved_by(path: &str) -> Option<&'static Reserved> {
    RESERVED.iter().find(|r| r.covers(path))
}

/// The reserved mount a prefix overlaps (either way), if any: what the console prefix's
/// check asks.
pub fn overlapping(prefix: &str) -> Option<&'static Reserved> {
    RESERVED.iter().find(|r| r.overlaps(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_falls_on_a_mount_segment_wise() {
        assert_eq!(
            reserved_by("/admin").map(|r| r.door),
            Some("the operator API")
        );
        assert_eq!(reserved_by("/mcp/x").map(|r| r.path), Some("/mcp"));
        assert_eq!(reserved_by("/administration"), None);
        assert_eq!(reserved_by("/mcpx"), None);
        assert_eq!(reserved_by("/agent"), None);
        assert_eq!(
            overlapping("/approvals/ui").map(|r| r.path),
            Some("/approvals")
        );
        assert_eq!(overlapping("/console"), None);
    }
}
