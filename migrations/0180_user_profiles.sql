-- What identity providers (SCIM, issue 29) and HR systems keep on a user, the groups they push,
-- and a user's lifecycle. A user made by `/v1/users` or a CSV import has every profile column
-- empty and is active. `users.name` stays the name every surface shows (SCIM `displayName`,
-- else `name.formatted`, else given and family names).
ALTER TABLE users
    -- false after a SCIM `active: false`, a SCIM DELETE or an API deactivation: assigns to the
    -- user are refused, their schedules and overdue events stop, reports keep their history.
    ADD COLUMN active          BOOLEAN NOT NULL DEFAULT true,
    ADD COLUMN deactivated_at  TIMESTAMPTZ,
    -- Set by a SCIM DELETE: the user is kept (deactivated, with their history) and answers 404
    -- to SCIM from then on, as RFC 7644 §3.6 asks; a later POST of the same userName revives it.
    ADD COLUMN scim_deleted_at TIMESTAMPTZ,
    -- Set when the person was erased on request: e-mail and names are pseudonyms from then on.
    ADD COLUMN erased_at       TIMESTAMPTZ,
    ADD COLUMN external_id     TEXT,
    ADD COLUMN given_name      TEXT,
    ADD COLUMN family_name     TEXT,
    ADD COLUMN formatted_name  TEXT,
    ADD COLUMN title           TEXT,
    ADD COLUMN department      TEXT,
    ADD COLUMN employee_number TEXT,
    -- The enterprise extension's manager: the provider's id of the manager, and its display name.
    ADD COLUMN manager_id      TEXT,
    ADD COLUMN manager_name    TEXT,
    ADD COLUMN start_date      DATE,
    -- SCIM `emails` as the provider sent them ([{value, type, primary}]); `email` stays the
    -- address the service identifies the person by.
    ADD COLUMN emails          JSONB NOT NULL DEFAULT '[]'::jsonb;

-- Providers look users up by externalId.
CREATE INDEX users_org_external_id_idx ON users (org_id, external_id) WHERE external_id IS NOT NULL;

-- Groups an identity provider pushes; names are unique per organization case-insensitively.
CREATE TABLE user_groups (
    id                      UUID PRIMARY KEY,
    org_id                  UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    display_name            TEXT NOT NULL,
    display_name_normalized TEXT NOT NULL,
    external_id             TEXT,
    created_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at              TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (org_id, display_name_normalized)
);
CREATE INDEX user_groups_org_id_idx ON user_groups (org_id, id);

-- Membership: users only (no nested groups).
CREATE TABLE user_group_members (
    group_id UUID NOT NULL REFERENCES user_groups (id) ON DELETE CASCADE,
    user_id  UUID NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    org_id   UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    added_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, user_id)
);
CREATE INDEX user_group_members_user_idx ON user_group_members (user_id, group_id);
