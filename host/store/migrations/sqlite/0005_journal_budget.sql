-- The per-namespace storage budget of the invocation journal (docs/gateway.md, "Storage
-- budget"). Each record now names the namespace it counts against; capgate_journal_usage
-- keeps, per namespace, how many records it holds and how many bytes of input and outcome
-- JSON, maintained by triggers in the same transaction as every insert, update and delete
-- (claims, settlements, resumes, purges), so the counts cannot drift from the rows. A
-- claim is admitted only while its namespace is within budget. Rows written before this
-- migration have no namespace and count against none.
ALTER TABLE capgate_invocations ADD COLUMN namespace TEXT;

CREATE TABLE capgate_journal_usage (
    namespace  TEXT    PRIMARY KEY NOT NULL,
    row_count  INTEGER NOT NULL DEFAULT 0,
    byte_count INTEGER NOT NULL DEFAULT 0
);

CREATE TRIGGER capgate_invocations_usage_insert AFTER INSERT ON capgate_invocations
WHEN NEW.namespace IS NOT NULL
BEGIN
    INSERT OR IGNORE INTO capgate_journal_usage (namespace) VALUES (NEW.namespace);
    UPDATE capgate_journal_usage
       SET row_count = row_count + 1,
           byte_count = byte_count + length(CAST(NEW.input AS BLOB))
                      + COALESCE(length(CAST(NEW.outcome AS BLOB)), 0)
     WHERE namespace = NEW.namespace;
END;

CREATE TRIGGER capgate_invocations_usage_update AFTER UPDATE OF input, outcome ON capgate_invocations
WHEN NEW.namespace IS NOT NULL
BEGIN
    UPDATE capgate_journal_usage
       SET byte_count = byte_count
                      + length(CAST(NEW.input AS BLOB)) + COALESCE(length(CAST(NEW.outcome AS BLOB)), 0)
                      - length(CAST(OLD.input AS BLOB)) - COALESCE(length(CAST(OLD.outcome AS BLOB)), 0)
     WHERE namespace = NEW.namespace;
END;

CREATE TRIGGER capgate_invocations_usage_delete AFTER DELETE ON capgate_invocations
WHEN OLD.namespace IS NOT NULL
BEGIN
    UPDATE capgate_journal_usage
       SET row_count = row_count - 1,
           byte_count = byte_count - length(CAST(OLD.input AS BLOB))
                      - COALESCE(length(CAST(OLD.outcome AS BLOB)), 0)
     WHERE namespace = OLD.namespace;
END;

-- The digest of the capability's own contract (without the deployment revision) when the
-- call asked for approval: a door resumes the approval only while the capability's current
-- digest is the same, so a revision bump that changed nothing about this capability keeps
-- its pending approvals. Rows written before this migration have none (the door then
-- compares what it recorded itself, as before).
ALTER TABLE capgate_approvals ADD COLUMN descriptor_digest TEXT;
