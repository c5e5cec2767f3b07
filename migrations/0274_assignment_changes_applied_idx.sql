-- The due-date changes applied after an instant, per organization (issue 39): a compliance
-- report over a whole population at a past instant (`asOf`, and every export) reads the due
-- date each assignment had then from these, as one set instead of a lookup per cell.
CREATE INDEX assignment_changes_org_applied_idx ON assignment_changes (org_id, applied_at)
    WHERE outcome = 'applied';
