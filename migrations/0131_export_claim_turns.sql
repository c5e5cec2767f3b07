-- Exports are claimed in turn across organizations, not first come first served: the next claim
-- goes to the organization with the fewest exports running and waiting ahead, and among equals to
-- the one whose last claim is the oldest (or that never had one). This table remembers when each
-- organization last had an export claimed; the claim writes it in the same statement.
CREATE TABLE export_claim_turns (
    org_id          UUID PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
    last_claimed_at TIMESTAMPTZ NOT NULL
);
