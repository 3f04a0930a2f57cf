-- capgate store, Postgres dialect. Mirrors migrations/sqlite/0001_initial.sql column for
-- column; JSON columns are jsonb, timestamps timestamptz.

-- Approvals (reference DDL: APPROVALS_DDL). execution_id, correlation_id and
-- decision_status are capgate additions the core record carries.
CREATE TABLE capgate_approvals (
    id                       text        PRIMARY KEY,
    capability_id            text        NOT NULL,
    surface                  text        NOT NULL,
    actor                    jsonb       NOT NULL,
    input                    jsonb       NOT NULL,
    input_hash               text        NOT NULL,
    reasons                  jsonb       NOT NULL,
    types                    jsonb       NOT NULL,
    risk                     text        NOT NULL,
    side_effect              text        NOT NULL,
    status                   text        NOT NULL,
    requested_at             timestamptz NOT NULL,
    expires_at               timestamptz NOT NULL,
    execution_id             text        NOT NULL,
    correlation_id           text,
    decision_status          text,
    decided_by               jsonb,
    decided_at               timestamptz,
    decision_comment         text,
    consumed_by_execution_id text
);
CREATE INDEX capgate_approvals_status_expires ON capgate_approvals (status, expires_at);
CREATE INDEX capgate_approvals_capability_requested ON capgate_approvals (capability_id, requested_at);

-- Audit events (reference DDL: AUDIT_DDL). Append-only.
CREATE TABLE capgate_audit_events (
    id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    type           text        NOT NULL,
    at             timestamptz NOT NULL,
    surface        text        NOT NULL,
    actor_id       text        NOT NULL,
    actor_kind     text        NOT NULL,
    execution_id   text,
    capability_id  text,
    correlation_id text,
    input_hash     text,
    data           jsonb       NOT NULL
);
CREATE INDEX capgate_audit_events_capability_at ON capgate_audit_events (capability_id, at);
CREATE INDEX capgate_audit_events_actor_at ON capgate_audit_events (actor_id, at);
CREATE INDEX capgate_audit_events_execution ON capgate_audit_events (execution_id);

-- Invocation journal (reference DDL: INVOCATIONS_DDL). The reference keeps the private
-- record in one jsonb column; capgate keeps its fields as columns.
CREATE TABLE capgate_invocations (
    scope             text        NOT NULL,
    invocation_id     text        NOT NULL,
    state             text        NOT NULL,
    claim_token       text        NOT NULL,
    approval_id       text,
    awaiting_approval boolean     NOT NULL DEFAULT false,
    capability_id     text        NOT NULL,
    input             jsonb       NOT NULL,
    input_hash        text        NOT NULL,
    idempotency_key   text        NOT NULL,
    correlation_id    text,
    contract_digest   text,
    outcome           jsonb,
    reconciled        boolean     NOT NULL DEFAULT false,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    PRIMARY KEY (scope, invocation_id)
);
CREATE INDEX capgate_invocations_scope_approval ON capgate_invocations (scope, approval_id);
CREATE INDEX capgate_invocations_state_updated ON capgate_invocations (state, updated_at);
