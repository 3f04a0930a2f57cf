-- Rate-limit buckets and MCP sessions shared by replicas: see
-- migrations/sqlite/0006_shared_limits_and_mcp_sessions.sql.
--
-- UNLOGGED: a bucket is one timestamp rewritten on every admitted request, which needs no
-- write-ahead log. A crash of the server (or a failover to a standby, which does not
-- receive unlogged tables) empties the table, and an empty bucket is a full one: the cost
-- of losing it is at most one burst per principal and namespace.
CREATE UNLOGGED TABLE capgate_rate_limits (
    bucket text PRIMARY KEY NOT NULL,
    tat_us bigint NOT NULL
);

CREATE TABLE capgate_mcp_sessions (
    id_sha256 text PRIMARY KEY NOT NULL,
    principal_sha256 text NOT NULL,
    state text NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX capgate_mcp_sessions_created ON capgate_mcp_sessions (created_at);
