-- The scheduler drains pending evaluations in turns per organization (docs/enrollment-rules.md,
-- "Durable evaluation"): a claim ranks each organization's rows by age and takes the first of
-- every organization before the second of any, so one organization's large import does not hold
-- up another's few users. This index serves that ranking.
CREATE INDEX enrollment_pending_org_queued_idx ON enrollment_pending (org_id, queued_at);
