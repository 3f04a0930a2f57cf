-- Issue 55: checkpoints that are chained and signed from a start record, and exported.
--
-- Every writer now signs a start record (`kind` 'start', `seq` 0, `hash` '') before its
-- first event: its `checkpointEvents` (`every_events`) and the highest id of a chain-less
-- event in the table when it started (`unchained_through`). Each later checkpoint
-- (`kind` 'checkpoint') signs, besides "chain C reached event SEQ whose hash is HASH", the
-- SHA-256 of the previous record's signature (`prev`), so deleting one breaks the next.
-- Rows written before this migration keep `kind` NULL (unchained checkpoints).
ALTER TABLE capgate_audit_checkpoints ADD COLUMN kind text;
ALTER TABLE capgate_audit_checkpoints ADD COLUMN prev text;
ALTER TABLE capgate_audit_checkpoints ADD COLUMN every_events bigint;
ALTER TABLE capgate_audit_checkpoints ADD COLUMN unchained_through bigint;

-- How far each export sink got in each chain's checkpoints: every record with `seq` at
-- most this was acknowledged (-1: none yet; the start record has `seq` 0).
CREATE TABLE capgate_audit_export_checkpoint_cursors (
    sink  text   NOT NULL,
    chain text   NOT NULL,
    seq   bigint NOT NULL,
    PRIMARY KEY (sink, chain)
);
