-- Rate-limit buckets (capgate-gateway's door, `gateway.rateLimit.scope = "store"`): one row
-- per bucket, a GCRA's theoretical arrival time in microseconds. The bucket key is a
-- digest of the principal or namespace, never the name itself. A row whose time is past is
-- a full bucket, the same as no row.
CREATE TABLE capgate_rate_limits (
    bucket TEXT PRIMARY KEY NOT NULL,
    tat_us INTEGER NOT NULL
);

-- MCP sessions over streamable HTTP, so any replica restores a session another opened
-- (no sticky routing): the SHA-256 of the session id, the SHA-256 of the principal that
-- opened it (a session used by another principal is refused), and the client's
-- `initialize` parameters (JSON), from which the session's handshake is replayed.
CREATE TABLE capgate_mcp_sessions (
    id_sha256 TEXT PRIMARY KEY NOT NULL,
    principal_sha256 TEXT NOT NULL,
    state TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX capgate_mcp_sessions_created ON capgate_mcp_sessions (created_at);
