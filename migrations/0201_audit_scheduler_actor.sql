-- The scheduler acts on its own when it evaluates enrollment rules left pending by a write whose
-- own evaluation did not finish (docs/enrollment-rules.md): its audit rows name it.
ALTER TABLE audit_events DROP CONSTRAINT audit_events_actor_kind_check;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_actor_kind_check
    CHECK (actor_kind IN ('account', 'api_key', 'flowctl', 'scheduler'));
