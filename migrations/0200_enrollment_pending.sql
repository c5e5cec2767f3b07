-- Users whose enrollment rules are still to be evaluated (docs/enrollment-rules.md, "Durable
-- evaluation"). Every write that changes what a rule looks at — a user created, a change of
-- active, department, title or start date, a group membership added or removed, a group
-- renamed while a rule names groups — queues its users here in the write's own transaction, by
-- the triggers below, and only in organizations that have a rule. The API evaluates them right
-- after its write and deletes what it handled; the scheduler drains what is left (an API that
-- died after the commit, a publish that failed) after a grace period.
--
-- No foreign keys: rows are written from triggers that also run inside cascading deletes of
-- users and organizations, and the drain deletes rows whose user or organization is gone.
CREATE SEQUENCE enrollment_pending_version;

CREATE TABLE enrollment_pending (
    org_id        UUID NOT NULL,
    user_id       UUID NOT NULL,
    -- Last time the user was queued: the drain waits a grace period after it.
    queued_at     TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    -- Fresh from the sequence at each queueing: an evaluation deletes the row only if it is
    -- still the version it read, so a change queued meanwhile is not lost.
    version       BIGINT NOT NULL DEFAULT nextval('enrollment_pending_version'),
    -- A scheduler evaluating the row leaves the others alone until then.
    claimed_until TIMESTAMPTZ,
    PRIMARY KEY (org_id, user_id)
);
CREATE INDEX enrollment_pending_queued_idx ON enrollment_pending (queued_at);

-- Queues (org, user) pairs; the caller passes each pair once.
CREATE FUNCTION enrollment_queue(orgs UUID[], users UUID[]) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO enrollment_pending AS p (org_id, user_id)
    SELECT DISTINCT t.org_id, t.user_id
    FROM UNNEST(orgs, users) AS t(org_id, user_id)
    ORDER BY t.org_id, t.user_id
    ON CONFLICT (org_id, user_id) DO UPDATE
        SET queued_at = clock_timestamp(), version = EXCLUDED.version, claimed_until = NULL
$$;

-- Users created active, in organizations with a rule.
CREATE FUNCTION enrollment_users_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM enrollment_queue(array_agg(n.org_id), array_agg(n.id))
    FROM new_rows n
    WHERE n.active AND EXISTS (SELECT 1 FROM enrollment_rules r WHERE r.org_id = n.org_id)
    HAVING count(*) > 0;
    RETURN NULL;
END $$;

-- Active users whose attributes a condition looks at changed (or who were reactivated).
CREATE FUNCTION enrollment_users_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM enrollment_queue(array_agg(n.org_id), array_agg(n.id))
    FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE n.active
      AND (o.active, o.department, o.title, o.start_date)
          IS DISTINCT FROM (n.active, n.department, n.title, n.start_date)
      AND EXISTS (SELECT 1 FROM enrollment_rules r WHERE r.org_id = n.org_id)
    HAVING count(*) > 0;
    RETURN NULL;
END $$;

-- Members added to a group.
CREATE FUNCTION enrollment_members_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM enrollment_queue(array_agg(n.org_id), array_agg(n.user_id))
    FROM (SELECT DISTINCT org_id, user_id FROM new_rows) n
    WHERE EXISTS (SELECT 1 FROM enrollment_rules r WHERE r.org_id = n.org_id)
    HAVING count(*) > 0;
    RETURN NULL;
END $$;

-- Members removed from a group (also when the group or the user is deleted: a deleted user is
-- not queued).
CREATE FUNCTION enrollment_members_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM enrollment_queue(array_agg(o.org_id), array_agg(o.user_id))
    FROM (SELECT DISTINCT org_id, user_id FROM old_rows) o
    WHERE EXISTS (SELECT 1 FROM enrollment_rules r WHERE r.org_id = o.org_id)
      AND EXISTS (SELECT 1 FROM users u WHERE u.id = o.user_id)
    HAVING count(*) > 0;
    RETURN NULL;
END $$;

-- The members of a renamed group, when a rule of the organization names a group.
CREATE FUNCTION enrollment_groups_renamed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM enrollment_queue(array_agg(m.org_id), array_agg(m.user_id))
    FROM (SELECT DISTINCT m.org_id, m.user_id
          FROM new_rows n
          JOIN old_rows o ON o.id = n.id
          JOIN user_group_members m ON m.group_id = n.id
          WHERE lower(o.display_name) IS DISTINCT FROM lower(n.display_name)
            AND EXISTS (SELECT 1 FROM enrollment_rules r
                        WHERE r.org_id = n.org_id AND r.condition::text LIKE '%"memberOf"%')) m
    HAVING count(*) > 0;
    RETURN NULL;
END $$;

-- Statement triggers with transition tables: one queueing per statement, however many rows.
CREATE TRIGGER enrollment_users_inserted AFTER INSERT ON users
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION enrollment_users_inserted();
CREATE TRIGGER enrollment_users_updated AFTER UPDATE ON users
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION enrollment_users_updated();
CREATE TRIGGER enrollment_members_added AFTER INSERT ON user_group_members
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION enrollment_members_added();
CREATE TRIGGER enrollment_members_removed AFTER DELETE ON user_group_members
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION enrollment_members_removed();
CREATE TRIGGER enrollment_groups_renamed AFTER UPDATE ON user_groups
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION enrollment_groups_renamed();
