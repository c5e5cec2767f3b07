-- GET /v1/exports lists an organization's exports newest first in keyset pages (ids are
-- time-ordered); without this index each page scanned every export of every organization.
CREATE INDEX exports_org_listing_idx ON exports (org_id, id DESC);
