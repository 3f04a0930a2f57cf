-- Tenancy of approvals: the namespace a call was requested in (the approvals API lists,
-- shows and decides only within the approver's, and a resume must come from the same),
-- whether a policy asked for approval without a type (never self-confirmable), and who
-- stood behind the decision (the approver's namespace, or an operator's shell action).
-- Rows written before this migration read back with an empty namespace: only an operator
-- (the CLI, across namespaces) sees them.
ALTER TABLE capgate_approvals ADD COLUMN namespace TEXT NOT NULL DEFAULT '';
ALTER TABLE capgate_approvals ADD COLUMN untyped INTEGER NOT NULL DEFAULT 0;
ALTER TABLE capgate_approvals ADD COLUMN decided_namespace TEXT;
ALTER TABLE capgate_approvals ADD COLUMN decided_via TEXT;
CREATE INDEX capgate_approvals_namespace_requested ON capgate_approvals (namespace, requested_at);
