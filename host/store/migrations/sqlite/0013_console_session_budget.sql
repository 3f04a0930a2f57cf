-- Console sessions count against their principal's namespace storage budget (docs/gateway.md,
-- "Storage budget"), beside its receipts and approval records: each sign-in stores a row
-- (the principal key and the credential's description, up to 16 KiB each), so sign-ins
-- without end must not grow the database without end. The triggers keep
-- capgate_journal_usage in the same transaction as every insert and delete of a session (a
-- session's row never changes). Sessions stored before this migration have no namespace and
-- count against none; they end at their expiry.
ALTER TABLE capgate_console_sessions ADD COLUMN namespace TEXT NOT NULL DEFAULT '';

CREATE TRIGGER capgate_console_sessions_usage_insert AFTER INSERT ON capgate_console_sessions
WHEN NEW.namespace <> ''
BEGIN
    INSERT OR IGNORE INTO capgate_journal_usage (namespace) VALUES (NEW.namespace);
    UPDATE capgate_journal_usage
       SET row_count = row_count + 1,
           byte_count = byte_count + length(CAST(NEW.principal AS BLOB))
                                   + length(CAST(NEW.credential AS BLOB))
     WHERE namespace = NEW.namespace;
END;

CREATE TRIGGER capgate_console_sessions_usage_delete AFTER DELETE ON capgate_console_sessions
WHEN OLD.namespace <> ''
BEGIN
    UPDATE capgate_journal_usage
       SET row_count = row_count - 1,
           byte_count = byte_count - length(CAST(OLD.principal AS BLOB))
                                   - length(CAST(OLD.credential AS BLOB))
     WHERE namespace = OLD.namespace;
END;
