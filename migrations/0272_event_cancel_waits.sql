-- A cancel event for an assignment an earlier event is still making (issue 38): the assign
-- actions now say whom and which flow they assign, so a cancel finds the assignment while its
-- command is still queued; such a cancel waits (`waits`) until the assignment is persisted, and the
-- scheduler's sweep publishes it then.
ALTER TABLE inbound_event_actions
    ADD COLUMN flow_id UUID,
    ADD COLUMN user_id UUID,
    ADD COLUMN waits BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX inbound_event_actions_person_idx ON inbound_event_actions (org_id, flow_id, user_id)
    WHERE action = 'assign';
CREATE INDEX inbound_event_actions_waiting_idx ON inbound_event_actions (created_at)
    WHERE waits AND published_at IS NULL;
-- Whether an assignment still being made already has a cancel waiting for it.
CREATE INDEX inbound_event_actions_cancelled_idx ON inbound_event_actions (assignment_id)
    WHERE action = 'cancel';
