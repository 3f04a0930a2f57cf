-- MCP tasks (the `io.modelcontextprotocol/tasks` extension): a held `tools/call` on `/mcp`
-- answered with a task the client polls, so any replica answers `tasks/get` and a restart
-- loses nothing (docs/gateway.md, "MCP tasks"). A task is bound to the principal that
-- created it (the SHA-256 of its key; another principal's `tasks/get` reads as an unknown
-- task), waits for one approval, and ends once: `status` moves from `working` to
-- `completed`, `failed` or `cancelled` and never back. `outcome` is what `tasks/get`
-- answers at the end (the redacted tool result, or the public error), as JSON text;
-- `claim` names the replica's run of the approved call, so two pollers never both resume
-- it, until `run_deadline` (past it, a replica that stopped mid-run is assumed and the task
-- fails as outcome-unknown); `input_answered` says the client answered the URL elicitation that points its user to
-- the approval's console page (it is not asked again). Tasks count against their namespace's storage budget like receipts, approvals and
-- console sessions, kept by the triggers below in the same transaction as each change,
-- and are forgotten at `purge_after`: the approval's expiry plus the approvals' horizon.
CREATE TABLE capgate_mcp_tasks (
    id               TEXT    PRIMARY KEY NOT NULL,
    principal_sha256 TEXT    NOT NULL,
    namespace        TEXT    NOT NULL,
    approval_id      TEXT,
    capability_id    TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    status_message   TEXT    NOT NULL,
    outcome          TEXT,
    input_answered   INTEGER NOT NULL DEFAULT 0,
    run_deadline     INTEGER,
    claim            TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    purge_after      INTEGER NOT NULL
);
CREATE INDEX capgate_mcp_tasks_principal ON capgate_mcp_tasks (principal_sha256, status);
CREATE INDEX capgate_mcp_tasks_purge ON capgate_mcp_tasks (purge_after);

CREATE TRIGGER capgate_mcp_tasks_usage_insert AFTER INSERT ON capgate_mcp_tasks
WHEN NEW.namespace <> ''
BEGIN
    INSERT OR IGNORE INTO capgate_journal_usage (namespace) VALUES (NEW.namespace);
    UPDATE capgate_journal_usage
       SET row_count = row_count + 1,
           byte_count = byte_count + length(CAST(NEW.capability_id AS BLOB))
                                   + length(CAST(NEW.status_message AS BLOB))
                                   + COALESCE(length(CAST(NEW.outcome AS BLOB)), 0)
     WHERE namespace = NEW.namespace;
END;

CREATE TRIGGER capgate_mcp_tasks_usage_update AFTER UPDATE OF status_message, outcome ON capgate_mcp_tasks
WHEN NEW.namespace <> ''
BEGIN
    UPDATE capgate_journal_usage
       SET byte_count = byte_count - length(CAST(OLD.status_message AS BLOB))
                                   - COALESCE(length(CAST(OLD.outcome AS BLOB)), 0)
                                   + length(CAST(NEW.status_message AS BLOB))
                                   + COALESCE(length(CAST(NEW.outcome AS BLOB)), 0)
     WHERE namespace = NEW.namespace;
END;

CREATE TRIGGER capgate_mcp_tasks_usage_delete AFTER DELETE ON capgate_mcp_tasks
WHEN OLD.namespace <> ''
BEGIN
    UPDATE capgate_journal_usage
       SET row_count = row_count - 1,
           byte_count = byte_count - length(CAST(OLD.capability_id AS BLOB))
                                   - length(CAST(OLD.status_message AS BLOB))
                                   - COALESCE(length(CAST(OLD.outcome AS BLOB)), 0)
     WHERE namespace = OLD.namespace;
END;
