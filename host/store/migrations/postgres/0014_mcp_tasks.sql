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
-- console sessions, kept by the trigger below in the same transaction as each change, and
-- are forgotten at `purge_after`: the approval's expiry plus the approvals' horizon.
CREATE TABLE capgate_mcp_tasks (
    id               text        PRIMARY KEY NOT NULL,
    principal_sha256 text        NOT NULL,
    namespace        text        NOT NULL,
    approval_id      text,
    capability_id    text        NOT NULL,
    status           text        NOT NULL,
    status_message   text        NOT NULL,
    outcome          text,
    input_answered   boolean     NOT NULL DEFAULT false,
    run_deadline     timestamptz,
    claim            text,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    purge_after      timestamptz NOT NULL
);
CREATE INDEX capgate_mcp_tasks_principal ON capgate_mcp_tasks (principal_sha256, status);
CREATE INDEX capgate_mcp_tasks_purge ON capgate_mcp_tasks (purge_after);

CREATE FUNCTION capgate_mcp_tasks_size(t capgate_mcp_tasks) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT (octet_length(t.capability_id) + octet_length(t.status_message)
            + COALESCE(octet_length(t.outcome), 0))::bigint
$$;

CREATE FUNCTION capgate_mcp_tasks_usage_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.namespace <> '' THEN
            INSERT INTO capgate_journal_usage AS u (namespace, row_count, byte_count)
            VALUES (NEW.namespace, 1, capgate_mcp_tasks_size(NEW))
            ON CONFLICT (namespace) DO UPDATE
               SET row_count = u.row_count + 1,
                   byte_count = u.byte_count + EXCLUDED.byte_count;
        END IF;
        RETURN NEW;
    ELSIF TG_OP = 'UPDATE' THEN
        IF NEW.namespace <> '' THEN
            UPDATE capgate_journal_usage
               SET byte_count = byte_count - capgate_mcp_tasks_size(OLD) + capgate_mcp_tasks_size(NEW)
             WHERE namespace = NEW.namespace;
        END IF;
        RETURN NEW;
    ELSE
        IF OLD.namespace <> '' THEN
            UPDATE capgate_journal_usage
               SET row_count = row_count - 1,
                   byte_count = byte_count - capgate_mcp_tasks_size(OLD)
             WHERE namespace = OLD.namespace;
        END IF;
        RETURN OLD;
    END IF;
END
$$;

CREATE TRIGGER capgate_mcp_tasks_usage
AFTER INSERT OR UPDATE OF status_message, outcome OR DELETE ON capgate_mcp_tasks
FOR EACH ROW EXECUTE FUNCTION capgate_mcp_tasks_usage_track();
