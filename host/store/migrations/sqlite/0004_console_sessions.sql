-- Approval console sessions (capgate-gateway's console), so a restart or another replica
-- keeps them. The session id is kept only as its SHA-256; the credential never: an API
-- key's session keeps the key's SHA-256 (re-admitted against the configured keys on every
-- request), a token's session the principal it mapped to, until the token's own expiry.
CREATE TABLE capgate_console_sessions (
    id_sha256 TEXT PRIMARY KEY NOT NULL,
    principal TEXT NOT NULL,
    credential TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX capgate_console_sessions_principal ON capgate_console_sessions (principal, created_at);
CREATE INDEX capgate_console_sessions_expires ON capgate_console_sessions (expires_at);
