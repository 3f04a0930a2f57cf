-- The policies that asked for each approval: see migrations/sqlite/0003_approval_policies.sql.
ALTER TABLE capgate_approvals ADD COLUMN policies jsonb NOT NULL DEFAULT '[]'::jsonb;
