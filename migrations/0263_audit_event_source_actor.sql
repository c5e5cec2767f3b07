-- A signed event source's delivery acts without an API key (docs/events.md): the audit rows of
-- what its events' triggers did name the source.
ALTER TABLE audit_events DROP CONSTRAINT audit_events_actor_kind_check;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_actor_kind_check
    CHECK (actor_kind IN ('account', 'api_key', 'flowctl', 'scheduler', 'event_source'));
