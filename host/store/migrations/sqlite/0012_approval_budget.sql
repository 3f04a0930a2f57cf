-- Approval records count against their namespace's storage budget (docs/gateway.md,
-- "Storage budget"), beside its invocation receipts: a held call stores its full input with
-- the approval, at every door (/mcp included, which keeps no receipts). The triggers keep
-- capgate_journal_usage in the same transaction as every insert and delete of an approval
-- (its input's bytes; an approval's input never changes), and the rows already stored are
-- counted once here. Approvals of no namespace (an embedder's) count against none.
CREATE TRIGGER capgate_approvals_usage_insert AFTER INSERT ON capgate_approvals
WHEN NEW.namespace <> ''
BEGIN
    INSERT OR IGNORE INTO capgate_journal_usage (namespace) VALUES (NEW.namespace);
    UPDATE capgate_journal_usage
       SET row_count = row_count + 1,
           byte_count = byte_count + length(CAST(NEW.input AS BLOB))
     WHERE namespace = NEW.namespace;
END;

CREATE TRIGGER capgate_approvals_usage_delete AFTER DELETE ON capgate_approvals
WHEN OLD.namespace <> ''
BEGIN
    UPDATE capgate_journal_usage
       SET row_count = row_count - 1,
           byte_count = byte_count - length(CAST(OLD.input AS BLOB))
     WHERE namespace = OLD.namespace;
END;

INSERT OR IGNORE INTO capgate_journal_usage (namespace)
SELECT DISTINCT namespace FROM capgate_approvals WHERE namespace <> '';

UPDATE capgate_journal_usage
   SET row_count = row_count
                 + (SELECT count(*) FROM capgate_approvals a
                     WHERE a.namespace = capgate_journal_usage.namespace),
       byte_count = byte_count
                  + COALESCE((SELECT sum(length(CAST(a.input AS BLOB))) FROM capgate_approvals a
                               WHERE a.namespace = capgate_journal_usage.namespace), 0);

-- The purge of approvals past the replay horizon reads them by expiry.
CREATE INDEX capgate_approvals_expires ON capgate_approvals (expires_at);
