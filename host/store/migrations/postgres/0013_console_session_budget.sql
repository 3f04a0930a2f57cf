-- Console sessions count against their principal's namespace storage budget (docs/gateway.md,
-- "Storage budget"), beside its receipts and approval records: each sign-in stores a row
-- (the principal key and the credential's description, up to 16 KiB each), so sign-ins
-- without end must not grow the database without end. The trigger keeps
-- capgate_journal_usage in the same transaction as every insert and delete of a session (a
-- session's row never changes). Sessions stored before this migration have no namespace and
-- count against none; they end at their expiry.
ALTER TABLE capgate_console_sessions ADD COLUMN namespace TEXT NOT NULL DEFAULT '';

CREATE FUNCTION capgate_console_sessions_usage_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.namespace <> '' THEN
            INSERT INTO capgate_journal_usage AS u (namespace, row_count, byte_count)
            VALUES (NEW.namespace, 1, octet_length(NEW.principal) + octet_length(NEW.credential))
            ON CONFLICT (namespace) DO UPDATE
               SET row_count = u.row_count + 1,
                   byte_count = u.byte_count + EXCLUDED.byte_count;
        END IF;
        RETURN NEW;
    ELSE
        IF OLD.namespace <> '' THEN
            UPDATE capgate_journal_usage
               SET row_count = row_count - 1,
                   byte_count = byte_count - octet_length(OLD.principal) - octet_length(OLD.credential)
             WHERE namespace = OLD.namespace;
        END IF;
        RETURN OLD;
    END IF;
END
$$;

CREATE TRIGGER capgate_console_sessions_usage
AFTER INSERT OR DELETE ON capgate_console_sessions
FOR EACH ROW EXECUTE FUNCTION capgate_console_sessions_usage_track();
