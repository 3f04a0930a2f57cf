-- Approval records count against their namespace's storage budget (docs/gateway.md,
-- "Storage budget"), beside its invocation receipts: a held call stores its full input with
-- the approval, at every door (/mcp included, which keeps no receipts). The trigger keeps
-- capgate_journal_usage in the same transaction as every insert and delete of an approval
-- (its input's bytes; an approval's input never changes), and the rows already stored are
-- counted once here. Approvals of no namespace (an embedder's) count against none.
CREATE FUNCTION capgate_approvals_usage_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.namespace <> '' THEN
            INSERT INTO capgate_journal_usage AS u (namespace, row_count, byte_count)
            VALUES (NEW.namespace, 1, octet_length(NEW.input::text))
            ON CONFLICT (namespace) DO UPDATE
               SET row_count = u.row_count + 1,
                   byte_count = u.byte_count + EXCLUDED.byte_count;
        END IF;
        RETURN NEW;
    ELSE
        IF OLD.namespace <> '' THEN
            UPDATE capgate_journal_usage
               SET row_count = row_count - 1,
                   byte_count = byte_count - octet_length(OLD.input::text)
             WHERE namespace = OLD.namespace;
        END IF;
        RETURN OLD;
    END IF;
END
$$;

CREATE TRIGGER capgate_approvals_usage
AFTER INSERT OR DELETE ON capgate_approvals
FOR EACH ROW EXECUTE FUNCTION capgate_approvals_usage_track();

INSERT INTO capgate_journal_usage AS u (namespace, row_count, byte_count)
SELECT namespace, count(*), COALESCE(sum(octet_length(input::text)), 0)
  FROM capgate_approvals WHERE namespace <> '' GROUP BY namespace
ON CONFLICT (namespace) DO UPDATE
   SET row_count = u.row_count + EXCLUDED.row_count,
       byte_count = u.byte_count + EXCLUDED.byte_count;

-- The purge of approvals past the replay horizon reads them by expiry.
CREATE INDEX capgate_approvals_expires ON capgate_approvals (expires_at);
