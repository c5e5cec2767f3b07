-- Each organization's place in the bulk assign lane: its bulk work goes to shard
-- `bulk_lane mod BULK_SHARDS` (common/src/amqp.rs), and the assign-worker takes the shards in turn.
-- Numbers are handed out in creation order, so the first BULK_SHARDS organizations each have a
-- shard of their own and later ones are spread evenly; two organizations on one shard share it in
-- FIFO order. An operator moves an organization with `flowctl orgs move-lane`.
CREATE SEQUENCE organization_bulk_lane_seq AS BIGINT MINVALUE 0 START 0;
ALTER TABLE organizations ADD COLUMN bulk_lane BIGINT;
UPDATE organizations o SET bulk_lane = numbered.n - 1
FROM (SELECT id, row_number() OVER (ORDER BY created_at, id) AS n FROM organizations) numbered
WHERE numbered.id = o.id;
SELECT setval('organization_bulk_lane_seq', COALESCE((SELECT max(bulk_lane) + 1 FROM organizations), 0), false);
ALTER TABLE organizations
    ALTER COLUMN bulk_lane SET DEFAULT nextval('organization_bulk_lane_seq'),
    ALTER COLUMN bulk_lane SET NOT NULL,
    ADD CONSTRAINT organizations_bulk_lane_check CHECK (bulk_lane >= 0);
ALTER SEQUENCE organization_bulk_lane_seq OWNED BY organizations.bulk_lane;
