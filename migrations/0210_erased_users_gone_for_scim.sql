-- An erased user is gone for SCIM, as after a SCIM DELETE (issue 35): an identity provider's
-- next sync can no longer read, rewrite or list them. Users erased before this release are
-- marked so, and leave their groups, as an erasure now does.
UPDATE users SET scim_deleted_at = erased_at
WHERE erased_at IS NOT NULL AND scim_deleted_at IS NULL;

DELETE FROM user_group_members m
USING users u
WHERE u.id = m.user_id AND u.erased_at IS NOT NULL;
