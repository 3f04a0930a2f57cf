-- Approval escalation (issue 39, item 6): when an approval still pending was escalated to
-- a second role (NULL: not yet). Set once, by one compare-and-set, so it fires once.
ALTER TABLE capgate_approvals ADD COLUMN escalated_at INTEGER;
