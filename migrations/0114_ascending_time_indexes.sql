-- Two indexes were declared descending on keys that only grow: an endpoint's deliveries by
-- (created_at, id) and an organization's audit events by their time-ordered id. Every new entry
-- then went to the leftmost leaf of its key range, and a full leftmost leaf splits in half (the
-- "fill the left page" split is for entries arriving at the right), so these indexes stayed half
-- empty: after a bulk benchmark the deliveries' index had a leaf density of 51% against 84-90%
-- for the table's other indexes, twice the pages to split, log and cache. Ascending, they fill
-- their pages; the listings read them backwards for newest first, the same plan without a sort.
DROP INDEX webhook_deliveries_endpoint_idx;
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, created_at, id);
DROP INDEX audit_events_org_idx;
CREATE INDEX audit_events_org_idx ON audit_events (org_id, id);
