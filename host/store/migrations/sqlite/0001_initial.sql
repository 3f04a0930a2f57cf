-- capgate store, SQLite dialect. Mirrors migrations/postgres/0001_initial.sql column for
-- column; timestamps are INTEGER microseconds since the Unix epoch (UTC) so that the
-- conditional statements compare numbers, and JSON columns are TEXT.

-- Approvals (reference DDL: APPROVALS_DDL). execution_id, correlation_id and
-- decision_status are capgate additions the core record carries.
CREATE TABLE capgate_approvals (
    id                       TEXT    PRIMARY KEY NOT NULL,
    capability_id            TEXT    NOT NULL,
    surface                  TEXT    NOT NULL,
    actor                    TEXT    NOT NULL,
    input                    TEXT    NOT NULL,
    input_hash               TEXT    NOT NULL,
    reasons                  TEXT    NOT NULL,
    types                    TEXT    NOT NULL,
    risk                     TEXT    NOT NULL,
    side_effect              TEXT    NOT NULL,
    status                   TEXT    NOT NULL,
    requested_at             INTEGER NOT NULL,
    expires_at               INTEGER NOT NULL,
    execution_id             TEXT    NOT NULL,
    correlation_id           TEXT,
    decision_status          TEXT,
    decided_by               TEXT,
    decided_at               INTEGER,
    decision_comment         TEXT,
    consumed_by_execution_id TEXT
);
CREATE INDEX capgate_approvals_status_expires ON capgate_approvals (status, expires_at);
CREATE INDEX capgate_approvals_capability_requested ON capgate_approvals (capability_id, requested_at);

-- Audit events (reference DDL: AUDIT_DDL). Append-only.
CREATE TABLE capgate_audit_events (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    type           TEXT    NOT NULL,
    at             INTEGER NOT NULL,
    surface        TEXT    NOT NULL,
    actor_id       TEXT    NOT NULL,
    actor_kind     TEXT    NOT NULL,
    execution_id   TEXT,
    capability_id  TEXT,
    correlation_id TEXT,
    input_hash     TEXT,
    data           TEXT    NOT NULL
);
CREATE INDEX capgate_audit_events_capability_at ON capgate_audit_events (capability_id, at);
CREATE INDEX capgate_audit_events_actor_at ON capgate_audit_events (actor_id, at);
CREATE INDEX capgate_audit_events_execution ON capgate_audit_events (execution_id);

-- Invocation journal (reference DDL: INVOCATIONS_DDL). The reference keeps the private
-- record in one jsonb column; capgate keeps its fields as columns.
CREATE TABLE capgate_invocations (
    scope             TEXT    NOT NULL,
    invocation_id     TEXT    NOT NULL,
    state             TEXT    NOT NULL,
    claim_token       TEXT    NOT NULL,
    approval_id       TEXT,
    awaiting_approval INTEGER NOT NULL DEFAULT 0,
    capability_id     TEXT    NOT NULL,
    input             TEXT    NOT NULL,
    input_hash        TEXT    NOT NULL,
    idempotency_key   TEXT    NOT NULL,
    correlation_id    TEXT,
    contract_digest   TEXT,
    outcome           TEXT,
    reconciled        INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (scope, invocation_id)
);
CREATE INDEX capgate_invocations_scope_approval ON capgate_invocations (scope, approval_id);
CREATE INDEX capgate_invocations_state_updated ON capgate_invocations (state, updated_at);
