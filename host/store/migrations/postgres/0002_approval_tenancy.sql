-- Tenancy of approvals: see migrations/sqlite/0002_approval_tenancy.sql. Existing rows
-- read back with an empty namespace, visible only to operators.
ALTER TABLE capgate_approvals ADD COLUMN namespace text NOT NULL DEFAULT '';
ALTER TABLE capgate_approvals ADD COLUMN untyped boolean NOT NULL DEFAULT false;
ALTER TABLE capgate_approvals ADD COLUMN decided_namespace text;
ALTER TABLE capgate_approvals ADD COLUMN decided_via text;
CREATE INDEX capgate_approvals_namespace_requested ON capgate_approvals (namespace, requested_at);
