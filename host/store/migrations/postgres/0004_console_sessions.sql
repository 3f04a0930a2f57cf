-- Approval console sessions: see migrations/sqlite/0004_console_sessions.sql.
CREATE TABLE capgate_console_sessions (
    id_sha256 text PRIMARY KEY NOT NULL,
    principal text NOT NULL,
    credential text NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX capgate_console_sessions_principal ON capgate_console_sessions (principal, created_at);
CREATE INDEX capgate_console_sessions_expires ON capgate_console_sessions (expires_at);
