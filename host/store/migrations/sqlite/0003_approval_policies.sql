-- The policies that asked for each approval (ApprovalRequest::policies), shown to approvers
-- beside the reasons. A JSON array of policy names; rows written before this migration read
-- back with none.
ALTER TABLE capgate_approvals ADD COLUMN policies TEXT NOT NULL DEFAULT '[]';
