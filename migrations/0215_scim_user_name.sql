-- SCIM `userName` when it is not the user's e-mail address (issue 35): a provider may name users
-- by a login such as `jdoe` and give the address in `emails`; the user is still identified by
-- that address (`email`), and SCIM reads back the `userName` it was sent. NULL (every user whose
-- userName is their address, and every user from `/v1/users` or a CSV): the userName is `email`.
ALTER TABLE users ADD COLUMN scim_user_name TEXT;

-- userName is unique in the organization case-insensitively, whether it is the e-mail or this
-- name (a name has no `@`, so it never equals an address); also the index Okta's
-- `userName eq "…"` look-up before every create probes.
CREATE UNIQUE INDEX users_org_user_name_idx
    ON users (org_id, (COALESCE(lower(scim_user_name), email_normalized)));
