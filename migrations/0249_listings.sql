-- GET /v1/exports lists an organization's exports newest first in keyset pages (ids are
-- time-ordered); without this index each page scanned every export of every organization.
CREATE INDEX exports_org_listing_idx ON exports (org_id, id DESC);

-- The dashboard's assign form offers departments with their active members and assigns a
-- flow to everyone in one: both read an organization's active users of a department.
CREATE INDEX users_org_department_idx ON users (org_id, department)
    WHERE active AND erased_at IS NULL;
