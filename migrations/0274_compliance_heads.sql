-- Each person's standing per flow kept current (issue 39, the compliance report's speed): for
-- every (person, flow) that has an assignment, the latest assignment (by assigned_at, then id) and
-- the latest completion (by completed_at, then id) with the instants the report judges by, and
-- when an assignment of the pair was last written (`changed_at`, the writing transaction's now()).
--
-- The compliance report of the request's own instant reads these rows instead of finding the two
-- assignments in the history: one row per pair instead of two ordered passes over every
-- assignment. A pair written after the instant judged (`changed_at` later) is read from the
-- history as before, so the answer is exactly what the history says at that instant.
--
-- Kept by statement triggers on `assignments`, in the writing transaction. Inserts and updates
-- merge the statement's rows into the pair's row under its row lock (ON CONFLICT), comparing
-- with what is stored rather than recomputing from the statement's snapshot, so two transactions
-- writing one pair at once both land whichever commits last. Deletes (rare: tests, a flow's
-- removal) recompute their pairs from the table. No foreign keys, as on `assignments` (0009):
-- parent row locks stalled concurrent batches.
CREATE TABLE compliance_heads (
    user_id        UUID NOT NULL,
    flow_id        UUID NOT NULL,
    org_id         UUID NOT NULL,
    l_id           UUID NOT NULL,
    l_assigned_at  TIMESTAMPTZ NOT NULL,
    l_due_at       TIMESTAMPTZ,
    l_started_at   TIMESTAMPTZ,
    l_completed_at TIMESTAMPTZ,
    l_expires_at   TIMESTAMPTZ,
    l_cancelled_at TIMESTAMPTZ,
    d_id           UUID,
    d_assigned_at  TIMESTAMPTZ,
    d_due_at       TIMESTAMPTZ,
    d_completed_at TIMESTAMPTZ,
    d_expires_at   TIMESTAMPTZ,
    changed_at     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (user_id, flow_id)
) WITH (fillfactor = 90);

CREATE INDEX compliance_heads_org_idx ON compliance_heads (org_id, flow_id);
-- The pairs written after an instant, read from the history instead.
CREATE INDEX compliance_heads_changed_idx ON compliance_heads (org_id, changed_at);

-- Whether the assignment (`id`, `at`) written takes the place of the one stored (`kept_id`,
-- `kept_at`): it is the same assignment (its new state), or later by `at` then id. A statement
-- that writes no completion of a pair (`id` null) keeps the stored one.
CREATE FUNCTION flow_heads_later(id uuid, at timestamptz, kept_id uuid, kept_at timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT id IS NOT NULL
       AND (kept_id IS NULL OR id = kept_id OR (at, id) > (kept_at, kept_id))
$$;

CREATE FUNCTION flow_compliance_heads_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO compliance_heads AS h
        (user_id, flow_id, org_id, l_id, l_assigned_at, l_due_at, l_started_at, l_completed_at,
         l_expires_at, l_cancelled_at, d_id, d_assigned_at, d_due_at, d_completed_at,
         d_expires_at, changed_at)
    SELECT l.user_id, l.flow_id, l.org_id, l.id, l.assigned_at, l.due_at, l.started_at,
           l.completed_at, l.expires_at, l.cancelled_at,
           d.id, d.assigned_at, d.due_at, d.completed_at, d.expires_at, now()
    FROM (SELECT DISTINCT ON (user_id, flow_id) * FROM new_rows
          ORDER BY user_id, flow_id, assigned_at DESC, id DESC) l
    LEFT JOIN (SELECT DISTINCT ON (user_id, flow_id) * FROM new_rows
               WHERE completed_at IS NOT NULL
               ORDER BY user_id, flow_id, completed_at DESC, id DESC) d
        ON d.user_id = l.user_id AND d.flow_id = l.flow_id
    ON CONFLICT (user_id, flow_id) DO UPDATE SET
        l_id = CASE WHEN flow_heads_later(EXCLUDED.l_id, EXCLUDED.l_assigned_at,
                                          h.l_id, h.l_assigned_at)
            THEN EXCLUDED.l_id ELSE h.l_id END,
        l_assigned_at = CASE WHEN flow_heads_later(EXCLUDED.l_id, EXCLUDED.l_assigned_at,
                                          h.l_id, h.l_assigned_at)
            THEN EXCLUDED.l_assigned_at ELSE h.l_assigned_at END,
        l_due_at = CASE WHEN flow_heads_later(EXCLUDED.l_id, EXCLUDED.l_assigned_at,
                                          h.l_id, h.l_assigned_at)
            THEN EXCLUDED.l_due_at ELSE h.l_due_at END,
        l_started_at = CASE WHEN flow_heads_later(EXCLUDED.l_id, EXCLUDED.l_assigned_at,
                                          h.l_id, h.l_assigned_at)
            THEN EXCLUDED.l_started_at ELSE h.l_started_at END,
        l_completed_at = CASE WHEN flow_heads_later(EXCLUDED.l_id, EXCLUDED.l_assigned_at,
                                          h.l_id, h.l_assigned_at)
            THEN EXCLUDED.l_completed_at ELSE h.l_completed_at END,
        l_expires_at = CASE WHEN flow_heads_later(EXCLUDED.l_id, EXCLUDED.l_assigned_at,
                                          h.l_id, h.l_assigned_at)
            THEN EXCLUDED.l_expires_at ELSE h.l_expires_at END,
        l_cancelled_at = CASE WHEN flow_heads_later(EXCLUDED.l_id, EXCLUDED.l_assigned_at,
                                          h.l_id, h.l_assigned_at)
            THEN EXCLUDED.l_cancelled_at ELSE h.l_cancelled_at END,
        d_id = CASE WHEN flow_heads_later(EXCLUDED.d_id, EXCLUDED.d_completed_at,
                                          h.d_id, h.d_completed_at)
            THEN EXCLUDED.d_id ELSE h.d_id END,
        d_assigned_at = CASE WHEN flow_heads_later(EXCLUDED.d_id, EXCLUDED.d_completed_at,
                                          h.d_id, h.d_completed_at)
            THEN EXCLUDED.d_assigned_at ELSE h.d_assigned_at END,
        d_due_at = CASE WHEN flow_heads_later(EXCLUDED.d_id, EXCLUDED.d_completed_at,
                                          h.d_id, h.d_completed_at)
            THEN EXCLUDED.d_due_at ELSE h.d_due_at END,
        d_completed_at = CASE WHEN flow_heads_later(EXCLUDED.d_id, EXCLUDED.d_completed_at,
                                          h.d_id, h.d_completed_at)
            THEN EXCLUDED.d_completed_at ELSE h.d_completed_at END,
        d_expires_at = CASE WHEN flow_heads_later(EXCLUDED.d_id, EXCLUDED.d_completed_at,
                                          h.d_id, h.d_completed_at)
            THEN EXCLUDED.d_expires_at ELSE h.d_expires_at END,
        changed_at = greatest(h.changed_at, now());
    RETURN NULL;
END $$;

-- The pairs of `pairs` (user_id, flow_id) recomputed from `assignments`: the latest assignment
-- and the latest completion of each; a pair with no assignment left loses its row.
CREATE FUNCTION flow_compliance_heads_recompute(pairs jsonb) RETURNS void LANGUAGE sql AS $$
    DELETE FROM compliance_heads h
    USING jsonb_to_recordset(pairs) AS p(user_id uuid, flow_id uuid)
    WHERE h.user_id = p.user_id AND h.flow_id = p.flow_id;
    INSERT INTO compliance_heads
        (user_id, flow_id, org_id, l_id, l_assigned_at, l_due_at, l_started_at, l_completed_at,
         l_expires_at, l_cancelled_at, d_id, d_assigned_at, d_due_at, d_completed_at,
         d_expires_at, changed_at)
    SELECT l.user_id, l.flow_id, l.org_id, l.id, l.assigned_at, l.due_at, l.started_at,
           l.completed_at, l.expires_at, l.cancelled_at,
           d.id, d.assigned_at, d.due_at, d.completed_at, d.expires_at, now()
    FROM (SELECT DISTINCT user_id, flow_id
          FROM jsonb_to_recordset(pairs) AS p(user_id uuid, flow_id uuid)) p
    CROSS JOIN LATERAL (
        SELECT a.* FROM assignments a WHERE a.user_id = p.user_id AND a.flow_id = p.flow_id
        ORDER BY a.assigned_at DESC, a.id DESC LIMIT 1) l
    LEFT JOIN LATERAL (
        SELECT a.* FROM assignments a
        WHERE a.user_id = p.user_id AND a.flow_id = p.flow_id AND a.completed_at IS NOT NULL
        ORDER BY a.completed_at DESC, a.id DESC LIMIT 1) d ON true;
$$;

CREATE FUNCTION flow_compliance_heads_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM flow_compliance_heads_recompute(
        (SELECT jsonb_agg(jsonb_build_object('user_id', user_id, 'flow_id', flow_id))
         FROM (SELECT DISTINCT user_id, flow_id FROM old_rows) o));
    RETURN NULL;
END $$;

-- An update that moves an assignment to another pair, or takes back a completion or the time
-- it was assigned, cannot be merged: its pairs are recomputed after the merge (nothing in Flow
-- does so today; the trigger names order the two).
CREATE FUNCTION flow_compliance_heads_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    moved jsonb;
BEGIN
    SELECT jsonb_agg(jsonb_build_object('user_id', o.user_id, 'flow_id', o.flow_id))
    INTO moved
    FROM old_rows o JOIN new_rows n ON n.id = o.id
    WHERE n.user_id <> o.user_id OR n.flow_id <> o.flow_id
       OR n.assigned_at <> o.assigned_at
       OR (o.completed_at IS NOT NULL AND n.completed_at IS DISTINCT FROM o.completed_at);
    IF moved IS NOT NULL THEN
        PERFORM flow_compliance_heads_recompute(moved);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER assignments_compliance_heads_insert AFTER INSERT ON assignments
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION flow_compliance_heads_written();
CREATE TRIGGER assignments_compliance_heads_update AFTER UPDATE ON assignments
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION flow_compliance_heads_written();
CREATE TRIGGER assignments_compliance_heads_update_moved AFTER UPDATE ON assignments
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION flow_compliance_heads_moved();
CREATE TRIGGER assignments_compliance_heads_delete AFTER DELETE ON assignments
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION flow_compliance_heads_deleted();

-- Assignments that exist already: each pair's row, last written when its latest write was.
INSERT INTO compliance_heads
    (user_id, flow_id, org_id, l_id, l_assigned_at, l_due_at, l_started_at, l_completed_at,
     l_expires_at, l_cancelled_at, d_id, d_assigned_at, d_due_at, d_completed_at, d_expires_at,
     changed_at)
SELECT l.user_id, l.flow_id, l.org_id, l.id, l.assigned_at, l.due_at, l.started_at,
       l.completed_at, l.expires_at, l.cancelled_at,
       d.id, d.assigned_at, d.due_at, d.completed_at, d.expires_at, w.changed_at
FROM (SELECT DISTINCT ON (user_id, flow_id) * FROM assignments
      ORDER BY user_id, flow_id, assigned_at DESC, id DESC) l
LEFT JOIN (SELECT DISTINCT ON (user_id, flow_id) * FROM assignments
           WHERE completed_at IS NOT NULL
           ORDER BY user_id, flow_id, completed_at DESC, id DESC) d
    ON d.user_id = l.user_id AND d.flow_id = l.flow_id
JOIN (SELECT user_id, flow_id,
             greatest(max(updated_at), max(assigned_at), max(completed_at), max(cancelled_at))
                 AS changed_at
      FROM assignments GROUP BY user_id, flow_id) w
    ON w.user_id = l.user_id AND w.flow_id = l.flow_id;
