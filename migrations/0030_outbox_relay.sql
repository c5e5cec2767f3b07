-- The outbox relay claims unpublished rows in order with FOR UPDATE SKIP LOCKED (several relays
-- share the work without publishing a row twice), and prunes published rows after a while.
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;
-- Events of one assignment, for the API and the tests that count them.
CREATE INDEX outbox_assignment_idx ON outbox (assignment_id, event_type);
