-- The audit trail's hash chains (issue 39). Every audit writer (one per process: a
-- replica, a CLI command) appends to a chain of its own: `chain` names it, `seq` counts
-- from 1 without gaps, `prev_hash` is the hash of the chain's previous event (NULL for the
-- first) and `hash` the SHA-256 (hex) of this event's canonical JSON, chain fields
-- included. Rows written before this migration have no chain.
ALTER TABLE capgate_audit_events ADD COLUMN chain TEXT;
ALTER TABLE capgate_audit_events ADD COLUMN seq INTEGER;
ALTER TABLE capgate_audit_events ADD COLUMN prev_hash TEXT;
ALTER TABLE capgate_audit_events ADD COLUMN hash TEXT;
CREATE UNIQUE INDEX capgate_audit_events_chain_seq ON capgate_audit_events (chain, seq);

-- Signed checkpoints: "chain C had reached event SEQ, whose hash was HASH", signed with
-- the deployment's Ed25519 key, so a tail deleted after a checkpoint is detected too.
CREATE TABLE capgate_audit_checkpoints (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    chain TEXT NOT NULL,
    seq INTEGER NOT NULL,
    hash TEXT NOT NULL,
    at INTEGER NOT NULL,
    key_id TEXT NOT NULL,
    signature TEXT NOT NULL
);
CREATE INDEX capgate_audit_checkpoints_chain_seq ON capgate_audit_checkpoints (chain, seq);
