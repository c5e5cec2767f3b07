-- The change feed of assignments (`GET /v1/assignments?updatedSince=`, issue 39): every insert or
-- update of an assignment records the id of the transaction that made it (`change_xid`) and
-- moves `updated_at`, and the feed reads in (change_xid, id) order only the changes of
-- transactions older than every transaction still running (pg_snapshot_xmin): a change committed
-- later can then never land behind a cursor already handed out, so a reader following the cursor
-- neither skips nor repeats a change, whatever the concurrent writers. Rows written before this
-- migration read as transaction 0 (a constant default: no table rewrite).
ALTER TABLE assignments ADD COLUMN change_xid xid8 NOT NULL DEFAULT '0';

CREATE FUNCTION flow_assignment_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.change_xid := pg_current_xact_id();
    IF TG_OP = 'UPDATE' AND NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at THEN
        NEW.updated_at := now();
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER assignments_change_feed BEFORE INSERT OR UPDATE ON assignments
    FOR EACH ROW EXECUTE FUNCTION flow_assignment_changed();

CREATE INDEX assignments_change_feed_idx ON assignments (org_id, change_xid, id);
