-- The header an Okta event hook sends its secret in (issue 38): Okta lets the administrator name
-- it ("Authentication field"); null is `Authorization`.
ALTER TABLE event_sources ADD COLUMN auth_header TEXT;
