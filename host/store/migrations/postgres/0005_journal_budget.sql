-- The per-namespace storage budget of the invocation journal (docs/gateway.md, "Storage
-- budget"). Each record now names the namespace it counts against; capgate_journal_usage
-- keeps, per namespace, how many records it holds and how many bytes of input and outcome
-- JSON, maintained by a trigger in the same transaction as every insert, update and delete
-- (claims, settlements, resumes, purges), so the counts cannot drift from the rows. A
-- claim locks its namespace's usage row and is admitted only while the namespace is within
-- budget, so concurrent claims cannot overshoot it. Rows written before this migration
-- have no namespace and count against none.
ALTER TABLE capgate_invocations ADD COLUMN namespace text;

CREATE TABLE capgate_journal_usage (
    namespace  text   PRIMARY KEY,
    row_count  bigint NOT NULL DEFAULT 0,
    byte_count bigint NOT NULL DEFAULT 0
);

CREATE FUNCTION capgate_journal_usage_track() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.namespace IS NOT NULL THEN
            INSERT INTO capgate_journal_usage AS u (namespace, row_count, byte_count)
            VALUES (NEW.namespace, 1,
                    octet_length(NEW.input::text) + COALESCE(octet_length(NEW.outcome::text), 0))
            ON CONFLICT (namespace) DO UPDATE
               SET row_count = u.row_count + 1,
                   byte_count = u.byte_count + EXCLUDED.byte_count;
        END IF;
        RETURN NEW;
    ELSIF TG_OP = 'DELETE' THEN
        IF OLD.namespace IS NOT NULL THEN
            UPDATE capgate_journal_usage
               SET row_count = row_count - 1,
                   byte_count = byte_count - octet_length(OLD.input::text)
                              - COALESCE(octet_length(OLD.outcome::text), 0)
             WHERE namespace = OLD.namespace;
        END IF;
        RETURN OLD;
    ELSE
        IF NEW.namespace IS NOT NULL THEN
            UPDATE capgate_journal_usage
               SET byte_count = byte_count
                              + octet_length(NEW.input::text) + COALESCE(octet_length(NEW.outcome::text), 0)
                              - octet_length(OLD.input::text) - COALESCE(octet_length(OLD.outcome::text), 0)
             WHERE namespace = NEW.namespace;
        END IF;
        RETURN NEW;
    END IF;
END
$$;

CREATE TRIGGER capgate_invocations_usage
AFTER INSERT OR UPDATE OR DELETE ON capgate_invocations
FOR EACH ROW EXECUTE FUNCTION capgate_journal_usage_track();

-- The digest of the capability's own contract (without the deployment revision) when the
-- call asked for approval: a door resumes the approval only while the capability's current
-- digest is the same, so a revision bump that changed nothing about this capability keeps
-- its pending approvals. Rows written before this migration have none (the door then
-- compares what it recorded itself, as before).
ALTER TABLE capgate_approvals ADD COLUMN descriptor_digest TEXT;
