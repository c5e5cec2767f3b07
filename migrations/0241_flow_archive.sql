-- Editing a flow where it is safe (design §16): its name and description change in place, and
-- an archived flow takes no new assignments (409) while keeping its assignments and reports.
ALTER TABLE flows ADD COLUMN archived_at TIMESTAMPTZ;
