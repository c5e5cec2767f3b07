-- A key may be restricted to SCIM provisioning (issue 29): such a key authenticates only under
-- /scim/v2 and is refused (403) on /v1, so the secret an identity provider holds cannot assign,
-- report or export.
ALTER TABLE api_keys ADD COLUMN scim_only BOOLEAN NOT NULL DEFAULT false;
