-- Audit export and retention (issue 39): the store is the outbox. Every sink keeps a cursor per chain
-- (the last `seq` it acknowledged); one replica at a time exports a sink (its lease).

-- The chains there are, so an exporter finds a new one without scanning the events: a
-- writer registers its chain before its first event, and records where it ended when it
-- stops cleanly (`closed_seq`; NULL while it writes, or when it was killed).
CREATE TABLE capgate_audit_chains (
    chain      TEXT    PRIMARY KEY,
    started_at INTEGER NOT NULL,
    closed_seq INTEGER
);
INSERT INTO capgate_audit_chains (chain, started_at)
    SELECT chain, min(at) FROM capgate_audit_events WHERE chain IS NOT NULL GROUP BY chain;

-- How far each sink got in each chain: every event with `seq` at most this was acknowledged.
CREATE TABLE capgate_audit_export_cursors (
    sink  TEXT    NOT NULL,
    chain TEXT    NOT NULL,
    seq   INTEGER NOT NULL,
    PRIMARY KEY (sink, chain)
);

-- Which replica exports a sink, until when (renewed while it runs).
CREATE TABLE capgate_audit_export_leases (
    sink   TEXT    PRIMARY KEY,
    holder TEXT    NOT NULL,
    until  INTEGER NOT NULL
);

-- Retention (issue 39, item 4): "chain C's events through SEQ, the last of which had hash
-- HASH, were purged on purpose", signed with the checkpoint key, so `capgate audit verify`
-- tells a purge from a deletion. A purge always ends at a signed checkpoint.
CREATE TABLE capgate_audit_purges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    chain TEXT NOT NULL,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL,
    at INTEGER NOT NULL,
    key_id TEXT NOT NULL,
    signature TEXT NOT NULL
);
CREATE INDEX capgate_audit_purges_chain_seq ON capgate_audit_purges (chain, seq);
